"""FedNTD: the not-true KL (true logit ignored, value by hand, gradient by finite differences),
beta = 0 is FedAvg exactly, the teacher is the frozen received model."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_ntd import fed_ntd, ntd_loss
from fedjax_sharp.core import losses
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (DIM, MOMENTUM, NUM_CLASSES, WD, apply_fn, assert_trees_equal,
                          eager_batch, eager_round, init_params, make_problem, run_rounds, tmap)


def _np_not_true_kl(t_logits, s_logits, y, tau, mask):
  total = 0.0
  for b in range(len(y)):
    keep = [c for c in range(t_logits.shape[1]) if c != y[b]]
    p = ref.softmax(t_logits[b, keep] / tau)
    q = ref.softmax(s_logits[b, keep] / tau)
    total += mask[b] * np.sum(p * (np.log(p) - np.log(q)))
  return total / max(mask.sum(), 1)


def test_not_true_kl_by_hand_and_true_logit_ignored():
  rng = np.random.default_rng(0)
  t, s = rng.normal(size=(7, 4)), rng.normal(size=(7, 4))
  y = rng.integers(0, 4, 7)
  mask = np.array([1, 1, 1, 1, 1, 0, 1], bool)
  tau = 2.0
  kl = float(losses.not_true_kl(jnp.asarray(t), jnp.asarray(s), jnp.asarray(y), tau,
                                jnp.asarray(mask)))
  np.testing.assert_allclose(kl, _np_not_true_kl(t, s, y, tau, mask.astype(float)), rtol=1e-5)
  # Changing the true-class logit (teacher or student) changes nothing, value or gradient.
  bump = np.zeros_like(s)
  bump[np.arange(7), y] = 5.0
  kl2 = float(losses.not_true_kl(jnp.asarray(t + bump), jnp.asarray(s + bump), jnp.asarray(y),
                                 tau, jnp.asarray(mask)))
  np.testing.assert_allclose(kl2, kl, rtol=1e-6)
  grad = jax.grad(lambda z: losses.not_true_kl(jnp.asarray(t), z, jnp.asarray(y), tau,
                                               jnp.asarray(mask)))(jnp.asarray(s))
  np.testing.assert_array_equal(np.asarray(grad)[np.arange(7), y], 0.0)
  assert np.abs(np.asarray(grad)).max() > 1e-3
  # Identical teacher and student: zero.
  assert float(losses.not_true_kl(jnp.asarray(t), jnp.asarray(t), jnp.asarray(y), tau,
                                  jnp.asarray(mask))) == pytest.approx(0.0, abs=1e-7)


def test_loss_is_ce_plus_beta_tau2_kl_with_finite_difference_gradient():
  batch, params, teacher = eager_batch(8, seed=1), init_params(1), init_params(2)
  beta, tau = 0.7, 2.0
  total, (ce, kl, _) = ntd_loss(apply_fn, beta, tau)(params, teacher, batch)
  x, y, mask = (np.asarray(batch[k]) for k in ("x", "y", "mask"))
  p, q = ref.to_np(params), ref.to_np(teacher)
  expected_kl = _np_not_true_kl(x @ q["w"] + q["b"], x @ p["w"] + p["b"], y, tau, mask)
  np.testing.assert_allclose(float(kl), expected_kl, rtol=1e-5)
  np.testing.assert_allclose(float(total), ref.ce_loss(p, x, y, mask) + beta * tau ** 2 *
                             expected_kl, rtol=1e-5)
  with jax.enable_x64(True):
    to64 = lambda tr: tmap(lambda a: jnp.asarray(a, jnp.float64), tr)
    b64 = dict(batch, x=jnp.asarray(batch["x"], jnp.float64))
    f = jax.jit(lambda w: ntd_loss(apply_fn, beta, tau)(w, to64(teacher), b64)[0])
    p64 = to64(params)
    v = {"w": jnp.asarray(np.random.default_rng(5).normal(size=(DIM, NUM_CLASSES))),
         "b": jnp.ones((NUM_CLASSES,), jnp.float64)}
    g = jax.grad(f)(p64)
    directional = sum(float(jnp.vdot(g[k], v[k])) for k in g)
    h = 1e-6
    fd = (f(tmap(lambda a, d: a + h * d, p64, v)) - f(tmap(lambda a, d: a - h * d, p64, v))) / (2 * h)
    np.testing.assert_allclose(directional, float(fd), rtol=1e-6)


def test_beta0_equals_fedavg_and_teacher_is_frozen():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=7)
  sampler = CohortSampler(parts, 3, 4, local_epochs=2, seed=7)
  params, tx = init_params(7), local_sgd(MOMENTUM, WD)
  a, _, ma, _ = run_rounds(fed_ntd(apply_fn, tx, beta=0.0), params, data, sampler, 2)
  b, _, mb, _ = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 2)
  assert_trees_equal(a.params, b.params)
  c, _, mc, _ = run_rounds(fed_ntd(apply_fn, tx, beta=1.0), params, data, sampler, 2)
  assert float(mc["ntd_kl_sum"]) > 0 and float(ma["ntd_kl_sum"]) == 0.0
  assert float(np.abs(np.asarray(c.params["w"]) - np.asarray(b.params["w"])).max()) > 1e-5
  # The teacher in the local state is w^t during the whole round.
  alg = fed_ntd(apply_fn, tx, beta=1.0)
  from fedjax_sharp.core.algorithm import ClientInfo, RoundInfo
  rinfo = RoundInfo(jnp.int32(0), jnp.float32(0.1), 5)
  info = ClientInfo(jnp.int32(0), jnp.float32(6), jnp.int32(2), jnp.float32(1))
  local = alg.client_init(params, (), info, rinfo)
  for _ in range(2):
    local, _ = alg.local_step(local, eager_batch(), jax.random.key(0), rinfo)
  assert_trees_equal(local.anchor, params)


def test_builder():
  c = config_lib.base_config()
  c.algorithm.name = "fedntd"
  c.algorithm.fedntd.update(beta=0.5, tau=3.0)
  params, batch = init_params(8), eager_batch()
  assert_trees_equal(eager_round(ALGORITHMS["fedntd"].build(c, apply_fn), params, batch),
                     eager_round(fed_ntd(apply_fn, local_sgd(0.9, 1e-5), beta=0.5, tau=3.0),
                                 params, batch))
