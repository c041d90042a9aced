"""Data sources: an embedded default (digits), IDX files, `.npz` files, TFDS, and local files.

Image loaders return an `ArrayDataset` (uint8 `[N, H, W, C]` images, int32 labels); text
loaders a `TokenDataset` (int32 `[N, L]` token ids + the vocabulary). `load_dataset(data_cfg)`
dispatches on `data.source`:

  'embedded'          the UCI digits shipped with the package.
  'idx'               MNIST-style IDX files (`load_idx`).
  'npz'               x_train / y_train / x_test / y_test arrays (`load_npz`).
  'tfds'              a prepared TFDS dataset (`load_tfds`, `load_tfds_text`): cifar10,
                      cifar100 (fine labels), mnist, fashion_mnist, emnist[/byclass, bymerge,
                      balanced, letters, digits, mnist] (turned upright: TFDS stores EMNIST
                      transposed), ag_news_subset (text).
  'imagefolder'       `<path>/{train,test[,valid]}/<class>/*.png` (CINIC-10 layout).
  'landmarks_csv'     Landmarks-User-160k split CSVs + a local image directory; natural
                      partition by user.
  'federated_h5'      TFF/fedjax Federated EMNIST HDF5 (`examples/<client>/{pixels,label}`);
                      natural partition by writer.
  'federated_sqlite'  TFF's SQLite client data (`examples(split_name, client_id,
                      serialized_example_proto)`); natural partition by client. With
                      data.name 'shakespeare' / 'stackoverflow': next-token sequences
                      (`natural.load_tff_shakespeare` / `load_tff_stackoverflow`).
  'leaf'              LEAF's JSON files (femnist, shakespeare; `natural.load_leaf`).

With an empty data.path and data.download=True, the published files of federated EMNIST,
Shakespeare, Stack Overflow (TFF's SQLite) and CINIC-10 are fetched once (`data.download`).

The file layouts live in `federated_files` and `natural`. Nothing here imports TensorFlow or
tensorflow_datasets at module import time (TFDS, pillow and h5py are imported lazily).
"""
from __future__ import annotations

import gzip
import logging
import os
import zlib
from typing import Any, Sequence

import numpy as np

from fedjax_sharp.data import federated_files
from fedjax_sharp.data import natural
from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data.arrays import (as_images, as_labels, hold_out_validation, make_dataset,
                                      stratified_subset, subsample)
from fedjax_sharp.data.arrays import DATASET_STATS  # pylint: disable=unused-import  # sources.DATASET_STATS
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.errors import DataError

_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
DIGITS_PATH = os.path.join(_ASSETS, "digits.csv.gz")

# Datasets `load_dataset(data.source='tfds')` accepts: name -> (image key, label key,
# train split, test split). Anything else can still be loaded with `load_tfds` directly.
TFDS_DATASETS: dict[str, tuple[str, str, str, str]] = {
    "cifar10": ("image", "label", "train", "test"),
    "cifar100": ("image", "label", "train", "test"),  # 'label' = the 100 fine labels.
    "fashion_mnist": ("image", "label", "train", "test"),
    "mnist": ("image", "label", "train", "test"),
    # EMNIST: 'emnist' is TFDS's default config, byclass. Images are turned upright.
    "emnist": ("image", "label", "train", "test"),
    "emnist/balanced": ("image", "label", "train", "test"),
    "emnist/byclass": ("image", "label", "train", "test"),
    "emnist/bymerge": ("image", "label", "train", "test"),
    "emnist/digits": ("image", "label", "train", "test"),
    "emnist/letters": ("image", "label", "train", "test"),  # labels 1..26 (TFDS: 37 classes)
    "emnist/mnist": ("image", "label", "train", "test"),
}
_CLASSIC_TFDS = ("cifar10", "cifar100", "fashion_mnist", "mnist")

