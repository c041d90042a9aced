"""Sweeps: seeds x learning rates x algorithm hyperparameters as one compiled program
equal the separate runs."""
import json
import os

import flax.serialization
import jax
import numpy as np
import pytest

from algo_helpers import override

from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop
from fedjax_sharp.training import sweep

TIMING = ("round_time_s", "wall_time_s")


def tiny(seed=0, lr=0.1, **overrides):
  c = config_lib.base_config()
  c.name = "sweep_tiny"
  c.data.source, c.data.name = "embedded", "digits"
  c.data.num_clients = 6
  c.data.partition = "dirichlet"     # seed-dependent partitions: ragged, different S per seed
  c.data.alpha = 0.5
  c.clients_per_round = 3
  c.model.name = "linear"
  c.local.epochs = 1
  c.local.batch_size = 64
  c.local.lr = lr
  c.algorithm.name = "feddyn"        # a per-client state table, stacked along the sweep axis
  c.rounds = 3
  c.eval.every = 1
  c.eval.last_n = 2
  c.checkpoint_every = 2
  c.engine.client_strategy = "vmap"
  c.engine.local_loop = "rolled"
  c.seed = seed
  return override(c, **overrides)


def records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in f]


def final_params(workdir):
  with open(os.path.join(workdir, loop.FINAL_PARAMS), "rb") as f:
    return flax.serialization.msgpack_restore(f.read())


def assert_same_run(a, b):
  ra, rb = records(a), records(b)
  assert [r["round"] for r in ra] == [r["round"] for r in rb]
  for x, y in zip(ra, rb):
    assert x.keys() == y.keys()
    for k in x:
      if isinstance(x[k], float):
        assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6), k
      else:
        assert x[k] == y[k], k
  jax.tree.map(lambda p, q: np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6),
               final_params(a), final_params(b))


def test_sweep_of_3_seeds_x_2_lrs_equals_the_6_separate_runs(tmp_path):
  grid = [(seed, lr) for lr in (0.05, 0.2) for seed in (0, 1, 2)]
  configs = [tiny(seed, lr) for seed, lr in grid]
  sweep_dirs = [str(tmp_path / f"sweep_lr{lr}_s{seed}") for seed, lr in grid]
  summaries = sweep.run_sweep(configs, sweep_dirs, progress=False)
  assert [s["status"] for s in summaries] == ["completed"] * 6
  assert all(s["sweep_size"] == 6 for s in summaries)
  # One compiled program served every round of every experiment.
  steps = {x.sampler.shape[1] for x in sweep.build_experiments(configs)}
  assert len(steps) > 1   # the seeds' partitions give different S: padding was exercised
  for (seed, lr), d in zip(grid, sweep_dirs):
    alone = str(tmp_path / f"alone_lr{lr}_s{seed}")
    loop.run(tiny(seed, lr), alone, progress=False)
    assert_same_run(d, alone)
  # The experiments are really different (not six copies of one).
  finals = [records(d)[-1]["train_loss"] for d in sweep_dirs]
  assert len(set(finals)) == 6


def test_sweep_resumes_from_its_checkpoints_and_a_diverged_lane_stops_alone(tmp_path):
  configs = [tiny(0, 0.1), tiny(1, 0.1), tiny(0, 1e6)]
  dirs = [str(tmp_path / n) for n in ("a", "b", "diverging")]
  short = [c.copy_and_resolve_references() for c in configs[:2]]
  for c in short:
    c.rounds = 2           # stop after the checkpoint of round 2, then extend to 3
  sweep.run_sweep(short, dirs[:2], progress=False)
  # Two experiments resume at round 2, the third starts at 0: they wait for it.
  summaries = sweep.run_sweep(configs, dirs, progress=False)
  assert [s["status"] for s in summaries] == ["completed", "completed", "diverged"]
  assert summaries[2]["completed_rounds"] <= 2
  for c, d in zip(configs[:2], dirs[:2]):
    alone = str(tmp_path / f"alone_{os.path.basename(d)}")
    loop.run(c, alone, progress=False)
    assert_same_run(d, alone)


