"""Client partitions stored in files (`data.partition='file'`, `data.partition_path=...`).

A partition file lists, for every client, the indices of its examples in the TRAINING
split of the dataset the run loads (after `data.max_train_examples` subsetting, if any:
the indices are positions in `dataset.x_train` / `dataset.y_train`). Two formats, chosen
by the file extension:

JSON (`.json`)::

    {
      "format": "fedjax_sharp.partition",     # optional
      "version": 1,                           # optional
      "num_examples": 50000,                  # optional: N of the training split it was made for
      "clients": [[12, 7, 301], [5, 44], ...],# required: one list of indices per client
      "client_ids": ["f0001", "f0002", ...],  # optional: one name per client
      "metadata": {"partition": "dirichlet", "alpha": 0.1, "seed": 0}   # optional, free form
    }

NPZ (`.npz`, `numpy.savez`; no pickled objects), one of two layouts:

* `client_0`, `client_1`, ..., `client_{M-1}`: one 1-D integer array per client (the names
  must run from 0 without gaps);
* `indices` (1-D integers, all clients one after the other) and `offsets` (M + 1
  non-decreasing integers, `offsets[0] = 0`, `offsets[M] = len(indices)`): client m holds
  `indices[offsets[m]:offsets[m + 1]]`.

Optional arrays: `num_examples` (a scalar), `client_ids` (M strings), `metadata` (a scalar
string holding JSON). `save_partition` writes the second layout.

Validation (`load_partition`; every error names the file and the problem): the file exists
and parses; every index is an integer in `[0, N)`; no client is empty; no index appears
twice, within a client or across clients, unless `data.partition_allow_duplicates=True`;
`num_examples`, if recorded, equals N; the number of clients equals `data.num_clients` when
that is > 0. Client m of the file is client m of the run; its indices are returned sorted.
"""
from __future__ import annotations

import io
import json
import os
from typing import Any, Sequence

import numpy as np

from fedjax_sharp.data import json_files
from fedjax_sharp.errors import DataError
from fedjax_sharp.fileio import atomic_write_bytes

FORMAT = "fedjax_sharp.partition"
VERSION = 1
EXTENSIONS = (".json", ".npz")


def _ext(path: str) -> str:
  ext = os.path.splitext(path)[1].lower()
  if ext not in EXTENSIONS:
    raise DataError(f"{path}: a partition file must end in .json or .npz (got "
                    f"{ext or 'no extension'!r})")
  return ext


# --------------------------------------------------------------------------------------
# Saving.
# --------------------------------------------------------------------------------------
def save_partition(path: str, client_indices: Sequence, metadata: dict | None = None, *,
                   num_examples: int | None = None,
                   client_ids: Sequence[str] | None = None) -> None:
  """Writes per-client index lists to `path` (`.json` or `.npz`, by extension), atomically.

  Args:
    path: destination; its directory is created if needed. An existing file is replaced
      only once the new one is complete.
    client_indices: one sequence of integer indices per client.
    metadata: JSON-serialisable dict stored with the partition (how it was made).
    num_examples: size of the training split the indices point into (recorded, and
      checked by `load_partition`).
    client_ids: optional names of the clients.
  """
  ext = _ext(path)
  clients = []
  for m, c in enumerate(client_indices):
    c = np.asarray(c)
    if c.ndim != 1 or (c.size and not np.issubdtype(c.dtype, np.integer)):
      raise ValueError(f"save_partition: client {m} must be a 1-D integer array, got "
                       f"{c.dtype} {c.shape}")
    clients.append(c.astype(np.int64))
  if client_ids is not None:
    client_ids = [str(i) for i in client_ids]
    if len(client_ids) != len(clients):
      raise ValueError(f"save_partition: {len(client_ids)} client_ids for {len(clients)} "
                       f"clients")
  meta_json = json.dumps(metadata if metadata is not None else {}, sort_keys=True)
  if ext == ".json":
    obj: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    if num_examples is not None:
      obj["num_examples"] = int(num_examples)
    obj["clients"] = [c.tolist() for c in clients]
    if client_ids is not None:
      obj["client_ids"] = client_ids
    obj["metadata"] = json.loads(meta_json)
    # One client per line: diff-able and still compact.
    body = ",\n  ".join(json.dumps(c) for c in obj.pop("clients"))
    head = json.dumps(obj, sort_keys=False)[:-1]
    payload = f'{head}, "clients": [\n  {body}\n]}}\n'.encode("utf-8")
  else:
    lengths = np.asarray([len(c) for c in clients], dtype=np.int64)
    arrays = {
        "indices": (np.concatenate(clients) if clients else np.zeros(0, np.int64)),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "metadata": np.asarray(meta_json),
        "format": np.asarray(FORMAT),
        "version": np.asarray(VERSION),
    }
    if num_examples is not None:
      arrays["num_examples"] = np.asarray(int(num_examples), dtype=np.int64)
    if client_ids is not None:
      arrays["client_ids"] = np.asarray(client_ids, dtype=np.str_)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
  atomic_write_bytes(path, payload)


