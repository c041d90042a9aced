"""The embedded default source (`data.source='embedded'`): the UCI handwritten digits shipped
with the package (`assets/digits.csv.gz`), so that a run needs no download."""
from __future__ import annotations

import gzip
import os

import numpy as np

from fedjax_sharp.data.arrays import make_dataset, stratified_subset
from fedjax_sharp.data.types import ArrayDataset

_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
DIGITS_PATH = os.path.join(_ASSETS, "digits.csv.gz")
EMBEDDED_NAMES = ("digits",)   # data.name values (the base config's default)


def _read_digits_csv(path: str = DIGITS_PATH) -> tuple[np.ndarray, np.ndarray]:
  """Parses digits.csv.gz: one image per line, 64 pixel values in 0..16, then the label."""
  with gzip.open(path, "rt") as f:
    table = np.loadtxt(f, delimiter=",", dtype=np.int64)
  if table.ndim != 2 or table.shape[1] != 65:
    raise ValueError(f"{path}: expected 65 columns (64 pixels + label), got shape {table.shape}")
  pixels, labels = table[:, :64], table[:, 64]
  if pixels.min() < 0 or pixels.max() > 16:
    raise ValueError(f"{path}: pixel values must lie in 0..16")
  # v in 0..16 -> round(v * 255 / 16) in exact integer arithmetic, half up (the one tie,
  # v = 8 -> 127.5, gives 128, as Python's round-half-even does too).
  images = ((pixels * 255 + 8) // 16).astype(np.uint8).reshape(-1, 8, 8, 1)
  return images, labels.astype(np.int32)


def load_embedded(name: str = "digits", seed: int = 0, test_fraction: float = 0.2) -> ArrayDataset:
  """The embedded UCI handwritten digits (1797 images, 8x8x1, 10 classes).

  Pixel values v in 0..16 become uint8 round(v * 255 / 16). The train/test split is
  class-stratified and fixed by `seed` (deterministic).
  """
  if name not in EMBEDDED_NAMES:
    raise ValueError(f"data.name={name!r} is not one of {list(EMBEDDED_NAMES)} for "
                     "data.source='embedded'")
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
  images, labels = _read_digits_csv()
  n_test = int(round(len(labels) * test_fraction))
  test_idx = stratified_subset(labels, n_test, seed)
  train_mask = np.ones(len(labels), dtype=bool)
  train_mask[test_idx] = False
  return make_dataset(name, images[train_mask], labels[train_mask], images[test_idx],
                       labels[test_idx], num_classes=10)


def from_config(data_cfg) -> ArrayDataset:
  """data.name: one of `EMBEDDED_NAMES`; the test split is the fixed stratified 20%."""
  return load_embedded(data_cfg.name)
