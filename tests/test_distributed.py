"""Multi-process runs (jax.distributed): two processes of two simulated CPU devices each
(gloo collectives) run experiments/run.py on one 4-device mesh and give the single-process run;
process 0 alone writes the run directory. Checkpoints: both processes save the
sharded client table together; killed with SIGKILL and rerun, they resume to the uninterrupted
run's numbers; a checkpoint of another process count is refused in one line."""
import json
import os
import re
import shutil
import signal
import socket
import sys
import time

import pytest

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "experiments", "run.py")
ROUNDS = 8
TINY = ["--config=" + os.path.join(ROOT, "configs", "demo.py"), f"--config.rounds={ROUNDS}",
        "--config.eval.every=1", "--config.eval.last_n=2", "--config.algorithm.name=feddyn",
        "--config.engine.client_strategy=vmap", "--config.engine.local_loop=rolled",
        "--config.checkpoint_every=2"]
MESH = ["--config.engine.devices=0"]   # the mesh: every process's devices (2 x 2)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def env(devices: int):
  """`devices` CPU devices per process; the suite's other XLA flags (tests/conftest.py) kept."""
  flags = os.environ.get("XLA_FLAGS", "")
  return dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
              XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={devices}".strip())


def start_processes(workdir, extra=(), n=2):
  port = free_port()
  # Each process forked from a zygote of its own (cli_runner.start: Popen's calls).
  return [cli_runner.start([sys.executable, RUN, *TINY, *extra, f"--workdir={workdir}",
                            f"--coordinator=localhost:{port}", f"--num_processes={n}",
                            f"--process_id={i}"], env=env(2)) for i in range(n)]


def run_processes(workdir, extra=(), n=2, procs=None):
  procs = procs or start_processes(workdir, extra, n)
  out = []
  for p in procs:
    try:
      stdout, stderr = p.communicate(timeout=600)
    finally:
      if p.poll() is None:
        p.kill()
    out.append((p.returncode, stdout, stderr))
  return out


def metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def read(path):
  with open(path, "rb") as f:
    return f.read()


def committed(workdir, step) -> bool:
  return os.path.exists(os.path.join(workdir, "checkpoints", str(step), "commit_success.txt"))


def error_lines(stderr):
  """stderr without absl's log lines (and gloo's connection notes): what the user reads."""
  return [line for line in stderr.splitlines()
          if line.strip() and not re.match(r"[IWEF]\d{4} ", line) and "gloo" not in line.lower()]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """The uninterrupted two-process run, checkpointing every 2 rounds."""
  workdir = str(tmp_path_factory.mktemp("straight") / "multi")
  results = run_processes(workdir, MESH + ["--verbose"])   # the device layout is a DEBUG line
  for code, _, stderr in results:
    assert code == 0, stderr[-3000:]
  return workdir, results


@pytest.fixture(scope="module")
def single(tmp_path_factory):
  """The same config in one process on one device."""
  workdir = str(tmp_path_factory.mktemp("single") / "single")
  proc = cli_runner.run([sys.executable, RUN, *TINY, f"--workdir={workdir}"], env=env(1),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir


def test_two_processes_on_one_mesh_equal_the_single_process_run(straight, single):
  multi, results = straight
  assert '"status": "completed"' in results[0][1]
  # Only process 0 prints the summary and writes (gloo prints its own connection lines).
  assert '"status"' not in results[1][1]
  log = results[0][2]
  assert "over 4 devices, 2 process(es)" in log, log[-2000:]
  a, b = metrics(multi), metrics(single)
  assert [r["round"] for r in a] == [r["round"] for r in b] == list(range(ROUNDS))
  for x, y in zip(a, b):
    for key in ("train_loss", "test_loss", "test_accuracy", "bytes_total"):
      assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-6), key
  # Both processes wrote the checkpoints; process 0 alone the rest of the run directory.
  assert sorted(os.listdir(multi)) == sorted(os.listdir(single))
  assert sorted(os.listdir(os.path.join(multi, "checkpoints"))) == ["6", "8"]
  state = os.path.join(multi, "checkpoints", "8", "state")
  assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state))


def test_both_processes_killed_then_rerun_equal_the_uninterrupted_run(tmp_path, straight):
  workdir = str(tmp_path / "killed")
  procs = start_processes(workdir, MESH)
  try:
    deadline = time.time() + 300
    while (not committed(workdir, 4) and all(p.poll() is None for p in procs)
           and time.time() < deadline):
      time.sleep(0.005)
    running = all(p.poll() is None for p in procs)
    for p in procs:                     # preemption: both at once, no chance to clean up
      if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    for p in procs:
      p.communicate(timeout=60)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert running and committed(workdir, 4), (
      "the run ended before the kill: " + "".join(p.stderr or "" for p in procs)[-2000:])
  assert not committed(workdir, ROUNDS) and not os.path.exists(os.path.join(workdir,
                                                                            "summary.json"))
  results = run_processes(workdir, MESH)   # the same command resumes
  for code, _, stderr in results:
    assert code == 0, stderr[-3000:]
  resumed_from = int(re.search(r"resuming \S+ from round (\d+)", results[0][2]).group(1))
  assert 4 <= resumed_from < ROUNDS
  a, b = metrics(workdir), metrics(straight[0])
  assert [r["round"] for r in a] == [r["round"] for r in b] == list(range(ROUNDS))
  for x, y in zip(a, b):
    for key in ("train_loss", "test_loss", "test_accuracy", "bytes_total"):
      assert x[key] == y[key], (x["round"], key)
  assert read(os.path.join(workdir, "final_params.msgpack")) == read(
      os.path.join(straight[0], "final_params.msgpack"))
  with open(os.path.join(workdir, "summary.json")) as f:
    assert json.load(f)["status"] == "completed"


def test_a_checkpoint_of_another_process_count_is_refused_in_one_line(tmp_path, straight,
                                                                      single):
  # Two processes' checkpoint, one process: refused before anything is written.
  two = str(tmp_path / "two")
  shutil.copytree(straight[0], two)
  before = read(os.path.join(two, "metrics.jsonl"))
  proc = cli_runner.run([sys.executable, RUN, *TINY, *MESH, f"--workdir={two}"], env=env(2),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2, proc.stderr[-3000:]
  [line] = error_lines(proc.stderr)
  assert line.startswith("error: ") and "written by 2 process(es)" in line and "has 1" in line
  assert "--num_processes=2" in line
  assert read(os.path.join(two, "metrics.jsonl")) == before
  # One process's checkpoint, two processes: both refuse (none waits for the other).
  one = str(tmp_path / "one")
  shutil.copytree(single, one)
  for code, _, stderr in run_processes(one, MESH):
    assert code == 2, stderr[-3000:]
    [line] = error_lines(stderr)
    assert "written by 1 process(es)" in line and "has 2" in line, line
