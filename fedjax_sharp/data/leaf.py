"""LEAF's JSON files (`data.source='leaf'`; no TensorFlow): what LEAF's `preprocess.sh` writes
and what FedML and FL-bench read. `<root>/train/*.json` and `<root>/test/*.json` (`<root>` may
also be the directory above LEAF's `data/`), each file an object

    {"users": [id, ...], "num_samples": [n, ...],
     "user_data": {id: {"x": [...], "y": [...]}, ...}, "hierarchies": [...]}

('num_samples' and 'hierarchies' are optional; 'hierarchies' is ignored). LEAF splits each
user's examples into a train and a test part (`-t sample`), so train and test are aligned
per user. A user may appear in several files of one split (shards): its examples are
concatenated in file-name order. `user_data` entries with no examples that are not listed
in 'users' are ignored (LEAF's `split_data.py` leaves one for every user it drops).
Users found only in test/ (LEAF's `-t user` split) keep their examples in `x_test` but own
no client.

- 'femnist': x = 784 floats per example, LEAF's `pixel / 255` of the NIST scan (background
  1.0, ink near 0), y in 0..61 (digits, then upper case, then lower case). Images become
  uint8 `[n, 28, 28, 1]` = `round((1 - x) * 255)` (`invert=True`, the MNIST convention:
  ink bright), the same convention as `hdf5.load_federated_h5` for TFF's Federated
  EMNIST. An `ArrayDataset` with 62 classes.
- 'shakespeare': x = 80-character strings, y = the next character (LEAF's next-character
  classification). A `TokenDataset` with x int32 `[n, 80]` (character ids, no BOS/EOS) and
  y int32 `[n]` (the next character's id), num_classes = `natural.SHAKESPEARE_VOCAB_SIZE`
  (90), so a next-character model trained on TFF's form (`tff_sqlite`) classifies LEAF's
  examples with the same ids. LEAF's 80 letters and fedjax's 86 characters differ: '>' and
  '}' (in LEAF's table, not fedjax's) map to `natural.SHAKESPEARE_OOV_ID`; every character
  outside the 86 does.

Every problem raises a one-line `DataError` naming the file and, where there is one, the user.
"""
from __future__ import annotations

import collections
import os
from typing import Callable

import numpy as np

from fedjax_sharp.data import json_files
from fedjax_sharp.data import natural
from fedjax_sharp.data.federated_files import assemble_federated
from fedjax_sharp.data.federated_files import pixels_to_uint8, resolve_path
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.errors import DataError

FEMNIST_NUM_CLASSES = 62
FEMNIST_SIDE = 28
LEAF_DATASETS = ("femnist", "shakespeare")
# LEAF's `ALL_LETTERS` (models/utils/language_utils.py), for reference: '>' and '}' are not
# in SHAKESPEARE_CHARS and read as OOV.
LEAF_SHAKESPEARE_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                            "abcdefghijklmnopqrstuvwxyz}")


def _leaf_femnist_user(what: str, xs: list, ys: list, invert: bool):
  try:
    pixels = np.asarray(xs, dtype=np.float64)
  except (TypeError, ValueError):
    raise DataError(f"{what}: 'x' must be lists of {FEMNIST_SIDE ** 2} numbers (28x28 "
                    f"pixels) of equal length") from None
  if pixels.ndim != 2 or pixels.shape[1] != FEMNIST_SIDE ** 2:
    raise DataError(f"{what}: 'x' examples must hold {FEMNIST_SIDE ** 2} pixel values "
                    f"(28x28), got shape {pixels.shape}")
  images = pixels_to_uint8(pixels.reshape(-1, FEMNIST_SIDE, FEMNIST_SIDE), invert, what)
  for i, v in enumerate(ys):
    if isinstance(v, bool) or not isinstance(v, int):
      raise DataError(f"{what}: label {v!r} of example {i} is not an integer")
    if not 0 <= v < FEMNIST_NUM_CLASSES:
      raise DataError(f"{what}: label {v} of example {i} is outside [0, "
                      f"{FEMNIST_NUM_CLASSES})")
  return images, np.asarray(ys, dtype=np.int64)


