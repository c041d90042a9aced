"""The client partition a config describes: `partition(labels_or_dataset, data_cfg, seed)`
dispatches on `data.partition`: 'iid' | 'dirichlet' | 'pathological' (drawn at random:
`partition_draws`) | 'file' (`data.partition_path`; format in `partition_files`) | 'natural'
(the dataset's own clients, its users / writers: pass the dataset, not its labels).

Every partition is one sorted int64 index array into the training set per client; every
client is non-empty and no index is used twice (a partition file may allow duplicates:
`data.partition_allow_duplicates`).
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from fedjax_sharp.data import partition_files
from fedjax_sharp.data.partition_draws import (dirichlet_balanced, dirichlet_label, iid,
                                               long_tail, pathological, rng_of,
                                               sorted_parts)

PARTITIONS = ("dirichlet", "file", "iid", "natural", "pathological")
# Partitions that come from outside (a file, the dataset): data.num_clients = 0 means "all".
EXTERNAL_PARTITIONS = ("file", "natural")
DIRICHLET_MODES = ("balanced", "label")

_log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# Config dispatch.
# --------------------------------------------------------------------------------------
def _external_partition(kind, labels, dataset, data_cfg, seed) -> list[np.ndarray]:
  """'file' and 'natural' (see `partition`)."""
  n = labels.shape[0]
  num_clients = data_cfg.num_clients
  if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 0:
    raise ValueError(f"data.num_clients must be an integer >= 0 (0 = every client of the "
                     f"{kind}) for data.partition={kind!r}, got {num_clients}")
  num_clients = int(num_clients)
  if data_cfg.long_tail:
    raise ValueError(f"data.long_tail=True cannot be combined with data.partition={kind!r} "
                     f"(the clients are given); set data.long_tail=False")
  if kind == "file":
    path = data_cfg.partition_path
    if not path:
      raise ValueError("data.partition_path must name a .json or .npz partition file for "
                       "data.partition='file'")
    allow = bool(data_cfg.partition_allow_duplicates)
    return partition_files.load_partition(str(path), n, num_clients or None,
                                          allow_duplicates=allow)
  # natural
  natural = getattr(dataset, "train_clients", None) if dataset is not None else None
  if natural is None:
    if dataset is None:
      raise ValueError("data.partition='natural' needs the dataset, not only its labels: call "
                       "partition_dataset(dataset, data_cfg, seed)")
    raise ValueError(f"data.partition='natural': dataset {getattr(dataset, 'name', '?')!r} has "
                     f"no natural clients (data.source 'landmarks_csv', 'federated_h5' and "
                     f"'federated_sqlite' have); use 'iid', 'dirichlet', 'pathological' or "
                     f"'file'")
  parts = [np.asarray(c, dtype=np.int64) for c in natural]
  if num_clients and num_clients != len(parts):
    if num_clients > len(parts):
      raise ValueError(f"data.num_clients={num_clients} but the dataset has only {len(parts)} "
                       f"natural clients (0 = all of them)")
    chosen = np.sort(rng_of(seed).choice(len(parts), size=num_clients, replace=False))
    _log.warning("data.partition='natural': using %d of the %d natural clients (a seeded "
                 "random subset; data.num_clients=0 uses all)", num_clients, len(parts))
    parts = [parts[i] for i in chosen]
  return sorted_parts(parts)


def natural_client_ids(dataset: Any, data_cfg: Any, seed) -> list[str] | None:
  """The source ids (writer / user ids) of the clients `partition` returns for 'natural'."""
  ids = getattr(dataset, "client_ids", None)
  if ids is None or data_cfg.partition != "natural":
    return None
  num_clients = int(data_cfg.num_clients)
  if not num_clients or num_clients == len(ids):
    return list(ids)
  chosen = np.sort(rng_of(seed).choice(len(ids), size=num_clients, replace=False))
  return [ids[i] for i in chosen]


def partition(labels: Any, data_cfg: Any, seed) -> list[np.ndarray]:
  """Partitions a training set as `data_cfg` says; returns indices into `labels`.

  `labels` is the int labels of the training split, or the dataset itself (`ArrayDataset`
  or `TokenDataset`; needed for 'natural').

  Fields (the base config's data section declares each): partition ('iid' | 'dirichlet' |
  'pathological' | 'file' | 'natural'), num_clients, alpha (dirichlet), dirichlet_mode
  ('label' | 'balanced'), examples_per_client (balanced mode; 0 = N // num_clients),
  shards_per_client (pathological), long_tail and imbalance_factor: with long_tail,
  `long_tail` is applied first and the returned indices still point into the ORIGINAL
  training set.

  'file': partition_path (.json / .npz, see `partition_files`), partition_allow_duplicates;
  num_clients must equal the file's client count, or be 0 (take the file's).
  'natural': the dataset's `train_clients` (users / writers); num_clients = 0 takes all of
  them, a smaller number a seeded random subset of clients (in source order). long_tail
  is refused for both.
  """
  dataset = None
  if hasattr(labels, "y_train"):
    dataset, labels = labels, labels.y_train
  kind = data_cfg.partition
  if np.ndim(labels) > 1 and kind != "natural":
    raise ValueError(f"data.partition={kind!r}: this dataset has per-token targets "
                     f"(next-token prediction) and no class labels to partition by; use "
                     f"data.partition='natural' (its clients)")
  labels = np.asarray(labels).reshape(-1) if np.ndim(labels) <= 1 else labels[:, 0]
  if kind not in PARTITIONS:
    drawn = sorted(set(PARTITIONS) - set(EXTERNAL_PARTITIONS))
    raise ValueError(f"data.partition={kind!r} is not one of {drawn} (drawn at random) or "
                     f"{sorted(EXTERNAL_PARTITIONS)} (given by a file / the dataset)")
  if kind in EXTERNAL_PARTITIONS:
    return _external_partition(kind, labels, dataset, data_cfg, seed)
  num_clients = data_cfg.num_clients
  if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 1:
    raise ValueError(f"data.num_clients must be a positive integer, got {num_clients}")
  num_clients = int(num_clients)
  rng = rng_of(seed)

  keep = np.arange(labels.shape[0], dtype=np.int64)
  if data_cfg.long_tail:
    factor = float(data_cfg.imbalance_factor)
    if not factor >= 1:
      raise ValueError(f"data.imbalance_factor must be >= 1, got {factor}")
    keep = long_tail(labels, factor, rng)
  sub_labels = labels[keep]
  if num_clients > len(keep):
    raise ValueError(f"data.num_clients={num_clients} is larger than the number of "
                     f"{'kept ' if len(keep) < len(labels) else ''}training examples "
                     f"({len(keep)})")

  if kind == "iid":
    parts = iid(len(keep), num_clients, rng)
  elif kind == "dirichlet":
    alpha = data_cfg.alpha
    if not float(alpha) >= 0:
      raise ValueError(f"data.alpha must be >= 0, got {alpha}")
    mode = data_cfg.dirichlet_mode
    if mode not in DIRICHLET_MODES:
      raise ValueError(f"data.dirichlet_mode={mode!r} is not one of {sorted(DIRICHLET_MODES)}")
    if mode == "label":
      parts = dirichlet_label(sub_labels, num_clients, float(alpha), rng)
    else:
      per_client = data_cfg.examples_per_client
      parts = dirichlet_balanced(sub_labels, num_clients, float(alpha), rng,
                                 examples_per_client=per_client or None)
  else:
    shards = data_cfg.shards_per_client
    if isinstance(shards, bool) or int(shards) != shards or shards < 1:
      raise ValueError(f"data.shards_per_client must be an integer >= 1, got {shards}")
    parts = pathological(sub_labels, num_clients, int(shards), rng)
  return [keep[p] for p in parts]
