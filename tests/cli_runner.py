"""`run`: `subprocess.run` for the suite's Python commands, forked from a preloaded process.

Most of a CPU-only command's first two seconds are imports (JAX, Flax, optax, the library). The
suite starts ~100 such commands (the CLI's fault battery, the docs' commands, the examples), so
`run([sys.executable, script, *args], ...)` hands them to a `cli_zygote` process of this worker
that has imported all that once, and each command runs in a child forked from it: a process of
its own with its own pid, environment, working directory, stdout, stderr and exit code, running
the script as `__main__` (see cli_zygote.py for what it shares). Anything else (`-c`, `-m`, a
non-Python program, `input=`, output not captured as text) goes to `subprocess.run` unchanged,
as does every command when `FEDJAX_SHARP_TEST_NO_ZYGOTE` is set. A command with its own `JAX_*`
variables gets a zygote of its own.

What a fresh interpreter prints while importing (a library's warnings) goes to the zygote's
stderr, not the command's: the tests of what a command prints from its very start
(test_first_hour.py) start real processes.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

_ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_zygote.py")
_zygotes: dict[tuple, subprocess.Popen] = {}


def _jax_env(env) -> tuple:
  return tuple(sorted((k, v) for k, v in env.items() if k.startswith("JAX_")))


def _read(proc: subprocess.Popen, timeout: float | None) -> dict:
  if timeout is not None and not select.select([proc.stdout], [], [], max(timeout, 0))[0]:
    raise TimeoutError
  line = proc.stdout.readline()
  if not line:
    raise RuntimeError(f"cli_zygote exited with code {proc.wait()}")
  return json.loads(line)


def _zygote(env) -> subprocess.Popen:
  key = _jax_env(env)
  proc = _zygotes.get(key)
  if proc is None or proc.poll() is not None:
    proc = subprocess.Popen([sys.executable, _ZYGOTE], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(env))
    if not _read(proc, 120).get("ready"):
      raise RuntimeError("cli_zygote did not start")
    _zygotes[key] = proc
  return proc


@atexit.register
def _close() -> None:
  for proc in _zygotes.values():
    proc.stdin.close()
    proc.wait(timeout=30)


_FORKED_KWARGS = {"env", "cwd", "timeout", "capture_output", "text", "check"}


def _forkable(cmd, kwargs) -> bool:
  return (isinstance(cmd, (list, tuple)) and len(cmd) >= 2 and cmd[0] == sys.executable
          and str(cmd[1]).endswith(".py") and set(kwargs) <= _FORKED_KWARGS
          and kwargs.get("capture_output") and kwargs.get("text")
          and not os.environ.get("FEDJAX_SHARP_TEST_NO_ZYGOTE"))


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
  """`subprocess.run(cmd, **kwargs)`; forked from a zygote when `cmd` is `[sys.executable,
  script.py, ...]` with `capture_output=True, text=True` (and at most env, cwd, timeout, check)."""
  if not _forkable(cmd, kwargs):
    return subprocess.run(cmd, **kwargs)
  env, cwd, timeout = kwargs.get("env"), kwargs.get("cwd"), kwargs.get("timeout")
  env = dict(os.environ if env is None else env)
  proc = _zygote(env)
  with tempfile.TemporaryDirectory() as tmp:
    out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    request = {"argv": [str(a) for a in cmd[1:]], "cwd": os.path.abspath(cwd or os.getcwd()),
               "env": env, "stdout": out, "stderr": err}
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    pid = _read(proc, 60)["pid"]
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
      code = _read(proc, None if deadline is None else deadline - time.monotonic())["returncode"]
    except TimeoutError:
      os.kill(pid, signal.SIGKILL)
      _read(proc, 60)
      raise subprocess.TimeoutExpired(cmd, timeout) from None
    with open(out) as f_out, open(err) as f_err:
      result = subprocess.CompletedProcess(list(cmd), code, f_out.read(), f_err.read())
  if kwargs.get("check"):
    result.check_returncode()
  return result
