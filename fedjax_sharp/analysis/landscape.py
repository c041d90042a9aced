"""Loss landscapes: 1D interpolation between two models and 2D surfaces along filter-normalised
random directions (Li et al., "Visualizing the Loss Landscape of Neural Nets", NeurIPS 2018).

    line = interpolate(loss_fn, params_a, params_b, batches, num=21)      # t in [-0.5, 1.5]
    surf = surface(loss_fn, params, batches, jax.random.key(0), num=21, span=1.0)
    save_surface(surf, "landscape")          # landscape.png (contour + 3D) and landscape.npz

Loss (and accuracy, with `acc_fn`) at every grid point: the grid points are vmapped in chunks
of `chunk` inside one jitted call per batch (default 16 on accelerators, 1 on CPU, where
convolutions vmapped over different weights become slow grouped convolutions), batches summed
example-weighted on the host, so padding never counts and one compile serves the whole grid.

Filter normalisation (Li et al. Sec. 4): a Gaussian direction d, then for every filter
d_f <- d_f / ||d_f|| * ||w_f||. A filter is one output unit: the slice `[..., o]` of a kernel
whose last axis is the output (Flax's Dense `[in, out]`, Conv `[h, w, in, out]`); biases and
normalisation scales/offsets (1-D leaves) get a zero direction (the paper's `ignore='biasbn'`).
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp import fileio
from fedjax_sharp.analysis.hessian import Progress, batch_weights, default_chunk
from fedjax_sharp.core import tree


def filter_normalized_direction(key, params):
  """A random direction with the structure of `params`, filter-normalised (module doc)."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  out = []
  for k, w in zip(keys, leaves):
    if w.ndim < 2:
      out.append(jnp.zeros_like(w))
      continue
    d = jax.random.normal(k, w.shape, w.dtype)
    axes = tuple(range(w.ndim - 1))        # every axis but the output one
    d_norm = jnp.sqrt(jnp.sum(d * d, axis=axes, keepdims=True))
    w_norm = jnp.sqrt(jnp.sum(w * w, axis=axes, keepdims=True))
    out.append(d / (d_norm + 1e-10) * w_norm)
  return jax.tree.unflatten(treedef, out)


def _grid_eval(loss_fn, acc_fn, point_params: Callable, coords: np.ndarray,
               batches: Sequence[dict], chunk: int | None, progress: Progress | None = None):
  """Loss (and accuracy) of `point_params(c)` for every row c of `coords`; `progress(done,
  total)` after every chunk of points."""
  chunk = default_chunk(chunk)
  weights = batch_weights(batches, "the landscape")

  # XLA's default CPU options (not backends.jit): these vmapped forward passes ran slower with
  # the convolutions out of YNNPACK (docs/performance.md).
  @jax.jit
  def batch_eval(cs, batch):
    def one(c):
      p = point_params(c)
      return (loss_fn(p, batch), acc_fn(p, batch) if acc_fn is not None else jnp.float32(0))
    return jax.vmap(one)(cs)

  losses, accs = np.zeros(len(coords)), np.zeros(len(coords))
  for start in range(0, len(coords), chunk):
    cs = jnp.asarray(coords[start:start + chunk])
    if len(cs) < chunk:   # keep one compiled shape: pad the last chunk
      cs = jnp.concatenate([cs, jnp.repeat(cs[-1:], chunk - len(cs), axis=0)])
    n = min(chunk, len(coords) - start)
    for batch, w in zip(batches, weights):
      if w:
        l, a = batch_eval(cs, batch)
        losses[start:start + n] += w * np.asarray(l)[:n]
        accs[start:start + n] += w * np.asarray(a)[:n]
    if progress is not None:
      progress(start + n, len(coords))
  return losses, (accs if acc_fn is not None else None)


