"""FedGloSS / NaiveFedGloSS: reductions, NumPy golden rounds, schedules, server-step order."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_gloss import fed_gloss
from fedjax_sharp.core import schedules
from fedjax_sharp.core.algorithm import RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (WD, apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          init_params, make_problem, run_rounds, tmap)

COHORTS = [[0, 2], [2, 3], [0, 2], [1, 3]]
NUM_CLIENTS = 5


def ramp(target, rho0, ramp_rounds, t):
  return target if ramp_rounds <= 0 else rho0 + (target - rho0) * min(t, ramp_rounds) / ramp_rounds


def ref_fed_gloss(params, data, sampler, *, rho, rho_l, rho0=0.001, ramp_rounds=0, beta=10.0,
                  eta_s=1.0, admm=True, kind="sgd", dual_scale="paper", naive=False,
                  refresh=False, batch_size=3, rounds=len(COHORTS)):
  """NumPy FedGloSS (Appendix A Algorithm 1), momentum 0, weight decay WD."""
  w = ref.to_np(params)
  d_prev, sigma = None, ref.zeros(w)
  sig = {m: ref.zeros(w) for m in range(NUM_CLIENTS)}
  used_perturbations = []

  def train(start, m, cohort, c, lr, t, update_dual):
    wk, opt, anchor, s_k = start, ref.Momentum(0.0, WD), start, sig[m]
    n = len(sampler.client_indices[m])
    per_epoch = -(-n // batch_size)
    for i, (x, y, mask) in enumerate(ref.client_batches(data, cohort, c)):
      if admm and refresh and i > 0 and i % per_epoch == 0:
        s_k = ref.sub(s_k, ref.scale(1 / beta, ref.sub(wk, anchor)))
        anchor = wk
      g = ref.ce_grad(wk, x, y, mask)
      if kind == "sam":
        r = ramp(rho_l, rho0, ramp_rounds, t)
        g = ref.ce_grad(ref.add(wk, ref.scale(r, ref.normalized(g))), x, y, mask)
      if admm:
        g = ref.add(ref.sub(g, s_k), ref.scale(1 / beta, ref.sub(wk, anchor)))
      wk = opt.step(wk, g, lr)
    if admm and update_dual:
      sig[m] = ref.sub(s_k, ref.scale(1 / beta, ref.sub(wk, anchor)))
    return wk

  for t in range(rounds):
    cohort, lr = sampler.build(t, COHORTS[t]), cohort_lr(t)
    p = cohort.weights
    r_s = ramp(rho, rho0, ramp_rounds, t)
    if naive:   # exchange 0: probe from w, no dual update; D of this round
      probe = [train(w, m, cohort, c, lr, t, False) for c, m in enumerate(COHORTS[t])]
      d_prev = ref.mean([ref.sub(w, wk) for wk in probe], p)
    e = ref.zeros(w) if d_prev is None else ref.scale(r_s, ref.normalized(d_prev))
    used_perturbations.append(e)
    w_tilde = ref.add(w, e)
    models = [train(w_tilde, m, cohort, c, lr, t, True) for c, m in enumerate(COHORTS[t])]
    if admm:
      denom = beta * NUM_CLIENTS * (len(models) if dual_scale == "code" else 1)
      sigma = ref.sub(sigma, ref.scale(1 / denom, ref.mean([ref.sub(wk, w_tilde) for wk in models],
                                                            np.ones(len(models)))))
    d = ref.mean([ref.sub(w_tilde, wk) for wk in models], p)
    w = ref.sub(w, ref.scale(eta_s, d))                      # from the UNperturbed w
    if admm:
      w = ref.sub(w, ref.scale(beta, sigma))
    d_prev = d
  return w, sigma, sig, used_perturbations


def _setup(seed, epochs=1):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=seed)
  return data, CohortSampler(parts, 2, 3, local_epochs=epochs, seed=seed), init_params(seed)


def _opt(kind, rho_l=0.0, rho0=0.001, ramp_rounds=0):
  rho = schedules.linear_ramp(rho_l, rho0, ramp_rounds) if kind != "sgd" else 0.0
  return ClientOptimizer(local_sgd(0.0, WD), kind, rho)


@pytest.mark.parametrize("kind", ["sgd", "sam"])
def test_rho_s0_no_admm_equals_fedavg_and_fedsam_exactly(kind):
  data, sampler, params = _setup(60)
  opt = _opt(kind, 0.3)
  a = run_rounds(fed_gloss(apply_fn, opt, rho=0.0, admm=False), params, data, sampler, 4)
  b = run_rounds(fed_avg(apply_fn, opt), params, data, sampler, 4)
  assert_trees_equal(a[0].params, b[0].params)
  np.testing.assert_array_equal(a[2]["loss_sum"], b[2]["loss_sum"])


def test_rho_s0_with_admm_is_a_hand_computed_admm_round_and_feddyn():
  data, sampler, params = _setup(61)
  beta = 5.0
  server, table, _, _ = run_rounds(fed_gloss(apply_fn, _opt("sgd"), rho=0.0, beta=beta), params,
                                   data, sampler, 4, cohorts=COHORTS)
  w, sigma, sig, _ = ref_fed_gloss(params, data, sampler, rho=0.0, rho_l=0.0, beta=beta)
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.sigma, sigma, atol=1e-6)
  for m in range(NUM_CLIENTS):
    assert_trees_close(tmap(lambda a: a[m], table), sig[m], atol=1e-6)
  assert ref.norm(sig[2]) > 1e-3
  dyn = run_rounds(fed_dyn(apply_fn, local_sgd(0.0, WD), alpha=1 / beta), params, data, sampler,
                   4, cohorts=COHORTS)
  assert_trees_close(server.params, dyn[0].params, atol=1e-6)


@pytest.mark.parametrize("options", [
    dict(kind="sgd"),
    dict(kind="sam", rho_l=0.2),
    dict(kind="sam", rho_l=0.2, ramp_rounds=2, dual_scale="code"),
    dict(kind="sgd", admm=False, eta_s=0.7),
])
def test_golden_rounds_with_the_ascent_on(options):
  data, sampler, params = _setup(62)
  rho, beta = 0.25, 10.0
  kind, rho_l = options.get("kind"), options.get("rho_l", 0.0)
  ramp_rounds = options.get("ramp_rounds", 0)
  alg = fed_gloss(apply_fn, _opt(kind, rho_l, ramp_rounds=ramp_rounds), rho=rho, beta=beta,
                  ramp_rounds=ramp_rounds, admm=options.get("admm", True),
                  eta_s=options.get("eta_s", 1.0), dual_scale=options.get("dual_scale", "paper"))
  server, _, _, _ = run_rounds(alg, params, data, sampler, 4, cohorts=COHORTS)
  w, sigma, _, used = ref_fed_gloss(params, data, sampler, rho=rho, rho_l=rho_l, beta=beta,
                                    ramp_rounds=ramp_rounds, admm=options.get("admm", True),
                                    eta_s=options.get("eta_s", 1.0),
                                    dual_scale=options.get("dual_scale", "paper"), kind=kind)
  assert_trees_close(server.params, w, atol=3e-6)
  assert ref.norm(used[0]) == 0.0 and ref.norm(used[3]) > 0.01   # no ascent in round 0


def test_descent_starts_from_the_unperturbed_model():
  """Server step on a state with a previous pseudo-gradient: w - eta_s D~ - beta sigma, where
  D~ = sum p (w~ - w_k); starting from w~ instead would add rho D_prev/||D_prev|| to the result."""
  params = init_params(63)
  alg = fed_gloss(apply_fn, _opt("sgd"), rho=0.5, beta=4.0, eta_s=0.8)
  rinfo = RoundInfo(jnp.int32(3), jnp.float32(0.1), NUM_CLIENTS)
  state = alg.server_init(params).replace(pseudo_grad=init_params(64),
                                          has_pseudo=jnp.ones((), jnp.bool_))
  w_tilde = alg.broadcast(state, rinfo)
  e = ref.sub(ref.to_np(w_tilde), ref.to_np(params))
  np.testing.assert_allclose(ref.norm(e), 0.5, rtol=1e-6)
  uploads = tmap(lambda a, b: jnp.stack([a, b]), init_params(65), init_params(66))  # w_k - w~
  weights, mask = jnp.asarray([0.25, 0.75]), jnp.ones((2,))
  new = alg.server_update(state, uploads, weights, mask, rinfo)
  u = [ref.to_np(init_params(65)), ref.to_np(init_params(66))]
  d = ref.scale(-1.0, ref.mean(u, [0.25, 0.75]))
  sigma = ref.scale(-1.0 / (4.0 * NUM_CLIENTS), ref.add(u[0], u[1]))
  expected = ref.sub(ref.sub(ref.to_np(params), ref.scale(0.8, d)), ref.scale(4.0, sigma))
  assert_trees_close(new.params, expected, atol=1e-6)
  assert_trees_close(new.pseudo_grad, d, atol=1e-6)


def test_naive_fedgloss_uses_the_current_rounds_pseudo_gradient():
  data, sampler, params = _setup(67)
  rho, beta = 0.3, 10.0
  alg = fed_gloss(apply_fn, _opt("sam", 0.1), rho=rho, beta=beta, naive=True)
  server, table, _, _ = run_rounds(alg, params, data, sampler, 4, cohorts=COHORTS)
  w, sigma, sig, used = ref_fed_gloss(params, data, sampler, rho=rho, rho_l=0.1, beta=beta,
                                      kind="sam", naive=True)
  assert_trees_close(server.params, w, atol=3e-6)
  assert_trees_close(server.sigma, sigma, atol=1e-6)
  for m in range(NUM_CLIENTS):
    assert_trees_close(tmap(lambda a: a[m], table), sig[m], atol=1e-6)
  assert ref.norm(used[0]) > 0.29                      # an ascent already in round 0
  # FedGloSS (previous round's direction) gives a different model.
  other = run_rounds(fed_gloss(apply_fn, _opt("sam", 0.1), rho=rho, beta=beta), params, data,
                     sampler, 4, cohorts=COHORTS)[0]
  assert float(jnp.abs(other.params["w"] - server.params["w"]).max()) > 1e-5
  assert (alg.communication.down, alg.communication.up, alg.exchanges) == (2, 2, 2)


def test_refresh_per_epoch_matches_the_authors_code_and_is_the_paper_step():
  """The authors' per-epoch refresh (sigma_k -= (w_e - anchor)/beta, anchor <- w_e) gives the
  same direction g - sigma_k + (w - w~)/beta and the same final dual: algebraically a no-op,
  so with E = 2 it equals the paper's step up to float rounding (docs/reproducing.md, "Where the
  specification, the paper and the code differ")."""
  data, sampler, params = _setup(68, epochs=2)
  alg = fed_gloss(apply_fn, _opt("sgd"), rho=0.2, beta=2.0, refresh_per_epoch=True)
  server, table, _, _ = run_rounds(alg, params, data, sampler, 4, cohorts=COHORTS)
  w, _, sig, _ = ref_fed_gloss(params, data, sampler, rho=0.2, rho_l=0.0, beta=2.0, refresh=True)
  assert_trees_close(server.params, w, atol=3e-6)
  for m in range(NUM_CLIENTS):
    assert_trees_close(tmap(lambda a: a[m], table), sig[m], atol=1e-6)
  plain = run_rounds(fed_gloss(apply_fn, _opt("sgd"), rho=0.2, beta=2.0), params, data, sampler,
                     4, cohorts=COHORTS)
  assert_trees_close(plain[0].params, server.params, atol=1e-6)
  assert_trees_close(plain[1], table, atol=1e-6)


