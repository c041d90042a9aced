"""MNIST-style IDX files (`data.source='idx'`): the four files of a directory, plain or
gzip-compressed (Debian's dataset-fashion-mnist installs them)."""
from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from fedjax_sharp.data.arrays import dataset_from_splits
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError

# Default directories for `data.source='idx'` when `data.path` is ''.
IDX_DEFAULT_DIRS: dict[str, str] = {
    "fashion_mnist": "/usr/share/datasets/fashion-mnist",
}

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}

# IDX type codes (third byte of the magic number) -> big-endian NumPy dtypes.
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str) -> np.ndarray:
  """Reads one IDX file (optionally gzip-compressed) into a NumPy array.

  Header: two zero bytes, a type code (0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int,
  0x0D float, 0x0E double), the number of dimensions, then each dimension as a
  big-endian int32; the data follows in C order, big-endian.
  """
  opener = gzip.open if path.endswith(".gz") else open
  try:
    with opener(path, "rb") as f:
      data = f.read()
  except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
    raise DataError(f"{path}: cannot be read ({type(e).__name__}: {e}); the file is truncated "
                    f"or corrupted (Debian: apt-get install --reinstall dataset-fashion-mnist)"
                    ) from None
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise DataError(f"{path}: not an IDX file (bad magic number {data[:4]!r})")
  type_code, ndim = data[2], data[3]
  if type_code not in _IDX_DTYPES:
    raise DataError(f"{path}: unknown IDX type code 0x{type_code:02x}")
  header = 4 + 4 * ndim
  if len(data) < header:
    raise DataError(f"{path}: truncated IDX header")
  dims = tuple(int(d) for d in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
  dtype = _IDX_DTYPES[type_code]
  count = int(np.prod(dims, dtype=np.int64))
  if len(data) - header != count * dtype.itemsize:
    raise DataError(f"{path}: header says {dims} of {dtype} ({count * dtype.itemsize} bytes) "
                     f"but the file holds {len(data) - header} bytes of data")
  array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
  return array.astype(dtype.newbyteorder("="), copy=True)


def _find_idx_file(directory: str, stem: str) -> str:
  candidates = [os.path.join(directory, stem + ext) for ext in ("", ".gz")]
  # Some distributions name them train-images.idx3-ubyte.
  candidates += [os.path.join(directory, stem.replace("-idx", ".idx") + ext) for ext in ("", ".gz")]
  for path in candidates:
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f"IDX file {stem}[.gz] not found in {directory!r}")


def load_idx(directory: str, name: str = "fashion_mnist",
             num_classes: int | None = None) -> ArrayDataset:
  """Loads the four MNIST-style IDX files of `directory` (plain or `.gz`).

  Files: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
  t10k-labels-idx1-ubyte. Images become uint8 `[N, 28, 28, 1]`.
  """
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"IDX directory {directory!r} does not exist"
                            + (" (Debian: apt-get install dataset-fashion-mnist)"
                               if name == "fashion_mnist" else ""))
  paths = {key: _find_idx_file(directory, stem) for key, stem in IDX_FILES.items()}
  arrays = {key: read_idx(path) for key, path in paths.items()}
  for split in ("train", "test"):
    if arrays[f"x_{split}"].shape[0] != arrays[f"y_{split}"].shape[0]:
      raise DataError(f"{paths[f'x_{split}']} and {paths[f'y_{split}']}: {split} images and "
                      f"labels differ in count: {arrays[f'x_{split}'].shape[0]} vs "
                      f"{arrays[f'y_{split}'].shape[0]}")
  if num_classes is None and name in ("mnist", "fashion_mnist"):
    num_classes = 10
  return dataset_from_splits(directory, name, arrays, num_classes)


def from_config(data_cfg) -> ArrayDataset:
  """data.path: the directory ('' = `IDX_DEFAULT_DIRS[data.name]`); data.name: the
  dataset's name ('' = fashion_mnist)."""
  name, path = data_cfg.name or "fashion_mnist", data_cfg.path
  if not path:
    if name not in IDX_DEFAULT_DIRS:
      raise ValueError(f"data.path must name the IDX directory for data.name={name!r} "
                       f"(defaults exist only for {sorted(IDX_DEFAULT_DIRS)})")
    path = IDX_DEFAULT_DIRS[name]
  return load_idx(path, name=name)
