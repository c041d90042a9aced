"""Multi-process runs (jax.distributed, issue 10): two processes of two simulated CPU devices each
(gloo collectives) run experiments/run.py on one 4-device mesh and give the single-process run;
process 0 alone writes the run directory."""
import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "experiments", "run.py")
TINY = ["--config=" + os.path.join(ROOT, "configs", "demo.py"), "--config.rounds=3",
        "--config.eval.every=1", "--config.eval.last_n=2", "--config.algorithm.name=feddyn",
        "--config.engine.client_strategy=vmap", "--config.engine.local_loop=rolled"]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def env(devices: int):
  return dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
              XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def run_processes(workdir, extra=(), n=2):
  port = free_port()
  procs = [subprocess.Popen([sys.executable, RUN, *TINY, *extra, f"--workdir={workdir}",
                             f"--coordinator=localhost:{port}", f"--num_processes={n}",
                             f"--process_id={i}"], env=env(2), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for i in range(n)]
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


def test_two_processes_on_one_mesh_equal_the_single_process_run(tmp_path):
  multi = str(tmp_path / "multi")
  results = run_processes(multi, ["--config.engine.devices=0"])   # the mesh: all 4 devices
  for code, _, stderr in results:
    assert code == 0, stderr[-3000:]
  assert '"status": "completed"' in results[0][1]
  # Only process 0 prints the summary and writes (gloo prints its own connection lines).
  assert '"status"' not in results[1][1]
  log = results[0][2]
  assert "over 4 devices, 2 process(es)" in log, log[-2000:]
  single = str(tmp_path / "single")
  proc = subprocess.run([sys.executable, RUN, *TINY, f"--workdir={single}"], env=env(1),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  a, b = metrics(multi), metrics(single)
  assert [r["round"] for r in a] == [r["round"] for r in b] == [0, 1, 2]
  for x, y in zip(a, b):
    for key in ("train_loss", "test_loss", "test_accuracy", "bytes_total"):
      assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-6), key
  assert sorted(os.listdir(multi)) == sorted(os.listdir(single))


def test_a_multi_process_run_with_checkpoints_is_refused_naming_the_field(tmp_path):
  results = run_processes(str(tmp_path / "ckpt"), ["--config.engine.devices=0",
                                                    "--config.checkpoint_every=2"])
  for code, _, stderr in results:
    assert code == 2, stderr[-3000:]
    assert "checkpoint_every=2" in stderr
  assert not os.path.exists(tmp_path / "ckpt" / "metrics.jsonl")
