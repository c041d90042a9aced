"""MimeLite: server momentum from full-batch gradients at x^t (first epoch), by hand."""
from __future__ import annotations

import numpy as np

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.mime_lite import mime_lite
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (WD, apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds)


def test_rounds_by_hand_with_two_epochs():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=41)
  sampler = CohortSampler(parts, 3, 4, local_epochs=2, seed=41)
  params, beta = init_params(41), 0.6
  server, _, _, _ = run_rounds(mime_lite(apply_fn, local_sgd(0.0, WD), beta=beta), params,
                               data, sampler, 3)
  w = ref.to_np(params)
  m = ref.zeros(w)
  for t in range(3):
    cohort, lr = sampler.build(t), cohort_lr(t)
    models, full_grads = [], []
    for c, cid in enumerate(np.asarray(cohort.client_ids)):
      n = len(sampler.client_indices[cid])
      batches = ref.client_batches(data, cohort, c)
      first_epoch = batches[:-(-n // 4)]
      assert sum(mask.sum() for _, _, mask in first_epoch) == n    # one pass over the data
      grad_sum = ref.zeros(w)
      for x, y, mask in first_epoch:
        grad_sum = ref.add(grad_sum, ref.scale(mask.sum(), ref.ce_grad(w, x, y, mask)))
      full_grads.append(ref.scale(1.0 / n, grad_sum))
      wk, opt = w, ref.Momentum(0.0, WD)
      for x, y, mask in batches:
        d = ref.add(ref.scale(1 - beta, ref.ce_grad(wk, x, y, mask)), ref.scale(beta, m))
        wk = opt.step(wk, d, lr)
      models.append(wk)
    w = ref.mean(models, cohort.weights)
    m = ref.add(ref.scale(1 - beta, ref.mean(full_grads, cohort.weights)), ref.scale(beta, m))
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.momentum, m, atol=2e-6)


def test_beta0_equals_fedavg_and_builder():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=42)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=42)
  params, tx = init_params(42), local_sgd(0.0, WD)
  a = run_rounds(mime_lite(apply_fn, tx, beta=0.0), params, data, sampler, 3)[0]
  b = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 3)[0]
  assert_trees_equal(a.params, b.params)
  c = config_lib.base_config()
  c.local.momentum = 0.9
  c.algorithm.name = "mimelite"
  c.algorithm.mimelite.beta = 0.5
  alg = ALGORITHMS["mimelite"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 2)
  batch = eager_batch()
  assert_trees_equal(eager_round(alg, params, batch),
                     eager_round(mime_lite(apply_fn, local_sgd(0.0, 1e-5), beta=0.5), params,
                                 batch))
