"""Top Hessian eigenvalues of a model's loss on a dataset (the sharpness metric of FedGloSS,
FedSAM and FedGMT).

Hessian-vector products are `jax.jvp` of `jax.grad` (forward-over-reverse, never the dense
Hessian), one jitted call per batch; the dataset loss is the example-weighted mean of the
masked-mean batch losses, so padding examples and padded batches contribute nothing. Batches
are summed by a host loop: XLA's CPU backend runs convolutions inside `lax.scan` slowly, and
the evaluator does the same.

Two methods:
  'power'   deflated power iteration (FedGloSS Appendix D: the stochastic power iteration of
            pytorch-hessian-eigenthings, top 5, 20 iterations): eigenpairs one after another,
            each on the operator with the previous ones projected out. It finds the eigenvalues
            of largest magnitude; a fixed iteration count may stop before convergence.
  'lanczos' Lanczos with full reorthogonalisation: the `k` algebraically largest Ritz values
            of a `num_steps`-dimensional Krylov space (exact once num_steps >= the dimension).

    evs = top_eigenvalues(loss_fn, params, batches, k=5, method="power", iters=20)
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np

from fedjax_sharp.core import backends, losses

METHODS = ("power", "lanczos")

# What the analyses report their progress to: `progress(done, total)` after each unit of work
# (an iteration, a probe, a grid point); `training.progress.Progress.advance` is one.
Progress = Callable[[int, int], object]


@dataclasses.dataclass
class HessianOperator:
  """`matvec(v) = H v` for flat vectors `v`, H the Hessian of the dataset loss at `params`."""
  matvec: Callable[[jax.Array], jax.Array]
  dim: int
  unravel: Callable[[jax.Array], object]


def _loss_count(batch: dict) -> float:
  """Real examples of a batch, or with per-token labels its tokens counted in the loss."""
  mask, y = np.asarray(batch["mask"]), batch.get("y")
  if y is None or np.ndim(y) <= mask.ndim:
    return float(np.sum(mask))
  return float(losses.loss_count(jnp.asarray(y), jnp.asarray(mask)))


def batch_weights(batches: Sequence[dict], what: str = "the dataset") -> list[float]:
  """Each batch's share of the real (unmasked) examples, or of the loss tokens for per-token
  labels (`core.losses`): the weights of the example- (token-) weighted dataset mean of
  masked-mean batch losses."""
  counts = [_loss_count(b) for b in batches]
  total = sum(counts)
  if total <= 0:
    raise ValueError(f"{what} needs at least one real (unmasked) example")
  return [c / total for c in counts]


def default_chunk(chunk: int | None) -> int:
  """How many weight vectors (grid points, probes) to vmap per call: `chunk` if given, else 1 on
  CPU (XLA's CPU backend turns convolutions vmapped over different weights into slow grouped
  convolutions) and 16 on accelerators."""
  return chunk or (1 if jax.default_backend() == "cpu" else 16)


def _cpu_cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def default_reverse_batch(size: int | None) -> int:
  """How many examples one reverse-mode call (gradient, Hessian-vector product) takes: `size` if
  given, else 50 on a CPU process pinned to one core and 0 (whole batches) otherwise: on one
  core pieces of 50 make lambda_max faster (XLA CPU's filter gradient grows superlinearly with
  the batch), on two idle cores whole batches of 500 are faster (docs/performance.md, "Analysis
  on CPU")."""
  if size is not None:
    return size
  return 50 if jax.default_backend() == "cpu" and _cpu_cores() == 1 else 0


def micro_batches(batches: Sequence[dict], size: int) -> list[dict]:
  """`batches` cut into pieces of `size` examples (every array of a batch along axis 0; a last
  short piece is padded with masked examples), pieces without a real example dropped. The
  example-weighted dataset mean of masked-mean batch losses is unchanged. `size` <= 0 or at
  least the batch size: `batches` as they are."""
  out = []
  for batch in batches:
    n = len(batch["mask"])
    if size <= 0 or size >= n:
      out.append(batch)
      continue
    for start in range(0, n, size):
      piece = {k: v[start:start + size] for k, v in batch.items()}
      pad = size - len(piece["mask"])
      if pad:
        piece = {k: jnp.concatenate([v, jnp.zeros((pad, *v.shape[1:]), v.dtype)])
                 for k, v in piece.items()}
      if bool(jnp.any(piece["mask"])):
        out.append(piece)
  return out


def dataset_hvp(loss_fn: Callable, params, batches: Sequence[dict],
                reverse_batch: int | None = None) -> HessianOperator:
  """The Hessian operator of `sum_b n_b loss_fn(params, batch_b) / sum_b n_b`.

  `loss_fn(params, batch) -> scalar` is a masked mean over `batch['mask']`; `n_b` is the
  number of real examples of batch b. Batches with no real example are skipped. Each product
  runs on pieces of `reverse_batch` examples (`default_reverse_batch`): the same operator.
  """
  flat, unravel = ravel_pytree(params)
  batches = micro_batches(batches, default_reverse_batch(reverse_batch))
  used = [(b, w) for b, w in zip(batches, batch_weights(batches, "the Hessian")) if w > 0]

  @backends.jit
  def batch_hvp(flat_params, v, batch):
    f = lambda p: loss_fn(unravel(p), batch)
    return jax.jvp(jax.grad(f), (flat_params,), (v,))[1]

  def matvec(v):
    out = jnp.zeros_like(flat)
    for batch, w in used:
      out = out + w * batch_hvp(flat, v, batch)
    return out

  return HessianOperator(matvec=matvec, dim=int(flat.size), unravel=unravel)


def _normalize(v):
  return v / (jnp.linalg.norm(v) + 1e-30)


def power_iteration(op: HessianOperator, k: int = 5, iters: int = 20, key=None,
                    tol: float = 0.0, progress: Progress | None = None) -> tuple[np.ndarray, list]:
  """Deflated power iteration: (eigenvalues in the order found, eigenvectors).

  Each eigenpair runs `iters` iterations (fewer if the Rayleigh quotient changes by less than
  `tol` relative), on `H - sum_j lambda_j u_j u_j^T`. `progress(done, total)` is called after
  every iteration (`total` = k x iters; an eigenpair that converges early skips ahead).
  """
  key = jax.random.key(0) if key is None else key
  values, vectors = [], []
  total = min(k, op.dim) * max(iters, 1)

  def deflated(v):
    out = op.matvec(v)
    for lam, u in zip(values, vectors):
      out = out - lam * jnp.vdot(u, v) * u
    return out

  for i in range(min(k, op.dim)):
    v = _normalize(jax.random.normal(jax.random.fold_in(key, i), (op.dim,)))
    lam = 0.0
    for j in range(max(iters, 1)):
      w = deflated(v)
      new = float(jnp.vdot(v, w))
      v = _normalize(w)
      converged = tol > 0 and abs(new - lam) <= tol * (abs(new) + 1e-30)
      lam = new
      if progress is not None:
        progress(i * max(iters, 1) + (max(iters, 1) if converged else j + 1), total)
      if converged:
        break
    values.append(lam)
    vectors.append(v)
  return np.asarray(values), vectors


def lanczos(op: HessianOperator, k: int = 5, num_steps: int = 40, key=None,
            progress: Progress | None = None) -> np.ndarray:
  """The k algebraically largest Ritz values (descending) after `num_steps` Lanczos steps with
  full reorthogonalisation (float64 on the host for the small tridiagonal problem).
  `progress(done, total)` is called after every step."""
  key = jax.random.key(0) if key is None else key
  m = min(num_steps, op.dim)
  basis = [_normalize(jax.random.normal(key, (op.dim,)))]
  alphas, betas = [], []
  for j in range(m):
    w = op.matvec(basis[j])
    if progress is not None:
      progress(j + 1, m)
    alpha = float(jnp.vdot(basis[j], w))
    alphas.append(alpha)
    for q in basis:  # full reorthogonalisation (twice is enough)
      w = w - jnp.vdot(q, w) * q
    for q in basis:
      w = w - jnp.vdot(q, w) * q
    beta = float(jnp.linalg.norm(w))
    if j == m - 1 or beta < 1e-10:
      break
    betas.append(beta)
    basis.append(w / beta)
  t = np.diag(np.asarray(alphas, np.float64))
  for i, b in enumerate(betas[:len(alphas) - 1]):
    t[i, i + 1] = t[i + 1, i] = b
  ritz = np.linalg.eigvalsh(t)[::-1]
  return ritz[:k]


def top_eigenvalues(loss_fn: Callable, params, batches: Sequence[dict], k: int = 5,
                    method: str = "power", iters: int = 20, key=None,
                    reverse_batch: int | None = None,
                    progress: Progress | None = None) -> np.ndarray:
  """Top-k Hessian eigenvalues of the dataset loss (descending). `iters`: power iterations
  per eigenpair, or Lanczos steps; `reverse_batch`: see `dataset_hvp`; `progress(done, total)`
  after every Hessian-vector product over the dataset (`training.progress`'s line takes it)."""
  if method not in METHODS:
    raise ValueError(f"method={method!r} is not one of {list(METHODS)}")
  op = dataset_hvp(loss_fn, params, batches, reverse_batch)
  if method == "power":
    values, _ = power_iteration(op, k, iters, key, progress=progress)
    return np.sort(values)[::-1]
  return lanczos(op, k, max(iters, k + 1), key, progress=progress)


def cross_entropy_batches(x: np.ndarray, y: np.ndarray, batch_size: int,
                          preprocess: Callable | None = None,
                          max_examples: int = 0) -> list[dict]:
  """Fixed-size padded batches of a dataset (the first `max_examples` if > 0), preprocessed
  (normalised, no augmentation) on the host side of jit."""
  if max_examples:
    x, y = x[:max_examples], y[:max_examples]
  n = len(y)
  batch_size = min(batch_size, n)
  batches = []
  for start in range(0, n, batch_size):
    xb, yb = x[start:start + batch_size], y[start:start + batch_size]
    pad = batch_size - len(yb)
    mask = np.arange(batch_size) < len(yb)
    if pad:
      xb = np.concatenate([xb, np.zeros((pad, *xb.shape[1:]), xb.dtype)])
      yb = np.concatenate([yb, np.zeros((pad, *yb.shape[1:]), yb.dtype)])
    xb = jnp.asarray(xb)
    if preprocess is not None:
      xb = preprocess(xb, jax.random.key(0))
    batches.append({"x": xb, "y": jnp.asarray(yb), "mask": jnp.asarray(mask)})
  return batches


def model_top_eigenvalues(apply_fn: Callable, params, x: np.ndarray, y: np.ndarray, *,
                          k: int = 5, method: str = "power", iters: int = 20,
                          batch_size: int = 1000, preprocess: Callable | None = None,
                          max_examples: int = 0, key=None,
                          progress: Progress | None = None) -> np.ndarray:
  """Top-k eigenvalues of the Hessian of the masked mean cross-entropy of `apply_fn` on (x, y)
  (the papers' protocol: the test set, top 5, 20 power iterations)."""
  def loss_fn(p, batch):
    return losses.masked_cross_entropy(apply_fn(p, batch["x"]), batch["y"], batch["mask"])
  batches = cross_entropy_batches(x, y, batch_size, preprocess, max_examples)
  return top_eigenvalues(loss_fn, params, batches, k=k, method=method, iters=iters, key=key,
                         progress=progress)
