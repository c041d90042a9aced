"""FedSWA and FedMoSWA: hand-computed rounds (NumPy, float64) of both variants, the reductions to
FedAvg and SCAFFOLD through the registry builders, the in-round schedule, config errors."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms import registry
from fedjax_sharp.algorithms.fed_swa import fed_swa, swa_learning_rate, swa_learning_rate_sum
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (apply_fn, assert_trees_close, cohort_lr, eager_batch, eager_round,
                          init_params, make_problem, override, run_rounds, tmap)

SIZES = (6, 9, 5, 8, 7)   # batch 3: K_m = 2, 3, 2, 3, 3 (ragged schedules)
ROUNDS = 3


@pytest.fixture(scope="module")
def problem():
  data, parts = make_problem(SIZES, seed=7)
  return data, parts, init_params(7)


def _config(name, **overrides):
  c = config_lib.base_config()
  c.algorithm.name = name
  return override(c, **overrides)


def _ref_rounds(params, data, sampler, *, rho, alpha, peak=1.0, gamma=None, controls=False,
                first_round_mean=False, wd=1e-3, clip=10.0, rounds=ROUNDS):
  """The spec's formulas, written out: eta_k = peak eta_t ((1 - k/K) + rho k/K); y <- y -
  eta_k (clip(g) [- c_i + m] + wd y); c_i^+ = c_i - m + (w - y_K) / sum_k eta_k; m <- m +
  gamma mean_cohort(c_i^+ - m); w <- w + alpha sum_i p_i (y_i - w)."""
  w = ref.to_np(params)
  m = ref.zeros(w)
  c_table = {i: ref.zeros(w) for i in range(len(SIZES))}
  clipped = unclipped = 0
  for t in range(rounds):
    cohort, lr = sampler.build(t), cohort_lr(t)
    moves, c_uploads = [], []
    for i, cid in enumerate(np.asarray(cohort.client_ids)):
      batches = ref.client_batches(data, cohort, i)
      num = len(batches)
      y, lr_sum = w, 0.0
      for k, (x, yb, mask) in enumerate(batches):
        g = ref.ce_grad(y, x, yb, mask)
        norm = ref.norm(g)
        if clip and clip / (norm + 1e-6) < 1.0:
          g, clipped = ref.scale(clip / (norm + 1e-6), g), clipped + 1
        else:
          unclipped += 1
        if controls:
          g = ref.add(ref.sub(g, c_table[cid]), m)
        eta = peak * lr * ((1.0 - k / num) + rho * k / num)
        lr_sum += eta
        y = ref.sub(y, ref.scale(eta, ref.add(g, ref.scale(wd, y))))
      moves.append(ref.sub(y, w))
      if controls:
        c_plus = ref.add(ref.sub(c_table[cid], m), ref.scale(1.0 / lr_sum, ref.sub(w, y)))
        c_uploads.append(ref.sub(c_plus, m))
        c_table[cid] = c_plus
    w = ref.add(w, ref.scale(alpha, ref.mean(moves, cohort.weights)))
    if controls:
      g_t = 1.0 if (first_round_mean and t == 0) else gamma
      m = ref.add(m, ref.scale(g_t / len(c_uploads), ref.mean(c_uploads, np.ones(len(c_uploads)))))
  return w, m, c_table, (clipped, unclipped)


# ------------------------------------------------------------------------------------------
# Golden rounds (3 rounds, 3 of 5 clients per round, ragged K, clients coming back).
@pytest.mark.parametrize("variant", ["paper", "code"])
def test_fedswa_rounds_match_the_formulas(problem, variant):
  data, parts, params = problem
  sampler = CohortSampler(parts, 3, 3, local_epochs=1, seed=11)
  over = dict(clip_norm=1.2) | (dict(rho=0.3) if variant == "paper" else {})
  c = _config("fedswa", **{f"algorithm.fedswa.{k}": v for k, v in over.items()},
              algorithm__fedswa__variant=variant)
  server, _, _, _ = run_rounds(ALGORITHMS["fedswa"].build(c, apply_fn), params, data, sampler, ROUNDS)
  # paper: the block's rho, the preset alpha 1.5; code: eta_k = 2 eta_t (1 - k/K), alpha 1.
  hp = dict(rho=0.3, alpha=1.5) if variant == "paper" else dict(rho=0.0, alpha=1.0, peak=2.0)
  w, _, _, (clipped, unclipped) = _ref_rounds(params, data, sampler, clip=1.2, **hp)
  assert clipped and unclipped          # the clipping both bites and lets some steps through
  assert_trees_close(server.params, w, atol=2e-6)


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_fedmoswa_rounds_match_the_formulas(problem, variant):
  data, parts, params = problem
  sampler = CohortSampler(parts, 3, 3, local_epochs=1, seed=11)
  over = dict(clip_norm=1.2) | (dict(rho=0.3, gamma=0.5) if variant == "paper" else {})
  c = _config("fedmoswa", **{f"algorithm.fedmoswa.{k}": v for k, v in over.items()},
              algorithm__fedmoswa__variant=variant)
  server, table, _, _ = run_rounds(ALGORITHMS["fedmoswa"].build(c, apply_fn), params, data, sampler, ROUNDS)
  hp = (dict(rho=0.3, alpha=1.5, gamma=0.5) if variant == "paper" else
        dict(rho=1.0, alpha=1.0, gamma=0.4, first_round_mean=True))
  w, m, c_table, _ = _ref_rounds(params, data, sampler, clip=1.2, controls=True, **hp)
  assert_trees_close(server.params, w, atol=2e-6)
  assert_trees_close(server.control, m, atol=2e-5)
  for i in range(len(SIZES)):
    assert_trees_close(tmap(lambda a: a[i], table), c_table[i], atol=2e-5)
  assert ref.norm(m) > 1e-2 and ref.norm(c_table[int(sampler.build(0).client_ids[0])]) > 1e-2


# ------------------------------------------------------------------------------------------
# Reductions through the registry builders.
def test_fedswa_rho1_alpha1_is_fedavg(problem):
  data, parts, params = problem
  sampler = CohortSampler(parts, 3, 3, local_epochs=1, seed=5)
  swa = _config("fedswa", algorithm__fedswa__rho=1.0, algorithm__fedswa__alpha=1.0,
                algorithm__fedswa__clip_norm=0.0, algorithm__fedswa__momentum=0.5)
  avg = _config("fedavg", local__momentum=0.5, local__weight_decay=1e-3)
  a = run_rounds(ALGORITHMS["fedswa"].build(swa, apply_fn), params, data, sampler, ROUNDS)[0]
  b = run_rounds(registry.build_algorithm(avg, apply_fn), params, data, sampler, ROUNDS)[0]
  assert_trees_close(jax.tree.leaves(a), jax.tree.leaves(b), atol=1e-6, rtol=1e-6)
  assert ref.norm(ref.sub(ref.to_np(a.params), ref.to_np(params))) > 1e-2


def test_fedmoswa_full_participation_gamma1_rho1_alpha1_is_scaffold(problem):
  data, parts, params = problem
  sampler = CohortSampler(parts, len(SIZES), 3, local_epochs=1, seed=5)
  mo = _config("fedmoswa", algorithm__fedmoswa__gamma=1.0,
               algorithm__fedmoswa__rho=1.0, algorithm__fedmoswa__alpha=1.0,
               algorithm__fedmoswa__clip_norm=0.0)
  sc = _config("scaffold", local__weight_decay=1e-3)
  a_server, a_table, _, _ = run_rounds(ALGORITHMS["fedmoswa"].build(mo, apply_fn), params, data, sampler,
                                       ROUNDS)
  b_server, b_table, _, _ = run_rounds(registry.build_algorithm(sc, apply_fn), params, data,
                                       sampler, ROUNDS)
  assert_trees_close(jax.tree.leaves(a_server), jax.tree.leaves(b_server), atol=1e-6, rtol=1e-6)
  assert_trees_close(a_table, b_table, atol=1e-6, rtol=1e-6)
  assert ref.norm(ref.to_np(a_server.control)) > 1e-2   # the controls are really nonzero


def test_fedmoswa_first_round_is_fedswa():
  """Round 0: c_i = m = 0, so the model moves as FedSWA's (same rho, alpha, optimiser)."""
  params, batch = init_params(6), eager_batch()
  mo = eager_round(ALGORITHMS["fedmoswa"].build(_config("fedmoswa", algorithm__fedmoswa__rho=0.4), apply_fn),
                   params, batch)[0]
  swa = eager_round(ALGORITHMS["fedswa"].build(_config("fedswa", algorithm__fedswa__rho=0.4), apply_fn),
                    params, batch)[0]
  assert_trees_close(mo.params, swa.params, atol=0, rtol=0)
  assert ref.norm(ref.to_np(mo.control)) > 1e-3


