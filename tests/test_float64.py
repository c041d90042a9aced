"""A float64 run is float64 throughout, and exact.

Under `jax_enable_x64`, with float64 parameters and data, every scalar the library derives from a
config value (hyperparameters, the learning rate, aggregation weights, DP's clip and noise) is
computed in float64 (`core.tree.float_dtype`):

- no value of lower float precision anywhere in the traced round of any registered algorithm
  (classification and minimax, with and without DP): a float32 cast anywhere fails, naming the
  operation and the line that made it;
- a relative change of 1e-12 of any hyperparameter, of the learning rate, or of DP's clip bound
  and noise multiplier changes two float64 rounds (a float32 cast erases such a change);
- the golden rounds of FedAvg, FedProx, FedDyn, FedGMT and FedGMT-v2 agree with independent
  float64 references to 1e-12.

Deliberate bugs each catches (checked once): `hparams.as_arrays` casting to float32 (every
algorithm with round-data hyperparameters fails both the trace and the perturbation test, and
the golden rounds move by ~1e-8); `RoundInfo.at` rounding the learning rate to float32; the
cohort's weights in float32; the DP clip's norm in float32; FedWMSAM's alpha, FedMoSWA's cohort
count and FedSWA's schedule fraction in float32 (the trace test names each line).
"""
from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_gmt import fed_gmt, fed_gmt_v2
from fedjax_sharp.algorithms.fed_prox import fed_prox
from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine, TrainData
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.minimax import algorithms as minimax
from fedjax_sharp.minimax import tasks as minimax_tasks
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training.experiment import apply_privacy

import np_reference as ref
from algo_helpers import MOMENTUM, WD, apply_fn, init_params, make_problem
from test_fed_dyn import ref_dyn_round
from test_fed_gmt import ref_gmt_round

SIZES = (6, 9, 5, 8)            # unequal clients: the 'examples' weights are not 1/m
ROUNDS = 2
VMAP_ROLLED = ExecutionConfig("vmap", local_loop="rolled")
REL = 1e-12                     # the perturbation a float32 cast erases
# Hyperparameters a 1e-12 change cannot move: thresholds are compared, never multiplied, so the
# change shows only at the boundary (the trace test still checks their dtype).
THRESHOLDS = {("fedgf", "T_D")}
# DP settings whose clip bites and whose noise is drawn, so that both change the round.
DP = {"global/server": dict(clip="global", noise="server"),
      "per_tensor/client": dict(clip="per_tensor", noise="client")}


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def to64(tree_):
  return jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), tree_)


def lr_at(t):
  return 0.1 * 0.998 ** t


class Problem:
  """Float64 softmax regression on 4 ragged clients; the cohorts are built under x64."""

  def __init__(self, weighting="examples", clients_per_round=3, sizes=SIZES):
    data, self.parts = make_problem(sizes, seed=3)
    self.data = TrainData(jnp.asarray(data.x, jnp.float64), data.y)
    self.params = to64(init_params(3))
    self.sampler = CohortSampler(self.parts, clients_per_round, 3, local_epochs=1, seed=3,
                                 weighting=weighting)
    self.cohorts = [self.sampler.build(t) for t in range(ROUNDS)]
    self.num_clients = len(self.parts)

  def engine(self, alg):
    return RoundEngine(alg, self.num_clients, VMAP_ROLLED)

  def info(self, t, lr_scale=1.0, hparams=None):
    return RoundInfo.at(t, lr_at(t) * lr_scale, self.num_clients, hparams=dict(hparams or {}))

  def run(self, alg, engine=None, **info_kw):
    """Leaves of (evaluated params, server state, client table) after ROUNDS rounds."""
    engine = engine or self.engine(alg)
    server, table = engine.init(self.params)
    for t in range(ROUNDS):
      server, table, _ = engine.round(server, table, self.data, self.cohorts[t],
                                      self.info(t, **info_kw), jax.random.key(0))
    return [np.asarray(x) for x in jax.tree.leaves((alg.eval_params(server), server, table))]


