"""DP-FedSAM (`algorithms/dp_fedsam.py`): golden rounds from an independent NumPy reference
(ASAM on every tensor, momentum 0.5, weight decay 5e-4, per-tensor clipping, uniform average),
the client noise stream and scale, the spec's reductions (3.8) through the registry builders,
and config validation."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core import privacy
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training.experiment import apply_privacy

import np_reference as ref
from algo_helpers import (apply_fn, assert_trees_close, cohort_lr, init_params, make_problem,
                          run_rounds)

SIZES = (6, 9, 5, 8)
ROUNDS = 2
KEY = 2


def _config(name="dp_fedsam", **block):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.aggregation = "uniform"
  for k, v in block.items():
    c.algorithm[name][k] = v
  return c


@pytest.fixture(scope="module")
def problem():
  data, parts = make_problem(SIZES, seed=21)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=21, weighting="uniform")


def _reference(data, sampler, rho, clip_norm, adaptive=True, rounds=ROUNDS):
  """DP-FedSAM without noise, from the spec's 3.3-3.4 (float64)."""
  w = ref.to_np(init_params(21))
  for t in range(rounds):
    cohort = sampler.build(t)
    deltas = []
    for c in range(cohort.client_ids.shape[0]):
      p, opt = dict(w), ref.Momentum(0.5, 5e-4)
      for x, y, mask in ref.client_batches(data, cohort, c):
        g = ref.ce_grad(p, x, y, mask)
        if adaptive:   # e = rho w^2 g / (|| |w| g || + 1e-12), every tensor (biases too)
          tg = {k: np.abs(p[k]) * g[k] for k in p}
          e = {k: rho * np.abs(p[k]) * tg[k] / (ref.norm(tg) + 1e-12) for k in p}
        else:
          e = ref.scale(rho, ref.normalized(g))
        p = opt.step(p, ref.ce_grad(ref.add(p, e), x, y, mask), cohort_lr(t))
      delta = ref.sub(w, p)
      deltas.append({k: v * min(1.0, clip_norm / max(np.linalg.norm(v), 1e-300))
                     for k, v in delta.items()})                 # per tensor
    w = ref.sub(w, ref.mean(deltas, [1 / len(deltas)] * len(deltas)))
  return w


def _run(alg, data, sampler, rounds=ROUNDS):
  server, *_ = run_rounds(alg, init_params(21), data, sampler, rounds, key=KEY)
  return alg.eval_params(server)


@pytest.mark.parametrize("adaptive", [True, False])
def test_golden_rounds_without_noise(problem, adaptive):
  data, sampler = problem
  c = 0.02   # small enough that every tensor of every upload is clipped
  alg = build_algorithm(_config(noise_multiplier=0.0, clip_norm=c, rho=0.3,
                                adaptive=adaptive), apply_fn)
  got = _run(alg, data, sampler)
  want = _reference(data, sampler, 0.3, c, adaptive)
  assert_trees_close(got, want, atol=1e-6, rtol=1e-5)
  unclipped = _reference(data, sampler, 0.3, 1e9, adaptive)
  assert ref.norm(ref.sub(unclipped, want)) > 1e-3    # the clipping mattered


def test_client_noise_stream_and_scale(problem):
  """One round: the noised model minus the noiseless one is -(1/m) sum_m z_m with
  z_m ~ sigma C / sqrt(m) N(0, I) drawn from the documented stream (core/privacy.py)."""
  data, sampler = problem
  sigma, c, m = 0.9, 0.05, 3
  noisy = _run(build_algorithm(_config(noise_multiplier=sigma, clip_norm=c), apply_fn), data,
               sampler, rounds=1)
  clean = _run(build_algorithm(_config(noise_multiplier=0.0, clip_norm=c), apply_fn), data,
               sampler, rounds=1)
  round_key = jax.random.fold_in(jax.random.key(KEY), 0)
  _, base = jax.random.split(jax.random.fold_in(round_key, 2 ** 31 - 1))
  expected = {"b": 0.0, "w": 0.0}
  for cid in sampler.sample_clients(0):
    keys = jax.random.split(jax.random.fold_in(base, int(cid)), 2)   # leaves 'b', 'w'
    for k, leaf_key in zip(("b", "w"), keys):
      shape = init_params(21)[k].shape
      expected[k] = expected[k] - np.asarray(jax.random.normal(leaf_key, shape)) * (
          sigma * c / math.sqrt(m)) / m
  for k in ("b", "w"):
    np.testing.assert_allclose(np.asarray(noisy[k]) - np.asarray(clean[k]), expected[k],
                               atol=2e-6)


def test_reductions(problem):
  """Spec 3.8: sigma = 0, C = inf, adaptive = False is FedSAM; and rho = 0 is FedAvg (both with
  the code's momentum 0.5 and weight decay 5e-4); DP-FedSAM is FedSAM + the library's DP
  wrapper with the same mechanism."""
  data, sampler = problem
  inf = float("inf")

  def plain(name, **local):
    c = _config(name)
    c.local.momentum, c.local.weight_decay = 0.5, 5e-4
    if name == "fedsam":
      c.algorithm.fedsam.rho = local.get("rho", 0.5)
    return build_algorithm(c, apply_fn)

  sam = _run(build_algorithm(_config(noise_multiplier=0.0, clip_norm=inf, adaptive=False),
                             apply_fn), data, sampler)
  assert_trees_close(sam, _run(plain("fedsam"), data, sampler), atol=1e-6, rtol=1e-6)
  avg = _run(build_algorithm(_config(noise_multiplier=0.0, clip_norm=inf, rho=0.0), apply_fn),
             data, sampler)
  assert_trees_close(avg, _run(plain("fedavg"), data, sampler), atol=1e-6, rtol=1e-6)
  mechanism = privacy.Mechanism(0.05, 0.7, clip="global", noise="server")
  ours = _run(build_algorithm(_config(noise_multiplier=0.7, clip_norm=0.05, adaptive=False,
                                      clip="global", noise="server"), apply_fn), data, sampler)
  wrapped = _run(privacy.with_dp(plain("fedsam"), mechanism), data, sampler)
  assert_trees_close(ours, wrapped, atol=1e-7, rtol=1e-7)


def test_accounting_counts_the_per_tensor_sensitivity():
  c = _config()
  c.clients_per_round = 3
  alg, setting = apply_privacy(c, build_algorithm(c, apply_fn), init_params(21), 4)
  assert alg.privacy.noise_multiplier == 0.95 and alg.privacy.clip == "per_tensor"
  assert setting.sensitivity == pytest.approx(math.sqrt(2))   # tensors 'w' and 'b'
  c.algorithm.dp_fedsam.clip = "global"
  _, setting = apply_privacy(c, build_algorithm(c, apply_fn), init_params(21), 4)
  assert setting.sensitivity == 1.0


@pytest.mark.parametrize("field,value", [("noise_multiplier", -1.0), ("clip_norm", 0.0),
                                         ("noise", "both"), ("rho", -0.1)])
def test_bad_values_name_the_field(field, value):
  c = _config(**{field: value})
  with pytest.raises(ConfigError) as e:
    config_lib.validate(c)
  assert str(e.value).startswith(f"algorithm.dp_fedsam.{field}"), str(e.value)
  assert "\n" not in str(e.value)