# TFDS datasets stored transposed (EMNIST: "inverted horizontally and rotated 90 degrees
# anti-clockwise", i.e. x_stored[i, j] = x_upright[j, i]): `load_tfds` transposes them back.
def _tfds_transposed(name: str) -> bool:
  return name.split("/")[0].split(":")[0] == "emnist"


# Text datasets `load_dataset(data.source='tfds')` accepts: name -> (text keys joined with a
# space, label key, train split, test split).
TFDS_TEXT_DATASETS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "ag_news_subset": (("title", "description"), "label", "train", "test"),
}

# Default directories for `data.source='idx'` when `data.path` is ''.
IDX_DEFAULT_DIRS: dict[str, str] = {
    "fashion_mnist": "/usr/share/datasets/fashion-mnist",
}

SOURCES = ("embedded", "idx", "npz", "tfds")
FILE_SOURCES = federated_files.FILE_SOURCES
ALL_SOURCES = SOURCES + FILE_SOURCES
KNOWN_NUM_CLASSES = {"cifar10": 10, "cifar100": 100, "mnist": 10, "fashion_mnist": 10,
                     "digits": 10, "emnist": 62}
EMBEDDED_NAMES = federated_files.EMBEDDED_NAMES

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


# --------------------------------------------------------------------------------------
# Embedded digits.
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# IDX files (MNIST / Fashion-MNIST format).
# --------------------------------------------------------------------------------------
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
  try:
    return make_dataset(name, arrays["x_train"], arrays["y_train"], arrays["x_test"],
                         arrays["y_test"], num_classes=num_classes)
  except ValueError as e:
    raise DataError(f"{directory}: {e}") from None


# --------------------------------------------------------------------------------------
# .npz files.
# --------------------------------------------------------------------------------------
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
    num_classes = KNOWN_NUM_CLASSES.get(name)
  if num_classes is None:
    raise DataError(f"{path}: the number of classes is not declared: add an array "
                    f"'num_classes' to the file or set --config.data.num_classes")
  try:
    return make_dataset(name, arrays["x_train"], arrays["y_train"], arrays["x_test"],
                         arrays["y_test"], num_classes=num_classes)
  except ValueError as e:
    raise DataError(f"{path}: {e}") from None


# --------------------------------------------------------------------------------------
# TFDS.
# --------------------------------------------------------------------------------------
class DatasetNotPreparedError(DataError, RuntimeError):
  """A TFDS dataset is not prepared in the data directory (and cannot be downloaded). The
  message is one line (the CLI prints it as is); `details` holds the readers' own errors."""

  def __init__(self, message: str, details: str = ""):
    super().__init__(message)
    self.details = details


class _ExampleFormatError(ValueError):
  """The examples were read but do not have the expected keys (not a preparation issue)."""


def _build_command(name: str, data_dir) -> str:
  where = f" --data_dir={data_dir}" if data_dir else ""
  return f"tfds build {name} --file_format=array_record{where}"


def _prepare_hint(name: str, data_dir) -> str:
  return (f"prepare it once on a machine with network access: `pip install "
          f"'fedjax_sharp[prepare]' && {_build_command(name, data_dir)}` "
          f"(array_record is read without TensorFlow), then pass data.path=<data_dir> (or set "
          f"TFDS_DATA_DIR); offline alternatives: data.source='idx' (e.g. Debian's "
          f"dataset-fashion-mnist), data.source='npz' or data.source='embedded' "
          f"(--verbose shows the readers' errors)")


# Where TFDS's builders download each dataset from (host, port): probed before preparing, so
# that a machine without network fails in seconds with one line instead of after TFDS's ten
# retries with backoff (~3.5 minutes). Unlisted names probe TFDS's GCS mirror.
DOWNLOAD_HOSTS: dict[str, tuple[str, int]] = {
    "cifar10": ("www.cs.toronto.edu", 443),
    "cifar100": ("www.cs.toronto.edu", 443),
    "mnist": ("storage.googleapis.com", 443),
    "fashion_mnist": ("fashion-mnist.s3-website.eu-central-1.amazonaws.com", 80),
    "emnist": ("biometrics.nist.gov", 443),
    "ag_news_subset": ("drive.google.com", 443),
}
PROBE_TIMEOUT_S = 10.0


