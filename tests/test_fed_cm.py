"""FedCM and MoFedSAM: beta = 1 reductions, hand-computed rounds with Delta in gradient units."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_cm import fed_cm
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (WD, apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds)


def _setup(seed):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=seed)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=seed), init_params(seed)


@pytest.mark.parametrize("kind", ["sgd", "sam"])
def test_beta1_equals_fedavg_and_fedsam_exactly(kind):
  data, sampler, params = _setup(0)
  opt = ClientOptimizer(local_sgd(0.0, WD), kind, 0.3)
  a, _, ma, _ = run_rounds(fed_cm(apply_fn, opt, beta=1.0), params, data, sampler, 3)
  b, _, mb, _ = run_rounds(fed_avg(apply_fn, opt), params, data, sampler, 3)
  assert_trees_equal(a.params, b.params)
  np.testing.assert_array_equal(ma["loss_sum"], mb["loss_sum"])


@pytest.mark.parametrize("kind,relative", [("sgd", 1.0), ("sam", 1.0), ("sam", 0.5)])
def test_hand_computed_rounds(kind, relative):
  data, sampler, params = _setup(1)
  beta, rho = 0.3, 0.25
  opt = ClientOptimizer(local_sgd(0.0, WD), kind, rho)
  server, _, _, _ = run_rounds(fed_cm(apply_fn, opt, beta=beta, server_lr_relative=relative),
                               params, data, sampler, 3)
  w = ref.to_np(params)
  momentum = ref.zeros(w)
  for t in range(3):
    cohort, lr = sampler.build(t), cohort_lr(t)
    deltas, grads_units = [], []
    for c in range(cohort.batch_idx.shape[0]):
      wm, o = w, ref.Momentum(0.0, WD)
      batches = ref.client_batches(data, cohort, c)
      for x, y, mask in batches:
        g = ref.ce_grad(wm, x, y, mask)
        if kind == "sam":
          g = ref.ce_grad(ref.add(wm, ref.scale(rho, ref.normalized(g))), x, y, mask)
        wm = o.step(wm, ref.add(ref.scale(beta, g), ref.scale(1 - beta, momentum)), lr)
      deltas.append(ref.sub(w, wm))
      grads_units.append(ref.scale(1.0 / (lr * len(batches)), ref.sub(w, wm)))
    momentum = ref.mean(grads_units, cohort.weights)       # Delta^{r+1}, gradient units
    w = ref.sub(w, ref.scale(relative, ref.mean(deltas, cohort.weights)))
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.momentum, momentum, atol=2e-5)
  assert ref.norm(momentum) > 1e-2


def test_builders_momentum_zero_and_communication():
  c = config_lib.base_config()
  c.local.momentum = 0.9
  c.algorithm.name = "mofedsam"
  c.algorithm.mofedsam.update(rho=0.2, beta=0.4)
  alg = ALGORITHMS["mofedsam"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 1)
  params, batch = init_params(2), eager_batch()
  direct = fed_cm(apply_fn, ClientOptimizer(local_sgd(0.0, 1e-5), "sam", 0.2), beta=0.4)
  assert_trees_equal(eager_round(alg, params, batch), eager_round(direct, params, batch))
  c.algorithm.name = "fedcm"
  assert_trees_equal(eager_round(ALGORITHMS["fedcm"].build(c, apply_fn), params, batch),
                     eager_round(fed_cm(apply_fn, local_sgd(0.0, 1e-5), beta=0.1), params, batch))
  with pytest.raises(ValueError, match=r"algorithm\.fedcm\.beta"):
    fed_cm(apply_fn, local_sgd(), beta=0.0)
