"""Federated minimax: the four known-solution problems of the spec, reductions between the
algorithms, and the simplex projection. Float64 (jax.enable_x64) where the spec asks for 1e-8.

Step sizes are stated in each test (the spec's checked values: quadratic eta_x = 0.02,
eta_y = 0.2; equal step sizes of 0.05 diverge there)."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo
from fedjax_sharp.minimax import algorithms as mm, projections, tasks

VMAP = ExecutionConfig("vmap", local_loop="rolled")


def run(task, alg, rounds, k=1, clients_per_round=None, seed=0, fixed=True, pad_to=None):
  """Full participation (fixed cohort) in one compiled scan, or sampled cohorts per round."""
  m = len(task.client_indices)
  sampler = CohortSampler(task.client_indices, clients_per_round or m, 1, local_steps=k,
                          seed=seed, weighting="uniform")
  engine = RoundEngine(alg, m, VMAP, preprocess=task.preprocess)
  server, table = engine.init(task.init_params(jax.random.key(0)))
  if fixed:
    server, table, _ = engine.repeat_rounds(server, table, task.train_data,
                                            sampler.build(0, pad_to=pad_to), 0, rounds, 0.0,
                                            jax.random.key(1))
    return server
  for t in range(rounds):
    server, table, _ = engine.round(server, table, task.train_data,
                                    sampler.build(t, pad_to=pad_to),
                                    RoundInfo(jnp.int32(t), jnp.float32(0.0), m),
                                    jax.random.key(1))
  return server


def fess(task, lr_x, lr_y, **kw):
  return mm.minimax_algorithm(task, mm.PlayerOptimizers(lr_x, lr_y), rule="fess_gda", **kw)


def sgda(task, lr_x, lr_y, **kw):
  return mm.minimax_algorithm(task, mm.PlayerOptimizers(lr_x, lr_y), rule="local_sgda",
                              name="local_sgda", **kw)


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


# ------------------------------------------------------------------------------------------
# A: quadratic, nonconvex in x, strongly concave in y.
@pytest.mark.parametrize("p_scale", [0.0, 2.0])
def test_quadratic_converges_to_1e8_with_k1_and_with_identical_clients(x64, p_scale):
  hetero = tasks.quadratic(hetero_a=0.3)       # eta_x = 0.02, eta_y = 0.2
  p = p_scale * hetero.extras["lipschitz"]     # p = 2l (NC-SC) or 0
  out = run(hetero, fess(hetero, 0.02, 0.2, p=p, beta=0.1), 6000, k=1)
  assert hetero.evaluate(out.params)["distance_to_saddle"] < 1e-8
  same = tasks.quadratic(hetero_a=0.0)
  out = run(same, fess(same, 0.02, 0.2, p=p, beta=0.1), 2000, k=5)
  metrics = same.evaluate(out.params)
  assert metrics["distance_to_saddle"] < 1e-8 and metrics["grad_phi_norm"] < 1e-7


def test_quadratic_heterogeneous_bias_shrinks_linearly_with_the_step(x64):
  """Heterogeneous A_i, K = 5: a residual bias proportional to eta (eta_y = 10 eta_x)."""
  task = tasks.quadratic(hetero_a=0.3)
  bias = {}
  for eta in (0.02, 0.01):
    bias[eta] = task.evaluate(run(task, sgda(task, eta, 10 * eta), int(100 / eta), k=5).params)[
        "distance_to_saddle"]
  assert 1e-3 < bias[0.02] < 0.05
  assert 1.6 < bias[0.02] / bias[0.01] < 2.4
  # Heterogeneity in b_i, c_i alone cancels: no bias.
  bc_only = tasks.quadratic(hetero_a=0.0, hetero_bc=2.0)
  out = run(bc_only, sgda(bc_only, 0.02, 0.2), 2000, k=5)
  assert bc_only.evaluate(out.params)["distance_to_saddle"] < 1e-8


# B: PL-PL.
def test_pl_game_converges_linearly_with_k1(x64):
  task = tasks.pl_game(hetero=0.5)
  dists = [task.evaluate(run(task, fess(task, 0.02, 0.02), r, k=1).params)["distance_to_saddle"]
           for r in (300, 600, 900)]
  ratios = [dists[1] / dists[0], dists[2] / dists[1]]
  assert dists[2] < 1e-8 and max(ratios) < 0.05
  np.testing.assert_allclose(ratios[0], ratios[1], rtol=0.5)   # a constant linear rate
  # Heterogeneity with K = 5 leaves a residual that shrinks with eta.
  res = [task.evaluate(run(task, fess(task, e, e), int(40 / e), k=5).params)["distance_to_saddle"]
         for e in (0.02, 0.01)]
  assert 0 < res[1] < res[0] / 2.0


# C: simplex.
@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_simplex_game_reaches_the_stated_saddle_points(x64, lam):
  task = tasks.simplex_game(lam=lam, hetero=0.5)
  out = run(task, fess(task, 0.05, 0.05), 4000, k=1)
  metrics = task.evaluate(out.params)
  assert metrics["distance_to_saddle"] < 1e-6, metrics
  np.testing.assert_allclose(np.sum(out.params["y"]), 1.0, atol=1e-12)


# D: bilinear with a box: why the smoothing matters.
def _abs_x_window(task, alg, warmup, window):
  """max |x| over `window` rounds after `warmup` rounds (eta and K as in the algorithm)."""
  engine = RoundEngine(alg, 4, VMAP, preprocess=task.preprocess)
  cohort = CohortSampler(task.client_indices, 4, 1, local_steps=1, seed=0).build(0)
  server, table = engine.init(task.init_params(None))
  server, table, _ = engine.repeat_rounds(server, table, task.train_data, cohort, 0, warmup,
                                          0.0, jax.random.key(0))
  values = []
  for t in range(window):
    server, table, _ = engine.round(server, table, task.train_data, cohort,
                                    RoundInfo(jnp.int32(warmup + t), jnp.float32(0.0), 4),
                                    jax.random.key(0))
    values.append(abs(float(server.params["x"][0])))
  return max(values)


def test_bilinear_local_sgda_cycles_while_fess_gda_converges(x64):
  task = tasks.bilinear()                                           # eta = 0.1, K = 1
  assert _abs_x_window(task, sgda(task, 0.1, 0.1), 2000, 120) > 0.9  # still cycling at |x| ~ 1
  for eta in (0.05, 0.1):                                           # p = 2, beta = 0.1
    assert _abs_x_window(task, fess(task, eta, eta, p=2.0, beta=0.1), 3000, 20) < 1e-3


# ------------------------------------------------------------------------------------------
def test_fess_gda_p0_eta1_equals_local_sgda_exactly():
  task = tasks.quadratic(hetero_a=0.3)
  a = run(task, fess(task, 0.02, 0.2, p=0.0, eta_xg=1.0, eta_yg=1.0), 6, k=3,
          clients_per_round=3, fixed=False)
  b = run(task, sgda(task, 0.02, 0.2), 6, k=3, clients_per_round=3, fixed=False)
  for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
    np.testing.assert_array_equal(u, v)


def test_k1_full_participation_is_centralised_smoothed_gda(x64):
  """K = 1, all clients, eta_g = 1: x' = x - eta_x (grad_x f + p (x - z)),
  y' = y + eta_y grad_y f, z' = z + beta (x' - z), written here with the mean gradient.
  (Unconstrained Y: with a projection the server averages the clients' projected points,
  which is not the projection of the averaged step.)"""
  task = tasks.quadratic(hetero_a=0.3)
  eta_x, eta_y, p, beta = 0.02, 0.2, 1.5, 0.2
  out = run(task, fess(task, eta_x, eta_y, p=p, beta=beta), 25, k=1)
  rows = np.asarray(task.train_data.x)
  def mean_grad(params):
    gs = [task.gradients(params, {"x": jnp.asarray(r[None]), "mask": jnp.ones((1,))},
                         None)[0] for r in rows]
    return jax.tree.map(lambda *g: sum(g) / len(g), *gs)
  params = task.init_params(None)
  z = params["x"]
  for _ in range(25):
    g = mean_grad(params)
    x = params["x"] - eta_x * (g["x"] + p * (params["x"] - z))
    y = params["y"] + eta_y * g["y"]
    z = z + beta * (x - z)
    params = {"x": x, "y": y}
  # rtol 1e-7: optax keeps the injected learning rate in float32 (a wrong rule is off by ~1e-2).
  for k in ("x", "y"):
    np.testing.assert_allclose(out.params[k], params[k], rtol=1e-7, atol=1e-9)
  np.testing.assert_allclose(out.z, z, rtol=1e-7, atol=1e-9)
  assert float(jnp.abs(out.z - task.init_params(None)["x"]).max()) > 1e-2


def test_simplex_projection_against_a_brute_force_check():
  rng = np.random.default_rng(0)
  for n in (1, 2, 3, 7):
    for _ in range(20):
      v = rng.normal(size=n) * rng.choice([0.1, 1.0, 10.0])
      y = np.asarray(projections.simplex(jnp.asarray(v, jnp.float32)), np.float64)
      assert np.all(y >= 0) and abs(y.sum() - 1) < 1e-5
      # Independent solution: bisection on theta for sum(max(v - theta, 0)) = 1.
      lo, hi = v.min() - 1.0, v.max()
      for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.maximum(v - mid, 0).sum() > 1 else (lo, mid)
      np.testing.assert_allclose(y, np.maximum(v - 0.5 * (lo + hi), 0), atol=1e-5)
      # And no random feasible point is closer.
      others = rng.dirichlet(np.ones(n), size=200)
      assert np.min(np.sum((others - v) ** 2, 1)) >= np.sum((y - v) ** 2) - 1e-5
  batch = projections.simplex(jnp.asarray(rng.normal(size=(4, 5)), jnp.float32))
  np.testing.assert_allclose(np.asarray(batch).sum(-1), 1.0, atol=1e-5)
  np.testing.assert_array_equal(projections.box(jnp.asarray([-3.0, 0.5, 2.0])), [-1.0, 0.5, 1.0])
  ball = projections.l2_ball({"a": jnp.asarray([3.0, 4.0])}, 1.0)
  np.testing.assert_allclose(ball["a"], [0.6, 0.8], rtol=1e-6)
  with pytest.raises(ValueError, match="projection"):
    projections.make("cube")


def test_local_sgda_plus_uses_the_snapshot_for_y_and_refreshes_it():
  task = tasks.quadratic(hetero_a=0.0)
  alg = mm.minimax_algorithm(task, mm.PlayerOptimizers(0.02, 0.2), rule="local_sgda",
                             snapshot_every=3, name="local_sgda_plus")
  engine = RoundEngine(alg, 8, VMAP, preprocess=task.preprocess)
  sampler = CohortSampler(task.client_indices, 8, 1, local_steps=2, seed=0)
  server, table = engine.init(task.init_params(None))
  x0 = np.array(server.params["x"])   # copies: the round donates (deletes) the state's arrays
  snaps = []
  for t in range(4):
    server, table, _ = engine.round(server, table, task.train_data, sampler.build(t),
                                    RoundInfo(jnp.int32(t), jnp.float32(0.0), 8),
                                    jax.random.key(0))
    snaps.append(np.array(server.snapshot))
  np.testing.assert_array_equal(snaps[0], x0)            # rounds 0, 1: still x_0
  np.testing.assert_array_equal(snaps[1], x0)
  assert not np.allclose(snaps[2], x0)                   # refreshed after round 2 (every 3)
  np.testing.assert_array_equal(snaps[3], snaps[2])
  # y steps at x~ differ from plain Local SGDA once x moved away from x~.
  plain = run(task, sgda(task, 0.02, 0.2), 4, k=2, fixed=False)
  assert not np.allclose(plain.params["y"], server.params["y"])


def test_fed_norm_sgda_with_equal_steps_is_fess_gda_p0():
  task = tasks.pl_game(hetero=0.3)
  eta, gamma = 0.02, 0.03   # eta_g = gamma * tau_eff / (eta K) = gamma / eta
  norm = mm.minimax_algorithm(task, mm.PlayerOptimizers(eta, eta), rule="fed_norm_sgda",
                              gamma_x=gamma, gamma_y=gamma, name="fed_norm_sgda")
  a = run(task, norm, 30, k=4)
  b = run(task, fess(task, eta, eta, p=0.0, eta_xg=gamma / eta, eta_yg=gamma / eta), 30, k=4)
  for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(mm.MINIMAX_ALGORITHMS))
def test_every_minimax_algorithm_ignores_padding_and_agrees_across_strategies(name):
  from fedjax_sharp.training import config as config_lib
  task = tasks.quadratic(hetero_a=0.3)
  cfg = config_lib.base_config()
  cfg.algorithm.name, cfg.task.name = name, "quadratic"
  cfg.minimax.lr_x, cfg.minimax.lr_y = 0.02, 0.2
  cfg.algorithm[name].update(dict(**({"p": 1.0} if name == "fess_gda" else {}), **(
      {"snapshot_every": 2} if name.endswith("plus") else {})))
  alg = mm.build_minimax_algorithm(cfg, task)
  sampler = CohortSampler(task.client_indices, 3, 1, local_steps=3, seed=0, weighting="uniform")
  results = []
  for execution, pad in ((ExecutionConfig("unrolled", local_loop="unrolled"), None),
                         (VMAP, 5), (ExecutionConfig("host", local_loop="unrolled"), None)):
    engine = RoundEngine(alg, 8, execution, preprocess=task.preprocess)
    server, table = engine.init(task.init_params(None))
    for t in range(3):
      server, table, _ = engine.round(server, table, task.train_data,
                                      sampler.build(t, pad_to=pad),
                                      RoundInfo(jnp.int32(t), jnp.float32(0.0), 8),
                                      jax.random.key(0))
    results.append(server)
  for other in results[1:]:
    for u, v in zip(jax.tree.leaves(results[0]), jax.tree.leaves(other)):
      np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
