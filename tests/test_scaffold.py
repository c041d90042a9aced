"""SCAFFOLD (option II) and FedGamma (SCAFFOLD + SAM): reductions, hand-computed controls."""
from __future__ import annotations

import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.scaffold import scaffold
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (WD, apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds, tmap)


def test_one_local_step_full_participation_equals_fedavg():
  """K = 1, all clients, uniform weights: the corrections cancel in the average (c = mean c_m),
  so every round equals FedAvg's, although the controls are nonzero after round 0."""
  data, parts = make_problem((6, 6, 6, 6), seed=0)
  sampler = CohortSampler(parts, 4, 3, local_steps=1, seed=0, weighting="uniform")
  params = init_params(0)
  tx = local_sgd(0.0, WD)
  s_sc, table, _, _ = run_rounds(scaffold(apply_fn, tx), params, data, sampler, 3)
  s_avg, _, _, _ = run_rounds(fed_avg(apply_fn, tx), params, data, sampler, 3)
  assert_trees_close(s_sc.params, s_avg.params, atol=1e-6)
  assert float(np.abs(np.asarray(table["w"])).max()) > 1e-3     # controls really are nonzero
  # Round 0 alone (zero controls) is FedAvg for any K and partial participation.
  sampler2 = CohortSampler(parts, 2, 2, local_epochs=1, seed=1)
  s1, _, _, _ = run_rounds(scaffold(apply_fn, tx), params, data, sampler2, 1)
  s2, _, _, _ = run_rounds(fed_avg(apply_fn, tx), params, data, sampler2, 1)
  assert_trees_close(s1.params, s2.params, atol=1e-7)


def _ref_scaffold(params, data, sampler, rounds, num_clients, rho=0.0):
  """NumPy SCAFFOLD option II (FedGamma when rho > 0), momentum 0, weight decay WD."""
  w, c = ref.to_np(params), ref.zeros(ref.to_np(params))
  c_table = {m: ref.zeros(w) for m in range(num_clients)}
  for t in range(rounds):
    cohort, lr = sampler.build(t), cohort_lr(t)
    ids = np.asarray(cohort.client_ids)
    deltas, dcs = [], []
    for i, m in enumerate(ids):
      wm, opt = w, ref.Momentum(0.0, WD)
      batches = ref.client_batches(data, cohort, i)
      for x, y, mask in batches:
        g = ref.ce_grad(wm, x, y, mask)
        if rho:
          g = ref.ce_grad(ref.add(wm, ref.scale(rho, ref.normalized(g))), x, y, mask)
        wm = opt.step(wm, ref.add(g, ref.sub(c, c_table[m])), lr)
      c_plus = ref.add(ref.sub(c_table[m], c), ref.scale(1.0 / (len(batches) * lr),
                                                          ref.sub(w, wm)))
      dcs.append(ref.sub(c_plus, c_table[m]))
      c_table[m] = c_plus
      deltas.append(ref.sub(w, wm))
    w = ref.sub(w, ref.mean(deltas, cohort.weights))
    c = ref.add(c, ref.scale(1.0 / num_clients, ref.mean(dcs, np.ones(len(dcs)))))
  return w, c, c_table


@pytest.mark.parametrize("rho", [0.0, 0.4])
def test_hand_computed_controls_option_ii(rho):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=3)
  sampler = CohortSampler(parts, 2, 3, local_epochs=1, seed=3)
  params = init_params(3)
  opt = ClientOptimizer(local_sgd(0.0, WD), "sam" if rho else "sgd", rho)
  server, table, _, _ = run_rounds(scaffold(apply_fn, opt), params, data, sampler, 3)
  w, c, c_table = _ref_scaffold(params, data, sampler, 3, 5, rho)
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.control, c, atol=2e-5)
  for m in range(5):
    assert_trees_close(tmap(lambda a: a[m], table), c_table[m], atol=2e-5)
  assert ref.norm(c) > 1e-3


def test_fedgamma_rho0_equals_scaffold_exactly():
  data, parts = make_problem((6, 9, 5, 8, 7), seed=4)
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=4)
  params, tx = init_params(4), local_sgd(0.0, WD)
  a = run_rounds(scaffold(apply_fn, tx), params, data, sampler, 3)
  b = run_rounds(scaffold(apply_fn, ClientOptimizer(tx, "sam", 0.0), name="fedgamma"), params,
                 data, sampler, 3)
  assert_trees_equal(a[0], b[0])
  assert_trees_equal(a[1], b[1])


def test_builders_momentum_and_communication():
  c = config_lib.base_config()
  c.local.momentum = 0.9                 # the FedGMT table's setting must not leak into SCAFFOLD
  c.algorithm.name = "scaffold"
  alg = ALGORITHMS["scaffold"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 2)
  params, batch = init_params(5), eager_batch()
  assert_trees_equal(eager_round(alg, params, batch),
                     eager_round(scaffold(apply_fn, local_sgd(0.0, 1e-5)), params, batch))
  c.algorithm.name = "fedgamma"
  c.algorithm.fedgamma.rho = 0.07
  assert_trees_equal(eager_round(ALGORITHMS["fedgamma"].build(c, apply_fn), params, batch),
                     eager_round(scaffold(apply_fn, ClientOptimizer(local_sgd(0.0, 1e-5), "sam",
                                                                    0.07)), params, batch))
