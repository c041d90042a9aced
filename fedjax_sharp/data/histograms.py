"""Per-client label histograms of a partition and their readable table (`experiments/run.py`
prints it)."""
from __future__ import annotations

import numpy as np


def label_histograms(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
  """int64 `[num_clients, num_classes]` label counts per client."""
  labels = np.asarray(labels).reshape(-1)
  if not parts:
    return np.zeros((0, num_classes), dtype=np.int64)
  return np.stack([np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=num_classes)
                   [:num_classes] for p in parts]).astype(np.int64)


def _entropy_bits(hist: np.ndarray) -> np.ndarray:
  p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
  with np.errstate(divide="ignore", invalid="ignore"):
    return -np.where(p > 0, p * np.log2(p), 0.0).sum(axis=1)


_WIDE_SHOWN = 12


def format_histograms(hist: np.ndarray, max_rows: int = 20) -> str:
  """A readable per-client table: client id, size, classes held, per-class counts.

  With more than 20 classes, counts are listed as `class:count` for the (at most 12
  largest) classes a client holds. At most `max_rows` clients are shown.
  """
  hist = np.asarray(hist)
  num_clients, num_classes = hist.shape
  sizes = hist.sum(axis=1)
  held = (hist > 0).sum(axis=1)
  lines = []
  if num_clients:
    lines.append(
        f"{num_clients} clients, {int(sizes.sum())} examples, {num_classes} classes; "
        f"size min/mean/max {int(sizes.min())}/{sizes.mean():.1f}/{int(sizes.max())}; "
        f"classes per client min/mean/max {int(held.min())}/{held.mean():.2f}/{int(held.max())}; "
        f"mean label entropy {_entropy_bits(hist).mean():.3f} bits")
  else:
    lines.append("0 clients")
  wide = num_classes > 20
  cw = max(3, len(str(int(hist.max(initial=0)))))
  head = f"{'client':>6} {'size':>7} {'#cls':>4} | "
  head += "counts (class:count)" if wide else " ".join(f"{c:>{cw}}" for c in range(num_classes))
  lines.append(head)
  lines.append("-" * len(head))
  for m in range(min(num_clients, max_rows)):
    row = f"{m:>6} {int(sizes[m]):>7} {int(held[m]):>4} | "
    if wide:
      order = [c for c in np.argsort(-hist[m], kind="stable") if hist[m, c] > 0]
      row += " ".join(f"{c}:{hist[m, c]}" for c in order[:_WIDE_SHOWN])
      if len(order) > _WIDE_SHOWN:
        row += f" (+{len(order) - _WIDE_SHOWN} classes)"
    else:
      row += " ".join(f"{int(v):>{cw}}" for v in hist[m])
    lines.append(row)
  if num_clients > max_rows:
    lines.append(f"... ({num_clients - max_rows} more clients)")
  return "\n".join(lines)
