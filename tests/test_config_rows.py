"""Every config under configs/ (and every model / dataset variant of the paper-table configs)
builds and runs one round end to end on tiny mock data of the right shape.

The dataset a config names is replaced by a mock with the real input shape, dtype and class
count (images uint8 [N, H, W, C], AG News int32 token ids [N, 200] with a vocabulary,
Landmarks with natural user clients); everything else -- partition, model, algorithm, engine,
metrics files -- is the config's own, shrunk to 1 round x 1 local step of batch 4 on a few
clients. A config that no longer validates, names a model/field that does not exist, or
feeds a model the wrong input fails here.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from fedjax_sharp import data as data_lib
from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data.types import ArrayDataset, TokenDataset
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")

# (config file, argument or None): the default of every file, plus the variants that change the
# model or the data (the other rows of a table only change scalar fields, validated in
# test_training.py::test_every_config_file_loads_and_validates and the table tests below).
# The natural benchmarks run on tiny files of their real formats in test_natural_configs.py.
NATURAL = ("femnist_cnn.py", "shakespeare_lstm.py", "stackoverflow_lstm.py")
CASES = [(os.path.basename(p), None) for p in sorted(glob.glob(os.path.join(CONFIG_DIR, "*.py")))
         if os.path.basename(p) not in NATURAL]
CASES += [
    ("fedgmt_table2.py", "cifar100,p5"),          # ResNet-8 GN, 100 classes, 5% participation
    ("fedgmt_table2.py", "cinic10,dir0.1"),       # ViT on CINIC-10 (ImageFolder source)
    ("fedgmt_table2.py", "ag_news,dir0.1"),       # FastText on AG News token ids
    ("fedgmt_table2.py", "fashion_mnist,path10"),  # pathological shards
    ("fedgmt_table4.py", "path2,alpha=0.5"),
    ("fedgloss_table3.py", "cifar100,0.5,resnet18"),
    ("fedgloss_table9.py", "cifar100"),
    ("mofedsam_table1.py", "emnist"),
    ("minimax_toy.py", "bilinear"),
]

# Mock shapes: name -> (input shape, classes).
SHAPES = {
    "cifar10": ((32, 32, 3), 10), "cifar100": ((32, 32, 3), 100), "cinic10": ((32, 32, 3), 10),
    "fashion_mnist": ((28, 28, 1), 10), "mnist": ((28, 28, 1), 10),
    "emnist": ((28, 28, 1), 62), "landmarks_user_160k": ((32, 32, 3), 20),
}
N_TRAIN, N_TEST = 240, 40


def mock_dataset(data_cfg, seed=None):
  """A tiny dataset with the shape, dtype and class count of the one `data_cfg` names."""
  del seed
  rng = np.random.default_rng(0)
  name = data_cfg.name
  if name == "ag_news_subset":
    words = [f"w{i}" for i in range(30)]
    texts = [" ".join(rng.choice(words, size=rng.integers(3, 12))) for _ in range(N_TRAIN + N_TEST)]
    vocab = text_lib.build_vocabulary(texts[:N_TRAIN], min_count=1)
    x = text_lib.encode(texts, vocab, int(data_cfg.max_length))
    y = np.arange(N_TRAIN + N_TEST, dtype=np.int32) % 4
    return TokenDataset(name=name, x_train=x[:N_TRAIN], y_train=y[:N_TRAIN],
                        x_test=x[N_TRAIN:], y_test=y[N_TRAIN:], num_classes=4, vocabulary=vocab)
  if name not in SHAPES:
    raise AssertionError(f"no mock shape for data.name={name!r}: add it to SHAPES")
  shape, classes = SHAPES[name]
  x = rng.integers(0, 256, size=(N_TRAIN + N_TEST, *shape), dtype=np.uint8)
  y = (np.arange(N_TRAIN + N_TEST) % classes).astype(np.int32)
  extra = {}
  if data_cfg.source == "landmarks_csv":  # natural clients: 8 users of 30 examples each
    extra = dict(train_clients=[np.arange(u * 30, (u + 1) * 30) for u in range(8)],
                 client_ids=tuple(f"user{u}" for u in range(8)))
  c = shape[-1]
  return ArrayDataset(name=name, x_train=x[:N_TRAIN], y_train=y[:N_TRAIN], x_test=x[N_TRAIN:],
                      y_test=y[N_TRAIN:], num_classes=classes, mean=(0.5,) * c,
                      std=(0.25,) * c, **extra)


def shrink(c):
  """1 round x 1 local step of batch 4 on a few clients, no extras."""
  c.rounds = 1
  c.local.steps = 1
  c.local.batch_size = 4
  c.eval.every = 1
  c.eval.last_n = 1
  c.eval.batch_size = 64
  c.eval.average_last = 0
  c.eval.hessian_every = 0
  c.eval.target_accuracy = 0.0
  c.checkpoint_every = 0
  # The engine is the config's own ('auto': on a CPU, clients and the single local step
  # dispatched from the host, the fastest to compile and run here, measured against vmap/rolled
  # and map/rolled); the strategies' equivalence is tested in test_engine.py and
  # test_algorithm_invariants.py.
  if config_lib.is_minimax(c) and c.task.name in ("quadratic", "pl", "simplex", "bilinear"):
    return c
  if c.data.partition not in ("natural", "file"):
    c.data.num_clients = 10  # >= the class count for alpha = 0 (one class per client)
  else:
    c.data.num_clients = 0
  c.clients_per_round = 2
  c.data.examples_per_client = 0
  c.dp.record_client_metrics = True   # a DP config's train loss (withheld by default) is checked
  if c.task.name == "gan":
    c.task.gan.update(fd_samples=32, classifier_epochs=1)
    c.eval.artifact_every = 1
  return c


@pytest.mark.parametrize("filename,arg", CASES,
                         ids=[f"{f[:-3]}:{a}" if a else f[:-3] for f, a in CASES])
def test_config_runs_one_round_on_mock_data(filename, arg, tmp_path, monkeypatch):
  config = shrink(config_lib.load_config_file(os.path.join(CONFIG_DIR, filename), arg))
  if config.data.source != "embedded":
    monkeypatch.setattr(data_lib, "load_dataset", mock_dataset)
  config_lib.validate(config)
  summary = loop.run(config, str(tmp_path / "run"), progress=False)
  assert summary["status"] == "completed" and summary["completed_rounds"] == 1
  records = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  assert len(records) == 1 and np.isfinite(records[0]["train_loss"])
  if config.data.get("name") == "ag_news_subset" and not config_lib.is_minimax(config):
    saved = text_lib.load_vocabulary(str(tmp_path / "run" / loop.VOCABULARY_FILE))
    assert len(saved) == len(mock_dataset(config.data).vocabulary)


def test_every_config_file_is_covered():
  files = {os.path.basename(p) for p in glob.glob(os.path.join(CONFIG_DIR, "*.py"))}
  assert files <= {f for f, _ in CASES} | set(NATURAL)
  import test_natural_configs  # pylint: disable=g-import-not-at-top  # runs NATURAL, each
  ran = " ".join(open(test_natural_configs.__file__).read().split())
  assert all(f'_run_one_round("{f}"' in ran for f in NATURAL)


def test_table_configs_follow_the_papers():
  load = lambda f, a=None: config_lib.load_config_file(os.path.join(CONFIG_DIR, f), a)
  # FedGMT Table 6 per dataset: model, E, B, lr, rounds; Table 7's exceptions.
  expected = {"cifar100,p20": ("resnet8", 2, 20, 0.01, 500, 20),
              "cinic10,dir0.1": ("vit_small", 5, 100, 0.01, 1000, 10),
              "ag_news,dir0.1": ("fasttext", 5, 50, 0.1, 1000, 10)}
  for arg, (model, e, b, lr, rounds, cohort) in expected.items():
    c = load("fedgmt_table2.py", arg)
    assert (c.model.name, c.local.epochs, c.local.batch_size, c.local.lr, c.rounds,
            c.clients_per_round) == (model, e, b, lr, rounds, cohort), arg
    assert c.data.long_tail and c.data.alpha == 0.1 and c.local.momentum == 0.9
  assert load("fedgmt_table2.py", "cifar100,p5").clients_per_round == 5
  assert load("fedgmt_table2.py", "cifar100,p10").algorithm.fedsam.rho == pytest.approx(0.01)
  ag = load("fedgmt_table2.py", "ag_news,dir0.1")
  assert ag.algorithm.fedgmt.beta == 100.0 and ag.algorithm.feddyn.alpha == pytest.approx(0.01)
  assert ag.algorithm.fedspeed.lam == 100.0 and ag.algorithm.fedsam.rho == pytest.approx(0.5)
  with pytest.raises(ValueError, match="DATASET,ROW"):
    load("fedgmt_table2.py", "cinic10,path2")
  # FedGMT Table 4: only the named field moves.
  t4 = load("fedgmt_table4.py", "path4,gamma=2.5")
  assert (t4.algorithm.fedgmt.gamma, t4.algorithm.fedgmt.alpha) == (2.5, 0.95)
  assert t4.data.shards_per_client == 4 and t4.algorithm.name == "fedgmt"
  with pytest.raises(ValueError, match="ROW,FIELD=VALUE"):
    load("fedgmt_table4.py", "dir0.1")
  # FedGloSS Table 12 ResNet-18 columns; Table 9 alphas.
  r18 = load("fedgloss_table3.py", "cifar10,0.05,resnet18")
  assert (r18.model.name, r18.clients_per_round, r18.local.momentum, r18.local.weight_decay,
          r18.rounds, r18.algorithm.fedgloss.rho_l) == ("resnet18", 10, 0.7, 1e-5, 10000, 0.01)
  with pytest.raises(ValueError, match="alpha = 0.05"):
    load("fedgloss_table3.py", "cifar10,0,resnet18")
  assert load("fedgloss_table9.py", "cifar100").data.alpha == 1000.0
  assert load("fedgloss_table7.py", "cifar100,0").rounds == 20000
  lm = load("fedgloss_landmarks.py")
  assert (lm.data.partition, lm.clients_per_round, lm.local.epochs, lm.local.lr) == (
      "natural", 50, 5, 0.1)
