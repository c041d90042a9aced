"""FedSAM / FedASAM (FedAvg with a sam/asam client optimiser): reductions and hand rounds."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (MOMENTUM, WD, apply_fn, assert_trees_close, assert_trees_equal,
                          cohort_lr, eager_batch, eager_round, init_params, make_problem, run_rounds)


def _setup(seed=0):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=seed)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=seed)


def test_fedsam_rho0_equals_fedavg_exactly():
  data, sampler = _setup(1)
  params = init_params(1)
  tx = local_sgd(MOMENTUM, WD)
  s_avg, _, m_avg, _ = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 3)
  s_sam, _, m_sam, _ = run_rounds(fed_avg(apply_fn, ClientOptimizer(tx, "sam", 0.0)), params,
                                  data, sampler, 3)
  assert_trees_equal(s_sam.params, s_avg.params)
  np.testing.assert_array_equal(m_sam["loss_sum"], m_avg["loss_sum"])
  # And a positive radius really changes the rounds.
  s_pos, _, _, _ = run_rounds(fed_avg(apply_fn, ClientOptimizer(tx, "sam", 0.5)), params, data,
                              sampler, 3)
  assert float(jnp.abs(s_pos.params["w"] - s_avg.params["w"]).max()) > 1e-4


def _asam_e(w, g, rho, eta):
  t = {k: np.abs(w[k]) + eta for k in w}          # the test model has no leaf named 'bias'
  tg = {k: t[k] * g[k] for k in w}
  return ref.scale(rho / (ref.norm(tg) + 1e-12), {k: t[k] * tg[k] for k in w})


@pytest.mark.parametrize("kind", ["sam", "asam"])
def test_hand_computed_rounds(kind):
  data, sampler = _setup(2)
  params = init_params(2)
  rho, eta = 0.3, 0.1
  alg = fed_avg(apply_fn, ClientOptimizer(local_sgd(MOMENTUM, WD), kind, rho, eta=eta))
  server, _, _, _ = run_rounds(alg, params, data, sampler, 2)
  w = ref.to_np(params)
  for t in range(2):
    cohort = sampler.build(t)
    models = []
    for c in range(cohort.batch_idx.shape[0]):
      wm, opt = w, ref.Momentum(MOMENTUM, WD)
      for x, y, mask in ref.client_batches(data, cohort, c):
        g = ref.ce_grad(wm, x, y, mask)
        e = (ref.scale(rho, ref.normalized(g)) if kind == "sam" else _asam_e(wm, g, rho, eta))
        wm = opt.step(wm, ref.ce_grad(ref.add(wm, e), x, y, mask), cohort_lr(t))
      models.append(wm)
    w = ref.mean(models, cohort.weights)
  assert_trees_close(server.params, w, atol=2e-6)


def test_builder_reads_rho_and_rejects_a_second_sam():
  c = config_lib.base_config()
  c.algorithm.name = "fedsam"
  c.algorithm.fedsam.rho = 0.123
  alg = ALGORITHMS["fedsam"].build(c, apply_fn)
  assert alg.name == "fedsam" and alg.communication.down == 1 and alg.communication.up == 1
  params, batch = init_params(4), eager_batch()
  direct = fed_avg(apply_fn, ClientOptimizer(local_sgd(0.9, 1e-5), "sam", 0.123))
  assert_trees_equal(eager_round(alg, params, batch), eager_round(direct, params, batch))
  c.local.optimizer = "sam"
  with pytest.raises(ValueError, match="conflicts with algorithm.name='fedsam'"):
    ALGORITHMS["fedsam"].build(c, apply_fn)