# ------------------------------------------------------------------------------------------
def test_in_round_schedule_and_its_sum():
  eta = 0.1
  for num, rho, peak in [(1, 0.1, 1.0), (5, 0.1, 1.0), (7, 0.0, 2.0), (4, 1.0, 1.0)]:
    rates = [float(swa_learning_rate(eta, k, num, rho, peak)) for k in range(num)]
    expected = [peak * eta * ((1 - k / num) + rho * k / num) for k in range(num)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    np.testing.assert_allclose(float(swa_learning_rate_sum(eta, num, rho, peak)), sum(expected),
                               rtol=1e-6)
  # The HEAD code's FedSWA: sum_k 2 eta (1 - k/K) = eta (K + 1) (spec A.7.4).
  np.testing.assert_allclose(float(swa_learning_rate_sum(eta, 50, 0.0, 2.0)), eta * 51,
                             rtol=1e-6)


def test_builders_use_their_own_local_optimizer_and_presets():
  c = _config("fedswa", local__momentum=0.9, local__weight_decay=1e-5)
  alg = ALGORITHMS["fedswa"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (1, 1)
  assert alg.hparams == {"rho": pytest.approx(0.1), "alpha": 1.5}
  params, batch = init_params(5), eager_batch()
  own = ClientOptimizer(local_sgd(0.0, 1e-3), clip_norm=10.0)
  assert_trees_close(eager_round(alg, params, batch),
                     eager_round(fed_swa(apply_fn, own), params, batch), atol=0, rtol=0)
  c.algorithm.fedswa.variant = "code"
  assert ALGORITHMS["fedswa"].build(c, apply_fn).hparams == {"rho": 0.0, "alpha": 1.0}
  c = _config("fedmoswa")
  alg = ALGORITHMS["fedmoswa"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 2)
  assert alg.hparams == pytest.approx({"rho": 0.1, "alpha": 1.5, "gamma": 0.2})
  c.algorithm.fedmoswa.variant = "code"
  c.algorithm.fedmoswa.gamma = 0.7
  assert ALGORITHMS["fedmoswa"].build(c, apply_fn).hparams == pytest.approx(
      {"rho": 1.0, "alpha": 1.0, "gamma": 0.7})
  assert registry.SWEEPABLE["fedmoswa"] == ("algorithm.fedmoswa.rho", "algorithm.fedmoswa.alpha",
                                            "algorithm.fedmoswa.gamma")


@pytest.mark.parametrize("name,field,value,message", [
    ("fedswa", "rho", 1.5, r"algorithm\.fedswa\.rho must be in \[0, 1\], got 1\.5"),
    ("fedswa", "alpha", 0.0, r"algorithm\.fedswa\.alpha must be > 0, got 0"),
    ("fedswa", "variant", "head", r"algorithm\.fedswa\.variant='head' is not one of"),
    ("fedswa", "clip_norm", -1.0, r"algorithm\.fedswa\.clip_norm must be >= 0"),
    ("fedmoswa", "gamma", 0.0, r"algorithm\.fedmoswa\.gamma must be in \(0, 1\], got 0"),
    ("fedmoswa", "weight_decay", -1e-3, r"algorithm\.fedmoswa\.weight_decay must be >= 0"),
])
def test_bad_values_name_the_field(name, field, value, message):
  c = _config(name)
  c.algorithm[name][field] = value
  with pytest.raises(ConfigError, match=message) as err:
    registry.build_algorithm(c, apply_fn)
  assert "\n" not in str(err.value)


def test_server_settings_and_sam_are_refused():
  c = _config("fedswa", server__lr=0.5)
  with pytest.raises(ConfigError, match=r"server\.lr=0\.5 has no effect .*algorithm\.fedswa\.alpha"):
    ALGORITHMS["fedswa"].check_server(c)
  c = _config("fedmoswa", local__optimizer="sam")
  with pytest.raises(ValueError, match=r"conflicts with algorithm\.name='fedmoswa'"):
    registry.build_algorithm(c, apply_fn)
  with pytest.raises(ValueError, match="takes no SAM client optimiser"):
    fed_swa(apply_fn, ClientOptimizer(local_sgd(0.0, 0.0), "sam", 0.1))
