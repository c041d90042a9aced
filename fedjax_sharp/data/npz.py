"""NumPy `.npz` files (`data.source='npz'`): arrays x_train, y_train, x_test, y_test and an
optional num_classes."""
from __future__ import annotations

import os

import numpy as np

from fedjax_sharp.data.arrays import dataset_from_splits, known_num_classes
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError


def load_npz(path: str, name: str | None = None, num_classes: int | None = None) -> ArrayDataset:
  """Loads arrays `x_train, y_train, x_test, y_test` (and optional `num_classes`).

  Images are uint8 `[N, H, W]` or `[N, H, W, C]`; a missing channel axis is added.
  `name` defaults to the file name without extension. The number of classes must be declared,
  in the file (`num_classes`) or by the caller (config `data.num_classes`), unless `name` is a
  known dataset: it is never inferred from the labels, so a label out of range is an error
  rather than a silently wider model. Every problem names the file.
  """
  if not os.path.isfile(path):
    raise DataError(f"npz file {path!r} does not exist")
  if name is None:
    name = os.path.splitext(os.path.basename(path))[0]
  try:
    with np.load(path, allow_pickle=False) as npz:
      missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in npz.files]
      if missing:
        raise DataError(f"{path}: missing arrays {missing} (found {sorted(npz.files)})")
      arrays = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
      declared = int(npz["num_classes"]) if "num_classes" in npz.files else None
  except DataError:
    raise
  except Exception as e:  # zipfile.BadZipFile, truncated members, pickled objects, ...
    raise DataError(f"{path}: cannot be read as .npz ({type(e).__name__}: {e}); the file is "
                    f"truncated, corrupted or not an npz") from None
  if declared is not None and num_classes is not None and declared != num_classes:
    raise DataError(f"{path}: declares num_classes={declared} but data.num_classes="
                    f"{num_classes}")
  num_classes = declared if declared is not None else num_classes
  if num_classes is None:
    num_classes = known_num_classes(name)
  if num_classes is None:
    raise DataError(f"{path}: the number of classes is not declared: add an array "
                    f"'num_classes' to the file or set --config.data.num_classes")
  return dataset_from_splits(path, name, arrays, num_classes)


def from_config(data_cfg) -> ArrayDataset:
  """data.path: the file; data.name ('' = the file name); data.num_classes (0 = declared in
  the file or known by name)."""
  if not data_cfg.path:
    raise ValueError("data.path must name the .npz file for data.source='npz'")
  return load_npz(data_cfg.path, name=data_cfg.name or None,
                  num_classes=data_cfg.num_classes or None)
