"""Datasets read from local files in their published layouts (no TFDS, no TensorFlow).

* `load_imagefolder` (`data.source='imagefolder'`): CINIC-10 and any ImageFolder tree::

      <root>/train/<class>/*.png      (also .jpg .jpeg .bmp .gif .webp .ppm .tif .tiff)
      <root>/test/<class>/*.png
      <root>/valid/<class>/*.png      optional; merged into train with `merge_valid=True`

  Classes are the sorted directory names of train/ (test/ may not add classes). Images are
  decoded with pillow to RGB uint8; `image_size=0` keeps their size (then every image must
  have the same size; CINIC-10: 32x32x3), otherwise they are resized to image_size^2.

* `load_landmarks_csv` (`data.source='landmarks_csv'`): Landmarks-User-160k (Hsu et al.
  2020; the GLDv2 federated split published with TFF): `federated_train.csv` with columns
  `user_id,image_id,class`, `test.csv` with `image_id,class`, and a directory of
  `<image_id>.jpg` (flat, or GLDv2's nested `<a>/<b>/<c>/<abc...>.jpg`). Images are resized
  to `image_size` x `image_size` (aspect ratio not kept; default 64, since 164k x 224^2 x 3
  bytes is 25 GB). Classes (landmark ids) are renumbered 0..K-1 in sorted order (the
  original ids are `class_names`). Natural partition: one client per user_id.

* `load_federated_h5` (`data.source='federated_h5'`): Federated EMNIST in the TFF / fedjax
  HDF5 layout (`fed_emnist_train.h5`, `fed_emnist_test.h5`, and the digits-only files):
  groups `examples/<client_id>/pixels` (float32 `[n, 28, 28]` in [0, 1], background 1.0)
  and `examples/<client_id>/label` (int). Pixels become uint8 `round((1 - p) * 255)` with
  `invert=True` (the MNIST convention: ink bright, as fedjax's `1 - pixels`); integer
  pixels are taken as 0..255. Needs h5py. Natural partition: one client per writer, train
  and test aligned (`test_clients`).

* `load_federated_sqlite` (`data.source='federated_sqlite'`): TFF's SQLite client data
  (e.g. `emnist_all.sqlite` after lzma decompression): a table `examples(split_name TEXT,
  client_id TEXT, serialized_example_proto BLOB)` of `tf.train.Example` protos with
  features `pixels` (float or int list) and `label` (int64), split names 'train' / 'test'.
  Parsed with the protobuf classes bundled in tensorflow-datasets (no TensorFlow). Same
  pixel convention and natural partition as the HDF5 loader.

Every problem raises `DataError` naming the file or directory.
"""
from __future__ import annotations

import concurrent.futures
import csv
import logging
import math
import os
import sqlite3
from typing import Any, Sequence

import numpy as np

from fedjax_sharp.data.arrays import make_dataset
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError

_log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")
LANDMARKS_DEFAULT_SIZE = 64
LANDMARKS_TRAIN_CSV = "federated_train.csv"
LANDMARKS_TEST_CSV = "test.csv"
# Class counts of the published federated datasets, by name (data.name).
KNOWN_FEDERATED_CLASSES = {"federated_emnist": 62, "femnist": 62, "federated_emnist_digits": 10}


