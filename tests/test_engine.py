"""The round engine: golden FedAvg round, masks, strategies, tracing, cohorts."""
import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sharp.algorithms import fed_avg, local_sgd
from fedjax_sharp.core import (CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData,
                               num_local_steps)
from fedjax_sharp.core.debugging import RoundStageError

LR0, DECAY, MOM, WD = 0.1, 0.9, 0.9, 0.01


def _run(problem, algorithm, sampler, rounds, execution=ExecutionConfig("vmap", 4, "rolled"),
         pad_to=None, client_ids=None, engine=None):
  engine = engine or RoundEngine(algorithm, len(problem.client_indices), execution)
  server, table = engine.init(problem.params)
  data = TrainData(jnp.asarray(problem.x), jnp.asarray(problem.y))
  metrics = None
  for t in range(rounds):
    cohort = sampler.build(t, client_ids=client_ids, pad_to=pad_to)
    info = RoundInfo(jnp.int32(t), jnp.float32(LR0 * DECAY ** t), len(problem.client_indices))
    server, table, metrics = engine.round(server, table, data, cohort, info, jax.random.key(7))
  return server, table, metrics, engine


def _max_diff(a, b):
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _hand_fedavg(problem, sampler, rounds):
  """FedAvg written out by hand: explicit CE gradient, weight decay, momentum buffer, average."""
  W = np.asarray(problem.params["out"]["kernel"], np.float64)
  b = np.asarray(problem.params["out"]["bias"], np.float64)
  X = problem.x.reshape(len(problem.x), -1).astype(np.float64)
  for t in range(rounds):
    lr = LR0 * DECAY ** t
    ids = sampler.sample_clients(t)
    new_W, new_b, sizes = [], [], []
    for cid in ids:
      idx, mask = sampler.client_plan(int(cid), t)
      w, bb = W.copy(), b.copy()
      mw, mb = np.zeros_like(w), np.zeros_like(bb)  # momentum reset every round
      for s in range(idx.shape[0]):
        if not mask[s].any():
          continue
        xb, yb = X[idx[s][mask[s]]], problem.y[idx[s][mask[s]]]
        logits = xb @ w + bb
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(yb)), yb] -= 1.0  # dCE/dlogits
        gw, gb = xb.T @ p / len(yb) + WD * w, p.mean(0) + WD * bb
        mw, mb = MOM * mw + gw, MOM * mb + gb
        w, bb = w - lr * mw, bb - lr * mb
      new_W.append(w); new_b.append(bb); sizes.append(len(problem.client_indices[cid]))
    p_m = np.array(sizes, np.float64) / sum(sizes)
    W = sum(p * w for p, w in zip(p_m, new_W))
    b = sum(p * bb for p, bb in zip(p_m, new_b))
  return W, b


def test_fedavg_matches_hand_computed_rounds(tiny):
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=3)
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  server, _, _, _ = _run(tiny, alg, sampler, rounds=3)
  W, b = _hand_fedavg(tiny, sampler, rounds=3)
  np.testing.assert_allclose(server.params["out"]["kernel"], W, atol=2e-6)
  np.testing.assert_allclose(server.params["out"]["bias"], b, atol=2e-6)
  # And the model moved: the test would not pass with a no-op round.
  assert _max_diff(server.params, tiny.params) > 1e-2


def test_uniform_weighting_matches_hand_computed_mean(tiny):
  sampler = CohortSampler(tiny.client_indices, 2, 4, local_steps=2, seed=0, weighting="uniform")
  alg = fed_avg(tiny.apply, local_sgd(0.0, 0.0))
  server, _, _, _ = _run(tiny, alg, sampler, rounds=1)
  # Clients trained alone (cohort of one, weight 1) give the per-client models.
  singles = [_run(tiny, alg, CohortSampler(tiny.client_indices, 1, 4, local_steps=2, seed=0),
                  rounds=1, client_ids=[c])[0].params for c in sampler.sample_clients(0)]
  mean = jax.tree.map(lambda a, b: (a + b) / 2, *singles)
  assert _max_diff(server.params, mean) < 1e-6


