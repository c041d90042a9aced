"""The benchmark entry points run (tiny shapes) and print their tables; figures are not checked
(tests never depend on wall-clock time)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_accelerator_benchmark_runs_small_on_cpu():
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "accelerator.py"),
                         "--small"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
  names = [line.split("|")[1].strip() for line in table[1:]]
  assert any(n.startswith("strategy vmap/rolled") for n in names)
  assert any(n.startswith("fedgmt") for n in names)
  assert any("clients per round" in n for n in names)
  assert any(n.startswith("sweep feddyn: 3 seeds") for n in names)
  assert names[-1].startswith("sweep 3 seeds x 2 algorithms")


def test_vs_torch_benchmark_runs_small():
  """Our side always runs; the PyTorch side only where torch is installed (an optional extra)."""
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "vs_torch.py"),
                         "--small"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ") and not line.startswith("| side")]
  assert rows[0].startswith("ours host/unrolled")
  try:
    import torch  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    assert rows[-1].startswith("torch")
  except ImportError:
    assert "torch is not installed" in proc.stdout


def test_analysis_benchmark_runs_small():
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "analysis.py"),
                         "--data=digits", "--examples=64", "--batch=32", "--reverse_batch=16",
                         "--iters=2", "--probes=2", "--grid=3"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "reverse-mode pieces of 16" in proc.stdout
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ")][1:]
  assert [r.split(",")[0].split(" ")[0] for r in rows] == [
      "lambda_max", "Hessian", "SAM", "landscape", "total"]


@pytest.mark.parametrize("impl", ["lax", "im2col"])
def test_conv_grad_benchmark_runs_small(impl):
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "conv_grad.py"),
                         "--batches=2,4", "--size=6", "--cin=2", "--cout=3", "--repeats=1",
                         f"--impl={impl}", "--pad=1"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ")][1:]
  assert rows == ["2", "4"]


def test_round_time_algorithms_with_a_model_and_micro_batches():
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "round_time.py"),
                         "--model=lenet5", "--input=28x28x1", "--clients=2", "--steps=2",
                         "--batch=8", "--rounds=1",
                         "--algorithms=fedavg,fedavg[engine.micro_batch=4]"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "lenet5 28x28x1" in proc.stdout
  rows = [line.split()[0] for line in proc.stdout.splitlines()
          if line.startswith("fedavg") and line.rstrip().endswith("1 / 1")]
  assert rows == ["fedavg", "fedavg[engine.micro_batch=4]"]
