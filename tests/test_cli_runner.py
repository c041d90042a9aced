"""The suite's forked command runner (cli_runner.py) behaves as `subprocess.run` would."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import atexit, os, sys, threading, time
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
    print("cwd", os.getcwd())
    print("env", os.environ.get("RUNNER_TEST"))
    print("argv", sys.argv[1:])
    print("path", sys.path[0] == os.path.dirname(os.path.abspath(__file__)),
          sys.path[1] == os.path.abspath(os.environ.get("PYTHONPATH", "-")))
    print("stdin", repr(sys.stdin.read()))
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "raise":
      raise RuntimeError("boom")
    if sys.argv[1] == "sleep":
      time.sleep(60)
    sys.exit(int(sys.argv[1]))
""")


def _both(cmd, **kwargs):
  kwargs.update(capture_output=True, text=True, timeout=60)
  forked = cli_runner.run(cmd, **kwargs)
  real = subprocess.run(cmd, **kwargs)
  return forked, real


@pytest.mark.parametrize("arg", ["0", "3", "raise"])
def test_a_forked_command_is_what_a_real_process_would_be(tmp_path, arg):
  script = tmp_path / "script.py"
  script.write_text(SCRIPT)
  (tmp_path / "sub").mkdir()
  env = dict(os.environ, RUNNER_TEST="here", PYTHONPATH=str(tmp_path))
  forked, real = _both([sys.executable, str(script), arg], env=env, cwd=tmp_path / "sub")
  assert forked.returncode == real.returncode == (1 if arg == "raise" else int(arg))
  assert forked.stdout == real.stdout
  assert f"cwd {tmp_path / 'sub'}" in forked.stdout and "env here" in forked.stdout
  assert "path True True" in forked.stdout and "stdin ''" in forked.stdout
  assert "thread finished" in forked.stdout and forked.stdout.endswith("atexit ran\n")
  if arg != "raise":
    assert forked.stderr == real.stderr
  else:   # the same traceback, below the zygote's and runpy's frames
    f_lines, r_lines = forked.stderr.splitlines(), real.stderr.splitlines()
    assert f_lines[:2] == r_lines[:2] == ["to stderr", "Traceback (most recent call last):"]
    assert f_lines[-3:] == r_lines[-3:] and r_lines[-1] == "RuntimeError: boom"


def test_the_cli_exit_code_and_its_one_line_error_are_the_real_processes():
  forked, real = _both([sys.executable, os.path.join(ROOT, "experiments", "run.py"),
                        "--config=configs/demo.py", "--config.local.lr=0"],
                       cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert forked.returncode == real.returncode == 2
  last = lambda p: p.stderr.strip().splitlines()[-1]
  assert last(forked) == last(real) == "error: local.lr must be > 0, got 0.0"


def test_a_timeout_kills_the_command_and_the_next_one_runs(tmp_path):
  script = tmp_path / "script.py"
  script.write_text(SCRIPT)
  start = time.monotonic()
  with pytest.raises(subprocess.TimeoutExpired):
    cli_runner.run([sys.executable, str(script), "sleep"], capture_output=True, text=True,
                   timeout=1)
  assert time.monotonic() - start < 30
  again = cli_runner.run([sys.executable, str(script), "4"], capture_output=True, text=True)
  assert again.returncode == 4


def test_what_cannot_be_forked_goes_to_subprocess():
  proc = cli_runner.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
  assert proc.stdout == "42\n"
  assert not cli_runner._forkable([sys.executable, "x.py"], {"capture_output": True})
  assert not cli_runner._forkable([sys.executable, "x.py"], {"capture_output": True,
                                                              "text": True, "input": "y"})
  assert cli_runner._forkable([sys.executable, "x.py"], {"capture_output": True, "text": True})


def test_started_commands_run_side_by_side_and_take_signals_like_popen(tmp_path):
  """`start`: Popen's calls on a forked command. Two commands run at once (each forked from a
  zygote of its own), signals reach the command itself, and its output and exit code are what
  a real `Popen` gives."""
  script = tmp_path / "script.py"
  script.write_text(SCRIPT)
  env = dict(os.environ, RUNNER_TEST="here", PYTHONPATH=str(tmp_path))
  cmd = [sys.executable, str(script), "sleep"]
  sleeping = [cli_runner.start(cmd, env=env, cwd=tmp_path) for _ in range(2)]
  real = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  assert len({p.pid for p in sleeping} | {os.getpid(), real.pid}) == 4
  time.sleep(0.5)
  assert [p.poll() for p in sleeping] == [None, None]
  with pytest.raises(subprocess.TimeoutExpired):
    sleeping[0].wait(timeout=0.1)
  sleeping[0].send_signal(15)
  sleeping[1].kill()
  real.send_signal(15)
  assert sleeping[0].communicate(timeout=30) == real.communicate(timeout=30)
  assert sleeping[0].returncode == real.returncode == -15
  assert sleeping[1].wait(timeout=30) == -9 and "to stderr" in sleeping[1].stderr
  done = cli_runner.start([sys.executable, str(script), "3"], env=env, cwd=tmp_path)
  assert done.wait(timeout=60) == 3 and "env here" in done.stdout
