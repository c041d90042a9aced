"""FedLESAM(-D): per-client w_old perturbations by hand, first participation, broadcast variant."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.algorithms.fed_lesam import fed_lesam
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (MOMENTUM, WD, apply_fn, assert_trees_close, assert_trees_equal,
                          cohort_lr, eager_batch, eager_round, init_params, make_problem,
                          run_rounds, tmap)

COHORTS = [[0, 2], [2, 3], [0, 2], [1, 3]]


def ref_fed_lesam(params, data, sampler, *, alpha, rho, dyn_terms, perturbation, first,
                  num_clients=5):
  w = ref.to_np(params)
  previous = w
  h = ref.zeros(w)
  h_m = {m: ref.zeros(w) for m in range(num_clients)}
  w_old = {m: (w if first == "w0" else None) for m in range(num_clients)}
  for t, ids in enumerate(COHORTS):
    cohort, lr = sampler.build(t, ids), cohort_lr(t)
    models = []
    for c, m in enumerate(ids):
      if perturbation == "broadcast":
        e = ref.scale(rho, ref.normalized(ref.sub(previous, w)))
      elif w_old[m] is None:
        e = ref.zeros(w)
      else:
        e = ref.scale(rho, ref.normalized(ref.sub(w_old[m], w)))
      wk, opt = w, ref.Momentum(MOMENTUM, WD)
      for x, y, mask in ref.client_batches(data, cohort, c):
        d = ref.ce_grad(ref.add(wk, e), x, y, mask)
        if dyn_terms:
          d = ref.add(ref.sub(d, h_m[m]), ref.scale(alpha, ref.sub(wk, w)))
        wk = opt.step(wk, d, lr)
      if dyn_terms:
        h_m[m] = ref.sub(h_m[m], ref.scale(alpha, ref.sub(wk, w)))
      w_old[m] = w
      models.append(wk)
    previous, avg = w, ref.mean(models, cohort.weights)
    if dyn_terms:
      drift = ref.mean([ref.sub(wk, w) for wk in models], np.ones(len(models)))
      h = ref.sub(h, ref.scale(alpha / num_clients, drift))
      w = ref.sub(avg, ref.scale(1.0 / alpha, h))
    else:
      w = avg
  return w, h_m


@pytest.mark.parametrize("dyn_terms,perturbation,first", [
    (True, "paper", "zero"), (True, "paper", "w0"), (False, "paper", "zero"),
    (True, "broadcast", "zero")])
def test_rounds_by_hand(dyn_terms, perturbation, first):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=31)
  sampler = CohortSampler(parts, 2, 3, local_epochs=1, seed=31)
  params = init_params(31)
  alpha, rho = 0.1, 0.3
  alg = fed_lesam(apply_fn, local_sgd(MOMENTUM, WD), dyn_terms=dyn_terms, alpha=alpha, rho=rho,
                  perturbation=perturbation, first_participation=first)
  server, table, _, _ = run_rounds(alg, params, data, sampler, 4, cohorts=COHORTS)
  w, h_m = ref_fed_lesam(params, data, sampler, alpha=alpha, rho=rho, dyn_terms=dyn_terms,
                         perturbation=perturbation, first=first)
  assert_trees_close(server.params, w, atol=3e-6)
  if dyn_terms:
    for m in range(5):
      assert_trees_close(tmap(lambda a: a[m], table.h), h_m[m], atol=1e-6)
  if perturbation == "paper":
    # w_old of client 2 is the model it received in round 2; clients never seen keep w^0.
    assert bool(table.seen[2]) and not bool(table.seen[4])
    assert_trees_equal(tmap(lambda a: a[4], table.w_old), params)
  assert (alg.communication.down, alg.communication.up) == (1 if perturbation == "paper" else 2, 1)


def test_rho0_reductions():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=32)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=32)
  params, tx = init_params(32), local_sgd(MOMENTUM, WD)
  a = run_rounds(fed_lesam(apply_fn, tx, rho=0.0), params, data, sampler, 3)[0]
  b = run_rounds(fed_dyn(apply_fn, tx, alpha=0.1), params, data, sampler, 3)[0]
  assert_trees_close(a.params, b.params, atol=1e-7)
  a = run_rounds(fed_lesam(apply_fn, tx, dyn_terms=False, rho=0.0), params, data, sampler, 3)[0]
  b = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 3)[0]
  assert_trees_close(a.params, b.params, atol=1e-7)


def test_builder():
  c = config_lib.base_config()
  c.algorithm.name = "fedlesam_d"
  c.algorithm.fedlesam_d.update(rho=0.2, perturbation="broadcast", prox="unsquared")
  params, batch = init_params(33), eager_batch()
  assert_trees_equal(eager_round(ALGORITHMS["fedlesam_d"].build(c, apply_fn), params, batch),
                     eager_round(fed_lesam(apply_fn, local_sgd(0.9, 1e-5), rho=0.2,
                                           perturbation="broadcast", prox="unsquared"),
                                 params, batch))
  with pytest.raises(ValueError, match=r"algorithm\.fedlesam_d\.first_participation"):
    fed_lesam(apply_fn, local_sgd(), first_participation="never")