def interpolate(loss_fn: Callable, params_a, params_b, batches: Sequence[dict], num: int = 21,
                t_min: float = -0.5, t_max: float = 1.5, acc_fn: Callable | None = None,
                chunk: int | None = None, progress: Progress | None = None) -> dict:
  """Loss along `(1 - t) a + t b` for `num` values of t in [t_min, t_max] (t = 0 is a, t = 1
  is b). Returns a dict with 't', 'loss' and, with `acc_fn`, 'accuracy'. `progress(done,
  total)` after every chunk of points."""
  ts = np.linspace(t_min, t_max, num)
  delta = tree.sub(params_b, params_a)
  losses, accs = _grid_eval(loss_fn, acc_fn,
                            lambda c: tree.add(params_a, tree.scale(c[0], delta)),
                            ts[:, None].astype(np.float32), batches, chunk, progress)
  out = {"t": ts, "loss": losses}
  if accs is not None:
    out["accuracy"] = accs
  return out


def surface(loss_fn: Callable, params, batches: Sequence[dict], key, num: int = 21,
            span: float = 1.0, acc_fn: Callable | None = None, directions=None,
            chunk: int | None = None, progress: Progress | None = None) -> dict:
  """Loss on the grid `params + a d1 + b d2`, a, b in [-span, span] (num x num points), d1, d2
  filter-normalised random directions (or `directions=(d1, d2)`). Returns a dict with 'alpha'
  and 'beta' (the axes), 'loss' (shape `(num, num)`, indexed `loss[beta, alpha]`) and, with
  `acc_fn`, 'accuracy'. `progress(done, total)` after every chunk of the num x num points."""
  if directions is None:
    k1, k2 = jax.random.split(key)
    directions = (filter_normalized_direction(k1, params),
                  filter_normalized_direction(k2, params))
  d1, d2 = directions
  axis = np.linspace(-span, span, num)
  aa, bb = np.meshgrid(axis, axis)
  coords = np.stack([aa.ravel(), bb.ravel()], axis=1).astype(np.float32)
  losses, accs = _grid_eval(
      loss_fn, acc_fn,
      lambda c: tree.add(params, tree.add(tree.scale(c[0], d1), tree.scale(c[1], d2))),
      coords, batches, chunk, progress)
  out = {"alpha": axis, "beta": axis, "loss": losses.reshape(num, num)}
  if accs is not None:
    out["accuracy"] = accs.reshape(num, num)
  return out


def _pyplot():
  """matplotlib's pyplot on the Agg backend (imported when a figure is drawn)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _save_arrays(result: dict, prefix: str) -> str:
  """`prefix.npz`: the arrays of `result`, its folder made if needed. Returns the path."""
  os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
  npz = prefix + ".npz"
  fileio.atomic_savez(npz, **{k: np.asarray(v) for k, v in result.items()})
  return npz


def _save_figure(fig, path: str, **kwargs) -> str:
  """Writes `fig` to `path` at 110 dpi (its folder made if needed) and closes it. Returns the
  path."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fileio.atomic_savefig(fig, path, dpi=110, **kwargs)
  _pyplot().close(fig)
  return path


def save_surface(result: dict, prefix: str, title: str = "") -> tuple[str, str]:
  """`prefix.png` (filled contour with a colour bar, and a 3D surface) and `prefix.npz` (the
  raw grid). Returns the two paths."""
  plt = _pyplot()
  npz = _save_arrays(result, prefix)
  a, b = np.meshgrid(result["alpha"], result["beta"])
  loss = result["loss"]
  fig = plt.figure(figsize=(11, 4.6))
  ax = fig.add_subplot(1, 2, 1)
  levels = np.linspace(loss.min(), np.percentile(loss, 95), 25)
  cs = ax.contourf(a, b, np.minimum(loss, levels[-1]), levels=levels, cmap="viridis")
  ax.contour(a, b, loss, levels=levels[::3], colors="white", linewidths=0.5)
  ax.plot([0], [0], "r*", markersize=10, label="model")
  ax.set_xlabel("direction 1 (filter-normalised)")
  ax.set_ylabel("direction 2 (filter-normalised)")
  ax.legend(loc="upper right")
  fig.colorbar(cs, ax=ax, label="loss (clipped at its 95th percentile)", format="%.3g")
  ax3 = fig.add_subplot(1, 2, 2, projection="3d")
  ax3.plot_surface(a, b, np.minimum(loss, levels[-1]), cmap="viridis", linewidth=0)
  ax3.set_xlabel("direction 1")
  ax3.set_ylabel("direction 2")
  ax3.set_zlabel("loss (clipped)")
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  return _save_figure(fig, prefix + ".png"), npz


