"""FedProx: mu = 0 is FedAvg exactly; a hand-computed round with the proximal term."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_prox import fed_prox
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (MOMENTUM, WD, apply_fn, assert_trees_close, assert_trees_equal,
                          cohort_lr, eager_batch, eager_round, init_params, make_problem,
                          run_rounds)


def test_mu0_equals_fedavg_and_hand_computed_rounds():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=5)
  sampler = CohortSampler(parts, 3, 4, local_epochs=2, seed=5)
  params, tx = init_params(5), local_sgd(MOMENTUM, WD)
  a = run_rounds(fed_prox(apply_fn, tx, mu=0.0), params, data, sampler, 2)[0]
  b = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 2)[0]
  assert_trees_equal(a.params, b.params)
  mu = 0.7
  server = run_rounds(fed_prox(apply_fn, tx, mu=mu), params, data, sampler, 2)[0]
  w = ref.to_np(params)
  for t in range(2):
    cohort = sampler.build(t)
    models = []
    for c in range(cohort.batch_idx.shape[0]):
      wm, o = w, ref.Momentum(MOMENTUM, WD)
      for x, y, mask in ref.client_batches(data, cohort, c):
        wm = o.step(wm, ref.add(ref.ce_grad(wm, x, y, mask), ref.scale(mu, ref.sub(wm, w))),
                    cohort_lr(t))
      models.append(wm)
    w = ref.mean(models, cohort.weights)
  assert_trees_close(server.params, w, atol=2e-6)
  assert float(np.abs(np.asarray(server.params["w"]) - np.asarray(b.params["w"])).max()) > 1e-4


def test_builder():
  c = config_lib.base_config()
  c.algorithm.name = "fedprox"
  c.algorithm.fedprox.mu = 0.3
  params, batch = init_params(6), eager_batch()
  assert_trees_equal(eager_round(ALGORITHMS["fedprox"].build(c, apply_fn), params, batch),
                     eager_round(fed_prox(apply_fn, local_sgd(0.9, 1e-5), mu=0.3), params, batch))
  with pytest.raises(ValueError, match=r"algorithm\.fedprox\.mu"):
    fed_prox(apply_fn, local_sgd(), mu=-1.0)