def _leaf_shakespeare_user(what: str, xs: list, ys: list, seq_length: int):
  for i, s in enumerate(xs):
    if not isinstance(s, str) or len(s) != seq_length:
      got = f"{len(s)} characters" if isinstance(s, str) else type(s).__name__
      raise DataError(f"{what}: 'x' of example {i} must be a string of {seq_length} "
                      f"characters, got {got}")
  for i, c in enumerate(ys):
    if not isinstance(c, str) or len(c) != 1:
      raise DataError(f"{what}: 'y' of example {i} must be one character (the next "
                      f"character), got {c!r}")
  x = natural.encode_chars("".join(xs)).reshape(len(xs), seq_length)
  y = natural.encode_chars("".join(ys))
  return x, y


# A LEAF data file (module docstring) and one entry of its 'user_data'. An entry without
# 'x' or 'y' has no examples there (LEAF leaves empty entries for the users it drops).
_LEAF_FILE = json_files.Schema(
    "a LEAF data file", "a JSON object with 'users', 'num_samples' and 'user_data'", (
        json_files.Key("users", list, "a list of user ids"),
        json_files.Key("user_data", dict, "an object of one entry per user"),
        json_files.Key("num_samples", (list, json_files.NONE), "a list with one count per user",
                       default=None),
    ))
_USER_ENTRY = json_files.Schema("a 'user_data' entry", "an object with lists 'x' and 'y'", (
    json_files.Key("x", list, "a list of examples", default=[]),
    json_files.Key("y", list, "a list of labels, one per example", default=[]),
))


def _read_leaf_file(path: str, parse_user: Callable) -> dict:
  """{user: (x, y)} of one LEAF JSON file, validated (module docstring)."""
  obj = json_files.read_object(path, _LEAF_FILE)
  users = [str(u) for u in obj["users"]]
  if len(set(users)) != len(users):
    dup = next(u for u, c in collections.Counter(users).items() if c > 1)
    raise DataError(f"{path}: user {dup!r} is listed twice in 'users'")
  num_samples = obj["num_samples"]
  if num_samples is not None and len(num_samples) != len(users):
    raise DataError(f"{path}: 'num_samples' must be a list with one count per user "
                    f"({len(users)} users, got {len(num_samples)})")
  user_data = {u: json_files.check_object(entry, _USER_ENTRY, f"{path}: user {u!r}")
               for u, entry in obj["user_data"].items()}
  listed = set(users)
  for u, entry in user_data.items():
    if u not in listed and (entry["x"] or entry["y"]):
      raise DataError(f"{path}: user {u!r} has examples in 'user_data' but is not listed "
                      f"in 'users'")
  out = {}
  for k, u in enumerate(users):
    what = f"{path}: user {u!r}"
    if u not in user_data:
      raise DataError(f"{what} is listed in 'users' but has no entry in 'user_data'")
    xs, ys = user_data[u]["x"], user_data[u]["y"]
    if len(xs) != len(ys):
      raise DataError(f"{what}: {len(xs)} examples in 'x' but {len(ys)} labels in 'y'")
    if not xs:
      raise DataError(f"{what} has zero examples")
    if num_samples is not None and num_samples[k] != len(xs):
      raise DataError(f"{what}: num_samples says {num_samples[k]!r} but 'x' holds "
                      f"{len(xs)} examples")
    out[u] = parse_user(what, xs, ys)
  return out


