"""Sharpness-aware minimisation primitives: one implementation for every algorithm.

SAM (Foret et al. 2021), on one batch `b` (the same batch and the same augmentation draw for
both passes, because the engine preprocesses the batch once per step):

    g   = grad L(w; b)
    e   = rho * g / (||g|| + 1e-12)                  # one global L2 norm over the pytree
    g_s = grad L(w + e; b)                           # the optimiser steps with g_s at w

ASAM (adaptive SAM, Kwon et al. 2021; FedASAM in Caldarola et al. 2022), elementwise
`T = |w| + eta` on every parameter except biases (`T = 1` there, as in the official ASAM code,
whose scaling covers only parameters named `weight`: kernels, normalisation scales,
embeddings); biases still count in the one global norm:

    e = rho * T^2 g / (||T g|| + 1e-12)

Generalised perturbations (`direction`): `e = rho * d / (||d|| + 1e-12)` for a direction other
than the local gradient: FedSMOO's `g - mu_m - s`, FedLESAM's `w_old - w^t`, FedGloSS's server
ascent along the previous pseudo-gradient. A zero direction gives a zero perturbation, so
`rho = 0` or an all-padding batch (zero gradient) leaves `g_s == g` exactly.

Nothing here is specific to an algorithm: algorithms get their gradients through
`fedjax_sharp.core.optimizers.ClientOptimizer`, which calls these functions.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from fedjax_sharp.core import tree

GRADIENTS = ("sgd", "sam", "asam")


def perturbation(direction, rho, eps: float = tree.NORM_EPS):
  """`rho * d / (||d|| + eps)`: the SAM step of radius `rho` along `direction` (`eps`: the
  guard of the norm; FedWMSAM's code uses 1e-7)."""
  return tree.scale(rho, tree.normalize(direction, eps))


def _is_bias(path) -> bool:
  last = path[-1] if path else None
  return getattr(last, "key", getattr(last, "name", None)) == "bias"


def asam_perturbation(grads, params, rho, eta: float, scale_biases: bool = False):
  """ASAM: `rho * T^2 g / (||T g|| + eps)` with `T = |w| + eta` elementwise (1 on biases, or
  `|w| + eta` there too with `scale_biases`: DP-FedSAM's sam.py L50-60 scales every tensor)."""
  t = jax.tree_util.tree_map_with_path(
      lambda path, w: (jnp.ones_like(w) if _is_bias(path) and not scale_biases
                       else jnp.abs(w) + eta), params)
  tg = jax.tree.map(jnp.multiply, t, grads)
  return tree.scale(rho / (tree.global_norm(tg) + tree.NORM_EPS),
                    jax.tree.map(jnp.multiply, t, tg))


def sam_value_and_grad(loss_fn: Callable[..., tuple[jax.Array, Any]], params, *args, rho,
                       adaptive: bool = False, eta: float = 0.0, direction=None,
                       normalize: bool = True, scale_biases: bool = False):
  """Two passes of SAM/ASAM on the same arguments.

  Args:
    loss_fn: `(params, *args) -> (loss, aux)`.
    params: the unperturbed weights `w`.
    *args: everything else `loss_fn` takes (the batch, a teacher model, ...).
    rho: the radius (a Python float or a traced scalar, e.g. from a schedule).
    adaptive: ASAM scaling `T = |w| + eta` (ignored when `direction` is given).
    eta: ASAM's offset.
    direction: perturb along this pytree instead of the gradient at `w`.
    normalize: False gives the unnormalised extra-gradient ascent `e = rho * g` (FedSpeed's
      paper box); ignored when `adaptive`.
    scale_biases: ASAM's `T = |w| + eta` on biases too (else 1 there).

  Returns:
    `((loss, aux), g, g_s)`: value and aux at `w`, the gradient at `w` and the gradient at
    `w + e`. Metrics are taken at the unperturbed weights.
  """
  (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *args)
  if adaptive and direction is None:
    e = asam_perturbation(grads, params, rho, eta, scale_biases)
  else:
    d = grads if direction is None else direction
    e = perturbation(d, rho) if normalize else tree.scale(rho, d)
  perturbed_grads = jax.grad(lambda p: loss_fn(p, *args)[0])(tree.add(params, e))
  return (loss, aux), grads, perturbed_grads


def grad_at(loss_fn: Callable[..., tuple[jax.Array, Any]], params, e, *args):
  """One pass at `w + e` (a perturbation known in advance, e.g. FedLESAM's): `((loss, aux), g)`.

  Value and aux are those of the perturbed point; no extra backward pass is spent.
  """
  return jax.value_and_grad(loss_fn, has_aux=True)(tree.add(params, e), *args)
