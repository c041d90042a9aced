"""FedGMT / FedGMT-v2: hand-computed rounds, bookkeeping and reduction equivalences.

Tiny softmax-regression model (dict params, no Flax) so that the reference computations below
can be written independently in plain jax.numpy. Everything runs through the real RoundEngine
and CohortSampler unless a test says otherwise.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms import common
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_gmt import (client_dual, fed_gmt, fed_gmt_v2, global_dual,
                                             trajectory_loss)
from fedjax_sharp.core.algorithm import ClientInfo, RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.training import config as config_lib

import algo_helpers
from algo_helpers import (DIM, MOMENTUM, NUM_CLASSES, WD, apply_fn, assert_trees_close,
                          eager_round, init_params, lr_at, make_problem, tmap)

VMAP_ROLLED = ExecutionConfig("vmap", local_loop="rolled")
UNROLLED = ExecutionConfig("unrolled", local_loop="unrolled")


def run_rounds(*args, **kwargs):
  """(server_state, client_table, metrics) after the rounds (algo_helpers.run_rounds)."""
  return algo_helpers.run_rounds(*args, **kwargs)[:3]


def row(table, m):
  return tmap(lambda t: t[m], table)


# ------------------------------------------------------------------------------------------
# Independent reference (plain jax.numpy).
def ref_loss(w, e, x, y, mask, gamma, tau):
  mask = mask.astype(jnp.float32)
  denom = jnp.maximum(mask.sum(), 1.0)
  logits = x @ w["w"] + w["b"]
  logp = logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)
  ce = -jnp.sum(mask * logp[jnp.arange(len(y)), y]) / denom
  t = (x @ e["w"] + e["b"]) / tau
  s = logits / tau
  log_pt = t - jax.scipy.special.logsumexp(t, axis=1, keepdims=True)
  log_ps = s - jax.scipy.special.logsumexp(s, axis=1, keepdims=True)
  kl = jnp.sum(mask * jnp.sum(jnp.exp(log_pt) * (log_pt - log_ps), axis=1)) / denom
  return ce + gamma * tau ** 2 * kl


_ref_grad = jax.jit(jax.grad(ref_loss), static_argnums=(5, 6))


def ref_gmt_round(w, e, u, u_table, data, cohort, lr, *, gamma, tau, alpha, beta, num_clients):
  """One FedGMT round (paper order), explicit momentum buffer and weight decay."""
  ids, p = np.asarray(cohort.client_ids), np.asarray(cohort.weights)
  new_models, u_table = [], dict(u_table)
  for c, m in enumerate(ids):
    wm = w
    buf = tmap(jnp.zeros_like, w)
    for s in range(cohort.batch_idx.shape[1]):
      if not bool(cohort.step_mask[c, s]):
        continue
      idx = np.asarray(cohort.batch_idx[c, s])
      g = _ref_grad(wm, e, data.x[idx], data.y[idx],
                             jnp.asarray(cohort.example_mask[c, s]), gamma, tau)
      d = tmap(lambda gi, ui, wi: gi - ui + WD * wi, g, u_table[m], wm)
      buf = tmap(lambda bi, di: MOMENTUM * bi + di, buf, d)
      wm = tmap(lambda wi, bi: wi - lr * bi, wm, buf)
    u_table[m] = tmap(lambda ui, a, b: ui - (a - b) / beta, u_table[m], wm, w)
    new_models.append(wm)
  drift = tmap(lambda *ms: sum(mi for mi in ms[1:]) - len(ids) * ms[0], w, *new_models)
  u = tmap(lambda ui, di: ui - di / (beta * num_clients), u, drift)
  avg = tmap(lambda *ms: sum(float(pi) * mi for pi, mi in zip(p, ms)), *new_models)
  w_next = tmap(lambda a, ui: a - beta * ui, avg, u)
  e_next = tmap(lambda ei, wi: alpha * ei + (1 - alpha) * wi, e, w_next)
  return w_next, e_next, u, u_table


# ------------------------------------------------------------------------------------------
def test_hand_computed_rounds_match_engine():
  sizes = (10, 7, 12)  # K = 3, 2, 3 with B = 4: ragged clients and partial last batches
  data, parts = make_problem(sizes)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=3)
  hp = dict(gamma=1.0, tau=3.0, alpha=0.5, beta=10.0)
  alg = fed_gmt(apply_fn, common.local_sgd(MOMENTUM, WD), **hp)
  engine = RoundEngine(alg, 3, VMAP_ROLLED)
  params = init_params()
  ss, table = engine.init(params)
  w, e = params, params
  u = tmap(jnp.zeros_like, params)
  u_table = {m: tmap(jnp.zeros_like, params) for m in range(3)}
  for t, ids in enumerate([[0, 1], [1, 2], [0, 1]]):  # client 1 and 0 come back with u_m != 0
    cohort = sampler.build(t, ids)
    n = np.asarray([sizes[i] for i in ids], np.float64)
    np.testing.assert_allclose(cohort.weights, n / n.sum(), rtol=1e-6)
    ss, table, metrics = engine.round(ss, table, data, cohort,
                                      RoundInfo(jnp.int32(t), jnp.float32(lr_at(t)), 3),
                                      jax.random.key(0))
    w, e, u, u_table = ref_gmt_round(w, e, u, u_table, data, cohort, np.float32(lr_at(t)),
                                     num_clients=3, **hp)
    assert_trees_close(ss.params, w)
    assert_trees_close(ss.ema, e)
    assert_trees_close(ss.dual, u, atol=1e-6)
    for m in range(3):
      assert_trees_close(row(table.dual, m), u_table[m], atol=1e-6)
    assert float(metrics["kl_sum"]) > 0
  # The duals really are nonzero (the test exercises the -u_m correction).
  assert float(jnp.abs(u_table[1]["w"]).max()) > 1e-3


def test_paper_and_authors_bookkeeping_agree():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=1)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=0)
  opt = common.local_sgd(MOMENTUM, WD)
  params = init_params(1)
  beta, m = 10.0, 5
  runs = {bk: run_rounds(fed_gmt(apply_fn, opt, beta=beta, bookkeeping=bk), params, data,
                         sampler, 5)
          for bk in ("paper", "authors")}
  (sp, tp, _), (sa, ta, _) = runs["paper"], runs["authors"]
  assert_trees_close(sp.params, sa.params)
  assert_trees_close(sp.ema, sa.ema)
  assert_trees_close(global_dual(sp, beta, m, "paper"), global_dual(sa, beta, m, "authors"),
                     atol=1e-6)
  assert_trees_close(client_dual(tp, beta, "paper"), client_dual(ta, beta, "authors"),
                     atol=1e-6)
  # The server's running sum S equals the sum of the clients' D_m.
  assert_trees_close(sa.dual, tmap(lambda d: d.sum(0), ta.dual), atol=1e-6)
  assert float(jnp.abs(sp.dual["w"]).max()) > 1e-4


def test_gamma0_no_admm_equals_fedavg():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=2)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=1)
  opt = common.local_sgd(MOMENTUM, WD)
  params = init_params(2)
  s_gmt, _, m_gmt = run_rounds(fed_gmt(apply_fn, opt, gamma=0.0, admm=False), params, data,
                               sampler, 4)
  s_avg, _, m_avg = run_rounds(fed_avg(apply_fn, opt, optax.sgd(1.0)), params, data, sampler, 4)
  assert_trees_close(s_gmt.params, s_avg.params)
  np.testing.assert_allclose(float(m_gmt["loss_sum"]), float(m_avg["loss_sum"]), rtol=1e-5)
  assert float(m_gmt["kl_sum"]) == 0.0


def test_gamma0_equals_feddyn_without_prox():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=3)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=2)
  opt = common.local_sgd(MOMENTUM, WD)
  params = init_params(3)
  beta = 10.0
  s_gmt, t_gmt, _ = run_rounds(fed_gmt(apply_fn, opt, gamma=0.0, beta=beta), params, data,
                               sampler, 4)
  s_dyn, t_dyn, _ = run_rounds(fed_dyn(apply_fn, opt, alpha=1.0 / beta, prox="none"), params,
                               data, sampler, 4)
  assert_trees_close(s_gmt.params, s_dyn.params)
  assert_trees_close(s_gmt.dual, s_dyn.h, atol=1e-6)       # u == h
  assert_trees_close(t_gmt.dual, t_dyn, atol=1e-6)         # u_m == h_m


def test_v2_alpha0_equals_fedgmt_alpha0():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=4)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=3)
  opt = common.local_sgd(MOMENTUM, WD)
  params = init_params(4)
  s1, t1, m1 = run_rounds(fed_gmt(apply_fn, opt, alpha=0.0), params, data, sampler, 4)
  s2, t2, m2 = run_rounds(fed_gmt_v2(apply_fn, opt, alpha=0.0), params, data, sampler, 4)
  assert_trees_close(s1.params, s2.params)
  assert_trees_close(s1.dual, s2.dual, atol=1e-6)
  assert_trees_close(t1.dual, t2.dual, atol=1e-6)
  np.testing.assert_allclose(float(m1["kl_sum"]), float(m2["kl_sum"]), rtol=1e-4, atol=1e-7)
  assert float(m1["kl_sum"]) > 0


def test_v2_execution_strategies_and_padding_agree():
  """vmap + rolled scan with a padding client == unrolled clients + unrolled steps."""
  data, parts = make_problem((6, 9, 5, 8, 7), seed=5)
  sampler = CohortSampler(parts, 2, 4, local_epochs=1, seed=4)
  opt = common.local_sgd(MOMENTUM, WD)
  alg = fed_gmt_v2(apply_fn, opt)
  params = init_params(5)
  sa, ta, ma = run_rounds(alg, params, data, sampler, 4, VMAP_ROLLED, pad_to=3)
  sb, tb, mb = run_rounds(alg, params, data, sampler, 4, UNROLLED)
  assert_trees_close(sa, sb)
  assert_trees_close(ta.dual, tb.dual, atol=1e-6)
  assert_trees_close(ta.ema, tb.ema)
  np.testing.assert_array_equal(np.asarray(ta.seen), np.asarray(tb.seen))
  for k in ma:
    np.testing.assert_allclose(float(ma[k]), float(mb[k]), rtol=1e-5, atol=1e-6)
  # Clients that never took part keep e_m = w^0 and seen = False.
  seen = set(int(c) for t in range(4) for c in sampler.sample_clients(t))
  for m in range(5):
    assert bool(ta.seen[m]) == (m in seen)
    if m not in seen:
      assert_trees_close(row(ta.ema, m), params, atol=0)


def test_v2_client_ema_update_rule():
  """Algorithm 1 line 7 and the two initialisations, on the algorithm's functions directly."""
  opt = common.local_sgd(MOMENTUM, WD)
  w0, wt = init_params(6), init_params(7)
  info = ClientInfo(jnp.int32(0), jnp.float32(4), jnp.int32(1), jnp.float32(1))
  rinfo = RoundInfo(jnp.int32(3), jnp.float32(0.1), 4)
  alpha = 0.5
  first = fed_gmt_v2(apply_fn, opt, alpha=alpha)
  from_w0 = fed_gmt_v2(apply_fn, opt, alpha=alpha, v2_ema_init="w0")
  # First participation.
  cs = first.client_state_init(w0)
  local = first.client_init(wt, cs, info, rinfo)
  assert_trees_close(local.teacher, wt, atol=1e-7)
  _, cs2 = first.client_finalize(local, wt, cs, info, rinfo)
  assert bool(cs2.seen)
  assert_trees_close(cs2.ema, wt, atol=1e-7)
  local_w0 = from_w0.client_init(wt, from_w0.client_state_init(w0), info, rinfo)
  assert_trees_close(local_w0.teacher, tmap(lambda a, b: alpha * a + (1 - alpha) * b, w0, wt))
  # Later participation: e_m <- alpha e_m + (1 - alpha) w^t for both initialisations.
  w_later = init_params(8)
  for alg in (first, from_w0):
    local = alg.client_init(w_later, cs2, info, rinfo)
    assert_trees_close(local.teacher,
                       tmap(lambda a, b: alpha * a + (1 - alpha) * b, cs2.ema, w_later))