def config_for(name, block=None, dp=None):
  c = config_lib.base_config()
  c.algorithm.name, c.clients_per_round, c.data.num_clients = name, 3, len(SIZES)
  for k, v in (block or {}).items():
    c.algorithm[name][k] = v
  if dp is not None:
    c.dp.enabled, c.aggregation = True, "uniform"
    c.dp.clip_norm, c.dp.noise_multiplier = dp.get("clip_norm", 0.05), dp.get("sigma", 0.7)
    c.dp.clip, c.dp.noise = dp["clip"], dp["noise"]
  return c


def build(problem, name, block=None, dp=None):
  c = config_for(name, block, dp)
  alg = ALGORITHMS[name].build(c, apply_fn)
  if dp is not None:
    alg, _ = apply_privacy(c, alg, problem.params, problem.num_clients)
  return alg


def low_precision_values(fn, *args) -> list[str]:
  """Where values of float dtype narrower than float64 arise in the jaxpr of `fn(*args)`
  (nested jaxprs included): the operations that make one from float64 or integer inputs (a cast,
  a float32 literal or constant), as 'primitive dtype at file:line (function)'."""
  from jax._src import source_info_util  # pylint: disable=g-import-not-at-top
  found = []

  def low(v):
    dtype = getattr(getattr(v, "aval", None), "dtype", None)
    return (dtype is not None and jnp.issubdtype(dtype, jnp.floating)
            and jnp.dtype(dtype).itemsize < 8)

  def visit(jaxpr):
    found.extend(f"input {v.aval.str_short()}" for v in (*jaxpr.invars, *jaxpr.constvars)
                 if low(v))
    for eqn in jaxpr.eqns:
      subs = list(_subjaxprs(eqn))
      for sub in subs:
        visit(sub)
      literal = [v for v in eqn.invars if low(v) and isinstance(v, jax.extend.core.Literal)]
      made = [v for v in eqn.outvars if low(v)] and not any(
          low(v) for v in eqn.invars if not isinstance(v, jax.extend.core.Literal))
      if (literal or made) and not subs:
        v = (literal or eqn.outvars)[0]
        frames = [f for f in source_info_util.user_frames(eqn.source_info.traceback)
                  if "fedjax_sharp" in f.file_name]
        where = (f"{frames[0].file_name.split('fedjax_sharp/')[-1]}:{frames[0].start_line} "
                 f"({frames[0].function_name})" if frames
                 else source_info_util.summarize(eqn.source_info))
        found.append(f"{eqn.primitive} {v.aval.str_short()} at {where}")

  visit(jax.make_jaxpr(fn)(*args).jaxpr)
  return found


def _subjaxprs(eqn):
  for p in eqn.params.values():
    for item in (p if isinstance(p, (tuple, list)) else (p,)):
      if hasattr(item, "eqns"):
        yield item
      elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
        yield item.jaxpr


def round_values(problem, alg):
  """The low-precision values of one traced round of `alg` on `problem`."""
  engine = problem.engine(alg)
  server, table = engine.init(problem.params)
  return low_precision_values(
      lambda s, t: engine.round(s, t, problem.data, problem.cohorts[0], problem.info(0),
                                jax.random.key(0)), server, table)


# ------------------------------------------------------------------------------------------
# No float32 anywhere in a float64 round.
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_no_low_precision_value_in_a_float64_round(name):
  problem = Problem()
  found = round_values(problem, build(problem, name))
  assert not found, f"{name}: {len(found)} values below float64, first: {found[:3]}"


@pytest.mark.parametrize("dp", sorted(DP))
def test_no_low_precision_value_in_a_float64_dp_round(dp):
  problem = Problem("uniform")
  for name in ("fedavg", "scaffold", "naive_fedgloss"):
    found = round_values(problem, build(problem, name, dp=DP[dp]))
    assert not found, f"{name} with DP {dp}: {found[:3]}"


