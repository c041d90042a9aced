"""Euclidean projections onto the feasible set Y of the max player (pure functions).

`simplex` is the sort-based algorithm (Held et al. 1974; Duchi et al. 2008):
`P(v) = max(v - theta, 0)` with `theta = (sum_{i<=rho} u_i - 1)/rho`, `u` sorted descending and
`rho` the largest index with `u_rho > (sum_{i<=rho} u_i - 1)/rho`. It acts on the last axis.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

PROJECTIONS = ("identity", "box", "simplex", "l2_ball")


def identity(y):
  return y


def box(y, low: float = -1.0, high: float = 1.0):
  return jnp.clip(y, low, high)


def simplex(v, radius: float = 1.0):
  """Projection onto {y >= 0, sum y = radius} along the last axis."""
  u = jnp.sort(v, axis=-1)[..., ::-1]
  css = jnp.cumsum(u, axis=-1) - radius
  k = jnp.arange(1, v.shape[-1] + 1, dtype=v.dtype)
  cond = u - css / k > 0
  rho = jnp.sum(cond, axis=-1, keepdims=True)          # >= 1 always (u_1 - (u_1 - r) > 0)
  theta = jnp.take_along_axis(css, rho - 1, axis=-1) / rho.astype(v.dtype)
  return jnp.maximum(v - theta, 0.0)


def l2_ball(y, radius: float = 1.0):
  norm = jnp.sqrt(sum(jnp.vdot(a, a) for a in jax.tree.leaves(y)))
  scale = jnp.minimum(1.0, radius / jnp.maximum(norm, 1e-30))
  return jax.tree.map(lambda a: a * scale, y)


def make(name: str, low: float = -1.0, high: float = 1.0, radius: float = 1.0) -> Callable:
  """The projection called `name` with its parameters (box: low, high; simplex, l2_ball: radius)."""
  if name == "identity":
    return identity
  if name == "box":
    low, high = float(low), float(high)
    return lambda y: jax.tree.map(lambda a: box(a, low, high), y)
  if name == "simplex":
    radius = float(radius)
    return lambda y: jax.tree.map(lambda a: simplex(a, radius), y)
  if name == "l2_ball":
    radius = float(radius)
    return lambda y: l2_ball(y, radius)
  raise ValueError(f"projection={name!r} is not one of {list(PROJECTIONS)}")