def _download_host(name: str) -> tuple[str, int]:
  return DOWNLOAD_HOSTS.get(name, DOWNLOAD_HOSTS.get(name.split("/")[0],
                                                     ("storage.googleapis.com", 443)))


def _tensorflow_available() -> bool:
  import importlib.util  # pylint: disable=g-import-not-at-top
  return importlib.util.find_spec("tensorflow") is not None


def _probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
  """None if a TCP connection to host:port opens within `timeout`, else the reason."""
  import socket  # pylint: disable=g-import-not-at-top
  try:
    with socket.create_connection((host, port), timeout=timeout):
      return None
  except OSError as e:
    return " ".join(str(e).split()) or type(e).__name__


def _download_and_prepare(tfds, name: str, data_dir) -> None:
  """data.download=True for an unprepared TFDS dataset: checks what preparing needs (TFDS's
  stock builders decode the publishers' archives with TensorFlow; the network), then lets
  TFDS download and prepare it ONCE in the array_record format that `tfds.data_source` reads
  without TensorFlow. Each missing requirement is one line naming the dataset, the directory
  and the way out."""
  where = data_dir or "(TFDS default: TFDS_DATA_DIR or ~/tensorflow_datasets)"
  if not _tensorflow_available():
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset is not prepared in data.path={where}, and "
        f"preparing it (data.download=True) needs TensorFlow: `pip install "
        f"'fedjax_sharp[prepare]'` and rerun (it downloads and prepares once, then reads "
        f"without TensorFlow); or run `{_build_command(name, data_dir)}` where TensorFlow is "
        f"installed and copy the result into data.path; offline alternatives: "
        f"data.source='idx' / 'npz' / 'embedded'")
  host, port = _download_host(name)
  reason = _probe(host, port)
  if reason is not None:
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset is not prepared in data.path={where} and "
        f"cannot be downloaded (no connection to {host}:{port}: {reason}); offline: run "
        f"`{_build_command(name, data_dir)}` on a machine with network access and copy "
        f"the prepared directory into data.path, or use data.source='idx' / 'npz' / "
        f"'embedded'")
  logging.getLogger(__name__).info("data.download: downloading and preparing %r into %s "
                                   "(array_record; once)", name, where)
  tfds.builder(name, data_dir=data_dir).download_and_prepare(file_format="array_record")


_GETITEMS_CHUNK = 4096


def _read_source(src) -> list:
  """Reads every example of a random-access TFDS data source, in order."""
  n = len(src)
  getitems = getattr(src, "__getitems__", None)
  if getitems is not None and n:
    try:
      first = getitems(list(range(min(_GETITEMS_CHUNK, n))))
    except TypeError:
      # tfds.testing.mock_data (4.9.10) installs an unbound `__getitems__` on its mock.
      first = None
    if first is not None:
      out = list(first)
      for start in range(len(out), n, _GETITEMS_CHUNK):
        out.extend(getitems(list(range(start, min(start + _GETITEMS_CHUNK, n)))))
      return out
  return [src[i] for i in range(n)]


def _columns(examples: Sequence[dict], keys: Sequence[str], what: str) -> dict[str, list]:
  """Examples (dicts) -> one list per key, in order."""
  if not examples:
    raise _ExampleFormatError(f"{what}: the split is empty")
  for key in keys:
    if key not in examples[0]:
      raise _ExampleFormatError(f"{what}: example has no key {key!r}; keys are "
                                f"{sorted(examples[0])}")
  try:
    return {key: [ex[key] for ex in examples] for key in keys}
  except KeyError as e:
    raise _ExampleFormatError(f"{what}: an example has no key {e}") from None


