"""Image files in their published layouts, decoded with pillow (no TFDS, no TensorFlow).

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

Every problem raises `DataError` naming the file or directory.
"""
from __future__ import annotations

import concurrent.futures
import csv
import os
from typing import Annotated, Sequence

import numpy as np

from fedjax_sharp.data.arrays import make_dataset
from fedjax_sharp.data.federated_files import checked_image_size, file_source_name
from fedjax_sharp.data.federated_files import resolve_path
from fedjax_sharp.data.federated_files import sort_key
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError
from fedjax_sharp.hyperparameters import ON_OFF, Field

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")
LANDMARKS_DEFAULT_SIZE = 64
LANDMARKS_TRAIN_CSV = "federated_train.csv"
LANDMARKS_TEST_CSV = "test.csv"


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
      reader = csv.DictReader(f, restval="")   # a short row's missing cells read as empty
      header = [h.strip() for h in (reader.fieldnames or [])]
      missing = [c for c in required if c not in header]
      if missing:
        raise DataError(f"{path}: missing columns {missing} (header: {header}; expected "
                        f"{list(required)})")
      reader.fieldnames = header
      rows = []
      for line, row in enumerate(reader, start=2):
        values = {c: row[c].strip() for c in required}
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
  classes = sort_key({r["class"] for r in train_rows} | {r["class"] for r in test_rows})
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
  user_ids = sort_key(set(users.tolist()))
  train_clients = [np.flatnonzero(users == u) for u in user_ids]
  num_classes = num_classes or len(classes)
  try:
    return make_dataset(
        name, x_train, y_train, x_test, y_test, num_classes=num_classes,
        train_clients=train_clients, client_ids=tuple(user_ids),
        class_names=tuple(classes) if num_classes == len(classes) else None)
  except ValueError as e:
    raise DataError(f"{train_csv}: {e}") from None


def imagefolder_from_config(data_cfg, *, merge_valid: Annotated[
    bool, Field(doc="CINIC-10's valid split joins train", choices=ON_OFF)] = False
                            ) -> ArrayDataset:
  """data.path: the root ('' with data.name 'cinic10' and data.download: fetched); data.name
  ('' = the directory's name); data.image_size (0 = keep); data.num_classes (0 = the class
  directories); its own block: data.imagefolder.merge_valid."""
  name = file_source_name(data_cfg)
  path = resolve_path("imagefolder", name, data_cfg.path, data_cfg.download)
  return load_imagefolder(path, name=name or None, image_size=checked_image_size(data_cfg),
                          merge_valid=bool(merge_valid),
                          num_classes=data_cfg.num_classes or None)


def landmarks_from_config(
    data_cfg, *,
    train_csv: Annotated[str, Field(doc="'' = <path>/federated_train.csv")] = "",
    test_csv: Annotated[str, Field(doc="'' = <path>/test.csv")] = "",
    image_dir: Annotated[str, Field(doc="'' = <path>/images (or <path>)")] = "") -> ArrayDataset:
  """data.path: the directory; data.image_size (0 = 64), data.num_classes (0 = the classes
  listed); its own block data.landmarks_csv: train_csv, test_csv, image_dir ('' = <path>/images
  if it exists, else <path>)."""
  name = file_source_name(data_cfg)
  path = resolve_path("landmarks_csv", name, data_cfg.path, data_cfg.download)
  if not image_dir:
    image_dir = (os.path.join(path, "images") if os.path.isdir(os.path.join(path, "images"))
                 else path)
  return load_landmarks_csv(train_csv or os.path.join(path, LANDMARKS_TRAIN_CSV),
                            test_csv or os.path.join(path, LANDMARKS_TEST_CSV),
                            image_dir,
                            image_size=checked_image_size(data_cfg) or LANDMARKS_DEFAULT_SIZE,
                            name=name or "landmarks_user_160k",
                            num_classes=data_cfg.num_classes or None)