@pytest.mark.usefixtures("optimised_compiles")   # an exact zero
def test_kl_zero_at_ema_and_gradient_finite_differences():
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.normal(size=(6, DIM)), jnp.float32)
  y = jnp.asarray(rng.integers(0, NUM_CLASSES, 6), jnp.int32)
  mask = jnp.asarray([1, 1, 1, 1, 1, 0], bool)
  batch = {"x": x, "y": y, "mask": mask}
  params = init_params(10)
  loss_fn = trajectory_loss(apply_fn, gamma=1.0, tau=3.0)
  total, (ce, kl, _) = jax.jit(loss_fn)(params, params, batch)
  assert float(kl) == 0.0 and float(total) == float(ce)
  # Through the algorithm: in round 0 the first local step has w = e = w^0, so kl_sum is 0
  # (up to one ulp: under differentiation jax.nn.log_softmax's custom JVP recomputes the
  # student's log-probabilities with a different rounding than the teacher's).
  alg = fed_gmt(apply_fn, common.local_sgd(MOMENTUM, WD))
  rinfo = RoundInfo(jnp.int32(0), jnp.float32(0.1), 3)
  info = ClientInfo(jnp.int32(0), jnp.float32(6), jnp.int32(1), jnp.float32(1))
  ss = alg.server_init(params)
  local = alg.client_init(alg.broadcast(ss, rinfo), alg.client_state_init(params), info, rinfo)
  step = jax.jit(alg.local_step)
  local, metrics = step(local, batch, jax.random.key(0), rinfo)
  assert abs(float(metrics["kl_sum"])) < 1e-6
  _, metrics = step(local, batch, jax.random.key(0), rinfo)
  assert float(metrics["kl_sum"]) > 0.0
  # Gradient of the full local loss vs central finite differences (float64).
  with jax.enable_x64(True):
    to64 = lambda t: tmap(lambda a: jnp.asarray(a, jnp.float64), t)
    p64, e64 = to64(params), to64(init_params(11))
    b64 = {"x": jnp.asarray(x, jnp.float64), "y": y, "mask": mask}
    f = lambda p: loss_fn(p, e64, b64)[0]
    kl_only = lambda p: loss_fn(p, e64, b64)[1][1]
    v = {"w": jnp.asarray(rng.normal(size=(DIM, NUM_CLASSES))),
         "b": jnp.asarray(rng.normal(size=(NUM_CLASSES,)))}
    h = 1e-5
    for fn in (f, kl_only):
      fn = jax.jit(fn)
      directional = sum(jnp.vdot(g, d) for g, d in zip(
          jax.tree.leaves(jax.jit(jax.grad(fn))(p64)), jax.tree.leaves(v)))
      fd = (fn(tmap(lambda a, d: a + h * d, p64, v))
            - fn(tmap(lambda a, d: a - h * d, p64, v))) / (2 * h)
      np.testing.assert_allclose(float(directional), float(fd), rtol=1e-6, atol=1e-9)
    # The KL part is gamma tau^2 KL: compare with the independent reference loss.
    np.testing.assert_allclose(float(f(p64)),
                               float(jax.jit(ref_loss, static_argnums=(5, 6))(
                                   p64, e64, b64["x"], y, mask, 1.0, 3.0)),
                               rtol=1e-12)