def save_surfaces(surfaces: dict, path: str, title: str = "") -> tuple[str, np.ndarray]:
  """Several models' surfaces side by side (label -> a `surface` result): one filled contour
  each on a shared colour scale (the lowest loss of all grids to the 95th percentile of all
  grids together) and a last panel with every model's loss along direction 1 through its centre
  (beta = 0), so flatness is compared on one scale. Returns the PNG path and the levels."""
  plt = _pyplot()
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  if not surfaces:
    raise ValueError("save_surfaces needs at least one surface")
  every = np.concatenate([np.ravel(r["loss"]) for r in surfaces.values()])
  levels = np.linspace(every.min(), np.percentile(every, 95), 25)
  panels = len(surfaces) + 1
  cols = min(panels, 4)
  rows = -(-panels // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False,
                           constrained_layout=True)
  axes = axes.ravel()
  cs = None
  for i, (ax, (label, r)) in enumerate(zip(axes, surfaces.items())):
    a, b = np.meshgrid(r["alpha"], r["beta"])
    cs = ax.contourf(a, b, np.minimum(r["loss"], levels[-1]), levels=levels, cmap="viridis")
    ax.plot([0], [0], "r*", markersize=8)
    ax.set_title(label, fontsize=10)
    ax.set_xlabel("direction 1")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(5))
    if i % cols == 0:
      ax.set_ylabel("direction 2")
  line_ax = axes[len(surfaces)]
  for label, r in surfaces.items():
    centre = len(r["beta"]) // 2
    line_ax.plot(r["alpha"], np.asarray(r["loss"])[centre], label=label)
  line_ax.set_xlabel("direction 1 (filter-normalised)")
  line_ax.set_ylabel("loss")
  line_ax.set_title("loss along direction 1 through each model", fontsize=10)
  line_ax.legend(fontsize=8)
  for ax in axes[panels:]:
    ax.axis("off")
  bar = fig.colorbar(cs, ax=list(axes[:len(surfaces)]), location="bottom", format="%.3g",
                     shrink=0.8, aspect=40, label="loss, one scale for all panels (clipped at "
                     "the 95th percentile of all grids)")
  bar.locator = ticker.MaxNLocator(6)
  bar.update_ticks()
  if title:
    fig.suptitle(title)
  return _save_figure(fig, path, bbox_inches="tight"), levels


def save_line(result: dict, prefix: str, labels=("model A", "model B"), title: str = "") -> str:
  """`prefix.png`: loss (and accuracy) along a 1D interpolation, and `prefix.npz`."""
  plt = _pyplot()
  _save_arrays(result, prefix)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  ax.plot(result["t"], result["loss"], color="C0", label="loss")
  ax.set_xlabel(f"t  (0 = {labels[0]}, 1 = {labels[1]})")
  ax.set_ylabel("loss")
  for t in (0.0, 1.0):
    ax.axvline(t, color="grey", linestyle=":", linewidth=0.8)
  if "accuracy" in result:
    ax2 = ax.twinx()
    ax2.plot(result["t"], result["accuracy"], color="C1", label="accuracy")
    ax2.set_ylabel("accuracy")
    lines = ax.get_lines()[:1] + ax2.get_lines()
    ax.legend(lines, [l.get_label() for l in lines], loc="upper center")
  else:
    ax.legend(loc="upper center")
  if title:
    ax.set_title(title)
  fig.tight_layout()
  return _save_figure(fig, prefix + ".png")