# --------------------------------------------------------------------------------------
# Loading.
# --------------------------------------------------------------------------------------
class PartitionFile:
  """What a partition file holds (see `read_partition_file`)."""

  def __init__(self, path, clients, client_ids=None, num_examples=None, metadata=None):
    self.path = path
    self.clients = clients            # list of int64 arrays, file order, unsorted
    self.client_ids = client_ids      # list[str] | None
    self.num_examples = num_examples  # int | None
    self.metadata = metadata if metadata is not None else {}

  def __len__(self):
    return len(self.clients)


def _int_array(path: str, values, what: str) -> np.ndarray:
  arr = np.asarray(values)
  if arr.ndim != 1:
    raise DataError(f"{path}: {what} must be a flat list of indices, got shape {arr.shape}")
  if arr.size == 0:
    return np.zeros(0, np.int64)
  if arr.dtype.kind not in "iu":
    bad = next((v for v in arr.tolist()
                if isinstance(v, bool) or not isinstance(v, int)), arr.flat[0])
    raise DataError(f"{path}: {what} holds {bad!r}, which is not an integer index")
  if arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
    raise DataError(f"{path}: {what} holds an index too large for int64")
  return arr.astype(np.int64)


# The JSON layout (module docstring).
_JSON_FILE = json_files.Schema(
    "a partition file",
    "a JSON object with a \"clients\" list (one list of indices per client)", (
        json_files.Key("format", str, repr(FORMAT), default=FORMAT, values=(FORMAT,)),
        json_files.Key("version", int, f"{VERSION} (the version this reader supports)",
                       default=VERSION, values=(VERSION,)),
        json_files.Key("clients", list, "a list of lists of indices"),
        json_files.Key("num_examples", (int, json_files.NONE), "an integer", default=None),
        json_files.Key("client_ids", (list, json_files.NONE), "a list of client names",
                       default=None),
        json_files.Key("metadata", object, "any JSON value", default={}),
    ))


def _read_json(path: str) -> PartitionFile:
  obj = json_files.read_object(path, _JSON_FILE)
  clients = []
  for m, c in enumerate(obj["clients"]):
    if not isinstance(c, list):
      raise DataError(f"{path}: client {m} must be a list of indices, got "
                      f"{type(c).__name__}")
    for v in c:  # JSON numbers: reject 1.0, true, "3" before NumPy coerces them.
      if isinstance(v, bool) or not isinstance(v, int):
        raise DataError(f"{path}: client {m} holds {v!r}, which is not an integer index")
    clients.append(_int_array(path, c, f"client {m}"))
  return PartitionFile(path, clients, obj["client_ids"], obj["num_examples"], obj["metadata"])


