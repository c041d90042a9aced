"""Each algorithm's hyperparameters in one place (its factory's keyword arguments)."""
import importlib.util
import json
import os
import sys

import pytest
from absl import logging as absl_logging

from fedjax_sharp.algorithms import registry
from fedjax_sharp.hyperparameters import fields
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.minimax import algorithms as minimax
from fedjax_sharp.training import cli
from fedjax_sharp.training import config as config_lib
from algo_helpers import apply_fn, assert_trees_equal, eager_batch, eager_round, init_params
import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG_FILE = '''
from typing import Annotated

from fedjax_sharp.algorithms import Field, register
from fedjax_sharp.algorithms.fed_prox import fed_prox
from fedjax_sharp.training.config import base_config


@register("my_fedprox", title="My FedProx", paper="Li et al., MLSys 2020")
def my_fedprox(apply_fn, client_optimizer, *,
               mu: Annotated[float, Field(">= 0", "proximal weight")] = 0.01,
               name: str = "my_fedprox"):
  print(f"my_fedprox built with mu={mu}", flush=True)
  return fed_prox(apply_fn, client_optimizer, mu=mu, name=name)


def get_config():
  c = base_config()
  c.data.num_clients = 4
  c.clients_per_round = 2
  c.data.max_train_examples = 200
  c.data.max_test_examples = 100
  c.model.name = "linear"
  c.local.steps = 2
  c.local.batch_size = 10
  c.eval.last_n = 1
  return c
'''


