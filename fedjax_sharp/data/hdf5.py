"""Federated EMNIST in the TFF / fedjax HDF5 layout (`data.source='federated_h5'`).

`fed_emnist_train.h5`, `fed_emnist_test.h5` (and the digits-only files): groups
`examples/<client_id>/pixels` (float32 `[n, 28, 28]` in [0, 1], background 1.0) and
`examples/<client_id>/label` (int). Pixels become uint8 `round((1 - p) * 255)` with
`invert=True` (the MNIST convention: ink bright, as fedjax's `1 - pixels`); integer pixels are
taken as 0..255. Needs h5py (imported lazily). Natural partition: one client per writer, train
and test aligned (`test_clients`).
"""
from __future__ import annotations

import os
from typing import Annotated

import numpy as np

from fedjax_sharp.data.arrays import known_num_classes
from fedjax_sharp.data.federated_files import assemble_federated
from fedjax_sharp.data.federated_files import file_source_name, pixels_to_uint8, resolve_path
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError
from fedjax_sharp.hyperparameters import Field


def default_test_path(train_path: str) -> str | None:
  """`.../fed_emnist_train.h5` -> `.../fed_emnist_test.h5` (None if no 'train' in the name)."""
  directory, base = os.path.split(train_path)
  i = base.rfind("train")
  if i < 0:
    return None
  return os.path.join(directory, base[:i] + "test" + base[i + len("train"):])


def _read_h5(path: str, pixels_key: str, label_key: str, invert: bool) -> dict:
  try:
    import h5py  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("data.source='federated_h5' needs h5py (pip install h5py); "
                      "data.source='federated_sqlite' reads TFF's SQLite files without it"
                      ) from e
  if not os.path.isfile(path):
    raise DataError(f"HDF5 file {path!r} does not exist")
  out = {}
  try:
    with h5py.File(path, "r") as f:
      if "examples" not in f:
        raise DataError(f"{path}: no 'examples' group (expected examples/<client_id>/"
                        f"{{{pixels_key},{label_key}}}; top-level keys: {sorted(f.keys())[:10]})")
      examples = f["examples"]
      for cid in examples.keys():
        g = examples[cid]
        if pixels_key not in g or label_key not in g:
          raise DataError(f"{path}: client {cid!r} lacks {pixels_key!r} or {label_key!r} "
                          f"(has {sorted(g.keys())})")
        what = f"{path}: examples/{cid}"
        x = pixels_to_uint8(g[pixels_key][()], invert, what)
        y = np.asarray(g[label_key][()]).reshape(-1)
        if not np.issubdtype(y.dtype, np.integer):
          raise DataError(f"{what}/{label_key}: labels must be integers, got {y.dtype}")
        if len(y) != len(x):
          raise DataError(f"{what}: {len(x)} images but {len(y)} labels")
        out[str(cid)] = (x, y.astype(np.int64))
  except DataError:
    raise
  except (OSError, KeyError, ValueError) as e:
    raise DataError(f"{path}: cannot be read as HDF5 ({type(e).__name__}: {e}); the file is "
                    f"truncated, corrupted or not HDF5") from None
  return out


def load_federated_h5(train_path: str, test_path: str | None = None,
                      name: str | None = None, num_classes: int | None = None,
                      invert: bool = True, pixels_key: str = "pixels",
                      label_key: str = "label") -> ArrayDataset:
  """Federated EMNIST from the TFF / fedjax HDF5 files (module docstring).

  `test_path` defaults to `train_path` with its last 'train' replaced by 'test'.
  `num_classes`: if None, `arrays.known_num_classes(name)` for a known `name`, else
  inferred from the labels (1 + the largest). `name` defaults to 'federated_emnist'.
  """
  test_path = test_path or default_test_path(train_path)
  if not test_path:
    raise ValueError(f"data.federated_h5.test_path must name the test HDF5 file ({train_path!r} has no "
                     f"'train' in its name to derive it from)")
  if num_classes is None and name:
    num_classes = known_num_classes(name)
  name = name or "federated_emnist"
  per_split = {"train": _read_h5(train_path, pixels_key, label_key, invert),
               "test": _read_h5(test_path, pixels_key, label_key, invert)}
  return assemble_federated(name, per_split, num_classes, f"{train_path} + {test_path}")



def from_config(data_cfg, *, test_path: Annotated[
    str, Field(doc="the test file ('' = data.path with 'train' -> 'test')")] = ""
                ) -> ArrayDataset:
  """data.path: the training file; data.name ('' = federated_emnist); data.num_classes (0 =
  known by name, else from the labels); data.invert_pixels; its own block:
  data.federated_h5.test_path."""
  name = file_source_name(data_cfg)
  path = resolve_path("federated_h5", name, data_cfg.path, data_cfg.download)
  return load_federated_h5(path, test_path or None, name=name or None,
                           num_classes=data_cfg.num_classes or None,
                           invert=bool(data_cfg.invert_pixels))