# --------------------------------------------------------------------------------------
# Image decoding.
# --------------------------------------------------------------------------------------
def _decode_image(path: str, size: tuple[int, int] | None, mode: str = "RGB") -> np.ndarray:
  """uint8 `[H, W, C]` of one image file; resized to `size` = (H, W) if given."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as im:
      if size is not None and im.format == "JPEG":
        im.draft(mode, (size[1], size[0]))  # DCT-domain downscaling: much faster for big JPEGs
      im = im.convert(mode)
      if size is not None and im.size != (size[1], size[0]):
        im = im.resize((size[1], size[0]), Image.BILINEAR)
      arr = np.asarray(im, dtype=np.uint8)
  except FileNotFoundError:
    raise DataError(f"{path}: image file does not exist") from None
  except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
    raise DataError(f"{path}: cannot be decoded as an image ({type(e).__name__}: {e})") from None
  if arr.ndim == 2:
    arr = arr[..., None]
  return arr


def _num_workers() -> int:
  return max(1, min(8, os.cpu_count() or 1))


def decode_images(paths: Sequence[str], size: int | tuple[int, int] | None = None,
                  mode: str = "RGB", size_hint: str = "data.image_size") -> np.ndarray:
  """uint8 `[N, H, W, C]` of `paths`, decoded in a thread pool.

  `size` None/0 keeps the images' own size, which must then be the same for all (the error
  names the first file that differs).
  """
  if isinstance(size, int):
    size = (size, size) if size > 0 else None
  if not paths:
    raise ValueError("decode_images: no image paths")
  first = _decode_image(paths[0], size, mode)
  out = np.empty((len(paths),) + first.shape, dtype=np.uint8)
  out[0] = first

  def work(i):
    arr = _decode_image(paths[i], size, mode)
    if arr.shape != first.shape:
      raise DataError(f"{paths[i]}: image is {arr.shape[1]}x{arr.shape[0]} but "
                      f"{paths[0]} is {first.shape[1]}x{first.shape[0]}; set {size_hint} to "
                      f"resize every image to one size")
    out[i] = arr

  if len(paths) > 1:
    with concurrent.futures.ThreadPoolExecutor(_num_workers()) as pool:
      for _ in pool.map(work, range(1, len(paths)), chunksize=64):
        pass
  return out


# --------------------------------------------------------------------------------------
# ImageFolder (CINIC-10).
# --------------------------------------------------------------------------------------
def _list_classes(split_dir: str) -> list[str]:
  return sorted(d for d in os.listdir(split_dir)
                if not d.startswith(".") and os.path.isdir(os.path.join(split_dir, d)))


def _list_split(root: str, split: str, classes: list[str]) -> tuple[list[str], list[int]]:
  split_dir = os.path.join(root, split)
  paths, labels = [], []
  for label, cls in enumerate(classes):
    cdir = os.path.join(split_dir, cls)
    if not os.path.isdir(cdir):
      continue
    for fname in sorted(os.listdir(cdir)):
      if fname.startswith(".") or os.path.splitext(fname)[1].lower() not in IMAGE_EXTENSIONS:
        continue
      paths.append(os.path.join(cdir, fname))
      labels.append(label)
  return paths, labels


def load_imagefolder(root: str, name: str | None = None, image_size: int = 0,
                     merge_valid: bool = False, num_classes: int | None = None,
                     mode: str = "RGB") -> ArrayDataset:
  """An ImageFolder tree (module docstring) as an `ArrayDataset`.

  Args:
    root: directory holding train/ and test/ (and optionally valid/).
    name: dataset name (default: the directory's base name); 'cinic10' uses CINIC-10's
      published mean/std.
    image_size: 0 = keep the images' size (must be uniform), else resize to a square.
    merge_valid: add valid/ to the training set (CINIC-10's train + valid = 180k images).
    num_classes: if given, at least the number of class directories.
    mode: pillow mode, 'RGB' (3 channels) or 'L' (grayscale, 1 channel).
  """
  root = os.path.abspath(root)
  if not os.path.isdir(root):
    raise DataError(f"image folder {root!r} does not exist (data.path)")
  name = name or os.path.basename(root.rstrip(os.sep))
  for split in ("train", "test"):
    if not os.path.isdir(os.path.join(root, split)):
      raise DataError(f"{root}: no {split}/ directory (expected {split}/<class>/<image>)")
  if merge_valid and not os.path.isdir(os.path.join(root, "valid")):
    raise DataError(f"{root}: data.merge_valid=True but there is no valid/ directory")
  classes = _list_classes(os.path.join(root, "train"))
  if not classes:
    raise DataError(f"{os.path.join(root, 'train')}: no class directories")
  for split in ("test",) + (("valid",) if merge_valid else ()):
    extra = sorted(set(_list_classes(os.path.join(root, split))) - set(classes))
    if extra:
      raise DataError(f"{os.path.join(root, split)}: classes {extra[:5]} have no directory "
                      f"in {os.path.join(root, 'train')}")
  train_paths, train_labels = _list_split(root, "train", classes)
  if merge_valid:
    p, l = _list_split(root, "valid", classes)
    train_paths += p
    train_labels += l
  test_paths, test_labels = _list_split(root, "test", classes)
  for split, paths in (("train", train_paths), ("test", test_paths)):
    if not paths:
      raise DataError(f"{os.path.join(root, split)}: no images ({', '.join(IMAGE_EXTENSIONS)})")
  if num_classes is not None and num_classes < len(classes):
    raise DataError(f"{root}: {len(classes)} class directories but data.num_classes="
                    f"{num_classes}")
  num_classes = num_classes or len(classes)
  x_train = decode_images(train_paths, image_size, mode)
  x_test = decode_images(test_paths, image_size, mode)
  if x_train.shape[1:] != x_test.shape[1:]:
    raise DataError(f"{root}: train images are {x_train.shape[1:]} but test images "
                    f"{x_test.shape[1:]}; set data.image_size")
  try:
    return make_dataset(
        name, x_train, np.asarray(train_labels), x_test, np.asarray(test_labels),
        num_classes=num_classes,
        class_names=tuple(classes) if num_classes == len(classes) else None)
  except ValueError as e:
    raise DataError(f"{root}: {e}") from None


# --------------------------------------------------------------------------------------
# Landmarks-User-160k.
# --------------------------------------------------------------------------------------
def _read_csv(path: str, required: Sequence[str]) -> list[dict]:
  if not os.path.isfile(path):
    raise DataError(f"CSV file {path!r} does not exist")
  try:
    with open(path, newline="", encoding="utf-8-sig") as f:
      reader = csv.DictReader(f)
      header = [h.strip() for h in (reader.fieldnames or [])]
      missing = [c for c in required if c not in header]
      if missing:
        raise DataError(f"{path}: missing columns {missing} (header: {header}; expected "
                        f"{list(required)})")
      reader.fieldnames = header
      rows = []
      for line, row in enumerate(reader, start=2):
        values = {c: (row.get(c) or "").strip() for c in required}
        empty = [c for c, v in values.items() if not v]
        if empty:
          raise DataError(f"{path}, line {line}: empty {empty}")
        values["_line"] = line
        rows.append(values)
  except (UnicodeDecodeError, csv.Error) as e:
    raise DataError(f"{path}: not a readable CSV file ({type(e).__name__}: {e})") from None
  if not rows:
    raise DataError(f"{path}: no rows")
  return rows


def _sort_key(values):
  """Numeric order when every value is an integer, else string order."""
  try:
    return sorted(values, key=int)
  except ValueError:
    return sorted(values)


def _landmarks_image_path(image_dir: str, image_id: str) -> str | None:
  for candidate in (os.path.join(image_dir, image_id + ".jpg"),
                    os.path.join(image_dir, *image_id[:3], image_id + ".jpg")):
    if os.path.isfile(candidate):
      return candidate
  return None


def load_landmarks_csv(train_csv: str, test_csv: str, image_dir: str,
                       image_size: int = LANDMARKS_DEFAULT_SIZE,
                       name: str = "landmarks_user_160k",
                       num_classes: int | None = None) -> ArrayDataset:
  """Landmarks-User-160k (module docstring) with its natural partition by user_id."""
  if not os.path.isdir(image_dir):
    raise DataError(f"image directory {image_dir!r} does not exist (data.image_dir)")
  if isinstance(image_size, bool) or int(image_size) != image_size or image_size < 1:
    raise ValueError(f"data.image_size must be a positive integer, got {image_size}")
  train_rows = _read_csv(train_csv, ("user_id", "image_id", "class"))
  test_rows = _read_csv(test_csv, ("image_id", "class"))
  classes = _sort_key({r["class"] for r in train_rows} | {r["class"] for r in test_rows})
  class_index = {c: i for i, c in enumerate(classes)}
  if num_classes is not None and num_classes < len(classes):
    raise DataError(f"{train_csv}: {len(classes)} classes (with {test_csv}) but "
                    f"data.num_classes={num_classes}")
  paths = {}
  for csv_path, rows in ((train_csv, train_rows), (test_csv, test_rows)):
    missing = []
    for r in rows:
      found = _landmarks_image_path(image_dir, r["image_id"])
      if found is None:
        missing.append(r)
      paths[r["image_id"]] = found
    if missing:
      r = missing[0]
      raise DataError(f"{os.path.join(image_dir, r['image_id'] + '.jpg')}: image of "
                      f"{csv_path} line {r['_line']} not found ({len(missing)} of "
                      f"{len(rows)} images listed in {csv_path} are missing from {image_dir})")
  x_train = decode_images([paths[r["image_id"]] for r in train_rows], int(image_size))
  x_test = decode_images([paths[r["image_id"]] for r in test_rows], int(image_size))
  y_train = np.asarray([class_index[r["class"]] for r in train_rows], dtype=np.int64)
  y_test = np.asarray([class_index[r["class"]] for r in test_rows], dtype=np.int64)
  users = np.asarray([r["user_id"] for r in train_rows])
  user_ids = _sort_key(set(users.tolist()))
  train_clients = [np.flatnonzero(users == u) for u in user_ids]
  num_classes = num_classes or len(classes)
  try:
    return make_dataset(
        name, x_train, y_train, x_test, y_test, num_classes=num_classes,
        train_clients=train_clients, client_ids=tuple(user_ids),
        class_names=tuple(classes) if num_classes == len(classes) else None)
  except ValueError as e:
    raise DataError(f"{train_csv}: {e}") from None


# --------------------------------------------------------------------------------------
# Federated EMNIST: HDF5 and SQLite.
# --------------------------------------------------------------------------------------
def _pixels_to_uint8(pixels: np.ndarray, invert: bool, what: str) -> np.ndarray:
  p = np.asarray(pixels)
  if p.ndim == 2:  # [n, D] flattened squares
    side = math.isqrt(p.shape[1])
    if side * side != p.shape[1]:
      raise DataError(f"{what}: flat pixels of length {p.shape[1]} are not a square image")
    p = p.reshape(p.shape[0], side, side)
  if p.ndim == 3:
    p = p[..., None]
  if p.ndim != 4:
    raise DataError(f"{what}: pixels must be [n, H, W] or [n, H, W, C], got shape {p.shape}")
  if np.issubdtype(p.dtype, np.floating):
    bad = ~np.isfinite(p)
    if bad.any():
      first = tuple(int(i) for i in np.argwhere(bad)[0])
      raise DataError(f"{what}: {int(bad.sum())} float pixel(s) are {p[first]} (not finite; "
                      f"the first: image {first[0]}, at {first[1:]}); pixels must lie in "
                      f"[0, 1]")
    if p.size and (p.min() < -1e-6 or p.max() > 1 + 1e-6):
      raise DataError(f"{what}: float pixels must lie in [0, 1], got {p.min()}..{p.max()}")
    q = np.clip(np.rint((1.0 - p if invert else p) * 255.0), 0, 255).astype(np.uint8)
  elif np.issubdtype(p.dtype, np.integer):
    if p.size and (p.min() < 0 or p.max() > 255):
      raise DataError(f"{what}: integer pixels must lie in 0..255, got {p.min()}..{p.max()}")
    q = p.astype(np.uint8)
    if invert:
      q = 255 - q
  else:
    raise DataError(f"{what}: pixels have dtype {p.dtype}, expected float or integer")
  return q


def client_rows(train: dict, test: dict, client_ids: list) -> tuple[tuple, tuple]:
  """The per-client arrays of a natural partition laid end to end, for each split:
  ((xs, ys, index arrays) of `train` in `client_ids` order, (xs, ys, index arrays) of `test`:
  each client's test rows aligned with it (empty if it has none), the rows of test-only clients
  after them, owned by no client). {client_id: (x, y)} -> lists to concatenate."""
  xs, ys, train_clients, start = [], [], [], 0
  for cid in client_ids:
    x, y = train[cid]
    xs.append(x)
    ys.append(y)
    train_clients.append(np.arange(start, start + len(y)))
    start += len(y)
  txs, tys, test_clients, start = [], [], {}, 0
  for cid in client_ids + [c for c in _sort_key(test.keys()) if c not in train]:
    if cid in test:
      x, y = test[cid]
      txs.append(x)
      tys.append(y)
      test_clients[cid] = np.arange(start, start + len(y))
      start += len(y)
  return ((xs, ys, train_clients),
          (txs, tys, [test_clients.get(c, np.zeros(0, np.int64)) for c in client_ids]))


def _assemble_federated(name: str, per_split: dict, num_classes: int | None,
                        where: str) -> ArrayDataset:
  """per_split[split] = {client_id: (uint8 images, int labels)} -> dataset + natural clients."""
  train, test = per_split["train"], per_split["test"]
  if not train:
    raise DataError(f"{where}: no training examples")
  if not test:
    raise DataError(f"{where}: no test examples")
  client_ids = [c for c in _sort_key(train.keys()) if len(train[c][1])]
  (xs, ys, train_clients), (txs, tys, test_clients) = client_rows(train, test, client_ids)
  shapes = {x.shape[1:] for x in xs + txs}
  if len(shapes) != 1:
    raise DataError(f"{where}: clients' images differ in shape: {sorted(shapes)[:4]}")
  y_train, y_test = np.concatenate(ys), np.concatenate(tys)
  if num_classes is None:
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    _log.info("%s: num_classes=%d inferred from the labels (set data.num_classes to fix it)",
              where, num_classes)
  try:
    return make_dataset(
        name, np.concatenate(xs), y_train, np.concatenate(txs), y_test,
        num_classes=num_classes, train_clients=train_clients,
        test_clients=test_clients, client_ids=tuple(client_ids))
  except ValueError as e:
    raise DataError(f"{where}: {e}") from None


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
        x = _pixels_to_uint8(g[pixels_key][()], invert, what)
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
  `num_classes`: if None, `KNOWN_FEDERATED_CLASSES[name]` for a known `name`, else
  inferred from the labels (1 + the largest). `name` defaults to 'federated_emnist'.
  """
  test_path = test_path or default_test_path(train_path)
  if not test_path:
    raise ValueError(f"data.test_path must name the test HDF5 file ({train_path!r} has no "
                     f"'train' in its name to derive it from)")
  if num_classes is None and name:
    num_classes = KNOWN_FEDERATED_CLASSES.get(name)
  name = name or "federated_emnist"
  per_split = {"train": _read_h5(train_path, pixels_key, label_key, invert),
               "test": _read_h5(test_path, pixels_key, label_key, invert)}
  return _assemble_federated(name, per_split, num_classes, f"{train_path} + {test_path}")


def _example_pb2():
  try:
    from tensorflow_datasets.proto import tf_example_pb2  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("data.source='federated_sqlite' parses tf.train.Example protos with "
                      "tensorflow-datasets' bundled protobuf classes: pip install "
                      "tensorflow-datasets") from e
  return tf_example_pb2


def _feature_values(feature, what: str) -> np.ndarray:
  kind = feature.WhichOneof("kind")
  if kind == "float_list":
    return np.asarray(feature.float_list.value, dtype=np.float32)
  if kind == "int64_list":
    return np.asarray(feature.int64_list.value, dtype=np.int64)
  raise DataError(f"{what}: feature of kind {kind!r}, expected a float or int64 list")


def open_examples_table(path: str) -> sqlite3.Connection:
  """A read-only connection to a TFF SQLite file whose `examples(split_name, client_id,
  serialized_example_proto)` table is checked (`DataError` naming the file otherwise)."""
  con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
  cols = {r[1] for r in con.execute("PRAGMA table_info(examples)")}
  need = {"split_name", "client_id", "serialized_example_proto"}
  if not need <= cols:
    con.close()
    raise DataError(f"{path}: no table 'examples' with columns {sorted(need)} (found "
                    f"{sorted(cols) or 'no such table'})")
  return con


def load_federated_sqlite(path: str, name: str | None = None,
                          num_classes: int | None = None, invert: bool = True,
                          pixels_key: str = "pixels", label_key: str = "label",
                          train_split: str = "train", test_split: str = "test",
                          image_shape: tuple[int, ...] | None = None) -> ArrayDataset:
  """Federated EMNIST (or similar) from TFF's SQLite client data (module docstring).

  `image_shape` (default: a square from the pixel count, e.g. 784 -> 28x28) reshapes each
  example's flat pixel list. `name` and `num_classes` as in `load_federated_h5`.
  """
  if not os.path.isfile(path):
    raise DataError(f"SQLite file {path!r} does not exist")
  pb2 = _example_pb2()
  if num_classes is None and name:
    num_classes = KNOWN_FEDERATED_CLASSES.get(name)
  name = name or "federated_emnist"
  raw: dict[str, dict[str, tuple[list, list]]] = {train_split: {}, test_split: {}}
  try:
    con = open_examples_table(path)
    try:
      rows = con.execute("SELECT split_name, client_id, serialized_example_proto FROM examples "
                         "WHERE split_name IN (?, ?) ORDER BY rowid", (train_split, test_split))
      for split, cid, blob in rows:
        what = f"{path}: client {cid!r} ({split})"
        try:
          ex = pb2.Example.FromString(bytes(blob))
        except Exception as e:  # pylint: disable=broad-except  (protobuf DecodeError)
          raise DataError(f"{what}: not a serialized tf.train.Example ({e})") from None
        feats = ex.features.feature
        if pixels_key not in feats or label_key not in feats:
          raise DataError(f"{what}: example lacks {pixels_key!r} or {label_key!r} (has "
                          f"{sorted(feats.keys())})")
        label = _feature_values(feats[label_key], what)
        if label.dtype != np.int64 or label.size != 1:
          raise DataError(f"{what}: {label_key!r} must be one int64, got {label.dtype} "
                          f"x{label.size}")
        xs, ys = raw[split].setdefault(str(cid), ([], []))
        xs.append(_feature_values(feats[pixels_key], what))
        ys.append(int(label[0]))
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise DataError(f"{path}: cannot be read as SQLite ({type(e).__name__}: {e})") from None
  per_split = {}
  for split, key in ((train_split, "train"), (test_split, "test")):
    per_split[key] = {}
    for cid, (xs, ys) in raw[split].items():
      what = f"{path}: client {cid!r} ({split})"
      lengths = {len(x) for x in xs}
      if len(lengths) != 1:
        raise DataError(f"{what}: examples have {sorted(lengths)[:4]} pixels")
      flat = np.stack(xs)
      shape = image_shape
      if shape is None:
        side = math.isqrt(flat.shape[1])
        if side * side != flat.shape[1]:
          raise DataError(f"{what}: {flat.shape[1]} pixels are not a square image; pass "
                          f"image_shape")
        shape = (side, side)
      try:
        images = flat.reshape((len(xs),) + tuple(shape))
      except ValueError:
        raise DataError(f"{what}: {flat.shape[1]} pixels do not fit image_shape={shape}"
                        ) from None
      per_split[key][cid] = (_pixels_to_uint8(images, invert, what),
                             np.asarray(ys, dtype=np.int64))
  if not per_split["train"]:
    raise DataError(f"{path}: no examples with split_name={train_split!r}")
  if not per_split["test"]:
    raise DataError(f"{path}: no examples with split_name={test_split!r}")
  return _assemble_federated(name, per_split, num_classes, path)


# --------------------------------------------------------------------------------------
# Config dispatch (called by `sources.load_dataset`).
# --------------------------------------------------------------------------------------
FILE_SOURCES = ("federated_h5", "federated_sqlite", "imagefolder", "landmarks_csv", "leaf")
# (data.source, data.name) -> (download.RESOURCES name, the file or directory inside it): what
# an empty data.path fetches when data.download is True (`data.download` module).
DOWNLOADABLE = {
    ("federated_sqlite", "federated_emnist"): ("federated_emnist", "emnist_all.sqlite"),
    ("federated_sqlite", "femnist"): ("federated_emnist", "emnist_all.sqlite"),
    ("federated_sqlite", "shakespeare"): ("shakespeare", "shakespeare.sqlite"),
    ("federated_sqlite", "stackoverflow"): ("stackoverflow", "stackoverflow.sqlite"),
    ("imagefolder", "cinic10"): ("cinic10", ""),
}
TEXT_SQLITE = ("shakespeare", "stackoverflow")
EMBEDDED_NAMES = ("digits",)   # the embedded source's names (the base config's default)


def _cfg(data_cfg, field, default=None):
  value = getattr(data_cfg, field, None)
  return default if value is None else value


def load_from_config(source: str, data_cfg: Any):
  """Loads a `FILE_SOURCES` dataset from config fields (see `sources.load_dataset`)."""
  name = _cfg(data_cfg, "name", "") or ""
  if name in EMBEDDED_NAMES:  # the base config's default; meaningless here
    name = ""
  path = _cfg(data_cfg, "path", "") or ""
  declared = int(_cfg(data_cfg, "num_classes", 0) or 0) or None
  image_size = _cfg(data_cfg, "image_size", 0) or 0
  if isinstance(image_size, bool) or int(image_size) != image_size or image_size < 0:
    raise ValueError(f"data.image_size must be an integer >= 0 (0 = the source's default), "
                     f"got {image_size}")
  image_size = int(image_size)
  path = resolve_path(source, name, path, data_cfg)
  if source == "imagefolder":
    return load_imagefolder(path, name=name or None, image_size=image_size,
                            merge_valid=bool(_cfg(data_cfg, "merge_valid", False)),
                            num_classes=declared)
  if source == "landmarks_csv":
    train_csv = _cfg(data_cfg, "train_csv", "") or os.path.join(path, LANDMARKS_TRAIN_CSV)
    test_csv = _cfg(data_cfg, "test_csv", "") or os.path.join(path, LANDMARKS_TEST_CSV)
    image_dir = _cfg(data_cfg, "image_dir", "")
    if not image_dir:
      image_dir = (os.path.join(path, "images") if os.path.isdir(os.path.join(path, "images"))
                   else path)
    return load_landmarks_csv(train_csv, test_csv, image_dir,
                              image_size=image_size or LANDMARKS_DEFAULT_SIZE,
                              name=name or "landmarks_user_160k", num_classes=declared)
  invert = bool(_cfg(data_cfg, "invert_pixels", True))
  if source == "federated_h5":
    return load_federated_h5(path, _cfg(data_cfg, "test_path", "") or None,
                             name=name or None, num_classes=declared,
                             invert=invert)
  if source == "federated_sqlite":
    return load_federated_sqlite(path, name=name or None, num_classes=declared,
                                 invert=invert)
  raise ValueError(f"data.source={source!r} is not one of {list(FILE_SOURCES)}")


def resolve_path(source: str, name: str, path: str, data_cfg: Any) -> str:
  """data.path, or with an empty one the file / directory `data.download` fetches for a
  DOWNLOADABLE (source, name); a one-line error naming the ways otherwise."""
  if not path and (source, name) in DOWNLOADABLE and _cfg(data_cfg, "download", True):
    from fedjax_sharp.data import download  # pylint: disable=g-import-not-at-top
    resource, inside = DOWNLOADABLE[(source, name)]
    path = os.path.join(download.fetch_dataset(resource), inside)
  if not path:
    what = {"imagefolder": "the ImageFolder root (train/, test/)",
            "landmarks_csv": "the Landmarks-User-160k directory (federated_train.csv, test.csv)",
            "federated_h5": "the training HDF5 file",
            "federated_sqlite": "the SQLite file",
            "leaf": "the LEAF data directory (train/*.json, test/*.json)"}[source]
    fetchable = sorted(n for s, n in DOWNLOADABLE if s == source)
    hint = (f" (or data.name one of {fetchable} with data.download=True to fetch it)"
            if fetchable else "")
    raise ValueError(f"data.path must name {what} for data.source={source!r}{hint}")
  return path