def test_communication_and_builders():
  opt = common.local_sgd()
  assert (fed_gmt(apply_fn, opt).communication.down,
          fed_gmt(apply_fn, opt).communication.up) == (2, 1)
  assert (fed_gmt_v2(apply_fn, opt).communication.down,
          fed_gmt_v2(apply_fn, opt).communication.up) == (1, 1)
  cfg = config_lib.base_config()
  cfg.algorithm.name, cfg.local.momentum, cfg.local.weight_decay = "fedgmt", 0.9, 1e-5
  rng = np.random.default_rng(12)
  batch = {"x": jnp.asarray(rng.normal(size=(6, DIM)), jnp.float32),
           "y": jnp.asarray(rng.integers(0, NUM_CLASSES, 6), jnp.int32),
           "mask": jnp.ones((6,), bool)}
  params = init_params(12)
  built = ALGORITHMS["fedgmt"].build(cfg, apply_fn)
  assert built.name == "fedgmt" and built.communication.down == 2
  assert_trees_close(eager_round(built, params, batch),
                     eager_round(fed_gmt(apply_fn, common.local_sgd(0.9, 1e-5), gamma=1.0,
                                          tau=3.0, alpha=0.95, beta=10.0), params, batch),
                     atol=0, rtol=0)
  cfg.algorithm.name = "fedgmt_v2"
  built = ALGORITHMS["fedgmt_v2"].build(cfg, apply_fn)
  assert built.communication.down == 1
  assert_trees_close(eager_round(built, params, batch),
                     eager_round(fed_gmt_v2(apply_fn, common.local_sgd(0.9, 1e-5), alpha=0.5),
                                  params, batch), atol=0, rtol=0)
  # Overrides are read.
  cfg.algorithm.fedgmt_v2 = {"gamma": 0.5, "tau": 2.0, "alpha": 0.9, "beta": 100.0,
                             "bookkeeping": "authors", "v2_ema_init": "w0"}
  assert_trees_close(eager_round(ALGORITHMS["fedgmt_v2"].build(cfg, apply_fn), params, batch),
                     eager_round(fed_gmt_v2(apply_fn, common.local_sgd(0.9, 1e-5), gamma=0.5,
                                             tau=2.0, alpha=0.9, beta=100.0,
                                             bookkeeping="authors", v2_ema_init="w0"),
                                  params, batch), atol=0, rtol=0)
  cfg.algorithm.fedgmt = {"bookkeeping": "nope"}
  with pytest.raises(ValueError, match="bookkeeping"):
    ALGORITHMS["fedgmt"].build(cfg, apply_fn)
