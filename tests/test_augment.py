"""Tests for fedjax_sharp.data.augment."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp import data

B, H, W, C = 16, 8, 7, 3

# Jitted once per static configuration (eager op-by-op dispatch of the vmapped path is slow).
crop_flip = jax.jit(data.random_crop_flip, static_argnames=("pad", "per_example", "flip"))


def images(batch=B, seed=0):
  # Strictly positive and all distinct, so zero padding and offsets are identifiable.
  rng = np.random.default_rng(seed)
  return np.asarray(rng.permutation(batch * H * W * C).reshape(batch, H, W, C) + 1.0,
                    np.float32)


def find_transform(out, img, pad):
  """(dy, dx, flipped) such that out = crop/flip of img padded by pad, or None."""
  padded = np.pad(np.asarray(img), ((pad, pad), (pad, pad), (0, 0)))
  for dy in range(2 * pad + 1):
    for dx in range(2 * pad + 1):
      crop = padded[dy:dy + H, dx:dx + W]
      for flipped, cand in ((False, crop), (True, crop[:, ::-1])):
        if np.array_equal(np.asarray(out), cand):
          return dy, dx, flipped
  return None


def test_normalize_per_channel():
  x = np.array([[[[0, 255, 51]]]], np.uint8)
  out = data.normalize(x, (0.5, 0.5, 0.2), (0.5, 0.25, 0.1))
  assert out.dtype == jnp.float32 and out.shape == (1, 1, 1, 3)
  np.testing.assert_allclose(np.asarray(out).ravel(), [-1.0, 2.0, 0.0], atol=1e-6)
  out = jax.jit(data.normalize)(x, jnp.array([0.5, 0.5, 0.2]), jnp.array([0.5, 0.25, 0.1]))
  np.testing.assert_allclose(np.asarray(out).ravel(), [-1.0, 2.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("per_example", [True, False])
def test_shape_dtype_and_identity_without_pad_or_flip(per_example):
  x = images()
  key = jax.random.key(0)
  out = crop_flip(key, x, pad=4, per_example=per_example)
  assert out.shape == x.shape and out.dtype == x.dtype
  same = crop_flip(key, x, pad=0, per_example=per_example, flip=False)
  np.testing.assert_array_equal(np.asarray(same), np.asarray(x))


def test_flip_is_exact_horizontal_flip_per_example():
  x = images(batch=64)
  out = np.asarray(crop_flip(jax.random.key(1), x, pad=0, flip=True))
  flipped = np.asarray(x)[:, :, ::-1]
  is_flip = np.array([np.array_equal(o, f) for o, f in zip(out, flipped)])
  is_same = np.array([np.array_equal(o, xi) for o, xi in zip(out, np.asarray(x))])
  assert np.all(is_flip ^ is_same)
  assert 10 < is_flip.sum() < 54  # about half


def test_flip_whole_batch_when_not_per_example():
  x = images()
  seen = set()
  for seed in range(16):
    out = np.asarray(crop_flip(jax.random.key(seed), x, pad=0, per_example=False))
    if np.array_equal(out, np.asarray(x)[:, :, ::-1]):
      seen.add("flip")
    elif np.array_equal(out, np.asarray(x)):
      seen.add("same")
    else:
      pytest.fail("one draw per batch must flip all examples or none")
  assert seen == {"flip", "same"}


def test_per_example_crops_are_windows_of_the_padded_image_and_differ():
  x = images(batch=32)
  pad = 2
  out = crop_flip(jax.random.key(3), x, pad=pad, per_example=True)
  found = [find_transform(o, xi, pad) for o, xi in zip(np.asarray(out), x)]
  assert all(f is not None for f in found), "output is not a crop (+flip) of the padded input"
  assert len({f[:2] for f in found}) > 5  # independent offsets
  assert len({f[2] for f in found}) == 2  # independent flips
  assert all(0 <= dy <= 2 * pad and 0 <= dx <= 2 * pad for dy, dx, _ in found)


def test_batch_draw_is_shared_across_examples():
  x = images()
  pad = 2
  for seed in range(3):
    out = crop_flip(jax.random.key(seed), x, pad=pad, per_example=False)
    found = {find_transform(o, xi, pad) for o, xi in zip(np.asarray(out), x)}
    assert len(found) == 1 and None not in found
  # Identical inputs -> identical outputs across the batch.
  same_imgs = np.broadcast_to(x[:1], x.shape)
  out = np.asarray(crop_flip(jax.random.key(9), same_imgs, pad=4, per_example=False))
  assert all(np.array_equal(o, out[0]) for o in out)
  out = np.asarray(crop_flip(jax.random.key(9), same_imgs, pad=4, per_example=True))
  assert not all(np.array_equal(o, out[0]) for o in out)


@pytest.mark.parametrize("per_example", [True, False])
def test_jit_with_traced_key_and_determinism(per_example):
  x = images()
  fn = jax.jit(functools.partial(data.random_crop_flip, pad=4, per_example=per_example))
  key = jax.random.key(5)
  a = fn(key, x)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(fn(key, x)))
  np.testing.assert_array_equal(
      np.asarray(a),
      np.asarray(data.random_crop_flip(key, x, pad=4, per_example=per_example)))
  assert not np.array_equal(np.asarray(a), np.asarray(fn(jax.random.key(6), x)))
  # Legacy uint32 keys work too.
  legacy = fn(jax.random.PRNGKey(5), x)
  assert legacy.shape == x.shape


def test_vmap_over_clients_inside_jit():
  x = np.stack([images(seed=s) for s in range(3)])  # [clients, B, H, W, C]
  keys = jax.random.split(jax.random.key(0), 3)
  out = jax.jit(jax.vmap(data.random_crop_flip))(keys, x)
  assert out.shape == x.shape
  for c in range(3):
    np.testing.assert_array_equal(np.asarray(out[c]),
                                  np.asarray(crop_flip(keys[c], x[c])))
