"""FedSMOO: golden rounds computed by hand in NumPy (mu_m, s, FedDyn duals), reductions."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_smoo import fed_smoo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (MOMENTUM, WD, apply_fn, assert_trees_close, assert_trees_equal,
                          cohort_lr, eager_batch, eager_round, init_params, make_problem,
                          run_rounds, tmap)


def ref_fed_smoo(params, data, sampler, cohorts, *, alpha, rho, s_update, num_clients):
  w = ref.to_np(params)
  h, s = ref.zeros(w), ref.zeros(w)
  h_m = {m: ref.zeros(w) for m in range(num_clients)}
  mu = {m: ref.zeros(w) for m in range(num_clients)}
  for t, ids in enumerate(cohorts):
    cohort, lr = sampler.build(t, ids), cohort_lr(t)
    models, s_ups = [], []
    for c, m in enumerate(ids):
      wk, opt, e = w, ref.Momentum(MOMENTUM, WD), None
      for x, y, mask in ref.client_batches(data, cohort, c):
        g = ref.ce_grad(wk, x, y, mask)
        e = ref.scale(rho, ref.normalized(ref.sub(ref.sub(g, mu[m]), s)))
        mu[m] = ref.add(mu[m], ref.sub(e, s))
        g_s = ref.ce_grad(ref.add(wk, e), x, y, mask)
        d = ref.add(ref.sub(g_s, h_m[m]), ref.scale(alpha, ref.sub(wk, w)))
        wk = opt.step(wk, d, lr)
      h_m[m] = ref.sub(h_m[m], ref.scale(alpha, ref.sub(wk, w)))
      models.append(wk)
      s_ups.append(ref.sub(mu[m], e) if s_update == "paper" else mu[m])
    p = cohort.weights
    drift = ref.mean([ref.sub(wk, w) for wk in models], np.ones(len(models)))
    h = ref.sub(h, ref.scale(alpha / num_clients, drift))
    w = ref.sub(ref.mean(models, p), ref.scale(1.0 / alpha, h))
    s = ref.scale(rho, ref.normalized(ref.mean(s_ups, p)))
  return w, s, h_m, mu


@pytest.mark.parametrize("s_update", ["paper", "mu"])
def test_golden_rounds_by_hand(s_update):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=21)
  sampler = CohortSampler(parts, 2, 3, local_epochs=1, seed=21)
  cohorts = [[1, 3], [0, 3], [1, 4]]
  params = init_params(21)
  alpha, rho = 0.1, 0.15
  alg = fed_smoo(apply_fn, local_sgd(MOMENTUM, WD), alpha=alpha, rho=rho, s_update=s_update)
  server, table, _, _ = run_rounds(alg, params, data, sampler, 3, cohorts=cohorts)
  w, s, h_m, mu = ref_fed_smoo(params, data, sampler, cohorts, alpha=alpha, rho=rho,
                               s_update=s_update, num_clients=5)
  assert_trees_close(server.params, w, atol=3e-6)
  assert_trees_close(server.s, s, atol=2e-6)
  for m in range(5):
    assert_trees_close(tmap(lambda a: a[m], table.h), h_m[m], atol=1e-6)
    assert_trees_close(tmap(lambda a: a[m], table.mu), mu[m], atol=2e-6)
  assert abs(ref.norm(s) - rho) < 1e-6 and ref.norm(mu[3]) > 1e-3


def test_rho0_equals_feddyn():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=22)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=22)
  params, tx = init_params(22), local_sgd(MOMENTUM, WD)
  a = run_rounds(fed_smoo(apply_fn, tx, rho=0.0), params, data, sampler, 3)
  b = run_rounds(fed_dyn(apply_fn, tx, alpha=0.1), params, data, sampler, 3)
  assert_trees_close(a[0].params, b[0].params, atol=1e-7)
  assert_trees_close(a[1].h, b[1], atol=1e-7)


def test_builder_and_communication():
  c = config_lib.base_config()
  c.algorithm.name = "fedsmoo"
  c.algorithm.fedsmoo.update(alpha=0.01, rho=0.2, s_update="mu")
  alg = ALGORITHMS["fedsmoo"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 2)
  params, batch = init_params(23), eager_batch()
  assert_trees_equal(eager_round(alg, params, batch),
                     eager_round(fed_smoo(apply_fn, local_sgd(0.9, 1e-5), alpha=0.01, rho=0.2,
                                          s_update="mu"), params, batch))
  with pytest.raises(ValueError, match=r"algorithm\.fedsmoo\.s_update"):
    fed_smoo(apply_fn, local_sgd(), s_update="both")
