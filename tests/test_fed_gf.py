"""FedGF: hand-computed rounds (local SAM pulled to the perturbed global model by c, the divergence
window, the global perturbation), c = 0 as FedSAM, the window on a synthetic sequence, the
authors' client-optimiser defaults, config checks."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms.fed_gf import divergence_window, fed_gf
from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import config as config_lib, loop, metrics as metrics_lib

import np_reference as ref
from test_training import tiny_config
from algo_helpers import (apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds)

ROUNDS = 3
GF_WD = 4e-4


def _setup(seed):
  data, parts = make_problem((6, 9, 5, 8, 7), seed=seed)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=seed), init_params(seed)


def _reference(data, sampler, params, rho, g_rho, t_d, window_size, rounds=ROUNDS):
  """The spec's formulas (new_algorithms.md Part 2, 1.3-1.4) in float64."""
  w = ref.to_np(params)
  w_tilde, c, flags = w, 0.0, []
  divergences, cs = [], []
  for t in range(rounds):
    cohort, lr = sampler.build(t), cohort_lr(t)
    cs.append(c)
    uploads = []
    for k in range(cohort.batch_idx.shape[0]):
      y, o = w, ref.Momentum(0.0, GF_WD)
      for x, lab, mask in ref.client_batches(data, cohort, k):
        g = ref.ce_grad(y, x, lab, mask)
        w_a = ref.add(y, ref.scale(rho / (ref.norm(g) + 1e-12), g))
        w_p = ref.add(ref.scale(c, w_tilde), ref.scale(1.0 - c, w_a))
        y = o.step(y, ref.ce_grad(w_p, x, lab, mask), lr)
      uploads.append(y)                                      # the code uploads w_m
    divergence = float(np.mean([ref.norm(ref.sub(w, wm)) for wm in uploads]))
    divergences.append(divergence)
    flags = (flags + [1.0 if divergence > t_d else 0.0])[-window_size:]
    c = float(np.mean(flags))
    w_new = ref.mean(uploads, cohort.weights)
    pseudo = ref.sub(w, w_new)
    w_tilde = ref.add(w_new, ref.scale(g_rho / (ref.norm(pseudo) + 1e-12), pseudo))
    w = w_new
  return dict(w=w, w_tilde=w_tilde, c=c, flags=flags, divergences=divergences, cs=cs)


@pytest.mark.parametrize("setting", ["c_one", "c_half"])
def test_hand_computed_rounds(setting):
  data, sampler, params = _setup(1)
  rho, g_rho, window_size = 0.3, 0.5, 2
  # T_D from the c = 0 (FedSAM) trajectory, whose divergences do not depend on it.
  fedsam = _reference(data, sampler, params, rho, g_rho, 1e30, window_size)
  d = fedsam["divergences"]
  if setting == "c_one":    # T_D below round 0's divergence: rounds 1, 2 run with c = 1
    rounds, t_d, expected_cs = 3, 0.8 * d[0], [0.0, 1.0, 1.0]
  else:                     # flags 0, 0, 1: round 3 runs with c = 1/2
    rounds, t_d, expected_cs = 4, 0.5 * (max(d[0], d[1]) + d[2]), [0.0, 0.0, 0.0, 0.5]
  r = _reference(data, sampler, params, rho, g_rho, t_d, window_size, rounds=rounds)
  assert r["cs"] == expected_cs
  assert all(abs(x - t_d) > 1e-2 * t_d for x in r["divergences"])   # no float32 ties
  alg = fed_gf(apply_fn, local_sgd(0.0, GF_WD), rho=rho, g_rho=g_rho, T_D=t_d, W=window_size)
  server, _, _, _ = run_rounds(alg, params, data, sampler, rounds)
  assert_trees_close(server.params, r["w"], atol=2e-6)
  assert_trees_close(server.perturbed, r["w_tilde"], atol=2e-6)
  np.testing.assert_allclose(float(server.c), r["c"])
  np.testing.assert_array_equal(np.asarray(server.window), r["flags"])
  assert int(server.filled) == window_size
  # What metrics.jsonl records each round (the ServerStats hook): D_t and the c it set.
  stats = alg.round_stats(server)
  np.testing.assert_allclose(float(stats["gf_divergence"]), r["divergences"][-1], rtol=1e-5)
  assert float(stats["gf_c"]) == r["c"]
  # The global perturbation has norm g_rho.
  np.testing.assert_allclose(ref.norm(ref.sub(ref.to_np(server.perturbed),
                                              ref.to_np(server.params))), g_rho, rtol=1e-5)
  # c matters on this problem: with c held at 0 (FedSAM) the model differs.
  if setting == "c_one":
    assert ref.norm(ref.sub(r["w"], fedsam["w"])) > 1e-3