def _num_classes_from_info(info, label_key):
  try:
    return int(info.features[label_key].num_classes)
  except Exception:  # pylint: disable=broad-except
    return None


def _read_tfds_data_source(tfds, name, data_dir, splits, keys, download):
  columns, info = [], None
  for split in splits:
    src = tfds.data_source(name, split=split, data_dir=data_dir, download=download)
    if info is None:
      info = getattr(src, "dataset_info", None)
    columns.append(_columns(_read_source(src), keys, f"{name}[{split}]"))
  return columns, info


def _read_tfds_tf(tfds, name, data_dir, splits, keys, download):
  """Fallback: `tfds.load(..., batch_size=-1)` (needs TensorFlow)."""
  loaded, info = tfds.load(name, split=list(splits), data_dir=data_dir, batch_size=-1,
                           download=download, with_info=True)
  columns = []
  for split, ds in zip(splits, loaded):
    batch = tfds.as_numpy(ds)
    missing = [k for k in keys if k not in batch]
    if missing:
      raise _ExampleFormatError(f"{name}[{split}]: keys are {sorted(batch)}, need "
                                f"{', '.join(repr(k) for k in keys)}")
    columns.append({k: batch[k] for k in keys})
  return columns, info


def _read_tfds(name: str, data_dir, splits: Sequence[str], keys: Sequence[str],
               download: bool):
  """Reads `keys` of every example of `splits`: (one dict of columns per split, DatasetInfo).

  `tfds.data_source` first (array_record, no TensorFlow), then `tfds.load(batch_size=-1)`;
  raises `DatasetNotPreparedError` with instructions when neither can read the data.
  """
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("data.source='tfds' needs tensorflow-datasets (pip install "
                      "tensorflow-datasets pillow importlib_resources)") from e
  errors = []
  result = None
  try:
    result = _read_tfds_data_source(tfds, name, data_dir, splits, keys, False)
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f"TFDS has no dataset named {name!r}: {str(e).splitlines()[0]}") from None
  except _ExampleFormatError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    errors.append(f"tfds.data_source: {type(e).__name__}: {e}")
    logging.getLogger(__name__).debug("tfds.data_source(%r) failed (%s); trying tfds.load",
                                     name, " ".join(str(e).split()))
  if result is None:
    try:
      result = _read_tfds_tf(tfds, name, data_dir, splits, keys, False)
    except _ExampleFormatError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      errors.append(f"tfds.load: {type(e).__name__}: {e}")
  if result is None:
    prepared = None
    try:
      prepared = tfds.builder(name, data_dir=data_dir).is_prepared()
    except Exception:  # pylint: disable=broad-except
      pass
    details = "\n".join("  " + err.splitlines()[0] for err in errors)
    if prepared is False and download:
      _download_and_prepare(tfds, name, data_dir)
      return _read_tfds(name, data_dir, splits, keys, download=False)
    if prepared is False:
      raise DatasetNotPreparedError(
          f"data.name={name!r}: the TFDS dataset is not prepared in data.path="
          f"{data_dir or '(TFDS default)'}; {_prepare_hint(name, data_dir)}", details)
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset could not be read from data.path="
        f"{data_dir or '(TFDS default)'} (tfds.data_source needs the array_record format; "
        f"tfds.load needs TensorFlow); {_prepare_hint(name, data_dir)}", details)
  columns, info = result
  if info is None:  # e.g. a data source without `dataset_info`: ask the builder.
    try:
      info = tfds.builder(name, data_dir=data_dir).info
    except Exception:  # pylint: disable=broad-except
      info = None
  return columns, info


