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


@pytest.mark.parametrize("per_example", [True, False])
def test_crop_offsets_and_flips_are_uniform_over_the_full_range(per_example):
  """N = 2000 draws of one image (per example: one batch of N copies; per batch: N keys, vmapped)
  are each exactly one of the 2 x (2 pad + 1)^2 crops of the padded image (the slice
  padded[dy:dy + H, dx:dx + W], flipped or not), every offset 0..2 pad is reached on both
  axes, and the counts are uniform: each of the 25 offset pairs Binomial(N, 1/25), each value
  of dy and of dx Binomial(N, 1/5), the flips Binomial(N, 1/2), all within Z = 4.5 standard
  deviations (the keys are fixed).

  Deliberate bugs it catches: offsets drawn from [0, pad] (or [0, 2 pad - 1]) instead of
  [0, 2 pad]; a crop that is not the padded image's slice at its offset (a shifted, or
  unpadded, window); dy and dx one draw; a flip probability other than 1/2 (0.4 is 9
  standard deviations off)."""
  n, pad, z = 2000, 2, 4.5
  img = images(batch=1)
  if per_example:
    out = crop_flip(jax.random.key(11), np.broadcast_to(img, (n, H, W, C)), pad=pad)
  else:
    keys = jax.random.split(jax.random.key(11), n)
    out = jax.jit(jax.vmap(lambda k: data.random_crop_flip(k, img, pad=pad,
                                                           per_example=False)))(keys)[:, 0]
  padded = np.pad(img[0], ((pad, pad), (pad, pad), (0, 0)))
  side = 2 * pad + 1
  outcomes = [(dy, dx, f) for dy in range(side) for dx in range(side) for f in (False, True)]
  crops = np.stack([padded[dy:dy + H, dx:dx + W][:, ::-1 if f else 1]
                    for dy, dx, f in outcomes])
  assert len(np.unique(crops.reshape(len(outcomes), -1), axis=0)) == len(outcomes)
  match = np.all(np.asarray(out)[:, None] == crops[None], axis=(2, 3, 4))   # [n, outcomes]
  assert np.all(match.sum(1) == 1), "a draw is not a crop (+ flip) of the padded image"
  dy, dx, flipped = np.array(outcomes)[match.argmax(1)].T
  np.testing.assert_array_equal(np.unique(dy), np.arange(side))
  np.testing.assert_array_equal(np.unique(dx), np.arange(side))
  for counts, p in ((np.bincount(dy * side + dx, minlength=side * side), 1 / side ** 2),
                    (np.bincount(dy, minlength=side), 1 / side),
                    (np.bincount(dx, minlength=side), 1 / side),
                    (np.bincount(flipped, minlength=2), 1 / 2)):
    assert np.all(np.abs(counts - n * p) <= z * np.sqrt(n * p * (1 - p))), counts


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