def test_no_low_precision_value_in_a_float64_minimax_round():
  task = minimax_tasks.quadratic(num_clients=3, seed=0)
  sampler = CohortSampler(task.client_indices, 3, 1, local_steps=2, seed=0, weighting="uniform")
  cohort = sampler.build(0)
  for name in minimax.MINIMAX_ALGORITHMS:
    alg = minimax.MINIMAX_ALGORITHMS[name].factory(task, minimax.PlayerOptimizers(0.02, 0.2),
                                                   name=name)
    engine = RoundEngine(alg, 3, VMAP_ROLLED, preprocess=task.preprocess)
    server, table = engine.init(task.init_params(jax.random.key(0)))
    assert tree.float_dtype() == jnp.float64
    found = low_precision_values(
        lambda s, t: engine.round(s, t, task.train_data, cohort, RoundInfo.at(0, 0.0, 3),
                                  jax.random.key(1)), server, table)
    assert not found, f"{name}: {found[:3]}"


def test_round_data_carries_the_run_dtype():
  assert tree.float_dtype() == jnp.float64
  info = RoundInfo.at(3, 0.1, 4)
  assert info.learning_rate.dtype == jnp.float64 and float(info.learning_rate) == 0.1
  problem = Problem()
  alg = build(problem, "fedprox")
  engine = problem.engine(alg)
  seen = engine._with_hparams(info).hparams   # pylint: disable=protected-access
  assert seen["mu"].dtype == jnp.float64 and float(seen["mu"]) == 0.01
  assert problem.cohorts[0].weights.dtype == np.float64
  with jax.enable_x64(False):
    assert tree.float_dtype() == jnp.float32
    assert RoundInfo.at(0, 0.1).learning_rate.dtype == jnp.float32
    # Weakly typed: a hyperparameter never promotes bfloat16 or float32 state.
    assert (tree.as_float(0.5) * jnp.ones((2,), jnp.bfloat16)).dtype == jnp.bfloat16


# ------------------------------------------------------------------------------------------
# A 1e-12 change of any hyperparameter changes a float64 round.
def _differs(a, b) -> bool:
  return any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, b))


def _perturbed_block(name):
  """The algorithm's block with every float field at (1 + REL) times its default (or (1 - REL)
  where the range ends at the default)."""
  from fedjax_sharp.errors import ConfigError  # pylint: disable=g-import-not-at-top
  fields = ALGORITHMS[name].fields()
  block = {}
  for k, h in fields.items():
    if isinstance(h.default, float) and h.default != 0:
      for factor in (1 + REL, 1 - REL):
        try:
          ALGORITHMS[name].values(config_for(name, {k: h.default * factor}))
        except ConfigError:
          continue
        block[k] = h.default * factor
        break
  return block


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_relative_change_of_1e_12_changes_a_float64_round(name):
  """Round data (each of `FederatedAlgorithm.hparams`, the learning rate) through the same
  compiled round; the factory's other float keyword arguments all at once."""
  problem = Problem()
  alg = build(problem, name)
  engine = problem.engine(alg)
  base = problem.run(alg, engine)
  assert _differs(base, problem.run(alg, engine, lr_scale=1 + REL)), "learning rate"
  for k, v in alg.hparams.items():
    if v == 0 or (name, k) in THRESHOLDS:
      continue
    assert _differs(base, problem.run(alg, engine, hparams={k: v * (1 + REL)})), k
  closed = {k: v for k, v in _perturbed_block(name).items() if k not in alg.hparams}
  if closed:
    assert _differs(base, problem.run(build(problem, name, closed))), sorted(closed)


@pytest.mark.parametrize("dp", sorted(DP))
def test_dp_clip_and_noise_changes_of_1e_12_change_a_float64_round(dp):
  problem = Problem("uniform")
  base = problem.run(build(problem, "fedavg", dp=DP[dp]))
  for k in ("clip_norm", "sigma"):
    default = {"clip_norm": 0.05, "sigma": 0.7}[k]
    changed = problem.run(build(problem, "fedavg", dp={**DP[dp], k: default * (1 + REL)}))
    assert _differs(base, changed), k


# ------------------------------------------------------------------------------------------
# Golden float64 rounds against independent references, to 1e-12.
def assert_close_1e12(actual, expected):
  for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=1e-12, atol=1e-12)