def load_tfds(name: str, data_dir: str | None = None, *, image_key: str | None = None,
              label_key: str | None = None, train_split: str | None = None,
              test_split: str | None = None, download: bool = False) -> ArrayDataset:
  """Loads a prepared TFDS image-classification dataset into memory.

  First tries `tfds.data_source` (array_record; no TensorFlow needed, pillow decodes the
  images); if that fails, falls back to `tfds.load(..., batch_size=-1)` + `tfds.as_numpy`
  (needs TensorFlow, reads any file format). Raises `DatasetNotPreparedError` with
  instructions when the dataset is not prepared in `data_dir`. EMNIST (any config) is
  transposed back to the upright MNIST orientation.

  Args:
    name: TFDS name, e.g. 'cifar10', 'cifar100' (fine labels), 'fashion_mnist', 'mnist',
      'emnist/byclass', 'emnist/letters'.
    data_dir: TFDS data directory (None: TFDS_DATA_DIR or ~/tensorflow_datasets).
    image_key, label_key, train_split, test_split: default from `TFDS_DATASETS`
      ('image', 'label', 'train', 'test').
    download: let TFDS download and prepare (needs network and TensorFlow).
  """
  defaults = TFDS_DATASETS.get(name, ("image", "label", "train", "test"))
  image_key = image_key or defaults[0]
  label_key = label_key or defaults[1]
  splits = (train_split or defaults[2], test_split or defaults[3])
  columns, info = _read_tfds(name, data_dir or None, splits, (image_key, label_key), download)
  arrays = []
  for split, cols in zip(splits, columns):
    try:
      x = np.stack([np.asarray(v) for v in cols[image_key]])
      y = np.asarray([int(v) for v in np.asarray(cols[label_key]).reshape(-1)], dtype=np.int64)
    except (ValueError, TypeError) as e:
      raise ValueError(f"{name}[{split}]: cannot stack {image_key!r}/{label_key!r} into "
                       f"arrays ({e})") from None
    if _tfds_transposed(name):
      x = as_images(x, f"{name}[{split}]").transpose(0, 2, 1, 3)
    arrays.extend([x, y])
  x_train, y_train, x_test, y_test = arrays
  return make_dataset(name, x_train, y_train, x_test, y_test,
                       num_classes=_num_classes_from_info(info, label_key))


def load_tfds_text(name: str, data_dir: str | None = None, *,
                   text_keys: Sequence[str] | None = None, label_key: str | None = None,
                   train_split: str | None = None, test_split: str | None = None,
                   max_length: int = 200, min_count: int = 2, max_size: int = 0,
                   vocabulary: "text_lib.Vocabulary | str | None" = None,
                   download: bool = False) -> TokenDataset:
  """Loads a prepared TFDS text-classification dataset as padded token ids.

  The texts of `text_keys` (default `TFDS_TEXT_DATASETS[name]`, for ag_news_subset the title
  and the description) are joined with a space, tokenised (`text.tokenize`) and encoded
  with `vocabulary` (a `text.Vocabulary` or the path of a saved one) or, if None, with a
  vocabulary built from the TRAINING split (`min_count`, `max_size`). Sequences are cut or
  zero-padded to `max_length`. The result carries the vocabulary: save it with the run
  (`text.save_vocabulary(path, ds.vocabulary)`) and pass it back to reproduce the encoding.
  """
  defaults = TFDS_TEXT_DATASETS.get(name, (("text",), "label", "train", "test"))
  text_keys = tuple(text_keys or defaults[0])
  label_key = label_key or defaults[1]
  splits = (train_split or defaults[2], test_split or defaults[3])
  columns, info = _read_tfds(name, data_dir or None, splits, text_keys + (label_key,), download)
  texts, labels = [], []
  for cols in columns:
    n = len(cols[label_key])
    texts.append([" ".join(text_lib._as_str(cols[k][i]) for k in text_keys)  # pylint: disable=protected-access
                  for i in range(n)])
    labels.append(as_labels(np.asarray([int(v) for v in np.asarray(cols[label_key]).reshape(-1)],
                                        dtype=np.int64), f"{name} labels"))
  if isinstance(vocabulary, str):
    vocabulary = text_lib.load_vocabulary(vocabulary)
  if vocabulary is None:
    vocabulary = text_lib.build_vocabulary(texts[0], min_count=min_count, max_size=max_size)
  x_train = text_lib.encode(texts[0], vocabulary, max_length)
  x_test = text_lib.encode(texts[1], vocabulary, max_length)
  num_classes = _num_classes_from_info(info, label_key)
  if num_classes is None:
    num_classes = int(max(labels[0].max(initial=-1), labels[1].max(initial=-1))) + 1
  names = None
  try:
    names = tuple(info.features[label_key].names)
    if len(names) != num_classes:
      names = None
  except Exception:  # pylint: disable=broad-except
    names = None
  return TokenDataset(name=name, x_train=x_train, y_train=labels[0], x_test=x_test,
                      y_test=labels[1], num_classes=num_classes, vocabulary=vocabulary,
                      class_names=names)


