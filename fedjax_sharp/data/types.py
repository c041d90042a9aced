"""In-memory dataset containers shared by all data sources.

* `ArrayDataset`: labelled images, uint8 `[N, H, W, C]` (every image source).
* `TokenDataset`: labelled token sequences, int32 `[N, L]` with 0 = padding, plus the
  `text.Vocabulary` that produced them (text sources, e.g. TFDS `ag_news_subset`).

They are siblings, not parent and child, so code written for images (normalisation by
`mean`/`std`, crop/flip augmentation) never receives token ids by accident; `modality`
('image' | 'tokens') tells them apart, and both have `input_shape`, `num_train`,
`num_test`, `num_classes`, `name`, `x_*`, `y_*`.

Natural partitions. A dataset that comes with users/writers (Federated EMNIST,
Landmarks-User-160k) carries them: `train_clients[m]` are the (sorted, int64) indices
into `x_train` of client m, `test_clients[m]` (optional) its indices into `x_test`, and
`client_ids[m]` its id in the source (writer id, user id). `data.partition='natural'`
uses them (see `partition.partition`). Datasets without users have all three `None`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

ClientList = Optional[tuple]  # tuple[np.ndarray, ...] | None


def _check_split(name: str, x: np.ndarray, y: np.ndarray, split: str):
  if y.shape != (x.shape[0],):
    raise ValueError(f"{name}: y_{split} has shape {y.shape}, expected ({x.shape[0]},)")
  if y.dtype != np.int32:
    raise ValueError(f"{name}: y_{split} must be int32, got {y.dtype}")


def _check_labels_in_range(name: str, ys: Sequence[np.ndarray], num_classes: int,
                           encoded: bool = False):
  """Labels in [0, num_classes); per-token targets (`encoded`) may also hold the encoding of
  `core.losses` (-1 ignored, -id - 2 counted in the loss only): [-num_classes - 1, C)."""
  if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
    raise ValueError(f"{name}: num_classes must be a positive integer, got {num_classes}")
  low = -num_classes - 1 if encoded else 0
  for split, y in zip(("train", "test"), ys):
    if y.size and (y.min() < low or y.max() >= num_classes):
      raise ValueError(f"{name}: y_{split} must lie in [{low}, {num_classes}), got "
                       f"{y.min()}..{y.max()}")


def normalize_clients(name: str, clients: Any, n: int, what: str,
                      allow_empty: bool = False) -> ClientList:
  """Validated tuple of sorted int64 index arrays (None stays None)."""
  if clients is None:
    return None
  out = []
  for m, c in enumerate(clients):
    c = np.asarray(c)
    if c.ndim != 1 or (c.size and not np.issubdtype(c.dtype, np.integer)):
      raise ValueError(f"{name}: {what}[{m}] must be a 1-D integer array, got "
                       f"{c.dtype} {c.shape}")
    c = np.sort(c.astype(np.int64))
    if not c.size and not allow_empty:
      raise ValueError(f"{name}: {what}[{m}] is empty")
    if c.size and (c[0] < 0 or c[-1] >= n):
      raise ValueError(f"{name}: {what}[{m}] holds indices {c[0]}..{c[-1]} outside [0, {n})")
    out.append(c)
  flat = np.concatenate(out) if out else np.zeros(0, np.int64)
  if flat.size and np.bincount(flat, minlength=n).max() > 1:
    raise ValueError(f"{name}: {what} use an example twice (a natural partition is disjoint)")
  return tuple(out)


def _check_natural(ds) -> None:
  n_train, n_test = ds.x_train.shape[0], ds.x_test.shape[0]
  train = normalize_clients(ds.name, ds.train_clients, n_train, "train_clients")
  test = normalize_clients(ds.name, ds.test_clients, n_test, "test_clients", allow_empty=True)
  ids = None if ds.client_ids is None else tuple(str(i) for i in ds.client_ids)
  if train is None and (test is not None or ids is not None):
    raise ValueError(f"{ds.name}: test_clients/client_ids need train_clients")
  if train is not None:
    if ids is None:
      ids = tuple(str(m) for m in range(len(train)))
    if len(ids) != len(train):
      raise ValueError(f"{ds.name}: {len(ids)} client_ids for {len(train)} train_clients")
    if len(set(ids)) != len(ids):
      raise ValueError(f"{ds.name}: client_ids are not unique")
    if test is not None and len(test) != len(train):
      raise ValueError(f"{ds.name}: {len(test)} test_clients for {len(train)} train_clients")
  object.__setattr__(ds, "train_clients", train)
  object.__setattr__(ds, "test_clients", test)
  object.__setattr__(ds, "client_ids", ids)
  if ds.class_names is not None:
    names = tuple(str(c) for c in ds.class_names)
    if len(names) != ds.num_classes:
      raise ValueError(f"{ds.name}: {len(names)} class_names for num_classes={ds.num_classes}")
    object.__setattr__(ds, "class_names", names)


class _Common:
  """Properties shared by both containers."""

  @property
  def input_shape(self) -> tuple[int, ...]:
    """Shape of one example: `(H, W, C)` for images, `(L,)` for token sequences."""
    return tuple(int(d) for d in self.x_train.shape[1:])

  @property
  def num_train(self) -> int:
    return int(self.x_train.shape[0])

  @property
  def num_test(self) -> int:
    return int(self.x_test.shape[0])

  @property
  def has_natural_partition(self) -> bool:
    return self.train_clients is not None

  def __repr__(self) -> str:
    natural = (f", natural_clients={len(self.train_clients)}"
               if self.train_clients is not None else "")
    return (f"{type(self).__name__}(name={self.name!r}, train={self.num_train}, "
            f"test={self.num_test}, input_shape={self.input_shape}, "
            f"num_classes={self.num_classes}{natural})")


@dataclasses.dataclass(frozen=True, eq=False, repr=False)  # eq=False: identity equality/hash.
class ArrayDataset(_Common):
  """A labelled image dataset held in host memory as NumPy arrays.

  Attributes:
    name: dataset name (e.g. 'cifar10', 'fashion_mnist', 'digits').
    x_train: uint8 `[N, H, W, C]` training images, values 0..255.
    y_train: int32 `[N]` training labels in `[0, num_classes)`.
    x_test: uint8 `[N_test, H, W, C]` test images.
    y_test: int32 `[N_test]` test labels.
    num_classes: number of classes.
    mean: per-channel mean of `x / 255` (train set, or published constants).
    std: per-channel standard deviation of `x / 255`.
    train_clients, test_clients, client_ids: the natural partition, if any (module doc).
    class_names: optional names of the classes (ImageFolder directories, landmark ids).
  """
  modality = "image"  # class attribute, not a field

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  mean: tuple[float, ...]
  std: tuple[float, ...]
  train_clients: ClientList = None
  test_clients: ClientList = None
  client_ids: Optional[tuple] = None
  class_names: Optional[tuple] = None

  def __post_init__(self):
    for split in ("train", "test"):
      x = getattr(self, f"x_{split}")
      y = getattr(self, f"y_{split}")
      if x.ndim != 4:
        raise ValueError(f"{self.name}: x_{split} must be [N, H, W, C], got shape {x.shape}")
      if x.dtype != np.uint8:
        raise ValueError(f"{self.name}: x_{split} must be uint8, got {x.dtype}")
      _check_split(self.name, x, y, split)
    if self.x_train.shape[1:] != self.x_test.shape[1:]:
      raise ValueError(f"{self.name}: train images {self.x_train.shape[1:]} and test images "
                       f"{self.x_test.shape[1:]} differ in shape")
    channels = self.x_train.shape[-1]
    if len(self.mean) != channels or len(self.std) != channels:
      raise ValueError(f"{self.name}: mean/std need {channels} entries, got {self.mean}, "
                       f"{self.std}")
    _check_natural(self)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TokenDataset(_Common):
  """A labelled text dataset as padded token-id sequences.

  Attributes:
    name: dataset name (e.g. 'ag_news_subset').
    x_train: int32 `[N, L]` token ids in `[0, vocabulary.size)`; 0 = padding, 1 = unknown
      (`natural.LMVocabulary`: 1 = BOS, 2 = EOS, the last id = OOV).
    y_train: int32 `[N]` labels in `[0, num_classes)`; with `label_mode='token'`, int32
      `[N, L]` next-token targets (one per position, 0 = padding; num_classes = vocab size).
    x_test: int32 `[N_test, L]`.
    y_test: int32 `[N_test]` (`[N_test, L]` with `label_mode='token'`).
    num_classes: number of classes.
    vocabulary: the `text.Vocabulary` that encoded x (built from the training split, or
      loaded with `data.vocabulary_path`); save it with the run (`text.save_vocabulary`)
      so evaluation encodes text identically.
    train_clients, test_clients, client_ids: the natural partition, if any.
    class_names: optional names of the classes.
    label_mode: 'sequence' (one label per sequence: classification) or 'token' (one target
      per position: next-token prediction, `natural.load_tff_shakespeare` / `_stackoverflow`).
  """
  modality = "tokens"

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  vocabulary: Any
  train_clients: ClientList = None
  test_clients: ClientList = None
  client_ids: Optional[tuple] = None
  class_names: Optional[tuple] = None
  label_mode: str = "sequence"

  def __post_init__(self):
    if self.label_mode not in ("sequence", "token"):
      raise ValueError(f"{self.name}: label_mode must be 'sequence' or 'token', got "
                       f"{self.label_mode!r}")
    size = int(self.vocabulary.size)
    for split in ("train", "test"):
      x = getattr(self, f"x_{split}")
      y = getattr(self, f"y_{split}")
      if x.ndim != 2:
        raise ValueError(f"{self.name}: x_{split} must be token ids [N, L], got shape {x.shape}")
      if x.dtype != np.int32:
        raise ValueError(f"{self.name}: x_{split} must be int32 token ids, got {x.dtype}")
      if x.size and (x.min() < 0 or x.max() >= size):
        raise ValueError(f"{self.name}: x_{split} token ids must lie in [0, {size}) (the "
                         f"vocabulary size), got {x.min()}..{x.max()}")
      if self.label_mode == "sequence":
        _check_split(self.name, x, y, split)
      elif y.shape != x.shape or y.dtype != np.int32:
        raise ValueError(f"{self.name}: y_{split} must be int32 {x.shape} per-token targets "
                         f"(label_mode='token'), got {y.dtype} {y.shape}")
    if self.x_train.shape[1] != self.x_test.shape[1]:
      raise ValueError(f"{self.name}: train sequences have length {self.x_train.shape[1]}, "
                       f"test sequences {self.x_test.shape[1]}")
    _check_labels_in_range(self.name, (self.y_train, self.y_test), self.num_classes,
                           encoded=self.label_mode == "token")
    _check_natural(self)

  @property
  def max_length(self) -> int:
    return int(self.x_train.shape[1])

  @property
  def vocab_size(self) -> int:
    """Number of token ids, padding and unknown included (the embedding table's rows)."""
    return int(self.vocabulary.size)


Dataset = Any  # ArrayDataset | TokenDataset (kept loose for Python 3.10 annotations)