def test_window_keeps_the_last_w_flags():
  window, filled = jnp.zeros((3,), jnp.float32), jnp.zeros((), jnp.int32)
  flags, cs = [], []
  for d in (0.5, 0.1, 0.3, 0.05, 0.01, 0.9):
    window, filled, c = divergence_window(window, filled, jnp.float32(d), 0.2)
    flags.append(1.0 if d > 0.2 else 0.0)
    cs.append(float(c))
    np.testing.assert_allclose(float(c), np.mean(flags[-3:]), rtol=1e-6)
  assert cs[:2] == [1.0, 0.5] and cs[-1] == pytest.approx(1 / 3)


def _config(name, **block):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.local.momentum, c.local.weight_decay = 0.0, GF_WD    # FedGF's own defaults, for FedSAM
  if block:
    c.algorithm[name].update(block)
  return c


def test_c_zero_is_fedsam_exactly():
  data, sampler, params = _setup(0)
  gf = ALGORITHMS["fedgf"].build(_config("fedgf", rho=0.2, T_D=1e30), apply_fn)
  sam = build_algorithm(_config("fedsam", rho=0.2), apply_fn)
  a, _, ma, _ = run_rounds(gf, params, data, sampler, ROUNDS)
  b, _, mb, _ = run_rounds(sam, params, data, sampler, ROUNDS)
  assert_trees_equal(a.params, b.params)
  np.testing.assert_array_equal(ma["loss_sum"], mb["loss_sum"])
  assert float(a.c) == 0.0 and not np.asarray(a.window).any()


def _jitted_round(alg, params, batch):
  """`eager_round` compiled as one program (op-by-op dispatch of the SAM passes is slow)."""
  return jax.jit(lambda p, b: eager_round(alg, p, b))(params, batch)


def test_builder_uses_the_authors_client_optimiser_and_communication():
  c = config_lib.base_config()
  c.algorithm.name = "fedgf"
  c.local.momentum, c.local.weight_decay = 0.9, 1e-5     # not used by FedGF
  alg = ALGORITHMS["fedgf"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 1)
  params, batch = init_params(2), eager_batch()
  direct = fed_gf(apply_fn, local_sgd(0.0, GF_WD), rho=0.05, T_D=0.2, W=30)
  assert_trees_equal(_jitted_round(alg, params, batch), _jitted_round(direct, params, batch))
  with pytest.raises(ValueError, match="own SAM gradient"):
    fed_gf(apply_fn, ClientOptimizer(local_sgd(0.0, GF_WD), "sam", 0.1))


@pytest.mark.parametrize("field,value,message", [
    ("W", 0, r"algorithm\.fedgf\.W must be >= 1"),
    ("rho", -0.1, r"algorithm\.fedgf\.rho must be >= 0"),
    ("g_rho", -1.0, r"algorithm\.fedgf\.g_rho must be >= 0"),
    ("T_D", 0.0, r"algorithm\.fedgf\.T_D must be > 0"),
    ("momentum", 1.0, r"algorithm\.fedgf\.momentum must be in \[0, 1\)"),
])
def test_config_errors_name_the_field(field, value, message):
  c = config_lib.base_config()
  c.algorithm.name = "fedgf"
  c.algorithm.fedgf[field] = value
  with pytest.raises(ConfigError, match=message):
    config_lib.validate(c)
  with pytest.raises(ConfigError, match=message):
    ALGORITHMS["fedgf"].build(c, apply_fn)


def test_every_round_records_its_divergence_and_the_c_it_set(tmp_path):
  """The run's wiring of `round_stats` (the ServerStats hook): metrics.jsonl carries D_t and c,
  and each c is the mean of the window of flags 1[D_s > T_D] the recorded D_s give."""
  t_d, window_size = 0.35, 2     # this problem's D_t: ~0.43, 0.40, 0.32, 0.31
  c = tiny_config(rounds=4, **{"algorithm.name": "fedgf", "algorithm.fedgf.T_D": t_d,
                               "algorithm.fedgf.W": window_size})
  loop.run(c, str(tmp_path), progress=False)
  records = metrics_lib.read_jsonl(str(tmp_path / "metrics.jsonl"))
  d = [r["gf_divergence"] for r in records]
  flags = [float(x > t_d) for x in d]
  assert 0.0 in flags and 1.0 in flags      # c moves: 1, 1, 1/2, 0 here
  assert [r["gf_c"] for r in records] == pytest.approx(
      [np.mean(flags[max(0, t + 1 - window_size):t + 1]) for t in range(4)])
