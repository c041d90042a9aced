"""Pytree arithmetic used by the algorithms and the engine, and the run's float dtype.

All norms are one global L2 norm over the whole pytree (never per layer), and every
normalisation is guarded: `v / (||v|| + eps)`, so a zero vector gives a zero step.

Every scalar the library derives from a config value (a hyperparameter, the learning rate, an
aggregation weight, a clip bound) is computed in the run's float dtype (`float_dtype`: float64
under `jax_enable_x64`, float32 otherwise), so that a float64 run is float64 throughout: a
float32 cast of a hyperparameter moves a float64 round by ~1e-8, which an exactness check in
float64 sees. `as_float` makes such a scalar weakly typed, so that it takes the dtype of the
state it meets (a float32 model under x64 stays float32; bfloat16 activations stay bfloat16).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NORM_EPS = 1e-12


def float_dtype() -> jnp.dtype:
  """The run's float dtype: float64 under `jax_enable_x64` (read at call time, so
  `jax.enable_x64` contexts count), float32 otherwise."""
  return jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def as_float(value) -> jax.Array:
  """`value` as a weakly typed float scalar (or stack of scalars) in the run's float dtype: what
  round data (`RoundInfo.learning_rate`, `RoundInfo.hparams`) carries. A JAX array passes with
  its own dtype (a caller's traced value)."""
  if isinstance(value, jax.Array):
    return value
  if np.ndim(value) == 0:
    return jnp.asarray(float(value))   # a Python float: weakly typed, float_dtype()
  return jnp.stack([as_float(v) for v in value])


def add(a, b):
  return jax.tree.map(jnp.add, a, b)


def sub(a, b):
  return jax.tree.map(jnp.subtract, a, b)


def scale(s, a):
  return jax.tree.map(lambda x: s * x, a)


def axpy(alpha, x, y):
  """alpha * x + y."""
  return jax.tree.map(lambda xi, yi: alpha * xi + yi, x, y)


def zeros_like(a):
  return jax.tree.map(jnp.zeros_like, a)


def vdot(a, b) -> jax.Array:
  leaves = jax.tree.leaves(jax.tree.map(lambda x, y: jnp.vdot(x, y), a, b))
  return sum(leaves, jnp.zeros((), float_dtype()))


def global_norm(a) -> jax.Array:
  return jnp.sqrt(vdot(a, a))


def normalize(a, eps: float = NORM_EPS):
  """a / (||a|| + eps): a zero tree maps to a zero tree."""
  return scale(1.0 / (global_norm(a) + eps), a)


def where(cond, a, b):
  """Elementwise `cond ? a : b` for a scalar boolean `cond`."""
  return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def _broadcast_weights(w, x):
  return w.reshape(w.shape + (1,) * (x.ndim - w.ndim))


def weighted_sum(tree_C, weights_C):
  """sum_c weights[c] * tree[c] over the leading client axis.

  Entries with weight 0 contribute exactly 0 even if they hold inf/NaN (padding clients).
  """
  def f(x):
    w = _broadcast_weights(weights_C.astype(x.dtype), x)
    return jnp.sum(jnp.where(w != 0, w * x, jnp.zeros_like(x)), axis=0)
  return jax.tree.map(f, tree_C)


def stack(trees):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def index(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def is_float(x) -> bool:
  """A floating-point (or complex) leaf: what is clipped, noised or checked for non-finite values."""
  return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def num_elements(tree) -> int:
  return int(sum(x.size for x in jax.tree.leaves(tree)))


def num_bytes(tree) -> int:
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))
