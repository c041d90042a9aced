"""The 'host' strategy with the cohort's clients side by side on several CPU devices
(`core.host_round`, `engine.host_devices`, the CLI's `--cpu_devices`): the same rounds bit for
bit as on one device, and the device counts checked."""
from __future__ import annotations

import json
import os
import re
import sys

import jax
import pytest

from fedjax_sharp.core import backends
from fedjax_sharp.core.execution import ExecutionConfig

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, cpu_devices: int):
  """Two rounds of SCAFFOLD (per-client state) on the demo's ragged clients; (stderr, the
  metrics records without their timings)."""
  workdir = tmp_path / f"devices{cpu_devices}"
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "run.py"), "--config=configs/demo.py",
         "--config.rounds=2", "--config.algorithm.name=scaffold", f"--cpu_devices={cpu_devices}",
         f"--workdir={workdir}"]
  env = dict(os.environ, XLA_FLAGS=re.sub(      # the flag decides; the suite's other flags kept
      r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")))
  out = cli_runner.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(env, JAX_PLATFORMS="cpu"))
  assert out.returncode == 0, out.stderr[-2000:]
  with open(workdir / "metrics.jsonl") as f:
    records = [json.loads(line) for line in f]
  return out.stderr, [{k: v for k, v in r.items() if "time" not in k} for r in records]


def test_clients_side_by_side_on_two_cpu_devices_compute_the_same_rounds(tmp_path):
  log_two, two = _run(tmp_path, 2)
  log_one, one = _run(tmp_path, 1)
  assert "engine host/unrolled on 2 CPU devices" in log_two
  assert "CPU devices" not in log_one
  assert len(two) == 2 and two == one       # losses, accuracies, control norms: every bit


def test_device_counts_are_checked(monkeypatch):
  assert backends.host_devices(0, "cpu") == jax.local_devices()
  assert backends.host_devices(0, "gpu") == jax.local_devices()[:1]
  assert backends.host_devices(1) == jax.local_devices()[:1]
  with pytest.raises(ValueError, match=r"engine.host_devices=99: this process has"):
    backends.host_devices(99)
  with pytest.raises(ValueError, match=r"engine.host_devices must be >= 0, got -1"):
    ExecutionConfig(host_devices=-1).validate()
  # A count given in XLA_FLAGS wins over the one asked for (and JAX's config is not touched).
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
  assert backends.use_cpu_devices(2) == 3
