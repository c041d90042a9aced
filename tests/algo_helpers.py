"""Helpers shared by the algorithm tests: a dict-params softmax regression written in plain
jax.numpy (so reference computations can be independent of Flax), a ragged client problem,
tree comparisons, an eager single-client round (no engine) for cheap builder checks, and the
donating rounds with their buffer checks (`run_donating_rounds`)."""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core import donation
from fedjax_sharp.core.algorithm import ClientInfo, RoundInfo
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine, TrainData
from fedjax_sharp.training import checkpoints

DIM, NUM_CLASSES = 5, 3
LR, MOMENTUM, WD = 0.1, 0.9, 1e-3


def apply_fn(params, x):
  return x @ params["w"] + params["b"]


def init_params(seed=0):
  rng = np.random.default_rng(seed)
  return {"w": jnp.asarray(0.5 * rng.normal(size=(DIM, NUM_CLASSES)), jnp.float32),
          "b": jnp.asarray(0.1 * rng.normal(size=(NUM_CLASSES,)), jnp.float32)}


def make_problem(sizes, seed=0):
  """Data of len(sizes) clients with `sizes` examples each; returns (TrainData, client_indices)."""
  rng = np.random.default_rng(seed)
  n = int(sum(sizes))
  x = rng.normal(size=(n, DIM)).astype(np.float32)
  # Client-dependent label skew so that local models drift apart.
  y = np.concatenate([(rng.integers(0, NUM_CLASSES, s) * (c % 2) + c) % NUM_CLASSES
                      for c, s in enumerate(sizes)]).astype(np.int32)
  bounds = np.cumsum([0, *sizes])
  parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(sizes))]
  return TrainData(jnp.asarray(x), jnp.asarray(y)), parts


def np_normal(shape, seed=0):
  """N(0, 1) float32 drawn with NumPy: an eager jax.random draw compiles a threefry program for
  each new shape (~0.3 s on a 2-core CPU), where the draw's values do not matter."""
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def tmap(f, *trees):
  return jax.tree.map(f, *trees)


def assert_trees_close(a, b, atol=1e-5, rtol=1e-5):
  """Same structure, leaves close to `atol` + `rtol` |b| (compared in float64)."""
  to64 = lambda t: jax.tree.map(lambda x: np.asarray(x, np.float64), t)
  chex.assert_trees_all_close(to64(a), to64(b), atol=atol, rtol=rtol)


def eager_round(alg, params, batch, num_clients=4):
  """One client, two local steps, server update; eager (no engine): cheap builder checks."""
  rinfo = RoundInfo(jnp.int32(0), jnp.float32(0.1), num_clients)
  info = ClientInfo(jnp.int32(0), jnp.float32(6), jnp.int32(1), jnp.float32(1))
  ss = alg.server_init(params)
  bcast = alg.broadcast(ss, rinfo)
  cs = alg.client_state_init(params)
  local = alg.client_init(bcast, cs, info, rinfo)
  for _ in range(2):
    local, _ = alg.local_step(local, batch, jax.random.key(0), rinfo)
  up, cs = alg.client_finalize(local, bcast, cs, info, rinfo)
  ss = alg.server_update(ss, tmap(lambda a: a[None], up), jnp.ones((1,)), jnp.ones((1,)), rinfo)
  return ss, cs


VMAP_ROLLED = ExecutionConfig("vmap", local_loop="rolled")


def lr_at(t):
  return LR * 0.998 ** t


def run_rounds(alg, params, data, sampler, num_rounds, execution=VMAP_ROLLED, cohorts=None,
               pad_to=None, engine=None, key=0):
  """Runs `num_rounds` through the real RoundEngine; returns (server, table, metrics, engine)."""
  engine = engine or RoundEngine(alg, sampler.num_clients, execution)
  server_state, table = engine.init(params)
  metrics = None
  for t in range(num_rounds):
    cohort = sampler.build(t, None if cohorts is None else cohorts[t], pad_to=pad_to)
    server_state, table, metrics = engine.round(
        server_state, table, data, cohort,
        RoundInfo(jnp.int32(t), jnp.float32(lr_at(t)), sampler.num_clients),
        jax.random.key(key))
  return server_state, table, metrics, engine


def buffer_pointers(tree) -> list:
  """The device buffers behind every leaf of `tree`."""
  return [p for leaf in jax.tree.leaves(tree) for p in donation.buffer_ids(leaf)]


def run_donating_rounds(engine, params, num_rounds, round_inputs, config, workdir, label=""):
  """`num_rounds` donating rounds of `engine` from `params`, checking buffer donation on the way
  as an accelerator runs them (the CPU donates too): no two leaves of the state share a buffer
  after init, after each round and after a checkpoint restore; each round's inputs are gone
  after it; the caller's parameters survive; the restored state can be donated again.
  `round_inputs(t)` gives round t's (data, cohort, RoundInfo, key). Returns host copies of
  (server, table) after `num_rounds` rounds and the last round's metrics."""
  assert engine.donate, label
  server, table = engine.init(params)
  # No leaf shares a buffer with another (unsafe_buffer_pointer identity) or with `params`.
  assert donation.shared_leaves((server, table)) == [], f"{label}: after init"
  assert not set(buffer_pointers((server, table))) & set(buffer_pointers(params)), label
  for t in range(num_rounds):
    before = jax.tree.leaves((server, table))
    server, table, metrics = engine.round(server, table, *round_inputs(t))
    jax.block_until_ready((server, table))
    # The CPU donated the inputs (they are gone), as an accelerator does.
    assert all(leaf.is_deleted() for leaf in before if isinstance(leaf, jax.Array)), (label, t)
    assert donation.shared_leaves((server, table)) == [], f"{label}: after round {t}"
    assert np.isfinite(float(metrics["loss_sum"])), (label, t)
  assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(params)), label
  expected = jax.device_get((server, table))
  committed = [leaf.committed for leaf in jax.tree.leaves((server, table))]
  checkpoints.save(workdir, config, num_rounds, server, table, 0)
  restored = checkpoints.restore(workdir, config, server, table)
  server, table = engine.unalias(restored[1], restored[2])
  # Committed to a device as the rounds' outputs were (jit compiles a program per commitment):
  # the round after a restore runs the program the rounds before it compiled.
  assert [leaf.committed for leaf in jax.tree.leaves((server, table))] == committed, label
  assert donation.shared_leaves((server, table)) == [], f"{label}: after a checkpoint restore"
  tmap(np.testing.assert_array_equal, jax.device_get((server, table)), expected)
  engine.round(server, table, *round_inputs(num_rounds))   # the restored state donated again
  return expected[0], expected[1], metrics


def assert_trees_equal(a, b):
  """Bitwise equality of two pytrees (reductions that must hold exactly)."""
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, a), jax.tree.map(np.asarray, b))


def cohort_lr(t):
  """The float32 learning rate the engine sees in round t, as float64 for NumPy references."""
  return float(np.float32(lr_at(t)))


def eager_batch(n=6, seed=3):
  rng = np.random.default_rng(seed)
  return {"x": jnp.asarray(rng.normal(size=(n, DIM)), jnp.float32),
          "y": jnp.asarray(rng.integers(0, NUM_CLASSES, n), jnp.int32),
          "mask": jnp.ones((n,), bool)}


def override(config, **overrides):
  """Sets `config` fields given as keyword arguments, `__` separating path parts
  (`data__alpha=0.5` sets config.data.alpha); returns the config."""
  for key, value in overrides.items():
    node = config
    *path, leaf = key.replace("__", ".").split(".")
    for part in path:
      node = node[part]
    node[leaf] = value
  return config