def test_server_optimizer_is_applied_to_the_pseudo_gradient(tiny):
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=1, seed=1)
  avg = _run(tiny, fed_avg(tiny.apply, local_sgd(MOM, WD)), sampler, 1)[0].params
  half = _run(tiny, fed_avg(tiny.apply, local_sgd(MOM, WD), optax.sgd(0.5)), sampler, 1)[0].params
  # w1 = w0 - 0.5 * (w0 - avg)
  expected = jax.tree.map(lambda w0, a: w0 - 0.5 * (w0 - a), tiny.params, avg)
  assert _max_diff(half, expected) < 1e-6


def test_padding_clients_and_padding_steps_change_nothing(tiny):
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  base = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=5)
  ref, _, ref_metrics, _ = _run(tiny, alg, base, rounds=3)
  padded_steps = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=5,
                               max_steps=base.max_steps + 3)
  out, _, m1, _ = _run(tiny, alg, padded_steps, rounds=3)
  assert _max_diff(out.params, ref.params) < 1e-6
  out2, _, m2, _ = _run(tiny, alg, base, rounds=3, pad_to=5)
  assert _max_diff(out2.params, ref.params) < 1e-6
  for m in (m1, m2):
    for k in ref_metrics:
      np.testing.assert_allclose(m[k], ref_metrics[k], rtol=1e-5)


_REFERENCE = {}
# The reference runs' execution: clients one after the other from the host, each step its own
# call (small programs; no in-loop padding skip, no sort).
REFERENCE_EXECUTION = ExecutionConfig("host", local_loop="unrolled", host_chunk=1)


@pytest.mark.parametrize("client_strategy,local_loop",
                         list(itertools.product(["vmap", "map", "chunked_vmap", "unrolled", "host"],
                                                ["rolled", "partial", "unrolled"])))
def test_execution_strategies_agree(tiny, client_strategy, local_loop):
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=2)
  if "host" not in _REFERENCE:   # computed once per process: `tiny` is always the same
    _REFERENCE["host"] = _run(tiny, alg, sampler, 2, REFERENCE_EXECUTION)[0]
  ref = _REFERENCE["host"]
  # chunk_size 2 does not divide the cohort of 3, host_chunk 2 does not divide the steps:
  # both exercise their remainder paths.
  out = _run(tiny, alg, sampler, 2, ExecutionConfig(client_strategy, 2, local_loop, 3, 2),
             pad_to=4)[0]
  assert _max_diff(out.params, ref.params) < 1e-5


@pytest.mark.parametrize("strategy", ["vmap", "unrolled", "host"])
def test_round_is_traced_once(tiny, strategy):
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=1, seed=0)
  *_, engine = _run(tiny, alg, sampler, rounds=4, execution=ExecutionConfig(strategy))
  assert engine.trace_count == 1
  pieces = (("prepare", "client_start", "steps", "client_end", "finish") if strategy == "host"
            else ("round",))
  assert all(engine.trace_counts[p] == 1 for p in pieces), engine.trace_counts


def test_debug_strategy_computes_the_vmapped_round(tiny):
  """'debug' (no jit, clients and steps from Python) gives the round 'vmap' gives, ragged
  clients and a padding client included."""
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=2)
  ref = _run(tiny, alg, sampler, 2, ExecutionConfig("vmap", local_loop="rolled"), pad_to=4)
  out = _run(tiny, alg, sampler, 2, ExecutionConfig("debug"), pad_to=4)
  assert _max_diff(out[:2], ref[:2]) < 1e-6               # server state and client table
  # The metric sums (a loss sum of ~41) within one float32 ulp of their own size: an absolute
  # 1e-6 is below the ulp there (3.8e-6), so it demanded bit equality, which eager and fused
  # summation give on some CPUs and not on others.
  for x, y in zip(jax.tree.leaves(out[2]), jax.tree.leaves(ref[2])):
    x, y = np.asarray(x), np.asarray(y)
    assert np.all(np.abs(x - y) <= np.maximum(1e-6, np.spacing(np.abs(y)))), (x, y)
  assert _max_diff(out[0].params, tiny.params) > 1e-2     # the rounds did train
  assert not out[3].trace_counts                          # nothing was jitted


