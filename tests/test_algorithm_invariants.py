"""Every registered algorithm: padding clients and masked steps change nothing, every execution
strategy computes the same rounds, the round is traced once (no recompiles), the vmapped
round donates its state without two leaves ever sharing a buffer, and Poisson-sampled rounds
(`engine.sampling='poisson'`: a cohort of 3, then an empty one) run with the same compiled round.

Each algorithm is built by its registry builder from the base config with non-trivial
hyperparameters (SAM radii, duals, momentum where allowed), on the dict-params softmax model.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS, build_algorithm
from fedjax_sharp.core.algorithm import RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.training import config as config_lib

from algo_helpers import (apply_fn, assert_trees_close, init_params, lr_at, make_problem,
                          run_donating_rounds, run_rounds)

SIZES = (6, 9, 5, 8, 7, 3)
ROUNDS = 3


def _config(name):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.local.momentum = 0.5
  c.local.weight_decay = 1e-3
  c.algorithm.fedspeed.rho = 0.2
  c.algorithm.fedlesam_d.rho = c.algorithm.fedlesam.rho = 0.3
  return c


def _run(alg, data, sampler, execution, pad_to=None):
  server, table, metrics, engine = run_rounds(alg, init_params(50), data, sampler, ROUNDS,
                                              execution=execution, pad_to=pad_to, key=3)
  return server, table, metrics, engine


def _run_donating(name, alg, data, sampler, execution, pad_to, workdir):
  """`_run`'s rounds (the same cohorts, learning rates and key) through
  `algo_helpers.run_donating_rounds`, which checks buffer donation on the way."""
  engine = RoundEngine(alg, sampler.num_clients, execution)
  inputs = lambda t: (data, sampler.build(t, pad_to=pad_to),
                      RoundInfo(jnp.int32(t), jnp.float32(lr_at(t)), sampler.num_clients),
                      jax.random.key(3))
  server, table, metrics = run_donating_rounds(engine, init_params(50), ROUNDS, inputs,
                                               _config(name), workdir, name)
  return server, table, metrics, engine


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_padding_masks_strategies_and_traces(name, tmp_path):
  data, parts = make_problem(SIZES, seed=50)
  alg = build_algorithm(_config(name), apply_fn)
  base = CohortSampler(parts, 3, 4, local_epochs=2, seed=50)
  # The reference: clients one after the other in one program ('map', what 'auto' runs on a
  # GPU), a rolled local loop. The unrolled local loop runs in the host/unrolled chunks below;
  # the 'unrolled' client strategy (the client program written out once per client: 1.5x the
  # reference's compile) runs against every other form in tests/test_engine.py.
  ref = _run(alg, data, base, ExecutionConfig("map", local_loop="rolled"))
  padded_steps = CohortSampler(parts, 3, 4, local_epochs=2, seed=50, max_steps=base.max_steps + 3)
  runs = {
      "vmap/rolled + padding clients and steps, donating": _run_donating(
          name, alg, data, padded_steps, ExecutionConfig("vmap", local_loop="rolled"), 5,
          str(tmp_path)),
      "host/unrolled": _run(alg, data, base, ExecutionConfig("host", local_loop="unrolled",
                                                             host_chunk=3)),
      "chunked_vmap/partial + padding clients": _run(
          alg, data, base, ExecutionConfig("chunked_vmap", 2, "partial", unroll=2), pad_to=4),
  }
  for label, (server, table, metrics, engine) in runs.items():
    try:
      assert_trees_close(server, ref[0], atol=2e-6, rtol=2e-5)
      assert_trees_close(table, ref[1], atol=2e-6, rtol=2e-5)
      for k in ref[2]:
        np.testing.assert_allclose(float(metrics[k]), float(ref[2][k]), rtol=2e-5, atol=1e-5)
    except AssertionError as e:
      raise AssertionError(f"{name}: {label} differs from map/rolled") from e
    assert engine.trace_count == 1, f"{name}: {label} retraced {dict(engine.trace_counts)}"
  # The rounds did something: the model moved.
  moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
              for a, b in zip(jax.tree.leaves(alg.eval_params(ref[0])),
                              jax.tree.leaves(init_params(50))))
  assert moved > 1e-3
  _poisson_rounds(name, alg, data, parts, padded_steps.max_steps,
                  runs["vmap/rolled + padding clients and steps, donating"][3])


# Seed 61 of a Poisson sampler of the 6 clients with m = 2 (q = 1/3) draws 3 clients, then none.
POISSON_SEED = 61


def _poisson_rounds(name, alg, data, parts, max_steps, engine):
  """Two Poisson rounds (3 clients, then an empty draw) on `engine`, the donating vmap round
  compiled above for cohorts of 5 clients x `max_steps` steps: no algorithm's server rule needs a
  fixed cohort size. The first round moves the model, finite; the empty one changes no bit of
  the server state or the client table (with its own DP, DP-FedSAM releases its noise there:
  the model moves); nothing is compiled again. Deliberate bug caught (checked once): the engine
  applying the server update to an empty cohort (FedDyn's, FedSMOO's, FedGMT's duals then move
  the model)."""
  sampler = CohortSampler(parts, 2, 4, local_epochs=2, seed=POISSON_SEED, max_steps=max_steps,
                          weighting="uniform", sampling="poisson", max_cohort=5,
                          fixed_denominator=alg.privacy is not None)
  assert [sampler.cohort_size(t) for t in range(2)] == [3, 0]
  traces = dict(engine.trace_counts)
  one = run_rounds(alg, init_params(50), data, sampler, 1, engine=engine, key=3)
  one = jax.tree.map(np.asarray, one[:2])
  two = run_rounds(alg, init_params(50), data, sampler, 2, engine=engine, key=3)
  assert dict(engine.trace_counts) == traces, f"{name}: Poisson rounds recompiled"
  params = [np.asarray(x) for x in jax.tree.leaves(alg.eval_params(one[0]))]
  assert all(np.all(np.isfinite(x)) for x in params), name
  assert max(float(np.abs(a - np.asarray(b)).max())
             for a, b in zip(params, jax.tree.leaves(init_params(50)))) > 1e-3, name
  same = all(np.array_equal(np.asarray(a), b) for a, b in
             zip(jax.tree.leaves(two[:2]), jax.tree.leaves(one)))
  assert same == (alg.privacy is None), (
      f"{name}: the empty draw {'kept' if same else 'moved'} the state")
