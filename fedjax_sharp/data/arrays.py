"""Validated datasets from arrays, and seeded subsets of them (no file formats here).

`make_dataset` turns decoded arrays into an `ArrayDataset` (uint8 `[N, H, W, C]` images,
int32 labels, the class count, per-channel statistics: published ones for the known datasets,
exact ones otherwise). `stratified_subset`, `subsample` and `hold_out_validation` take seeded,
class-stratified subsets and keep a natural partition consistent. The file and TFDS loaders
(`sources`, `federated_files`) build on this module.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.errors import DataError

# Published per-channel statistics of x / 255 on the training sets.
DATASET_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cinic10": ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
}
# Class counts by data.name, for the files that may leave theirs out: the centralized datasets
# (`npz`) and TFF's published federated ones (`hdf5`, `tff_sqlite`).
KNOWN_NUM_CLASSES: dict[str, int] = {
    "cifar10": 10, "cifar100": 100, "mnist": 10, "fashion_mnist": 10, "digits": 10,
    "emnist": 62, "federated_emnist": 62, "femnist": 62, "federated_emnist_digits": 10,
}


def known_num_classes(name: str) -> int | None:
  """The class count of the dataset called `name` in `KNOWN_NUM_CLASSES`, else None."""
  return KNOWN_NUM_CLASSES.get(name)


def _rng(seed) -> np.random.Generator:
  if isinstance(seed, np.random.Generator):
    return seed
  return np.random.default_rng(seed)


def channel_stats(x_uint8: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """Exact per-channel mean and std of `x / 255` for uint8 `[..., C]` images.

  Uses a 256-bin histogram per channel, so it needs no float copy of the data.
  """
  if x_uint8.dtype != np.uint8:
    raise ValueError(f"channel_stats expects uint8 images, got {x_uint8.dtype}")
  values = np.arange(256, dtype=np.float64) / 255.0
  means, stds = [], []
  for c in range(x_uint8.shape[-1]):
    counts = np.bincount(x_uint8[..., c].ravel(), minlength=256).astype(np.float64)
    n = counts.sum()
    mean = float((counts * values).sum() / n)
    var = float((counts * (values - mean) ** 2).sum() / n)
    means.append(mean)
    stds.append(float(np.sqrt(var)))
  return tuple(means), tuple(stds)


def _stats_for(name: str, x_train: np.ndarray):
  if name in DATASET_STATS:
    return DATASET_STATS[name]
  return channel_stats(x_train)


def as_images(x: np.ndarray, what: str) -> np.ndarray:
  """uint8 `[N, H, W]` or `[N, H, W, C]` -> uint8 `[N, H, W, C]`."""
  x = np.asarray(x)
  if x.ndim == 3:
    x = x[..., None]
  if x.ndim != 4:
    raise ValueError(f"{what}: expected images [N, H, W] or [N, H, W, C], got shape {x.shape}")
  if x.dtype != np.uint8:
    if np.issubdtype(x.dtype, np.integer) and x.size and (x.min() < 0 or x.max() > 255):
      raise ValueError(f"{what}: integer images must lie in 0..255, got {x.min()}..{x.max()}")
    if not np.issubdtype(x.dtype, np.integer):
      raise ValueError(f"{what}: images must be uint8 (0..255), got dtype {x.dtype}")
    x = x.astype(np.uint8)
  return np.ascontiguousarray(x)


def as_labels(y: np.ndarray, what: str) -> np.ndarray:
  y = np.asarray(y).reshape(-1)
  if not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"{what}: labels must be integers, got dtype {y.dtype}")
  if y.size and y.min() < 0:
    raise ValueError(f"{what}: labels must be >= 0, got min {y.min()}")
  return y.astype(np.int32)


def make_dataset(name, x_train, y_train, x_test, y_test, num_classes=None, mean=None,
                  std=None, **natural) -> ArrayDataset:
  """A validated `ArrayDataset` of decoded arrays; `natural` = train_clients, test_clients,
  client_ids, class_names (all optional). Statistics: published ones for the datasets of
  DATASET_STATS, exact ones of `x_train` otherwise (unless given)."""
  x_train = as_images(x_train, f"{name} x_train")
  x_test = as_images(x_test, f"{name} x_test")
  y_train = as_labels(y_train, f"{name} y_train")
  y_test = as_labels(y_test, f"{name} y_test")
  observed = int(max(y_train.max(initial=-1), y_test.max(initial=-1))) + 1
  if num_classes is None:
    num_classes = observed
  elif observed > num_classes:
    raise ValueError(f"{name}: labels go up to {observed - 1} but num_classes={num_classes}")
  if mean is None or std is None:
    mean, std = _stats_for(name, x_train)
  return ArrayDataset(name=name, x_train=x_train, y_train=y_train, x_test=x_test,
                      y_test=y_test, num_classes=int(num_classes),
                      mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std),
                      **natural)


def dataset_from_splits(where: str, name: str, splits: dict, num_classes) -> ArrayDataset:
  """`make_dataset` of `splits` = {x_train, y_train, x_test, y_test}; a problem is one
  `DataError` naming `where` (the file or directory read)."""
  try:
    return make_dataset(name, splits["x_train"], splits["y_train"], splits["x_test"],
                        splits["y_test"], num_classes=num_classes)
  except ValueError as e:
    raise DataError(f"{where}: {e}") from None


def stratified_subset(labels: np.ndarray, k: int, seed) -> np.ndarray:
  """A seeded, class-stratified subset of `k` indices (sorted), proportional to class sizes.

  Class quotas are `floor(k * n_c / N)` plus one for the classes with the largest
  remainders (ties broken at random), so a balanced set stays balanced.
  """
  labels = np.asarray(labels)
  n = labels.shape[0]
  if not 0 <= k <= n:
    raise ValueError(f"subset size must be in [0, {n}], got {k}")
  rng = _rng(seed)
  classes, counts = np.unique(labels, return_counts=True)
  exact = k * counts / n
  quota = np.floor(exact).astype(np.int64)
  remainder = k - int(quota.sum())
  if remainder:
    # Largest fractional parts first; random tie-break via a random secondary key.
    order = np.lexsort((rng.random(len(classes)), -(exact - quota)))
    quota[order[:remainder]] += 1
  chosen = []
  for c, q in zip(classes, quota):
    idx = np.flatnonzero(labels == c)
    chosen.append(rng.choice(idx, size=int(q), replace=False))
  return np.sort(np.concatenate(chosen)).astype(np.int64)


def _restrict_clients(clients, idx: np.ndarray, n: int):
  """Client index lists re-expressed in a subset `idx` of `range(n)` (None stays None)."""
  if clients is None:
    return None
  pos = np.full(n, -1, dtype=np.int64)
  pos[idx] = np.arange(len(idx))
  out = []
  for c in clients:
    p = pos[np.asarray(c, dtype=np.int64)]
    out.append(np.sort(p[p >= 0]))
  return out


def subsample(ds, max_train: int = 0, max_test: int = 0, seed=0):
  """Class-stratified, seeded subsets of the train/test sets (0 = keep all).

  mean/std are kept (they describe the full training set). Works for `ArrayDataset` and
  `TokenDataset`; a natural partition is carried over (indices renumbered, clients left
  without training examples dropped).
  """
  rng = _rng(seed)
  changes = {}
  train_clients, test_clients = ds.train_clients, ds.test_clients
  if max_train and max_train < len(ds.y_train):
    idx = stratified_subset(ds.y_train, int(max_train), rng)
    changes.update(x_train=ds.x_train[idx], y_train=ds.y_train[idx])
    train_clients = _restrict_clients(train_clients, idx, len(ds.y_train))
  if max_test and max_test < len(ds.y_test):
    idx = stratified_subset(ds.y_test, int(max_test), rng)
    changes.update(x_test=ds.x_test[idx], y_test=ds.y_test[idx])
    test_clients = _restrict_clients(test_clients, idx, len(ds.y_test))
  if not changes:
    return ds
  if train_clients is not None:
    keep = [m for m, c in enumerate(train_clients) if len(c)]
    changes.update(train_clients=tuple(train_clients[m] for m in keep),
                   client_ids=tuple(ds.client_ids[m] for m in keep),
                   test_clients=(None if test_clients is None
                                 else tuple(test_clients[m] for m in keep)))
  return dataclasses.replace(ds, **changes)



def hold_out_validation(ds, k: int, seed=0):
  """Moves a seeded, class-stratified subset of `k` training examples into the test slot.

  The returned dataset trains on the other examples and evaluates on the held-out ones, so
  hyperparameters can be chosen without looking at the test split (`data.validation_examples`).
  A natural partition keeps its clients: each client trains on its remaining examples and its
  held-out ones become its test examples; clients left without training examples are dropped.
  mean/std are kept (they describe the full training set).
  """
  n = len(ds.y_train)
  if not 0 < k < n:
    raise ValueError(f"data.validation_examples must be in [1, {n - 1}] for {ds.name} "
                     f"({n} training examples), got {k}")
  val = stratified_subset(ds.y_train, int(k), seed)
  keep = np.setdiff1d(np.arange(n), val)
  changes = dict(x_train=ds.x_train[keep], y_train=ds.y_train[keep],
                 x_test=ds.x_train[val], y_test=ds.y_train[val])
  if ds.train_clients is not None:
    train_clients = _restrict_clients(ds.train_clients, keep, n)
    test_clients = _restrict_clients(ds.train_clients, val, n)
    alive = [m for m, c in enumerate(train_clients) if len(c)]
    changes.update(train_clients=tuple(train_clients[m] for m in alive),
                   test_clients=tuple(test_clients[m] for m in alive),
                   client_ids=tuple(ds.client_ids[m] for m in alive))
  return dataclasses.replace(ds, **changes)