def test_debug_strategy_names_the_client_and_stage_of_an_error(tiny):
  """A local step that fails for one client: the error names the round, the client's position
  in the cohort and id, and the step; the algorithm's own error is chained."""
  base = fed_avg(tiny.apply, local_sgd(MOM, WD))
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=2)
  bad = int(sampler.build(0).client_ids[1])

  def client_init(bcast, client_state, info, round_info):
    return base.client_init(bcast, client_state, info, round_info), info.client_id, 0

  def local_step(local, batch, key, round_info):
    inner, client_id, s = local
    if int(client_id) == bad and s == 1:   # concrete values: nothing is traced
      raise FloatingPointError("loss is nan")
    inner, metrics = base.local_step(inner, batch, key, round_info)
    return (inner, client_id, s + 1), metrics

  alg = dataclasses.replace(base, client_init=client_init, local_step=local_step,
                            client_finalize=lambda local, *a: base.client_finalize(local[0], *a))
  with pytest.raises(RoundStageError, match=rf"^round 0, client 1 of the cohort \(id {bad}\), "
                     r"stage 'local step 1': FloatingPointError: loss is nan") as err:
    _run(tiny, alg, sampler, 1, ExecutionConfig("debug"))
  assert (err.value.stage, err.value.position, err.value.client_id) == ("local step 1", 1, bad)
  assert isinstance(err.value.__cause__, FloatingPointError)


def test_debug_strategy_catches_a_non_finite_or_recast_value_where_it_appears(tiny):
  """The debug round checks each stage's result (chex): an upload with a NaN is reported at
  that client's 'finalize'; a local step that changes the parameters' dtype (which a compiled
  loop refuses) at the first step. Deliberate bug caught: the checks left out (the NaN then
  surfaces rounds later, the dtype change only under jit)."""
  base = fed_avg(tiny.apply, local_sgd(MOM, WD))
  sampler = CohortSampler(tiny.client_indices, 3, 4, local_epochs=2, seed=2)
  bad = int(sampler.build(0).client_ids[2])

  def client_finalize(local, bcast, client_state, info, round_info):
    upload, state = base.client_finalize(local, bcast, client_state, info, round_info)
    if int(info.client_id) == bad:
      upload = jax.tree.map(lambda u: u * jnp.nan, upload)
    return upload, state

  with pytest.raises(RoundStageError, match=rf"client 2 of the cohort \(id {bad}\), stage "
                     r"'finalize': AssertionError: the upload: "):
    _run(tiny, dataclasses.replace(base, client_finalize=client_finalize), sampler, 1,
         ExecutionConfig("debug"))

  def local_step(local, batch, key, round_info):
    local, metrics = base.local_step(local, batch, key, round_info)
    return local.replace(params=jax.tree.map(lambda p: p.astype(jnp.float16), local.params)), \
        metrics

  with pytest.raises(RoundStageError, match=r"client 0 of the cohort .* stage 'local step 0': "
                     r"AssertionError: the local state: .*float16"):
    _run(tiny, dataclasses.replace(base, local_step=local_step), sampler, 1,
         ExecutionConfig("debug"))


