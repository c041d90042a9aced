"""Sharpness of a model's loss on a dataset: SAM sharpness and the Hessian trace (Hutchinson).

Every function takes `loss_fn(params, batch) -> scalar`, a masked mean over `batch['mask']`
(e.g. `cross_entropy_loss(apply_fn)`), any params pytree, and a list of fixed-size batches
(`hessian.cross_entropy_batches`: the global training set, the test set or one client's data).
The dataset loss is the example-weighted mean of the batch losses, so padding never counts and
one compile serves any dataset size; batches are summed by a host loop (XLA's CPU backend runs
convolutions inside loops slowly), each batch one jitted call.

    sam_sharpness(loss_fn, params, batches, rho=0.05)        # L(w + rho g/||g||) - L(w)
    hutchinson_trace(loss_fn, params, batches, num_probes=100, key=jax.random.key(0))
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np

from fedjax_sharp.analysis.hessian import (Progress, batch_weights, default_chunk,
                                           default_reverse_batch, micro_batches)
from fedjax_sharp.core import backends, losses, tree


def cross_entropy_loss(apply_fn: Callable) -> Callable:
  """`loss_fn(params, batch)`: the masked mean cross-entropy of `apply_fn`."""
  def loss_fn(params, batch):
    return losses.masked_cross_entropy(apply_fn(params, batch["x"]), batch["y"], batch["mask"])
  return loss_fn


def dataset_loss_and_grad(loss_fn: Callable, params, batches: Sequence[dict],
                          reverse_batch: int | None = None):
  """(loss, gradient pytree) of the example-weighted dataset loss, the gradient taken on pieces
  of `reverse_batch` examples (`hessian.default_reverse_batch`)."""
  batches = micro_batches(batches, default_reverse_batch(reverse_batch))
  value_and_grad = backends.jit(jax.value_and_grad(loss_fn))
  loss, grad = 0.0, tree.zeros_like(params)
  for batch, w in zip(batches, batch_weights(batches)):
    if w == 0:
      continue
    l, g = value_and_grad(params, batch)
    loss, grad = loss + w * l, tree.add(grad, tree.scale(w, g))
  return float(loss), grad


def dataset_loss(loss_fn: Callable, params, batches: Sequence[dict]) -> float:
  value = backends.jit(loss_fn)
  return float(sum(w * value(params, b) for b, w in zip(batches, batch_weights(batches)) if w))


def sam_sharpness(loss_fn: Callable, params, batches: Sequence[dict], rho: float = 0.05,
                  reverse_batch: int | None = None) -> dict:
  """SAM sharpness `L(w + rho g/||g||) - L(w)`, g the full-dataset gradient (one ascent step of
  radius rho, as SAM's inner maximisation). Returns {'sam_sharpness', 'loss', 'grad_norm'}."""
  loss, grad = dataset_loss_and_grad(loss_fn, params, batches, reverse_batch)
  norm = float(tree.global_norm(grad))
  if norm == 0.0:
    return {"sam_sharpness": 0.0, "loss": loss, "grad_norm": 0.0}
  perturbed = tree.add(params, tree.scale(rho / norm, grad))
  return {"sam_sharpness": dataset_loss(loss_fn, perturbed, batches) - loss, "loss": loss,
          "grad_norm": norm}


PROBES = ("rademacher", "basis")


def hutchinson_trace(loss_fn: Callable, params, batches: Sequence[dict], num_probes: int = 100,
                     key=None, chunk: int | None = None, probes: str = "rademacher",
                     progress: Progress | None = None) -> dict:
  """Hessian trace by Hutchinson's estimator: the mean of `v^T H v` over probes v.

  probes: 'rademacher' (`num_probes` random +-1 vectors; unbiased, standard error reported) or
  'basis' (every coordinate vector: the exact trace, d Hessian-vector products; small models
  and tests). Each `v^T H v` is the second derivative of `t -> L(w + t v)` at 0, computed
  forward over forward (two nested `jax.jvp`, no backward pass; exact, not a finite
  difference): on XLA's CPU backend this is faster than `v . (H v)` by forward-over-reverse,
  whose filter gradients dominate (docs/performance.md, "Analysis on CPU"). Probes are vmapped `chunk` at a time (default: 1 on CPU, where
  weight tangents vmapped through convolutions become slow grouped convolutions; 16 elsewhere).
  `progress(done, total)` is called after every chunk of probes.
  Returns {'trace', 'stderr', 'num_probes'}.
  """
  if probes not in PROBES:
    raise ValueError(f"probes={probes!r} is not one of {list(PROBES)}")
  flat, unravel = ravel_pytree(params)
  dim = int(flat.size)
  weights = batch_weights(batches)

  chunk = default_chunk(chunk)

  @backends.jit
  def quad_forms(flat_params, vs, batch):   # v^T H_batch v for a chunk of probes
    f = lambda p: loss_fn(unravel(p), batch)
    slope = lambda p, v: jax.jvp(f, (p,), (v,))[1]                    # v . grad f(p)
    return jax.vmap(lambda v: jax.jvp(lambda p: slope(p, v), (flat_params,), (v,))[1])(vs)

  if probes == "basis":
    num_probes = dim
  elif num_probes < 1:
    raise ValueError(f"num_probes must be >= 1, got {num_probes}")
  key = jax.random.key(0) if key is None else key
  values = []
  for start in range(0, num_probes, chunk):
    size = min(chunk, num_probes - start)
    if probes == "basis":
      vs = jnp.eye(dim, dtype=flat.dtype)[start:start + size]
    else:
      vs = jnp.stack([jax.random.rademacher(jax.random.fold_in(key, i), (dim,), flat.dtype)
                      for i in range(start, start + size)])   # probe i: the same for any chunk
    total = jnp.zeros((size,), flat.dtype)
    for batch, w in zip(batches, weights):
      if w:
        total = total + w * quad_forms(flat, vs, batch)
    values.append(np.asarray(total))
    if progress is not None:
      progress(start + size, num_probes)
  values = np.concatenate(values)
  if probes == "basis":
    return {"trace": float(values.sum()), "stderr": 0.0, "num_probes": dim}
  stderr = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
  return {"trace": float(values.mean()), "stderr": stderr, "num_probes": num_probes}
