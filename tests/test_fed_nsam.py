"""FedNSAM: hand-computed rounds of the four code variants, the rho = gamma = 0 reduction to
FedAvg, round 0 as a FedSAM round, the authors' client-optimiser defaults, config checks."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_nsam import fed_nsam
from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (WD, apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds)

ROUNDS = 3


def _setup(seed):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=seed)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=seed), init_params(seed)


def _clip(g, max_norm):
  """PyTorch's clip_grad_norm_: g * max / (||g|| + 1e-6) when that factor is below 1."""
  n = ref.norm(g)
  factor = max_norm / (n + 1e-6) if max_norm else 1.0
  return (ref.scale(factor, g), 1) if factor < 1.0 else (g, 0)


def _reference(variant, data, sampler, params, rho, gamma, clip_norm):
  """The spec's formulas (new_algorithms.md C.3-C.4) in float64; returns
  (w, m, (#clipped steps, #steps))."""
  w = ref.to_np(params)
  m = ref.zeros(w)
  clipped = steps = 0
  for t in range(ROUNDS):
    cohort, lr = sampler.build(t), cohort_lr(t)
    start = ref.add(w, ref.scale(gamma, m)) if variant in ("n1", "n2") else w
    deltas = []
    for c in range(cohort.batch_idx.shape[0]):
      y, o = start, ref.Momentum(0.0, WD)
      for x, lab, mask in ref.client_batches(data, cohort, c):
        if variant in ("n1", "n2"):
          g = ref.ce_grad(y, x, lab, mask)
          e = ref.scale(rho / (ref.norm(g) + 1e-12), g)
          g_s, k = _clip(ref.ce_grad(ref.add(y, e), x, lab, mask), clip_norm)
          clipped += k
        else:
          point = ref.add(y, ref.scale(gamma, m))
          if variant == "n4":
            point = ref.sub(point, ref.scale(rho / (ref.norm(m) + 1e-7), m))
          g_s = ref.ce_grad(point, x, lab, mask)
        y = o.step(y, g_s, lr)
        steps += 1
      deltas.append(ref.sub(y, start))
    mean_delta = ref.mean(deltas, cohort.weights)
    if variant == "n1":
      m = mean_delta if t == 0 else ref.scale(1.0 + gamma, mean_delta)
    else:
      m = ref.add(ref.scale(gamma, m), mean_delta)
    w = ref.add(w, m)
  return w, m, (clipped, steps)


@pytest.mark.parametrize("variant", ["n2", "n1", "n3", "n4"])
def test_hand_computed_rounds(variant):
  data, sampler, params = _setup(1)
  rho, gamma = 0.3, 0.6
  clip_norm = 1.0 if variant in ("n1", "n2") else None   # None: n3/n4's default, no clipping
  alg = fed_nsam(apply_fn, local_sgd(0.0, WD), rho=rho, gamma=gamma, clip_norm=clip_norm,
                 variant=variant)
  server, _, _, _ = run_rounds(alg, params, data, sampler, ROUNDS)
  w, m, clipped = _reference(variant, data, sampler, params, rho, gamma, clip_norm or 0.0)
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.momentum, m, atol=2e-6)
  if variant in ("n1", "n2"):
    assert 0 < clipped[0] < clipped[1]     # the clip is exercised, and is not always active
  assert ref.norm(m) > 1e-2
  # The variants differ on this problem, so a swapped rule fails.
  other = {"n2": "n1", "n1": "n2", "n3": "n4", "n4": "n3"}[variant]
  w_other, _, _ = _reference(other, data, sampler, params, rho, gamma, clip_norm or 0.0)
  assert ref.norm(ref.sub(w, w_other)) > 1e-3


def _config(name, **block):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.local.momentum, c.local.weight_decay = 0.0, 1e-3   # FedNSAM's own defaults, for the others
  if block:
    c.algorithm[name].update(block)
  return c


def test_rho_and_gamma_zero_is_fedavg_and_round_zero_is_fedsam():
  data, sampler, params = _setup(0)
  nsam = ALGORITHMS["fednsam"].build(_config("fednsam", rho=0.0, gamma=0.0, clip_norm=0.0), apply_fn)
  avg = build_algorithm(_config("fedavg"), apply_fn)
  a, _, ma, _ = run_rounds(nsam, params, data, sampler, ROUNDS)
  b, _, mb, _ = run_rounds(avg, params, data, sampler, ROUNDS)
  assert_trees_equal(a.params, b.params)
  np.testing.assert_array_equal(ma["loss_sum"], mb["loss_sum"])
  # Round 0 (m = 0) is a FedSAM round with the same radius.
  nsam = ALGORITHMS["fednsam"].build(_config("fednsam", rho=0.2, clip_norm=0.0), apply_fn)
  sam = build_algorithm(_config("fedsam", rho=0.2), apply_fn)
  a, _, _, _ = run_rounds(nsam, params, data, sampler, 1)
  b, _, _, _ = run_rounds(sam, params, data, sampler, 1)
  assert_trees_close(a.params, b.params, atol=1e-6)
  assert_trees_close(a.momentum, ref.sub(ref.to_np(a.params), ref.to_np(params)), atol=1e-6)


def _jitted_round(alg, params, batch):
  """`eager_round` compiled as one program (op-by-op dispatch of the SAM passes is slow)."""
  return jax.jit(lambda p, b: eager_round(alg, p, b))(params, batch)


def test_builder_uses_the_authors_client_optimiser_and_communication():
  c = config_lib.base_config()
  c.algorithm.name = "fednsam"
  c.local.momentum, c.local.weight_decay = 0.9, 1e-5     # not used by FedNSAM
  alg = ALGORITHMS["fednsam"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (1, 1)
  params, batch = init_params(2), eager_batch()
  direct = fed_nsam(apply_fn, local_sgd(0.0, 1e-3), rho=0.05, gamma=0.85, clip_norm=10.0)
  assert_trees_equal(_jitted_round(alg, params, batch), _jitted_round(direct, params, batch))
  c.algorithm.fednsam.variant = "n3"
  assert ALGORITHMS["fednsam"].build(c, apply_fn).communication.down == 2


@pytest.mark.parametrize("field,value,message", [
    ("gamma", 1.0, r"algorithm\.fednsam\.gamma must be in \[0, 1\)"),
    ("rho", -0.1, r"algorithm\.fednsam\.rho must be >= 0"),
    ("variant", "n5", r"algorithm\.fednsam\.variant='n5' is not one of"),
    ("weight_decay", -1.0, r"algorithm\.fednsam\.weight_decay must be >= 0"),
])
def test_config_errors_name_the_field(field, value, message):
  c = config_lib.base_config()
  c.algorithm.name = "fednsam"
  c.algorithm.fednsam[field] = value
  with pytest.raises(ConfigError, match=message):
    config_lib.validate(c)
  with pytest.raises(ConfigError, match=message):
    ALGORITHMS["fednsam"].build(c, apply_fn)
