"""Hessian eigenvalues: a quadratic with a known spectrum, a tiny softmax model against the
dense `jax.hessian`, masks and batch weighting."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np
import pytest

from fedjax_sharp.analysis import hessian
from fedjax_sharp.core import losses

from algo_helpers import DIM, NUM_CLASSES, apply_fn, init_params, np_normal

SPECTRUM = np.array([9.0, 6.0, 4.0, 2.5, 1.5, 0.8, 0.5, 0.3, 0.2, 0.1, 0.05, 0.01])


def _quadratic():
  rng = np.random.default_rng(0)
  q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
  a = jnp.asarray(q @ np.diag(SPECTRUM) @ q.T, jnp.float32)
  loss = lambda p, batch: 0.5 * (p["x"] @ a @ p["x"]) + jnp.sum(jnp.sin(p["b"]))
  params = {"x": jnp.ones((12,)), "b": jnp.zeros((0,))}
  return loss, params, [{"mask": jnp.ones((1,))}]


@pytest.mark.parametrize("method,iters", [("power", 400), ("lanczos", 12)])
def test_quadratic_with_known_spectrum(method, iters):
  loss, params, batches = _quadratic()
  evs = hessian.top_eigenvalues(loss, params, batches, k=5, method=method, iters=iters)
  np.testing.assert_allclose(evs, SPECTRUM[:5], atol=1e-4, rtol=1e-4)


def _batches(n=23, batch_size=8, seed=1):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, DIM)).astype(np.float32)
  y = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
  return x, y, hessian.cross_entropy_batches(x, y, batch_size)


def test_tiny_softmax_model_against_dense_hessian():
  params = init_params(3)
  x, y, batches = _batches()
  flat, unravel = ravel_pytree(params)
  full = lambda f: losses.masked_cross_entropy(apply_fn(unravel(f), jnp.asarray(x)),
                                               jnp.asarray(y), jnp.ones(len(y)))
  dense = np.linalg.eigvalsh(np.asarray(jax.hessian(full)(flat), np.float64))[::-1]
  lan = hessian.model_top_eigenvalues(apply_fn, params, x, y, k=5, method="lanczos", iters=18,
                                      batch_size=8)
  np.testing.assert_allclose(lan, dense[:5], atol=1e-4, rtol=1e-4)
  power = hessian.model_top_eigenvalues(apply_fn, params, x, y, k=2, method="power", iters=3000,
                                        batch_size=8)
  np.testing.assert_allclose(power, dense[:2], atol=1e-4, rtol=1e-4)
  # Batches are weighted by their real examples: one batch of everything gives the same.
  one = hessian.model_top_eigenvalues(apply_fn, params, x, y, k=3, method="lanczos", iters=18,
                                      batch_size=100)
  np.testing.assert_allclose(one, lan[:3], atol=1e-5, rtol=1e-5)


def test_hvp_ignores_padding_and_errors():
  params = init_params(4)
  x, y, batches = _batches(16, 8)
  def loss_fn(p, b):
    return losses.masked_cross_entropy(apply_fn(p, b["x"]), b["y"], b["mask"])
  op = hessian.dataset_hvp(loss_fn, params, batches)
  # The same data with garbage in padded slots and an all-padding batch.
  junk = [dict(b, x=jnp.concatenate([b["x"], 100 * jnp.ones((4, DIM))]),
               y=jnp.concatenate([b["y"], jnp.zeros((4,), jnp.int32)]),
               mask=jnp.concatenate([b["mask"], jnp.zeros((4,), bool)])) for b in batches]
  junk.append(dict(junk[0], mask=jnp.zeros((12,), bool)))
  op2 = hessian.dataset_hvp(loss_fn, params, junk)
  v = np_normal((op.dim,), seed=1)
  np.testing.assert_allclose(op.matvec(v), op2.matvec(v), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="method"):
    hessian.top_eigenvalues(loss_fn, params, batches, method="arnoldi")
  with pytest.raises(ValueError, match="real"):
    hessian.dataset_hvp(loss_fn, params, [dict(batches[0], mask=jnp.zeros((8,), bool))])


def test_reverse_mode_pieces_give_the_same_operator_and_gradient():
  """Hessian-vector products and the dataset gradient taken on pieces of 3 examples (a short,
  padded last piece; an all-padding piece dropped) equal the dense Hessian / gradient of the
  mean loss over the 13 real examples."""
  from fedjax_sharp.analysis import sharpness
  params = init_params(4)
  x, y, batches = _batches(13, 8)
  def loss_fn(p, b):
    return losses.masked_cross_entropy(apply_fn(p, b["x"]), b["y"], b["mask"])
  pieces = hessian.micro_batches(batches, 3)
  assert [int(jnp.sum(p["mask"])) for p in pieces] == [3, 3, 2, 3, 2]
  assert all(p["x"].shape == (3, DIM) for p in pieces)
  assert all(a is b for a, b in zip(hessian.micro_batches(batches, 0), batches))
  flat, unravel = ravel_pytree(params)
  full = {"x": jnp.asarray(x), "y": jnp.asarray(y), "mask": jnp.ones((13,), bool)}
  dense = jax.hessian(lambda f: loss_fn(unravel(f), full))(flat)
  v = np_normal((flat.size,), seed=2)
  for size in (3, 0):
    op = hessian.dataset_hvp(loss_fn, params, batches, reverse_batch=size)
    np.testing.assert_allclose(op.matvec(v), dense @ v, rtol=1e-4, atol=1e-5)
    loss, grad = sharpness.dataset_loss_and_grad(loss_fn, params, batches, reverse_batch=size)
    want_loss, want_grad = jax.value_and_grad(lambda f: loss_fn(unravel(f), full))(flat)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(ravel_pytree(grad)[0], want_grad, rtol=1e-4, atol=1e-6)