def test_auto_strategy_resolution():
  from fedjax_sharp.core.execution import Footprint
  assert ExecutionConfig().resolved("cpu").client_strategy == "host"
  assert ExecutionConfig().resolved("cpu").local_loop == "unrolled"
  # GPU (measured on an H100, core/backends.py): up to 16 clients one after another, more
  # clients vmapped; 'cuda' is the same backend.
  for gpu in ("gpu", "cuda"):
    assert ExecutionConfig().resolved(gpu).client_strategy == "map"
    assert ExecutionConfig().resolved(gpu).local_loop == "rolled"
    assert ExecutionConfig().resolved(gpu, Footprint(16, 0, None)).client_strategy == "map"
    assert ExecutionConfig().resolved(gpu, Footprint(17, 0, None)).client_strategy == "vmap"
  assert ExecutionConfig().resolved("tpu", Footprint(10, 0, None)).client_strategy == "vmap"
  assert ExecutionConfig("map", local_loop="partial").resolved("cpu").client_strategy == "map"
  assert ExecutionConfig("vmap").resolved("gpu", Footprint(4, 0, None)).client_strategy == "vmap"
  assert ExecutionConfig().reason("cpu").startswith("host/unrolled on cpu: ")
  assert ExecutionConfig().reason("gpu").startswith("map/rolled on gpu: ")
  assert "more than 16 clients" in ExecutionConfig().reason("gpu", Footprint(100, 0, None))


