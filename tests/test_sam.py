"""SAM primitives and the client-optimiser layer: closed forms, guards, masks, config errors."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_sharp.core import sam
from fedjax_sharp.algorithms.from_config import client_optimizer_from_config, resolve_momentum
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import DIM, NUM_CLASSES, apply_fn, init_params

A = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
B = np.array([0.3, -1.0, 2.0])


def quadratic(params, batch):
  w = params["w"]
  return 0.5 * w @ jnp.asarray(A, w.dtype) @ w + jnp.asarray(B, w.dtype) @ w, None


def test_sam_gradient_of_a_quadratic_equals_the_closed_form():
  w = np.array([0.5, -1.0, 2.0])
  rho = 0.3
  (value, _), g, g_s = sam.sam_value_and_grad(quadratic, {"w": jnp.asarray(w, jnp.float32)},
                                              None, rho=rho)
  g_true = A @ w + B
  e = rho * g_true / np.linalg.norm(g_true)
  np.testing.assert_allclose(float(value), 0.5 * w @ A @ w + B @ w, rtol=1e-6)
  np.testing.assert_allclose(g["w"], g_true, rtol=1e-6)
  np.testing.assert_allclose(g_s["w"], A @ (w + e) + B, rtol=1e-6)
  # Unnormalised ascent (FedSpeed's paper box): e = rho g.
  _, _, g_u = sam.sam_value_and_grad(quadratic, {"w": jnp.asarray(w, jnp.float32)}, None,
                                     rho=rho, normalize=False)
  np.testing.assert_allclose(g_u["w"], A @ (w + rho * g_true) + B, rtol=1e-6)
  # Explicit direction (FedSMOO / FedLESAM): e = rho d / ||d||.
  d = np.array([1.0, 2.0, -2.0])
  _, _, g_d = sam.sam_value_and_grad(quadratic, {"w": jnp.asarray(w, jnp.float32)}, None,
                                     rho=rho, direction={"w": jnp.asarray(d, jnp.float32)})
  np.testing.assert_allclose(g_d["w"], A @ (w + rho * d / 3.0) + B, rtol=1e-6)


def test_asam_perturbation_closed_form_and_bias_not_scaled():
  params = {"dense": {"kernel": jnp.asarray([0.5, -2.0]), "bias": jnp.asarray([3.0])}}
  grads = {"dense": {"kernel": jnp.asarray([1.0, -1.0]), "bias": jnp.asarray([2.0])}}
  rho, eta = 0.5, 0.1
  e = sam.asam_perturbation(grads, params, rho, eta)
  t = np.array([0.6, 2.1, 1.0])                     # |w| + eta on the kernel, 1 on the bias
  g = np.array([1.0, -1.0, 2.0])
  expected = rho * t ** 2 * g / np.linalg.norm(t * g)
  np.testing.assert_allclose(np.concatenate([e["dense"]["kernel"], e["dense"]["bias"]]),
                             expected, rtol=1e-6)


def test_zero_gradient_gives_zero_perturbation_not_nan():
  zeros = {"w": jnp.zeros((3,)), "b": jnp.zeros((2,))}
  for e in (sam.perturbation(zeros, 0.5), sam.asam_perturbation(zeros, zeros, 0.5, 0.0)):
    for leaf in jax.tree.leaves(e):
      assert np.all(np.asarray(leaf) == 0.0)


def _batch(n=6, masked=0, seed=0):
  rng = np.random.default_rng(seed)
  mask = np.ones(n, bool)
  if masked:
    mask[-masked:] = False
  return {"x": jnp.asarray(rng.normal(size=(n, DIM)), jnp.float32),
          "y": jnp.asarray(rng.integers(0, NUM_CLASSES, n), jnp.int32),
          "mask": jnp.asarray(mask)}


def _ce(params, batch):
  from fedjax_sharp.core import losses
  logits = apply_fn(params, batch["x"])
  return losses.masked_cross_entropy(logits, batch["y"], batch["mask"]), logits


def test_one_sam_step_by_hand_momentum_and_weight_decay_at_unperturbed_weights():
  params, batch = init_params(1), _batch()
  lr, mom, wd, rho = 0.1, 0.9, 1e-2, 0.2
  opt = ClientOptimizer(local_sgd(mom, wd), "sam", rho)
  state = opt.init(params, lr)
  p = params
  for _ in range(2):
    _, g = opt.value_and_grad(_ce, p, batch)
    p, state = opt.apply(p, state, g)
  # NumPy: two SAM steps with the perturbed gradient, wd and momentum at w.
  w, m = ref.to_np(params), ref.Momentum(mom, wd)
  x, y, mask = np.asarray(batch["x"]), np.asarray(batch["y"]), np.asarray(batch["mask"])
  for _ in range(2):
    g = ref.ce_grad(w, x, y, mask)
    g_s = ref.ce_grad(ref.add(w, ref.scale(rho, ref.normalized(g))), x, y, mask)
    w = m.step(w, g_s, lr)
  for k in w:
    np.testing.assert_allclose(np.asarray(p[k]), w[k], rtol=1e-5, atol=1e-6)


def test_masked_examples_behave_as_in_plain_sgd():
  """SAM on a batch with padding == SAM on the real examples alone (same gradients)."""
  params = init_params(2)
  padded = _batch(8, masked=3, seed=4)
  real = {k: v[:5] for k, v in padded.items()}
  for kind in ("sam", "asam"):
    opt = ClientOptimizer(local_sgd(0.0, 0.0), kind, 0.3, eta=0.1)
    (l1, _), g1 = opt.value_and_grad(_ce, params, padded)
    (l2, _), g2 = opt.value_and_grad(_ce, params, real)
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # An all-padding batch: zero gradient, zero perturbation, no NaN.
  empty = dict(padded, mask=jnp.zeros(8, bool))
  _, g = ClientOptimizer(local_sgd(), "sam", 0.3).value_and_grad(_ce, params, empty)
  assert all(np.all(np.asarray(leaf) == 0.0) for leaf in jax.tree.leaves(g))


def test_rho_zero_sam_equals_sgd_bitwise_and_schedules_are_traced():
  params, batch = init_params(3), _batch(seed=5)
  _, g_sgd = ClientOptimizer(local_sgd()).value_and_grad(_ce, params, batch)
  _, g_sam = ClientOptimizer(local_sgd(), "sam", 0.0).value_and_grad(_ce, params, batch)
  for a, b in zip(jax.tree.leaves(g_sgd), jax.tree.leaves(g_sam)):
    np.testing.assert_array_equal(a, b)
  # rho as a schedule of the (traced) round index: one trace for two rounds.
  traces = []
  opt = ClientOptimizer(local_sgd(), "sam", lambda t: 0.01 * t)

  @jax.jit
  def grad_at_round(t):
    traces.append(t)
    return opt.value_and_grad(_ce, params, batch, round_idx=t)[1]
  g0, g5 = grad_at_round(jnp.int32(0)), grad_at_round(jnp.int32(5))
  assert len(traces) == 1
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g_sgd)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  assert not np.allclose(g5["w"], g0["w"])


def test_client_optimizer_from_config_and_errors():
  c = config_lib.base_config()
  assert resolve_momentum(c) == 0.9                                  # FedGMT default
  assert resolve_momentum(c, own_momentum=c.algorithm.scaffold.momentum) == 0.0
  c.local.momentum = 0.5
  assert resolve_momentum(c) == 0.5
  assert resolve_momentum(c, own_momentum=c.algorithm.scaffold.momentum) == 0.0  # block wins
  c.local.optimizer = "asam"
  c.local.rho, c.local.asam_eta = 0.7, 0.2
  opt = client_optimizer_from_config(c)
  assert (opt.gradient, opt.rho, opt.eta) == ("asam", 0.7, 0.2)
  with pytest.raises(ValueError, match=r"local\.optimizer='asam' conflicts with "
                                       r"algorithm\.name='fedsam'"):
    client_optimizer_from_config(c, gradient="sam", rho=0.05, owner="fedsam")
  c.local.optimizer = "adam"
  with pytest.raises(ValueError, match=r"local\.optimizer='adam' is not one of"):
    config_lib.validate(c)
  with pytest.raises(ValueError, match=r"local\.optimizer"):
    ClientOptimizer(local_sgd(), "adam")
  with pytest.raises(ValueError, match="rho must be >= 0"):
    ClientOptimizer(local_sgd(), "sam", -0.1)


def test_gradient_clipping_of_the_client_optimizer():
  """`clip_norm` (the FedSWA family's clip 10): PyTorch's clip_grad_norm_ on the gradient
  value_and_grad returns (SAM's: at the perturbed weights); 0 is no clipping."""
  from fedjax_sharp.core.optimizers import clip_by_global_norm
  g = {"a": jnp.asarray([3.0, 0.0]), "b": jnp.asarray([[4.0]])}      # ||g|| = 5
  np.testing.assert_allclose(clip_by_global_norm(g, 2.0)["a"], [3.0 * 2 / (5 + 1e-6), 0.0],
                             rtol=1e-6)
  np.testing.assert_array_equal(clip_by_global_norm(g, 10.0)["b"], g["b"])   # below: unchanged
  assert clip_by_global_norm(g, 0.0) is g
  params = {"w": jnp.asarray([1.0, -2.0, 0.5])}
  for gradient, rho in (("sgd", 0.0), ("sam", 0.3)):
    plain = ClientOptimizer(local_sgd(0.0, 0.0), gradient, rho)
    clipped = ClientOptimizer(local_sgd(0.0, 0.0), gradient, rho, clip_norm=0.5)
    (_, raw) = plain.value_and_grad(quadratic, params, None)
    (value, out) = clipped.value_and_grad(quadratic, params, None)
    norm = float(jnp.linalg.norm(raw["w"]))
    assert norm > 0.5
    np.testing.assert_allclose(out["w"], raw["w"] * 0.5 / (norm + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(value[0], plain.value_and_grad(quadratic, params, None)[0][0])
  with pytest.raises(ValueError, match="clipping norm must be >= 0"):
    ClientOptimizer(local_sgd(), clip_norm=-1.0)
  c = config_lib.base_config()
  opt = client_optimizer_from_config(c, own_momentum=0.0, own_weight_decay=1e-3, clip_norm=10.0)
  assert opt.clip_norm == 10.0
  stepped, _ = opt.apply(params, opt.init(params, 1.0), {"w": jnp.zeros(3)})   # wd 1e-3, lr 1
  np.testing.assert_allclose(stepped["w"], params["w"] * (1 - 1e-3), rtol=1e-6)
  assert not client_optimizer_from_config(c).clip_norm