def test_a_registered_algorithm_runs_from_a_config_file_with_an_override(tmp_path):
  path = tmp_path / "my_config.py"
  path.write_text(CONFIG_FILE)
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  out = cli_runner.run(
      [sys.executable, os.path.join(ROOT, "experiments", "run.py"), f"--config={path}",
       "--config.rounds=2", "--config.algorithm.name=my_fedprox",
       "--config.algorithm.my_fedprox.mu=0.25", f"--workdir={tmp_path / 'run'}"],
      capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "my_fedprox built with mu=0.25" in out.stdout
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["status"] == "completed"
  saved = json.loads((tmp_path / "run" / "config.json").read_text())
  assert saved["algorithm"]["my_fedprox"]["mu"] == 0.25
  registry.ALGORITHMS.pop("my_fedprox", None)


def test_list_fields_prints_each_fields_value_and_doc(tmp_path):
  path = tmp_path / "my_config.py"
  path.write_text(CONFIG_FILE)
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  run = lambda *flags: cli_runner.run(
      [sys.executable, os.path.join(ROOT, "experiments", "run.py"), f"--config={path}", *flags],
      capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  out = run("--list_fields=algorithm.my_fedprox", "--config.algorithm.my_fedprox.mu=0.5")
  assert out.returncode == 0, out.stderr[-2000:]
  lines = out.stdout.splitlines()
  i = lines.index("  --config.algorithm.my_fedprox.mu=0.5")
  assert "proximal" in lines[i + 1] and "range >= 0" in lines[i + 1], lines
  out = run("--list_fields=algoritm")
  assert out.returncode != 0 and "no config field starts with it" in out.stderr
  registry.ALGORITHMS.pop("my_fedprox", None)


def test_every_algorithms_defaults_are_its_factorys_signature():
  config = config_lib.base_config()
  printed = cli.format_config(config)
  spec = importlib.util.spec_from_file_location("gen_pages", os.path.join(ROOT, "docs",
                                                                           "gen_algorithm_pages.py"))
  gen = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gen)
  declared = {name: r.fields() for name, r in registry.ALGORITHMS.items()}
  declared.update({name: r.fields() for name, r in minimax.MINIMAX_ALGORITHMS.items()})
  for name, hps in declared.items():
    assert dict(config.algorithm[name]) == {k: h.default for k, h in hps.items()}, name
    for k, h in hps.items():
      assert f"algorithm.{name}.{k} = {h.default!r}" in printed
    page = open(os.path.join(ROOT, "docs", "algorithms", f"{name}.md")).read()
    for k, (default, _, _) in gen._rows(hps).items():
      assert f"| `{k}` | `{json.dumps(default)}` |" in page, (name, k)
  # The factories' own defaults (the same values when called directly).
  from fedjax_sharp.algorithms.fed_gmt import fed_gmt, fed_gmt_v2
  assert config.algorithm.fedgmt.alpha == 0.95 and config.algorithm.fedgmt_v2.alpha == 0.5
  assert fields(fed_gmt)["alpha"].default == 0.95 and fields(fed_gmt_v2)["alpha"].default == 0.5


def test_print_config_shows_each_fields_own_doc():
  printed = cli.format_config(config_lib.base_config()).splitlines()
  gloss = [line for line in printed if line.startswith("algorithm.fedgloss.")]
  assert len({line.split("#", 1)[1] for line in gloss}) == len(gloss)   # no shared comment
  assert any("eta_s" in line and "server learning rate" in line for line in gloss)


@pytest.mark.parametrize("make", ["programmatic", "builder"])
def test_an_unknown_hyperparameter_is_refused_with_the_closest_name(make):
  c = config_lib.base_config()
  c.algorithm.name = "fedgmt"
  c.algorithm.fedgmt.gama = 2.0
  with pytest.raises(ConfigError, match=r"'algorithm\.fedgmt\.gama' does not exist; did you "
                                        r"mean 'algorithm\.fedgmt\.gamma'"):
    if make == "programmatic":
      config_lib.validate(c)
    else:
      registry.build_algorithm(c, apply_fn)


def test_ranges_come_from_the_declaration():
  c = config_lib.base_config()
  c.algorithm.fedcm.beta = 0.0
  with pytest.raises(ConfigError, match=r"algorithm\.fedcm\.beta must be in \(0, 1\]"):
    config_lib.validate(c)


def test_fedsam_deprecated_alias_logs_and_gives_the_same_algorithm(monkeypatch):
  warnings = []
  monkeypatch.setattr(absl_logging, "warning", lambda msg, *a: warnings.append(msg % a))
  new = config_lib.base_config()
  new.algorithm.name = "fedsam"
  new.algorithm.fedsam.rho = 0.1
  old = config_lib.base_config()
  old.algorithm.name = "fedavg"
  old.local.optimizer, old.local.rho = "sam", 0.1
  params, batch = init_params(3), eager_batch()
  a = eager_round(registry.build_algorithm(new, apply_fn), params, batch)
  assert not warnings
  b = eager_round(registry.build_algorithm(old, apply_fn), params, batch)
  assert_trees_equal(a, b)
  assert any("algorithm.fedsam.rho" in w and "deprecated" in w for w in warnings)


def test_server_lr_is_refused_for_fedgloss():
  c = config_lib.base_config()
  c.algorithm.name = "fedgloss"
  c.server.lr = 0.5
  with pytest.raises(ConfigError, match=r"server\.lr=0\.5 .*algorithm\.fedgloss\.eta_s"):
    config_lib.validate(c)
  with pytest.raises(ConfigError, match=r"server\.lr"):
    registry.build_algorithm(c, apply_fn)
  c.algorithm.name = "fedavg"   # FedOpt: takes config.server
  config_lib.validate(c)


def test_sweepable_is_derived_from_the_declarations():
  assert registry.SWEEPABLE["fedgmt"] == ("algorithm.fedgmt.gamma", "algorithm.fedgmt.alpha",
                                          "algorithm.fedgmt.beta")
  assert registry.SWEEPABLE["fedprox"] == ("algorithm.fedprox.mu", "local.rho")
  assert registry.SWEEPABLE.get("scaffold", ()) == ()


def test_every_sweepable_hyperparameter_reaches_the_algorithms_hparams():
  """A sweep stacks the experiments' `FederatedAlgorithm.hparams` (round data): every sweepable
  config path must change them, else its lanes would all run the first experiment's value."""
  from fedjax_sharp.training import config_paths
  for name, paths in registry.SWEEPABLE.items():
    for path in paths:
      c = config_lib.base_config()
      c.algorithm.name = name
      if path == "local.rho":
        c.local.optimizer = "sam"     # the radius of config.local's SAM optimiser
      before = registry.build_algorithm(c, apply_fn).hparams
      parent, leaf = path.rsplit(".", 1)
      value = config_paths.get(c, path)   # None: the algorithm's variant presets it
      config_paths.get(c, parent)[leaf] = 0.3125 if value is None else 0.5 * value + 0.125
      after = registry.build_algorithm(c, apply_fn).hparams
      assert before.keys() == after.keys() and before != after, (name, path)


@pytest.mark.parametrize("name,weighting", [("fedswa", "uniform"), ("fedmoswa", "uniform"),
                                            ("fednsam", "uniform"), ("fedwmsam", "uniform"),
                                            ("fedgf", "examples"), ("fedavg", "examples"),
                                            ("fedgmt", "examples")])
def test_auto_aggregation_is_each_algorithms_declared_weighting(name, weighting):
  """'auto' resolves to the weighting of the source the algorithm follows (the authors' code
  averages uniformly for FedSWA, FedMoSWA, FedNSAM and FedWMSAM; FedGF's weighs by examples),
  'uniform' under DP, and `--print_config` says which and why. Deliberate bug caught: 'auto'
  resolving to 'examples' for every algorithm without DP (what it did before)."""
  c = config_lib.base_config()
  c.algorithm.name = name
  assert config_lib.prepare(c).aggregation == weighting
  line = next(l for l in cli.format_config(c).splitlines() if l.startswith("aggregation ="))
  assert f"here {weighting!r} ({name}'s default: " in line, line
  c.dp.enabled = True
  assert config_lib.prepare(c).aggregation == "uniform"
  c.dp.enabled, c.aggregation = False, "examples"
  assert config_lib.prepare(c).aggregation == "examples"
