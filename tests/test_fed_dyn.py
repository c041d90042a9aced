"""FedDyn: hand-computed rounds through the engine, dual bookkeeping, proximal variants."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms import common
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.core.dyn import prox_gradient
from fedjax_sharp.core.algorithm import RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.training import config as config_lib

from algo_helpers import (DIM, LR, MOMENTUM, NUM_CLASSES, WD, apply_fn, assert_trees_close,
                          eager_round, init_params, make_problem, tmap)


def global_norm(t):
  return float(np.sqrt(sum(float(jnp.sum(x * x)) for x in jax.tree.leaves(t))))


# ------------------------------------------------------------------------------------------
# Independent reference.
def ref_ce(w, x, y, mask):
  mask = mask.astype(jnp.float32)
  logits = x @ w["w"] + w["b"]
  logp = logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)
  return -jnp.sum(mask * logp[jnp.arange(len(y)), y]) / jnp.maximum(mask.sum(), 1.0)


_ref_grad = jax.jit(jax.grad(ref_ce))


def ref_prox_grad(w, anchor, alpha, prox):
  diff = tmap(jnp.subtract, w, anchor)
  if prox == "squared":
    return tmap(lambda d: alpha * d, diff)
  norm = np.sqrt(sum(float(jnp.sum(d * d)) for d in jax.tree.leaves(diff)))
  return tmap(lambda d: 0.5 * alpha * d / (norm + 1e-12), diff)


def ref_dyn_round(w, h, h_table, data, cohort, lr, sizes, *, alpha, prox, num_clients):
  ids = np.asarray(cohort.client_ids)
  n = np.asarray([sizes[i] for i in ids], np.float64)
  p = n / n.sum()
  h_table, models = dict(h_table), []
  for c, m in enumerate(ids):
    wm, buf = w, tmap(jnp.zeros_like, w)
    for s in range(cohort.batch_idx.shape[1]):
      if not bool(cohort.step_mask[c, s]):
        continue
      idx = np.asarray(cohort.batch_idx[c, s])
      g = _ref_grad(wm, data.x[idx], data.y[idx], jnp.asarray(cohort.example_mask[c, s]))
      pg = ref_prox_grad(wm, w, alpha, prox)
      d = tmap(lambda gi, hi, pi, wi: gi - hi + pi + WD * wi, g, h_table[m], pg, wm)
      buf = tmap(lambda bi, di: MOMENTUM * bi + di, buf, d)
      wm = tmap(lambda wi, bi: wi - lr * bi, wm, buf)
    h_table[m] = tmap(lambda hi, a, b: hi - alpha * (a - b), h_table[m], wm, w)
    models.append(wm)
  drift_sum = tmap(lambda w0, *ms: sum(mi - w0 for mi in ms), w, *models)
  h = tmap(lambda hi, di: hi - alpha * di / num_clients, h, drift_sum)
  avg = tmap(lambda *ms: sum(float(pi) * mi for pi, mi in zip(p, ms)), *models)
  return tmap(lambda a, hi: a - hi / alpha, avg, h), h, h_table


# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prox", ["squared", "unsquared"])
def test_hand_computed_rounds_match_engine(prox):
  sizes = (10, 7, 12)  # K = 3, 2, 3 with B = 4
  data, parts = make_problem(sizes)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=0)
  alpha = 0.1
  alg = fed_dyn(apply_fn, common.local_sgd(MOMENTUM, WD), alpha=alpha, prox=prox)
  engine = RoundEngine(alg, 3, ExecutionConfig("vmap", local_loop="rolled"))
  params = init_params()
  ss, table = engine.init(params)
  w, h = params, tmap(jnp.zeros_like, params)
  h_table = {m: tmap(jnp.zeros_like, params) for m in range(3)}
  for t, ids in enumerate([[0, 1], [1, 2], [0, 1]]):
    cohort = sampler.build(t, ids)
    lr = LR * 0.998 ** t
    ss, table, metrics = engine.round(ss, table, data, cohort,
                                      RoundInfo(jnp.int32(t), jnp.float32(lr), 3),
                                      jax.random.key(0))
    w, h, h_table = ref_dyn_round(w, h, h_table, data, cohort, np.float32(lr), sizes,
                                  alpha=alpha, prox=prox, num_clients=3)
    assert_trees_close(ss.params, w)
    assert_trees_close(ss.h, h, atol=1e-6)
    for m in range(3):
      assert_trees_close(tmap(lambda x: x[m], table), h_table[m], atol=1e-6)
    assert np.isfinite(float(metrics["loss_sum"]))
  # Dual bookkeeping invariant with full history: h = (1/M) sum_m h_m.
  assert_trees_close(ss.h, tmap(lambda x: x.mean(0), table), atol=1e-6)
  assert global_norm(h_table[1]) > 1e-3


def test_prox_gradients():
  w, anchor = init_params(1), init_params(2)
  alpha = 0.3
  g = prox_gradient(w, anchor, alpha, "unsquared")
  np.testing.assert_allclose(global_norm(g), alpha / 2, rtol=1e-5)
  # Matches autodiff of (alpha/2)||w - w^t|| away from w = w^t.
  auto = jax.grad(lambda p: 0.5 * alpha * jnp.sqrt(sum(
      jnp.sum((a - b) ** 2) for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(anchor)))))(w)
  assert_trees_close(g, auto, atol=1e-6)
  # Zero (not NaN) at w = w^t.
  g0 = prox_gradient(anchor, anchor, alpha, "unsquared")
  for leaf in jax.tree.leaves(g0):
    assert np.all(np.asarray(leaf) == 0)
  assert_trees_close(prox_gradient(w, anchor, alpha, "squared"),
                     tmap(lambda a, b: alpha * (a - b), w, anchor), atol=1e-7)
  for leaf in jax.tree.leaves(prox_gradient(w, anchor, alpha, "none")):
    assert np.all(np.asarray(leaf) == 0)
  with pytest.raises(ValueError, match="prox"):
    fed_dyn(apply_fn, common.local_sgd(), prox="cubed")


def test_communication_and_builder():
  alg = fed_dyn(apply_fn, common.local_sgd())
  assert (alg.communication.down, alg.communication.up) == (1, 1)
  cfg = config_lib.base_config()
  cfg.algorithm.name, cfg.local.momentum, cfg.local.weight_decay = "feddyn", 0.9, 1e-5
  rng = np.random.default_rng(3)
  batch = {"x": jnp.asarray(rng.normal(size=(6, DIM)), jnp.float32),
           "y": jnp.asarray(rng.integers(0, NUM_CLASSES, 6), jnp.int32),
           "mask": jnp.ones((6,), bool)}
  params = init_params(3)
  built = ALGORITHMS["feddyn"].build(cfg, apply_fn)
  assert built.name == "feddyn" and built.communication.down == 1
  # Defaults: alpha = 0.1 (FedGMT paper Table 7, beta = 10), squared prox.
  assert_trees_close(eager_round(built, params, batch),
                     eager_round(fed_dyn(apply_fn, common.local_sgd(0.9, 1e-5), alpha=0.1,
                                          prox="squared"), params, batch), atol=0, rtol=0)
  cfg.algorithm.feddyn = {"alpha": 0.01, "prox": "unsquared"}
  assert_trees_close(eager_round(ALGORITHMS["feddyn"].build(cfg, apply_fn), params, batch),
                     eager_round(fed_dyn(apply_fn, common.local_sgd(0.9, 1e-5), alpha=0.01,
                                          prox="unsquared"), params, batch), atol=0, rtol=0)


def test_feddyn_sam_rho0_equals_feddyn_and_builder():
  from fedjax_sharp.core.optimizers import ClientOptimizer
  from fedjax_sharp.training import config as config_lib
  from algo_helpers import assert_trees_equal, run_rounds
  data, parts = make_problem((6, 9, 5, 8, 7), seed=8)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=8)
  params, tx = init_params(8), common.local_sgd(MOMENTUM, WD)
  a = run_rounds(fed_dyn(apply_fn, ClientOptimizer(tx, "sam", 0.0)), params, data, sampler, 3)
  b = run_rounds(fed_dyn(apply_fn, tx), params, data, sampler, 3)
  assert_trees_equal(a[0], b[0])
  assert_trees_equal(a[1], b[1])
  c = run_rounds(fed_dyn(apply_fn, ClientOptimizer(tx, "sam", 0.3)), params, data, sampler, 3)
  assert global_norm(tmap(jnp.subtract, c[0].params, b[0].params)) > 1e-4
  cfg = config_lib.base_config()
  cfg.algorithm.name = "feddyn_sam"
  cfg.algorithm.feddyn_sam.update(rho=0.3, alpha=0.05)
  batch = {"x": data.x[:6], "y": data.y[:6], "mask": jnp.ones((6,), bool)}
  assert_trees_equal(eager_round(ALGORITHMS["feddyn_sam"].build(cfg, apply_fn), params, batch),
                     eager_round(fed_dyn(apply_fn, ClientOptimizer(common.local_sgd(0.9, 1e-5),
                                                                   "sam", 0.3), alpha=0.05),
                                 params, batch))
