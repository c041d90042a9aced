"""What the file sources with a natural partition share: per-client arrays laid end to end
into a dataset whose clients are the writers / users / roles of the files, the pixel
convention of TFF's federated EMNIST, and `data.path` resolution (an empty path fetches the
published files of `DOWNLOADABLE` when data.download is True).

Used by `image_files` (Landmarks), `hdf5`, `tff_sqlite` and `leaf`; every problem raises
`DataError` naming the file or directory.
"""
from __future__ import annotations

import logging
import math
import os

import numpy as np

from fedjax_sharp.data.arrays import make_dataset
from fedjax_sharp.data.embedded import EMBEDDED_NAMES
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError

_log = logging.getLogger(__name__)

# (data.source, data.name) -> (download.RESOURCES name, the file or directory inside it): what
# an empty data.path fetches when data.download is True (`data.download` module).
DOWNLOADABLE = {
    ("federated_sqlite", "federated_emnist"): ("federated_emnist", "emnist_all.sqlite"),
    ("federated_sqlite", "femnist"): ("federated_emnist", "emnist_all.sqlite"),
    ("federated_sqlite", "shakespeare"): ("shakespeare", "shakespeare.sqlite"),
    ("federated_sqlite", "stackoverflow"): ("stackoverflow", "stackoverflow.sqlite"),
    ("imagefolder", "cinic10"): ("cinic10", ""),
}
# What data.path names, by file source (the message of an empty one).
PATH_MEANS = {
    "imagefolder": "the ImageFolder root (train/, test/)",
    "landmarks_csv": "the Landmarks-User-160k directory (federated_train.csv, test.csv)",
    "federated_h5": "the training HDF5 file",
    "federated_sqlite": "the SQLite file",
    "leaf": "the LEAF data directory (train/*.json, test/*.json)",
}


def sort_key(values):
  """Numeric order when every value is an integer, else string order."""
  try:
    return sorted(values, key=int)
  except ValueError:
    return sorted(values)


def pixels_to_uint8(pixels: np.ndarray, invert: bool, what: str) -> np.ndarray:
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
  for cid in client_ids + [c for c in sort_key(test.keys()) if c not in train]:
    if cid in test:
      x, y = test[cid]
      txs.append(x)
      tys.append(y)
      test_clients[cid] = np.arange(start, start + len(y))
      start += len(y)
  return ((xs, ys, train_clients),
          (txs, tys, [test_clients.get(c, np.zeros(0, np.int64)) for c in client_ids]))


def assemble_federated(name: str, per_split: dict, num_classes: int | None,
                        where: str) -> ArrayDataset:
  """per_split[split] = {client_id: (uint8 images, int labels)} -> dataset + natural clients."""
  train, test = per_split["train"], per_split["test"]
  if not train:
    raise DataError(f"{where}: no training examples")
  if not test:
    raise DataError(f"{where}: no test examples")
  client_ids = [c for c in sort_key(train.keys()) if len(train[c][1])]
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



def file_source_name(data_cfg) -> str:
  """data.name of a file source: '' for the base config's default (a name of the embedded
  source, meaningless here), so that the source's own default applies."""
  return "" if data_cfg.name in EMBEDDED_NAMES else data_cfg.name


def checked_image_size(data_cfg) -> int:
  """data.image_size checked: an integer >= 0 (0 = the source's default)."""
  size = data_cfg.image_size
  if isinstance(size, bool) or int(size) != size or size < 0:
    raise ValueError(f"data.image_size must be an integer >= 0 (0 = the source's default), "
                     f"got {size}")
  return int(size)


def resolve_path(source: str, name: str, path: str, download: bool) -> str:
  """data.path, or with an empty one the file / directory `data.download` fetches for a
  DOWNLOADABLE (source, name); a one-line error naming the ways otherwise."""
  if not path and (source, name) in DOWNLOADABLE and download:
    from fedjax_sharp.data import download as download_lib  # pylint: disable=g-import-not-at-top
    resource, inside = DOWNLOADABLE[(source, name)]
    path = os.path.join(download_lib.fetch_dataset(resource), inside)
  if not path:
    fetchable = sorted(n for s, n in DOWNLOADABLE if s == source)
    hint = (f" (or data.name one of {fetchable} with data.download=True to fetch it)"
            if fetchable else "")
    raise ValueError(f"data.path must name {PATH_MEANS[source]} for data.source={source!r}"
                     f"{hint}")
  return path