def test_auto_weighs_the_model_size_on_accelerators_only():
  from fedjax_sharp.core.execution import VMAP_MEMORY_FRACTION, Footprint
  gb = 2 ** 30
  small = Footprint(clients=10, per_client_bytes=10 * 2 ** 20, device_bytes=80 * gb)
  big = Footprint(clients=100, per_client_bytes=2 * gb, device_bytes=80 * gb)
  assert ExecutionConfig().resolved("gpu", small).client_strategy == "map"   # <= 16 clients
  got = ExecutionConfig().resolved("gpu", big)
  fit = int(VMAP_MEMORY_FRACTION * 80 * gb // (2 * gb))          # 20 clients of 2 GB in 40 GB
  assert (got.client_strategy, got.chunk_size, got.local_loop) == ("chunked_vmap", fit, "rolled")
  assert "100 vmapped clients x 2048 MB" in ExecutionConfig().reason("gpu", big)
  assert f"chunks of {fit} clients" in ExecutionConfig().reason("gpu", big)
  # An explicit strategy, the CPU, or an unknown device memory leave the choice alone.
  assert ExecutionConfig("vmap").resolved("gpu", big).client_strategy == "vmap"
  assert ExecutionConfig().resolved("cpu", big).client_strategy == "host"
  unknown = Footprint(100, 2 * gb, None)
  assert ExecutionConfig().resolved("gpu", unknown).client_strategy == "vmap"
  # The estimate: 4 parameter-sized buffers per client plus its state row.
  params = {"w": np.zeros((10, 10), np.float32)}
  est = Footprint.estimate(params, {"h": np.zeros((10, 10), np.float32)}, clients=7)
  assert (est.clients, est.per_client_bytes) == (7, 5 * 400)
  with pytest.raises(ValueError, match="engine.client_strategy"):
    ExecutionConfig("pmap").validate()
  with pytest.raises(ValueError, match="engine.local_loop"):
    ExecutionConfig(local_loop="loop").validate()


# ------------------------------------------------------------------------------ cohorts
def test_local_steps_formula_keeps_last_partial_batch():
  assert num_local_steps(101, 50, 1, 0) == 3
  assert num_local_steps(100, 50, 5, 0) == 10
  assert num_local_steps(7, 50, 2, 0) == 2
  assert num_local_steps(7, 50, 2, 9) == 9


def test_cohort_plan_covers_each_example_once_per_epoch(tiny):
  sampler = CohortSampler(tiny.client_indices, 2, 4, local_epochs=3, seed=0)
  for cid, ix in enumerate(tiny.client_indices):
    idx, mask = sampler.client_plan(cid, round_idx=1)
    k = 3 * math.ceil(len(ix) / 4)
    assert mask[:k].any(axis=1).all() and not mask[k:].any()
    used = idx[mask]
    assert len(used) == 3 * len(ix)
    np.testing.assert_array_equal(np.bincount(used - ix[0], minlength=len(ix)), 3)


def test_cohort_sampling_is_seeded_and_without_replacement(tiny):
  a = CohortSampler(tiny.client_indices, 3, 4, seed=11)
  b = CohortSampler(tiny.client_indices, 3, 4, seed=11)
  c = CohortSampler(tiny.client_indices, 3, 4, seed=12)
  draws_a = [tuple(a.sample_clients(t)) for t in range(20)]
  assert draws_a == [tuple(b.sample_clients(t)) for t in range(20)]
  assert draws_a != [tuple(c.sample_clients(t)) for t in range(20)]
  assert all(len(set(d)) == 3 for d in draws_a)
  assert len(set(draws_a)) > 1  # the cohort changes between rounds
  np.testing.assert_array_equal(a.build(4).batch_idx, b.build(4).batch_idx)


def test_cohort_weights_and_padding(tiny):
  sampler = CohortSampler(tiny.client_indices, 2, 4, seed=0)
  cohort = sampler.build(0, client_ids=[0, 2], pad_to=4)
  sizes = np.array([5, 12], np.float32)
  np.testing.assert_allclose(cohort.weights, np.r_[sizes / sizes.sum(), 0, 0])
  np.testing.assert_array_equal(cohort.client_ids, [0, 2, 5, 5])
  assert not cohort.step_mask[2:].any()


@pytest.mark.parametrize("kwargs,field", [
    (dict(batch_size=0), "local.batch_size"),
    (dict(clients_per_round=9), "clients_per_round"),
    (dict(local_steps=-1), "local.steps"),
    (dict(local_epochs=0), "local.epochs"),
    (dict(weighting="size"), "aggregation"),
])
def test_cohort_sampler_errors_name_the_field(tiny, kwargs, field):
  args = dict(clients_per_round=2, batch_size=4)
  args.update(kwargs)
  with pytest.raises(ValueError, match=field):
    CohortSampler(tiny.client_indices, **args)


@pytest.mark.parametrize("client_strategy", ["vmap", "map", "chunked_vmap"])
@pytest.mark.parametrize("skip_padding,sort_clients", [(False, False), (True, False),
                                                       (True, True), (False, True)])
def test_skipping_padding_steps_and_sorting_clients_change_no_result(tiny, client_strategy,
                                                                      skip_padding, sort_clients):
  from fedjax_sharp.algorithms.fed_dyn import fed_dyn
  # Ragged clients (5..12 examples, batch 2: 2..6 steps per epoch) and extra padding steps;
  # FedDyn's per-client duals check that a sorted cohort scatters each client's own row back.
  alg = fed_dyn(tiny.apply, local_sgd(MOM, WD), alpha=0.1)
  sampler = CohortSampler(tiny.client_indices, 4, 2, local_epochs=1, seed=4,
                          max_steps=num_local_steps(12, 2, 1, 0) + 3)
  # The reference (REFERENCE_EXECUTION: neither the in-loop padding skip nor the sort) is the
  # same run for all twelve cases: computed once per worker. (All steps unrolled in one program
  # would do too, at 7x the compile time.)
  if "skipping" not in _REFERENCE:
    _REFERENCE["skipping"] = _run(tiny, alg, sampler, 3, REFERENCE_EXECUTION)
  ref_server, ref_table, ref_m, _ = _REFERENCE["skipping"]
  execution = ExecutionConfig(client_strategy, 2, "rolled", skip_padding=skip_padding,
                              sort_clients=sort_clients)
  server, table, m, _ = _run(tiny, alg, sampler, 3, execution, pad_to=5)
  assert _max_diff(server, ref_server) < 1e-5
  assert _max_diff(table, ref_table) < 1e-5
  for k in ref_m:
    np.testing.assert_allclose(m[k], ref_m[k], rtol=1e-5)


class _HoledSampler:
  """A sampler's plans with a padding step after every step: real steps are no longer the
  first of each client's plan (the sampler's own plans always have them first)."""

  def __init__(self, sampler):
    self.sampler = sampler

  def build(self, t, client_ids=None, pad_to=None):
    cohort = self.sampler.build(t, client_ids=client_ids, pad_to=pad_to)

    def holed(a):
      a = np.asarray(a)
      out = np.zeros((a.shape[0], 2 * a.shape[1], *a.shape[2:]), a.dtype)
      out[:, ::2] = a
      return out
    return dataclasses.replace(cohort, batch_idx=holed(cohort.batch_idx),
                               example_mask=holed(cohort.example_mask),
                               step_mask=holed(cohort.step_mask))


@pytest.mark.parametrize("client_strategy", ["map", "vmap", "host"])
def test_real_steps_between_padding_steps(tiny, client_strategy):
  """Plans whose real steps are not all first give the round of the sampler's plans: the rolled
  loop (skip_padding) runs only each client's real steps, without the select that keeps a
  masked step's carry in the other loops ('partial' here), and 'host' skips only chunks of
  padding steps."""
  from fedjax_sharp.algorithms.fed_dyn import fed_dyn
  alg = fed_dyn(tiny.apply, local_sgd(MOM, WD), alpha=0.1)
  sampler = CohortSampler(tiny.client_indices, 4, 2, local_epochs=1, seed=4)
  if "holes" not in _REFERENCE:   # the plans without holes, the unrolled steps: once per worker
    _REFERENCE["holes"] = _run(tiny, alg, sampler, 2, REFERENCE_EXECUTION)
  ref_server, ref_table, ref_m, _ = _REFERENCE["holes"]
  holed = _HoledSampler(sampler)
  assert not all(np.all(np.diff(np.asarray(m, int)) <= 0) for m in holed.build(0).step_mask)
  loops = ((ExecutionConfig("host", local_loop="unrolled", host_chunk=1),
            ExecutionConfig("host", local_loop="unrolled", host_chunk=3))
           if client_strategy == "host" else
           (ExecutionConfig(client_strategy, local_loop="rolled"),
            ExecutionConfig(client_strategy, local_loop="partial", unroll=2)))
  for execution in loops:
    server, table, m, _ = _run(tiny, alg, holed, 2, execution)
    assert _max_diff(server, ref_server) < 1e-5
    assert _max_diff(table, ref_table) < 1e-5
    for k in ref_m:
      np.testing.assert_allclose(m[k], ref_m[k], rtol=1e-5)


def test_execution_config_from_a_config_block():
  from fedjax_sharp.training.config import base_config
  engine = base_config().engine
  engine.client_strategy, engine.sort_clients = "chunked_vmap", True
  got = ExecutionConfig.from_config(engine)
  assert (got.client_strategy, got.sort_clients, got.skip_padding) == ("chunked_vmap", True, True)


@pytest.mark.parametrize("strategy", ["map", "vmap"])
def test_sweep_round_equals_each_experiment_alone(tiny, strategy):
  """Two experiments (own seeds' cohorts, learning rates and keys) in one sweep_round, with the
  experiments vmapped ('vmap') or run one after another ('map'), give each experiment's own
  round."""
  alg = fed_avg(tiny.apply, local_sgd(MOM, WD))
  execution = ExecutionConfig(strategy, 4, "rolled")
  engine = RoundEngine(alg, len(tiny.client_indices), execution, donate=False)
  data = TrainData(jnp.asarray(tiny.x), jnp.asarray(tiny.y))
  samplers = [CohortSampler(tiny.client_indices, 3, 4, local_epochs=1, seed=s) for s in (0, 1)]
  state = engine.init(tiny.params)
  rates, keys = [0.1, 0.05], [jax.random.key(3), jax.random.key(4)]
  stack = lambda trees: jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
  servers, tables, metrics = engine.sweep_round(
      stack([state[0]] * 2), stack([state[1]] * 2), data, stack([s.build(0) for s in samplers]),
      0, rates, jnp.stack(keys))
  for e in range(2):
    alone = engine.round(state[0], state[1], data, samplers[e].build(0),
                         RoundInfo(jnp.int32(0), jnp.float32(rates[e]),
                                   len(tiny.client_indices)), keys[e])
    got = jax.tree.map(lambda a: a[e], (servers, tables, metrics))
    assert _max_diff(got, alone) < 1e-6
