"""End-to-end runs on real data: the CLI on the embedded digits, FedAvg on Fashion-MNIST."""
import json
import os
import sys

import pytest

from fedjax_sharp.training import loop
from fedjax_sharp.training.config import load_config_file

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"


DEMO_RESULTS = os.path.join(ROOT, "results", "demo")   # experiments/demo.py's own output
DEMO_ROUNDS = 3


def _same_rounds(run_dir, algorithm: str) -> None:
  """The rounds of `run_dir` are the first rounds of the committed demo run of `algorithm`."""
  got = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
  want = [json.loads(l) for l in open(os.path.join(DEMO_RESULTS, algorithm, "seed_0",
                                                   "metrics.jsonl"))][:len(got)]
  assert len(got) == DEMO_ROUNDS
  for g, w in zip(got, want):
    for key in ("train_loss", "test_loss", "test_accuracy", "bytes_total"):
      assert g[key] == pytest.approx(w[key], rel=1e-5), (algorithm, g["round"], key)


def test_cli_runs_the_demo_config_and_its_rounds_are_the_committed_demos(tmp_path):
  """The demo config as `make demo` runs it (FedGMT, seed 0), through the CLI, for its first
  rounds: the same numbers as results/demo/, whose table the docs quote
  (tests/test_docs.py)."""
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "run.py"),
         f"--config={os.path.join(ROOT, 'configs', 'demo.py')}", f"--workdir={tmp_path}",
         f"--config.rounds={DEMO_ROUNDS}", "--config.algorithm.name=fedgmt"]
  out = cli_runner.run(cmd, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "fedgmt: final test accuracy" in out.stdout
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["rounds"] == DEMO_ROUNDS and summary["communication"]["down"] == 2
  resolved = json.loads((tmp_path / "config.json").read_text())
  assert resolved["algorithm"]["name"] == "fedgmt" and resolved["rounds"] == DEMO_ROUNDS
  _same_rounds(tmp_path, "fedgmt")


@pytest.mark.parametrize("algorithm", ["fedavg", "feddyn"])
def test_the_demos_other_algorithms_compute_the_committed_rounds(tmp_path, algorithm):
  """FedAvg and FedDyn of `make demo` (compare's variant of the demo config), first rounds: the
  committed results/demo/ runs, so the numbers the docs promise are the demo's."""
  from fedjax_sharp.training import compare  # pylint: disable=g-import-not-at-top
  config = compare.configure_variant(load_config_file(os.path.join(ROOT, "configs", "demo.py")),
                                     algorithm, 0)
  config.rounds = DEMO_ROUNDS
  loop.run(config, str(tmp_path), progress=False)
  _same_rounds(tmp_path, algorithm)


def test_cli_rejects_an_unknown_algorithm(tmp_path):
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "run.py"),
         f"--config={os.path.join(ROOT, 'configs', 'demo.py')}", "--config.algorithm.name=fedx"]
  out = cli_runner.run(cmd, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert "algorithm.name='fedx' is not one of" in out.stderr


@pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")),
                    reason="needs Debian's dataset-fashion-mnist (installed by .ci/run)")
@pytest.mark.usefixtures("optimised_compiles")   # compute-bound
def test_fedavg_mcmahan_cnn_learns_fashion_mnist():
  """configs/fashion_mnist_cnn.py as shipped, 3 rounds of 5 clients instead of 50 of 10 (-> 89.2%,
  docs/reproducing.md, "FedAvg on Fashion-MNIST"): 73.1% on the first 2,000 test images (74.9%
  with 10 clients a round, which costs the suite more CPU: the round's 12 local steps of the CNN
  are most of this test's time; docs/performance.md, "The test suite")."""
  c = load_config_file(os.path.join(ROOT, "configs", "fashion_mnist_cnn.py"))
  c.data.max_test_examples = 2000
  c.rounds = 3
  c.clients_per_round = 5
  c.eval.last_n = 1
  c.eval.target_accuracy = 0.0
  summary = loop.run(c, None, progress=False)
  assert summary["final_test_accuracy"] > 0.70, summary
  assert summary["traces"] == 1