# --------------------------------------------------------------------------------------
# Config dispatch.
# --------------------------------------------------------------------------------------
def _positive_int(data_cfg, field, default):
  value = getattr(data_cfg, field, None)
  value = default if value is None else value
  if isinstance(value, bool) or int(value) != value or value < 1:
    raise ValueError(f"data.{field} must be a positive integer, got {value}")
  return int(value)


def load_dataset(data_cfg: Any, seed: int | None = None):
  """Loads the dataset a config describes: an `ArrayDataset`, or a `TokenDataset` for text.

  Fields (any object with attributes, e.g. `ml_collections.ConfigDict`; all optional but
  `source`/`name`/`path` where a source needs them):
    source: 'embedded' | 'idx' | 'npz' | 'tfds' | 'imagefolder' | 'landmarks_csv' |
      'federated_h5' | 'federated_sqlite'.
    name: dataset name ('digits' for embedded; one of `TFDS_DATASETS` or
      `TFDS_TEXT_DATASETS` for tfds; free for the file sources, where '' or 'digits' means
      the source's default name).
    path: idx directory / npz file / TFDS data_dir / ImageFolder root / Landmarks directory
      / training HDF5 file / SQLite file; '' = default (idx + fashion_mnist:
      /usr/share/datasets/fashion-mnist; tfds: TFDS_DATA_DIR or ~/tensorflow_datasets).
    num_classes: npz and file sources: the class count (0 = from the file / the data).
    validation_examples (0 = none): hold out a seeded (validation_seed, default 0),
      class-stratified subset of the training set and evaluate on it instead of the test
      split (hyperparameter tuning); applied before the max_*_examples subsets.
    max_train_examples, max_test_examples (0 = all): seeded, class-stratified subsets.
    subset_seed: seed of those subsets; default `seed`, else 0.
    test_fraction, split_seed (embedded only): 0.2 and 0 by default.
    download (tfds; True): an unprepared dataset is downloaded and prepared once into
      `path` (array_record; needs TensorFlow to prepare: the 'prepare' extra); False: only
      read what is prepared.
    Text (tfds ag_news_subset): max_length (200), vocab_min_count (2), vocab_max_size (0 =
      no limit), vocabulary_path ('' = build the vocabulary from the training split).
    imagefolder: merge_valid (False), image_size (0 = keep the images' size).
    landmarks_csv: train_csv ('' = <path>/federated_train.csv), test_csv ('' =
      <path>/test.csv), image_dir ('' = <path>/images if it exists, else <path>),
      image_size (0 = 64).
    federated_h5: test_path ('' = path with 'train' -> 'test'); federated_h5 and
      federated_sqlite: invert_pixels (True: TFF's white-background floats -> MNIST-style).
  """
  source = getattr(data_cfg, "source", "embedded")
  name = getattr(data_cfg, "name", None)
  path = getattr(data_cfg, "path", "") or ""
  if source not in ALL_SOURCES:
    raise ValueError(f"data.source={source!r} is not one of {sorted(SOURCES)} or the local "
                     f"file layouts {sorted(FILE_SOURCES)}")

  if source == "embedded":
    name = name or "digits"
    if name not in EMBEDDED_NAMES:
      raise ValueError(f"data.name={name!r} is not one of {list(EMBEDDED_NAMES)} for "
                       "data.source='embedded'")
    ds = load_embedded(name, seed=getattr(data_cfg, "split_seed", 0),
                       test_fraction=getattr(data_cfg, "test_fraction", 0.2))
  elif source == "idx":
    name = name or "fashion_mnist"
    if not path:
      if name not in IDX_DEFAULT_DIRS:
        raise ValueError(f"data.path must name the IDX directory for data.name={name!r} "
                         f"(defaults exist only for {sorted(IDX_DEFAULT_DIRS)})")
      path = IDX_DEFAULT_DIRS[name]
    ds = load_idx(path, name=name)
  elif source == "npz":
    if not path:
      raise ValueError("data.path must name the .npz file for data.source='npz'")
    declared = int(getattr(data_cfg, "num_classes", 0) or 0) or None
    ds = load_npz(path, name=name or None, num_classes=declared)
  elif source == "tfds":
    download = getattr(data_cfg, "download", True)
    if not isinstance(download, bool):
      raise ValueError(f"data.download must be True or False, got {download!r}")
    if name in TFDS_TEXT_DATASETS:
      vocab_path = getattr(data_cfg, "vocabulary_path", "") or ""
      ds = load_tfds_text(
          name, data_dir=path or None,
          max_length=_positive_int(data_cfg, "max_length", 200),
          min_count=_positive_int(data_cfg, "vocab_min_count", 2),
          max_size=int(getattr(data_cfg, "vocab_max_size", 0) or 0),
          vocabulary=vocab_path or None, download=download)
    elif name in TFDS_DATASETS:
      ds = load_tfds(name, data_dir=path or None, download=download)
    else:
      emnist = sorted(n for n in TFDS_DATASETS if _tfds_transposed(n))
      raise ValueError(f"data.name={name!r} is not one of {list(_CLASSIC_TFDS)}, {emnist} "
                       f"(turned upright) or the text datasets {sorted(TFDS_TEXT_DATASETS)} "
                       f"for data.source='tfds'")
  elif source == "leaf" or (source == "federated_sqlite" and name in natural.TEXT_SQLITE):
    ds = natural.load_from_config(source, data_cfg)
  else:
    ds = federated_files.load_from_config(source, data_cfg)

  if getattr(ds, "label_mode", "sequence") == "token":
    for field in ("validation_examples", "max_train_examples", "max_test_examples"):
      if int(getattr(data_cfg, field, 0) or 0):
        raise ValueError(f"data.{field}: class-stratified subsets need class labels; this "
                         f"dataset has per-token targets (next-token prediction): take fewer "
                         f"clients with data.num_clients instead")
  n_val = int(getattr(data_cfg, "validation_examples", 0) or 0)
  if n_val < 0:
    raise ValueError(f"data.validation_examples must be >= 0 (0 = evaluate on the test "
                     f"split), got {n_val}")
  if n_val:
    ds = hold_out_validation(ds, n_val, seed=int(getattr(data_cfg, "validation_seed", 0) or 0))

  max_train = int(getattr(data_cfg, "max_train_examples", 0) or 0)
  max_test = int(getattr(data_cfg, "max_test_examples", 0) or 0)
  if max_train < 0:
    raise ValueError(f"data.max_train_examples must be >= 0, got {max_train}")
  if max_test < 0:
    raise ValueError(f"data.max_test_examples must be >= 0, got {max_test}")
  if max_train or max_test:
    subset_seed = getattr(data_cfg, "subset_seed", None)
    if subset_seed is None:
      subset_seed = seed if seed is not None else 0
    ds = subsample(ds, max_train, max_test, seed=subset_seed)
  return ds
