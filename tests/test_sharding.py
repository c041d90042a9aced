"""The client and experiment axes sharded over a device mesh: 8 simulated CPU devices
in a subprocess (the rest of the suite keeps one device) give the one-device rounds."""
import os
import sys

import pytest

from fedjax_sharp.core import sharding

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sharded_rounds_and_sweeps_equal_one_device():
  flags = os.environ.get("XLA_FLAGS", "")      # the suite's flags (tests/conftest.py) kept
  env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=8".strip(),
             JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "tests", "scripts",
                                                      "sharded_rounds.py")],
                        env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "SHARDING OK" in proc.stdout and "CONFIG SHARDING OK" in proc.stdout


def test_mesh_errors_name_the_problem():
  with pytest.raises(ValueError, match="needs 16 devices"):
    sharding.make_mesh(clients=8, experiments=2, devices=list(range(4)))