def _read_npz(path: str) -> PartitionFile:
  try:
    with np.load(path, allow_pickle=False) as npz:
      files = set(npz.files)
      arrays = {k: npz[k] for k in files}
  except Exception as e:  # BadZipFile, pickled members, truncated members, ...
    raise DataError(f"{path}: cannot be read as .npz ({type(e).__name__}: {e}); the file is "
                    f"truncated, corrupted or not an npz") from None
  client_keys = sorted((k for k in files if k.startswith("client_") and k != "client_ids"),
                       key=lambda k: (len(k), k))
  if "indices" in files or "offsets" in files:
    if client_keys:
      raise DataError(f"{path}: holds both per-client arrays (client_0, ...) and "
                      f"indices/offsets; use one layout")
    if "indices" not in files or "offsets" not in files:
      raise DataError(f"{path}: the flat layout needs both 'indices' and 'offsets' "
                      f"(found {sorted(files)})")
    indices = _int_array(path, arrays["indices"], "'indices'")
    offsets = _int_array(path, arrays["offsets"], "'offsets'")
    if (len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(indices)
        or np.any(np.diff(offsets) < 0)):
      raise DataError(f"{path}: 'offsets' must be non-decreasing, start at 0 and end at "
                      f"len(indices)={len(indices)} (M + 1 entries for M clients); got "
                      f"{offsets[:5].tolist()}{'...' if len(offsets) > 5 else ''} ending at "
                      f"{offsets[-1] if len(offsets) else None}")
    clients = [indices[offsets[m]:offsets[m + 1]] for m in range(len(offsets) - 1)]
  elif client_keys:
    expected = [f"client_{m}" for m in range(len(client_keys))]
    if client_keys != expected:
      missing = sorted(set(expected) - set(client_keys), key=lambda k: (len(k), k))
      raise DataError(f"{path}: per-client arrays must be client_0 ... client_"
                      f"{len(client_keys) - 1} without gaps; missing {missing[:5]} (or "
                      f"badly named: {[k for k in client_keys if k not in expected][:5]})")
    clients = [_int_array(path, arrays[k], k) for k in client_keys]
  else:
    raise DataError(f"{path}: no partition found: expected arrays client_0, client_1, ... or "
                    f"'indices' + 'offsets' (found {sorted(files)})")
  ids = arrays["client_ids"].tolist() if "client_ids" in files else None
  num_examples = int(arrays["num_examples"]) if "num_examples" in files else None
  metadata = {}
  if "metadata" in files:
    try:
      metadata = json.loads(str(arrays["metadata"]))
    except json.JSONDecodeError:
      metadata = {"text": str(arrays["metadata"])}
  return PartitionFile(path, clients, ids, num_examples, metadata)


def read_partition_file(path: str) -> PartitionFile:
  """Parses a partition file without checking it against a dataset."""
  ext = _ext(path)
  if not os.path.isfile(path):
    raise DataError(f"partition file {path!r} does not exist (data.partition_path)")
  try:
    return _read_json(path) if ext == ".json" else _read_npz(path)
  except OSError as e:
    raise DataError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


def validate_partition(pf: PartitionFile, num_examples: int, num_clients: int | None = None,
                       allow_duplicates: bool = False) -> list[np.ndarray]:
  """Checks `pf` against a training split of `num_examples`; returns sorted int64 arrays."""
  path = pf.path
  if len(pf.clients) == 0:
    raise DataError(f"{path}: the partition has no clients")
  if num_clients and len(pf.clients) != int(num_clients):
    raise DataError(f"{path}: the file has {len(pf.clients)} clients but data.num_clients="
                    f"{num_clients} (set data.num_clients=0 to take the file's count)")
  if pf.num_examples is not None and pf.num_examples != num_examples:
    raise DataError(f"{path}: the partition was made for a training split of "
                    f"{pf.num_examples} examples, but this one has {num_examples} (another "
                    f"dataset, or a different data.max_train_examples?)")
  if pf.client_ids is not None and len(pf.client_ids) != len(pf.clients):
    raise DataError(f"{path}: {len(pf.client_ids)} client_ids for {len(pf.clients)} clients")
  for m, c in enumerate(pf.clients):
    if c.size == 0:
      raise DataError(f"{path}: client {m} is empty (every client needs at least one "
                      f"example)")
    lo, hi = int(c.min()), int(c.max())
    if lo < 0 or hi >= num_examples:
      bad = lo if lo < 0 else hi
      raise DataError(f"{path}: client {m} holds index {bad}, out of range [0, "
                      f"{num_examples}) for this training split of {num_examples} examples")
  if not allow_duplicates:
    for m, c in enumerate(pf.clients):
      uniq, counts = np.unique(c, return_counts=True)
      if len(uniq) != len(c):
        raise DataError(f"{path}: client {m} lists index {int(uniq[counts > 1][0])} more than "
                        f"once (duplicates; set data.partition_allow_duplicates=True to allow)")
    flat = np.concatenate(pf.clients)
    counts = np.bincount(flat, minlength=num_examples)
    if counts.max() > 1:
      dup = int(np.argmax(counts > 1))
      owners = [m for m, c in enumerate(pf.clients) if np.any(c == dup)]
      raise DataError(f"{path}: index {dup} is in more than one client (clients "
                      f"{owners[:5]}; duplicates; set data.partition_allow_duplicates=True "
                      f"to allow)")
  return [np.sort(c) for c in pf.clients]


def load_partition(path: str, num_examples: int, num_clients: int | None = None,
                   allow_duplicates: bool = False) -> list[np.ndarray]:
  """Reads and validates a partition file (module docstring); sorted int64 per client."""
  return validate_partition(read_partition_file(path), int(num_examples), num_clients,
                            allow_duplicates)
