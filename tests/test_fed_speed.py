"""FedSpeed: golden rounds computed by hand in NumPy (paper box and code variant), reductions."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_speed import fed_speed
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (MOMENTUM, WD, apply_fn, assert_trees_close, assert_trees_equal,
                          cohort_lr, eager_batch, eager_round, init_params, make_problem,
                          run_rounds, tmap)


def ref_fed_speed(params, data, sampler, rounds, *, lam, rho, alpha, normalize, dual_average,
                  num_clients):
  """NumPy FedSpeed: quasi-gradient, prox-correction g^_i, server per `dual_average`."""
  w = ref.to_np(params)
  g_hat = {m: ref.zeros(w) for m in range(num_clients)}
  h = ref.zeros(w)  # 'all': FedDyn's server dual
  for t in range(rounds):
    cohort, lr = sampler.build(t), cohort_lr(t)
    uploads = []
    for c, m in enumerate(np.asarray(cohort.client_ids)):
      x_k, opt = w, ref.Momentum(MOMENTUM, WD)
      for x, y, mask in ref.client_batches(data, cohort, c):
        g1 = ref.ce_grad(x_k, x, y, mask)
        step = ref.normalized(g1) if normalize else g1
        g2 = ref.ce_grad(ref.add(x_k, ref.scale(rho, step)), x, y, mask)
        quasi = ref.add(ref.scale(1 - alpha, g1), ref.scale(alpha, g2))
        d = ref.add(ref.sub(quasi, g_hat[m]), ref.scale(1.0 / lam, ref.sub(x_k, w)))
        x_k = opt.step(x_k, d, lr)
      g_hat[m] = ref.sub(g_hat[m], ref.scale(1.0 / lam, ref.sub(x_k, w)))
      uploads.append((x_k, g_hat[m]))
    p = cohort.weights
    if dual_average == "active":   # x^{t+1} = sum p_i (x_{i,K} - lam g^_i)
      w = ref.mean([ref.sub(xk, ref.scale(lam, gh)) for xk, gh in uploads], p)
    else:                          # FedDyn server with alpha = 1/lam
      drift = ref.mean([ref.sub(xk, w) for xk, _ in uploads], np.ones(len(uploads)))
      h = ref.sub(h, ref.scale(1.0 / (lam * num_clients), drift))
      w = ref.sub(ref.mean([xk for xk, _ in uploads], p), ref.scale(lam, h))
  return w, g_hat


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_golden_rounds_by_hand(variant):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=11)
  sampler = CohortSampler(parts, 2, 3, local_epochs=1, seed=11)
  cohorts = [[0, 2], [2, 4], [0, 1]]   # clients 0 and 2 return with nonzero g^_i
  params = init_params(11)
  lam, rho = 10.0, 0.2
  alg = fed_speed(apply_fn, local_sgd(MOMENTUM, WD), lam=lam, rho=rho, variant=variant)
  server, table, _, _ = run_rounds(alg, params, data, sampler, 3, cohorts=cohorts)
  opts = dict(paper=dict(alpha=0.95, normalize=False, dual_average="active"),
              code=dict(alpha=1.0, normalize=True, dual_average="all"))[variant]
  # Reference sampler with the forced cohorts.
  forced = _Forced(sampler, cohorts)
  w, g_hat = ref_fed_speed(params, data, forced, 3, lam=lam, rho=rho, num_clients=5, **opts)
  assert_trees_close(server.params, w, atol=3e-6)
  for m in range(5):
    assert_trees_close(tmap(lambda a: a[m], table), g_hat[m], atol=1e-6)
  assert ref.norm(g_hat[2]) > 1e-3


class _Forced:
  def __init__(self, sampler, cohorts):
    self.sampler, self.cohorts = sampler, cohorts

  def build(self, t):
    return self.sampler.build(t, self.cohorts[t])


def test_code_variant_rho0_equals_feddyn_exactly():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=12)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=12)
  params, tx = init_params(12), local_sgd(MOMENTUM, WD)
  a = run_rounds(fed_speed(apply_fn, tx, lam=10.0, rho=0.0, variant="code"), params, data,
                 sampler, 3)
  b = run_rounds(fed_dyn(apply_fn, tx, alpha=0.1), params, data, sampler, 3)
  assert_trees_close(a[0].params, b[0].params, atol=1e-7)
  assert_trees_close(a[1], b[1], atol=1e-7)


def test_builder_options_and_errors():
  c = config_lib.base_config()
  c.algorithm.name = "fedspeed"
  c.algorithm.fedspeed.update(lam=20.0, rho=0.1, variant="code", prox="unsquared")
  params, batch = init_params(13), eager_batch()
  assert_trees_equal(eager_round(ALGORITHMS["fedspeed"].build(c, apply_fn), params, batch),
                     eager_round(fed_speed(apply_fn, local_sgd(0.9, 1e-5), lam=20.0, rho=0.1,
                                           variant="code", prox="unsquared"), params, batch))
  with pytest.raises(ValueError, match=r"algorithm\.fedspeed\.variant='fast'"):
    fed_speed(apply_fn, local_sgd(), variant="fast")
  c.local.optimizer = "sam"
  with pytest.raises(ValueError, match="conflicts with algorithm.name='fedspeed'"):
    ALGORITHMS["fedspeed"].build(c, apply_fn)
