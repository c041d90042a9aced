"""`run`: `subprocess.run` for the suite's Python commands, forked from a preloaded process.

Most of a CPU-only command's first two seconds are imports (JAX, Flax, optax, the library). The
suite starts ~100 such commands (the CLI's fault battery, the docs' commands, the examples), so
`run([sys.executable, script, *args], ...)` hands them to a `cli_zygote` process of this worker
that has imported all that once, and each command runs in a child forked from it: a process of
its own with its own pid, environment, working directory, stdout, stderr and exit code, running
the script as `__main__` (see cli_zygote.py for what it shares). Anything else (`-c`, `-m`, a
non-Python program, `input=`, output not captured as text) goes to `subprocess.run` unchanged,
as does every command when `FEDJAX_SHARP_TEST_NO_ZYGOTE` is set. A command with its own `JAX_*`
variables gets a zygote of its own. `start` is `subprocess.Popen` for such a command (the kill /
resume and multi-process tests): it runs while the test polls, signals or kills it, each command
running side by side forked from a zygote of its own.

What a fresh interpreter prints while importing (a library's warnings) goes to the zygote's
stderr, not the command's: the tests of what a command prints from its very start
(test_first_hour.py) start real processes.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_zygote.py")
_zygotes: dict[tuple, subprocess.Popen] = {}
_busy: set[int] = set()   # pids of zygotes serving a command `start` returned


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
  """A free zygote for `env`'s JAX variables: one serves one command at a time, so commands
  running side by side (`start`) each get their own."""
  jax_env = _jax_env(env)
  slot = 0
  while True:
    proc = _zygotes.get((jax_env, slot))
    if proc is None or proc.poll() is not None:
      proc = subprocess.Popen([sys.executable, _ZYGOTE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=dict(env))
      if not _read(proc, 120).get("ready"):
        raise RuntimeError("cli_zygote did not start")
      _zygotes[(jax_env, slot)] = proc
      return proc
    if proc.pid not in _busy:
      return proc
    slot += 1


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


def _fork(proc: subprocess.Popen, cmd, env, cwd, tmp: str) -> int:
  """Asks zygote `proc` to run `cmd`; returns the child's pid."""
  request = {"argv": [str(a) for a in cmd[1:]], "cwd": os.path.abspath(cwd or os.getcwd()),
             "env": env, "stdout": os.path.join(tmp, "stdout"),
             "stderr": os.path.join(tmp, "stderr")}
  proc.stdin.write(json.dumps(request) + "\n")
  proc.stdin.flush()
  return _read(proc, 60)["pid"]


def _output(tmp: str) -> tuple[str, str]:
  with open(os.path.join(tmp, "stdout")) as f_out, open(os.path.join(tmp, "stderr")) as f_err:
    return f_out.read(), f_err.read()


class Started:
  """What `start` returns: the `subprocess.Popen` calls the suite makes on a running command
  (pid, poll, wait, communicate, send_signal, kill, returncode), for a command forked from a
  zygote. Its stdout and stderr (text) are read when it has ended."""

  def __init__(self, cmd, zygote: subprocess.Popen, env, cwd):
    self.args, self._zygote = list(cmd), zygote
    self._tmp = tempfile.mkdtemp(prefix="cli_runner_")
    self.pid = _fork(zygote, cmd, env, cwd, self._tmp)
    _busy.add(zygote.pid)
    self.returncode = self.stdout = self.stderr = None

  def _ended(self, reply: dict) -> None:
    self.returncode = reply["returncode"]
    self.stdout, self.stderr = _output(self._tmp)
    shutil.rmtree(self._tmp, ignore_errors=True)
    _busy.discard(self._zygote.pid)

  def poll(self):
    if self.returncode is None and select.select([self._zygote.stdout], [], [], 0)[0]:
      self._ended(_read(self._zygote, None))
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      try:
        self._ended(_read(self._zygote, timeout))
      except TimeoutError:
        raise subprocess.TimeoutExpired(self.args, timeout) from None
    return self.returncode

  def communicate(self, timeout=None) -> tuple[str, str]:
    self.wait(timeout)
    return self.stdout, self.stderr

  def send_signal(self, sig) -> None:
    if self.returncode is None:
      os.kill(self.pid, sig)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)


def start(cmd, env=None, cwd=None):
  """`subprocess.Popen(cmd, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE, text=True)` for
  `[sys.executable, script.py, ...]`, forked from a zygote of its own while it runs (a command
  started beside another gets another zygote); a real `Popen` when `FEDJAX_SHARP_TEST_NO_ZYGOTE`
  is set. Signals reach the command itself (its own pid)."""
  if not _forkable(cmd, {"capture_output": True, "text": True}):
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  env = dict(os.environ if env is None else env)
  return Started(cmd, _zygote(env), env, cwd)


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
  """`subprocess.run(cmd, **kwargs)`; forked from a zygote when `cmd` is `[sys.executable,
  script.py, ...]` with `capture_output=True, text=True` (and at most env, cwd, timeout, check)."""
  if not _forkable(cmd, kwargs):
    return subprocess.run(cmd, **kwargs)
  env, cwd, timeout = kwargs.get("env"), kwargs.get("cwd"), kwargs.get("timeout")
  env = dict(os.environ if env is None else env)
  proc = _zygote(env)
  with tempfile.TemporaryDirectory() as tmp:
    pid = _fork(proc, cmd, env, cwd, tmp)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
      code = _read(proc, None if deadline is None else deadline - time.monotonic())["returncode"]
    except TimeoutError:
      os.kill(pid, signal.SIGKILL)
      _read(proc, 60)
      raise subprocess.TimeoutExpired(cmd, timeout) from None
    result = subprocess.CompletedProcess(list(cmd), code, *_output(tmp))
  if kwargs.get("check"):
    result.check_returncode()
  return result