def test_schedules():
  s = schedules.linear_ramp(0.15, 0.001, 2000)
  vals = [float(s(jnp.int32(t))) for t in (0, 1000, 2000, 2001, 9999)]
  np.testing.assert_allclose(vals, [0.001, 0.0755, 0.15, 0.15, 0.15], rtol=1e-6)
  assert float(schedules.linear_ramp(0.2, 0.001, 0)(jnp.int32(0))) == pytest.approx(0.2)
  # Traced: one compilation for every round.
  traces = []
  f = jax.jit(lambda t: traces.append(1) or s(t))
  f(jnp.int32(0)), f(jnp.int32(5000))
  assert len(traces) == 1
  # The authors' code's server radius (spec): CIFAR-10 0.15007 throughout, CIFAR-100
  # 0.2000006 for the 15k ramp rounds then 0.01.
  c10 = schedules.fedgloss_code_server_rho(0.15, 0.15, 0.001, 2000)
  np.testing.assert_allclose([float(c10(jnp.int32(t))) for t in (0, 1, 2000, 2001)],
                             [0.001, 0.15 + 0.149 / 2000, 0.15 + 0.149 / 2000, 0.15], rtol=1e-6)
  c100 = schedules.fedgloss_code_server_rho(0.01, 0.2, 0.001, 15000)
  np.testing.assert_allclose([float(c100(jnp.int32(t))) for t in (1, 15000, 15001)],
                             [0.2000006, 0.2000006, 0.01], rtol=1e-6)


def test_builder_and_errors():
  c = config_lib.base_config()
  c.algorithm.name = "fedgloss"
  c.algorithm.fedgloss.update(client_optimizer="sam", rho=0.1, rho_l=0.05, ramp_rounds=3,
                              beta=4.0)
  data, sampler, params = _setup(69)
  built = run_rounds(ALGORITHMS["fedgloss"].build(c, apply_fn), params, data, sampler, 3)[0]
  direct = fed_gloss(apply_fn, ClientOptimizer(local_sgd(0.9, 1e-5), "sam",
                                               schedules.linear_ramp(0.05, 0.001, 3)),
                     rho=0.1, ramp_rounds=3, beta=4.0)
  assert_trees_equal(built, run_rounds(direct, params, data, sampler, 3)[0])
  c.algorithm.fedgloss.client_optimizer = "adam"
  with pytest.raises(ValueError, match=r"algorithm\.fedgloss\.client_optimizer='adam'"):
    ALGORITHMS["fedgloss"].build(c, apply_fn)
  with pytest.raises(ValueError, match=r"algorithm\.fedgloss\.dual_scale"):
    fed_gloss(apply_fn, local_sgd(), dual_scale="big")