def _read_leaf_split(split_dir: str, parse_user: Callable) -> dict:
  """{user: (x, y)} of every *.json file in split_dir; shards concatenated by file name."""
  files = sorted(f for f in os.listdir(split_dir)
                 if f.endswith(".json") and not f.startswith("."))
  if not files:
    raise DataError(f"{split_dir}: no .json files (expected LEAF data files)")
  parts: dict[str, list] = {}
  for fname in files:
    for u, xy in _read_leaf_file(os.path.join(split_dir, fname), parse_user).items():
      parts.setdefault(u, []).append(xy)
  return {u: (np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps]))
          for u, ps in parts.items()}


def leaf_root(root: str) -> str:
  """The directory holding train/ and test/: `root` itself, or `root/data` (LEAF's
  `data/<dataset>/data` layout when given `data/<dataset>`)."""
  root = os.path.abspath(root)
  if not os.path.isdir(root):
    raise DataError(f"LEAF data directory {root!r} does not exist")
  if not os.path.isdir(os.path.join(root, "train")) and os.path.isdir(
      os.path.join(root, "data", "train")):
    root = os.path.join(root, "data")
  for split in ("train", "test"):
    if not os.path.isdir(os.path.join(root, split)):
      raise DataError(f"{root}: no {split}/ directory (expected LEAF's layout "
                      f"<root>/train/*.json and <root>/test/*.json)")
  return root


def load_leaf(root: str, name: str, *, invert: bool = True,
              seq_length: int = natural.SHAKESPEARE_SEQUENCE_LENGTH,
              dataset_name: str | None = None) -> ArrayDataset | TokenDataset:
  """A LEAF dataset from its JSON files (module docstring), with its natural partition.

  Args:
    root: directory holding train/ and test/ (or the one above LEAF's data/).
    name: the LEAF dataset: 'femnist' (-> `ArrayDataset`, 62 classes) or 'shakespeare'
      (-> `TokenDataset`: x int32 `[n, seq_length]`, y int32 `[n]` next-character ids).
    invert: FEMNIST: store `1 - x` (ink bright, as MNIST); False keeps LEAF's values.
    seq_length: Shakespeare: the length every 'x' string must have (LEAF: 80).
    dataset_name: the returned dataset's name (default 'leaf_<name>').
  """
  if name not in LEAF_DATASETS:
    raise ValueError(f"load_leaf: name must be one of {list(LEAF_DATASETS)}, got {name!r}")
  root = leaf_root(root)
  dataset_name = dataset_name or f"leaf_{name}"
  if name == "femnist":
    def parse(what, xs, ys):
      return _leaf_femnist_user(what, xs, ys, invert)
  else:
    if isinstance(seq_length, bool) or int(seq_length) != seq_length or seq_length < 1:
      raise ValueError(f"load_leaf: seq_length must be a positive integer, got {seq_length}")
    def parse(what, xs, ys):
      return _leaf_shakespeare_user(what, xs, ys, int(seq_length))
  per_split = {split: _read_leaf_split(os.path.join(root, split), parse)
               for split in ("train", "test")}
  if name == "femnist":
    return assemble_federated(dataset_name, per_split, FEMNIST_NUM_CLASSES, root)
  return natural.assemble_tokens(dataset_name, per_split, natural.shakespeare_vocabulary(),
                                 natural.SHAKESPEARE_VOCAB_SIZE, "sequence", root)



def from_config(data_cfg) -> ArrayDataset | TokenDataset:
  """data.path: the LEAF data directory; data.name: one of `LEAF_DATASETS`;
  data.invert_pixels (femnist); data.max_length (shakespeare: 0 = 80)."""
  name = data_cfg.name
  path = resolve_path("leaf", name, data_cfg.path, data_cfg.download)
  if name not in LEAF_DATASETS:
    raise ValueError(f"data.name={name!r} is not one of {list(LEAF_DATASETS)} for "
                     f"data.source='leaf'")
  return load_leaf(path, name, invert=bool(data_cfg.invert_pixels),
                   seq_length=data_cfg.max_length or natural.SHAKESPEARE_SEQUENCE_LENGTH)