@pytest.mark.parametrize("algorithm,grid", [
    # FedDyn's alpha x 2 seeds; FedGMT's gamma (0: no teacher when built concretely, a zero
    # weight on the teacher's KL in a traced lane) with alpha and beta; FedSAM's rho (0 = FedAvg).
    ("feddyn", [({"algorithm__feddyn__alpha": a}, s) for a in (0.01, 0.5) for s in (0, 1)]),
    ("fedgmt", [({"algorithm__fedgmt__gamma": 0.0}, 0),
                ({"algorithm__fedgmt__gamma": 1.0, "algorithm__fedgmt__alpha": 0.5,
                  "algorithm__fedgmt__beta": 2.0}, 0)]),
    ("fedsam", [({"algorithm__fedsam__rho": r}, 0) for r in (0.0, 0.2)]),
])
def test_sweep_over_algorithm_hyperparameters_equals_the_separate_runs(tmp_path, algorithm,
                                                                        grid):
  configs = [tiny(seed, algorithm__name=algorithm, **o) for o, seed in grid]
  assert sweep.swept_hyperparameters(configs)          # really a hyperparameter sweep
  dirs = [str(tmp_path / f"sweep_{e}") for e in range(len(configs))]
  summaries = sweep.run_sweep(configs, dirs, progress=False)
  assert [s["status"] for s in summaries] == ["completed"] * len(configs)
  for e, (c, d) in enumerate(zip(configs, dirs)):
    alone = str(tmp_path / f"alone_{e}")
    loop.run(c, alone, progress=False)
    assert_same_run(d, alone)
  finals = [records(d)[-1]["train_loss"] for d in dirs]
  assert len(set(finals)) == len(configs)               # the values really differ per lane


def test_a_hyperparameter_left_to_its_default_in_some_experiments_is_refused():
  a = tiny(0)
  b = tiny(1, algorithm__feddyn__alpha=0.5)
  del a.algorithm.feddyn["alpha"]
  with pytest.raises(ValueError, match=r"algorithm\.feddyn\.alpha: set it explicitly"):
    sweep.swept_hyperparameters([a, b])


@pytest.mark.parametrize("override,field", [
    ({"algorithm__feddyn__prox": "unsquared"}, "algorithm.feddyn.prox"),
    ({"local__batch_size": 32}, "local.batch_size"),
    ({"rounds": 4}, "rounds"),
])
def test_incompatible_experiments_are_refused_naming_the_field(override, field):
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    sweep.check_compatible([tiny(0), tiny(1, **override)])


def test_the_host_strategy_is_refused_with_the_fix():
  with pytest.raises(ValueError, match="client_strategy=vmap"):
    sweep.build_experiments([tiny(0, engine__client_strategy="host")])


def test_compare_sweep_groups_seeds_and_lr_variants_into_one_program(tmp_path):
  from fedjax_sharp.training import compare
  base = tiny(rounds=2)
  variants = ["feddyn[local.lr=0.05]", "feddyn[local.lr=0.2]", "feddyn[prox=unsquared]"]
  pending = [(compare.configure_variant(base, v, s), f"{v}/{s}") for v in variants
             for s in (0, 1)]
  groups = compare._sweep_groups(pending, sweep)
  # The two learning rates x two seeds share a program; another proximal term cannot.
  assert [[d for _, d in g] for g in groups] == [
      [d for _, d in pending[:4]], [d for _, d in pending[4:]]]
  results = compare.run_grid(base, variants[:2], [0, 1], str(tmp_path), progress=False,
                             sweep=True)
  for v in variants[:2]:
    assert [r["summary"]["sweep_size"] for r in results[v]] == [4, 4]
    assert [r["summary"]["status"] for r in results[v]] == ["completed"] * 2
  # The same table as the separate runs would give (the grid reads the runs' own files).
  alone = compare.run_grid(base, variants[:1], [1], str(tmp_path / "alone"), progress=False)
  assert [r["train_loss"] for r in results[variants[0]][1]["records"]] == pytest.approx(
      [r["train_loss"] for r in alone[variants[0]][0]["records"]], rel=1e-5)


def test_a_poisson_sweep_equals_the_separate_runs(tmp_path, monkeypatch):
  """`engine.sampling='poisson'` with the padding forced down to 2 clients: each lane draws its
  own cohorts and grows its own padding at its own rounds, the sweep pads every lane to the
  largest, and each experiment equals its separate run. Deliberate bug caught (checked once):
  the lanes stacked without that padding (their cohorts then differ in size)."""
  from fedjax_sharp.core import cohort as cohort_lib
  monkeypatch.setattr(cohort_lib, "poisson_max_cohort", lambda num_clients, m, tail=0: 2)
  configs = [tiny(seed, engine__sampling="poisson") for seed in (0, 3)]
  padded = [[x.sampler.padded_size(t) for t in range(3)]
            for x in sweep.build_experiments(configs)]
  assert padded[0] != padded[1], padded     # the lanes' paddings differ in some round
  dirs = [str(tmp_path / f"sweep_{e}") for e in range(2)]
  summaries = sweep.run_sweep(configs, dirs, progress=False)
  assert [s["status"] for s in summaries] == ["completed"] * 2
  for e, (c, d) in enumerate(zip(configs, dirs)):
    alone = str(tmp_path / f"alone_{e}")
    loop.run(c, alone, progress=False)
    assert_same_run(d, alone)
    assert [r["clients"] for r in records(d)] == [
        len(x) for x in map(sweep.build_experiments([c])[0].sampler.sample_clients, range(3))]