def _hand_rounds(problem, direction_fn, rounds=3):
  """FedAvg-style rounds written out in NumPy: `direction_fn(w, w_global, x, y, mask)`."""
  w = ref.to_np(problem.params)
  for t in range(rounds):
    cohort = problem.sampler.build(t)
    models = []
    for c in range(cohort.batch_idx.shape[0]):
      wm, opt = w, ref.Momentum(MOMENTUM, WD)
      for x, y, mask in ref.client_batches(problem.data, cohort, c):
        wm = opt.step(wm, direction_fn(wm, w, x, y, mask), lr_at(t))
      models.append(wm)
    n = np.asarray([len(problem.parts[i]) for i in cohort.client_ids], np.float64)
    w = ref.mean(models, n / n.sum())
  return w


def _engine_rounds(problem, alg, rounds=3):
  engine = problem.engine(alg)
  server, table = engine.init(problem.params)
  for t in range(rounds):
    server, table, _ = engine.round(server, table, problem.data, problem.sampler.build(t),
                                    problem.info(t), jax.random.key(0))
  return server, table


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_golden_fedavg_and_fedprox_rounds_in_float64(mu):
  problem = Problem()
  tx = local_sgd(MOMENTUM, WD)
  alg = fed_prox(apply_fn, tx, mu=mu) if mu else fed_avg(apply_fn, tx)
  server, _ = _engine_rounds(problem, alg)
  expected = _hand_rounds(problem, lambda w, w0, x, y, m: ref.add(
      ref.ce_grad(w, x, y, m), ref.scale(mu, ref.sub(w, w0))))
  assert_close_1e12(server.params, expected)
  assert ref.norm(ref.sub(expected, ref.to_np(problem.params))) > 1e-2


@pytest.mark.parametrize("prox", ["squared", "unsquared"])
def test_golden_feddyn_rounds_in_float64(prox):
  problem = Problem()
  alg = fed_dyn(apply_fn, local_sgd(MOMENTUM, WD), alpha=0.1, prox=prox)
  engine = problem.engine(alg)
  server, table = engine.init(problem.params)
  w, h = problem.params, jax.tree.map(jnp.zeros_like, problem.params)
  h_table = {m: h for m in range(problem.num_clients)}
  for t in range(3):
    cohort = problem.sampler.build(t)
    server, table, _ = engine.round(server, table, problem.data, cohort, problem.info(t),
                                    jax.random.key(0))
    w, h, h_table = ref_dyn_round(w, h, h_table, problem.data, cohort, lr_at(t),
                                  [len(p) for p in problem.parts], alpha=0.1, prox=prox,
                                  num_clients=problem.num_clients)
    assert_close_1e12(server.params, w)
    assert_close_1e12(server.h, h)
    for m in range(problem.num_clients):
      assert_close_1e12(jax.tree.map(lambda x: x[m], table), h_table[m])


@pytest.mark.parametrize("version", ["fedgmt", "fedgmt_v2 (alpha 0)"])
def test_golden_fedgmt_rounds_in_float64(version):
  """FedGMT, and FedGMT-v2 at alpha = 0, where its client EMA is the received model: FedGMT's
  reference with alpha = 0."""
  problem = Problem()
  hp = dict(gamma=1.0, tau=3.0, alpha=0.5 if version == "fedgmt" else 0.0, beta=10.0)
  factory = fed_gmt if version == "fedgmt" else fed_gmt_v2
  alg = factory(apply_fn, local_sgd(MOMENTUM, WD), **hp)
  engine = problem.engine(alg)
  server, table = engine.init(problem.params)
  w = e = problem.params
  u = jax.tree.map(jnp.zeros_like, problem.params)
  u_table = {m: u for m in range(problem.num_clients)}
  for t in range(3):
    cohort = problem.sampler.build(t)
    server, table, _ = engine.round(server, table, problem.data, cohort, problem.info(t),
                                    jax.random.key(0))
    w, e, u, u_table = ref_gmt_round(w, e, u, u_table, problem.data, cohort, lr_at(t),
                                     num_clients=problem.num_clients, **hp)
    assert_close_1e12(server.params, w)
    assert_close_1e12(server.dual, u)
  assert float(jnp.abs(u_table[1]["w"]).max()) > 1e-3
