"""The natural federated benchmarks in their published on-disk formats (no TensorFlow).

Two formats hold most of the federated benchmarks that researchers already have on disk:

* LEAF JSON (`load_leaf`): what LEAF's `preprocess.sh` writes and what FedML and FL-bench
  read. `<root>/train/*.json` and `<root>/test/*.json` (`<root>` may also be the directory
  above LEAF's `data/`), each file an object

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
    ink bright), the same convention as `federated_files.load_federated_h5` for TFF's
    Federated EMNIST. An `ArrayDataset` with 62 classes.
  - 'shakespeare': x = 80-character strings, y = the next character (LEAF's next-character
    classification). A `TokenDataset` with x int32 `[n, 80]` (character ids, no BOS/EOS) and
    y int32 `[n]` (the next character's id), num_classes = SHAKESPEARE_VOCAB_SIZE (90), so a
    next-character model trained on the TFF form below classifies LEAF's examples with the
    same ids. LEAF's 80 letters and fedjax's 86 characters differ: '>' and '}' (in LEAF's
    table, not fedjax's) map to SHAKESPEARE_OOV_ID; every character outside the 86 does.

* TFF's SQLite client data (`shakespeare.sqlite`, `stackoverflow.sqlite` after lzma
  decompression): a table `examples(split_name, client_id, serialized_example_proto)` of
  `tf.train.Example` protos, parsed with the protobuf classes bundled in tensorflow-datasets
  (as `federated_files.load_federated_sqlite` does for EMNIST). If the file's
  `client_metadata(client_id, split_name, num_examples)` table is there, its counts must
  match the examples read.

  - `load_tff_shakespeare`: feature 'snippets' (one bytes value: a contiguous passage of one
    character's lines), splits 'train' / 'test'. Per client, fedjax's preprocessing: every
    snippet becomes BOS, its bytes' ids, EOS; the client's snippets are joined into one
    sequence s; inputs s[:-1] and targets s[1:] are cut into rows of `seq_length` (80),
    the last row padded with PAD. With seq_length 3, [b'ABCD', b'E'] becomes
    x = [[BOS, A, B], [C, D, EOS], [BOS, E, PAD]], y = [[A, B, C], [D, EOS, BOS],
    [E, EOS, PAD]]. Bytes are mapped one by one (a non-ASCII character is several OOVs).
  - `load_tff_stackoverflow`: feature 'tokens' (one bytes value: the post's tokens joined
    by spaces; 'title', 'tags', 'creation_date', 'score', 'type' are not read), splits
    'train', 'heldout', 'test'. Each example is one sequence: x = [BOS, w1, ..., wn] and
    y = [w1, ..., wn, EOS], each cut to `max_length` (20) and padded with PAD (fedjax's
    `StackoverflowTokenizer`; a post longer than max_length - 1 words loses its EOS).

  Both give a `TokenDataset` with `label_mode='token'`: x and y int32 `[n, L]`,
  num_classes = the vocabulary size, one client per TFF client (train split), its rows of
  the test split aligned (`test_clients`).

Token ids (fedjax's layout; `LMVocabulary` holds it, `vocabulary.tokens[i]` names id i):

    0 = PAD ('<pad>'), 1 = BOS ('<bos>'), 2 = EOS ('<eos>'),
    3 .. 3 + K - 1 = the K characters / words, K + 3 = OOV ('<oov>'); size K + 4.

  Shakespeare: K = 86, fedjax's / TFF's character table `SHAKESPEARE_CHARS` in its order
  ('d' = 3, ..., '\\r' = 88), OOV = 89, size 90.
  Stack Overflow: K = `vocab_size` (10,000) words, OOV = 10,003, size 10,004. The words are
  the first `vocab_size` lines of TFF's `stackoverflow.word_count` ("word count" per line,
  most frequent first) when `word_counts_path` is given (fedjax's and TFF's vocabulary);
  otherwise the `vocab_size` most frequent words of the training split read, counted as TFF
  documents its file (`count_by='clients'`: the number of training clients whose posts use
  the word; 'tokens': occurrences), ties in alphabetical order (deterministic; fewer than
  vocab_size words if the split has fewer distinct ones). TFF's own baselines order the
  special ids differently (pad 0, words, oov, bos, eos): models trained here and there do
  not share output layers.

Masked metrics (constants below; `core.losses.encode_targets(y, LOSS_IGNORE, ACCURACY_IGNORE)`
turns y into the per-token encoding the losses read):

  Shakespeare: the loss skips PAD; the accuracy also skips EOS (fedjax's 'accuracy_no_eos')
  and BOS, which is a target after every EOS in the joined form and not a character.
  Stack Overflow: the loss skips PAD; the accuracy counts in-vocabulary words only, as TFF's
  'accuracy_without_out_of_vocab_or_end_of_sentence' (Reddi et al. 2021): PAD, EOS and OOV
  targets are skipped (BOS is never a target). fedjax's 'accuracy_in_vocab' instead counts
  OOV targets as always wrong.

Every problem raises a one-line `DataError` naming the file and, where there is one, the
client.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import sqlite3
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data.federated_files import TEXT_SQLITE  # pylint: disable=unused-import
from fedjax_sharp.data.federated_files import _assemble_federated
from fedjax_sharp.data.federated_files import _cfg
from fedjax_sharp.data.federated_files import _example_pb2
from fedjax_sharp.data.federated_files import _pixels_to_uint8
from fedjax_sharp.data.federated_files import _sort_key
from fedjax_sharp.data.federated_files import client_rows
from fedjax_sharp.data.federated_files import open_examples_table
from fedjax_sharp.data.federated_files import resolve_path
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.errors import DataError

_log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------
# Constants a model or a metric needs.
# --------------------------------------------------------------------------------------
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_RESERVED = 3                      # ids before the first character / word
PAD, BOS, EOS, OOV = "<pad>", "<bos>", "<eos>", "<oov>"

# fedjax's (and TFF's text-generation tutorial's) 86 characters, in id order from 3.
SHAKESPEARE_CHARS = ("dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#'/37;?bfjnrvzBFJNRVZ\"&*.26:\n"
                     "aeimquyAEIMQUY]!%)-159\r")
SHAKESPEARE_OOV_ID = NUM_RESERVED + len(SHAKESPEARE_CHARS)          # 89
SHAKESPEARE_VOCAB_SIZE = SHAKESPEARE_OOV_ID + 1                     # 90
SHAKESPEARE_SEQUENCE_LENGTH = 80
SHAKESPEARE_LOSS_IGNORE_IDS = (PAD_ID,)
SHAKESPEARE_ACCURACY_IGNORE_IDS = (BOS_ID, EOS_ID)
# Ids a next-character model should never predict (fedjax's logits mask).
SHAKESPEARE_UNPREDICTABLE_IDS = (PAD_ID, BOS_ID, EOS_ID, SHAKESPEARE_OOV_ID)
# LEAF's `ALL_LETTERS` (models/utils/language_utils.py), for reference: '>' and '}' are not
# in SHAKESPEARE_CHARS and read as OOV.
LEAF_SHAKESPEARE_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                            "abcdefghijklmnopqrstuvwxyz}")

STACKOVERFLOW_NUM_WORDS = 10000
STACKOVERFLOW_OOV_ID = NUM_RESERVED + STACKOVERFLOW_NUM_WORDS        # 10003
STACKOVERFLOW_VOCAB_SIZE = STACKOVERFLOW_OOV_ID + 1                 # 10004
STACKOVERFLOW_SEQUENCE_LENGTH = 20
STACKOVERFLOW_SPLITS = ("train", "heldout", "test")
STACKOVERFLOW_LOSS_IGNORE_IDS = (PAD_ID,)
# With the default 10,000 words; for another vocabulary use `stackoverflow_accuracy_ignore_ids`.
STACKOVERFLOW_ACCURACY_IGNORE_IDS = (BOS_ID, EOS_ID, STACKOVERFLOW_OOV_ID)
STACKOVERFLOW_UNPREDICTABLE_IDS = (PAD_ID, BOS_ID, EOS_ID, STACKOVERFLOW_OOV_ID)

FEMNIST_NUM_CLASSES = 62
FEMNIST_SIDE = 28
LEAF_DATASETS = ("femnist", "shakespeare")

VOCAB_FORMAT = "fedjax_sharp.lm_vocabulary"
VOCAB_VERSION = 1


def stackoverflow_accuracy_ignore_ids(vocabulary: "LMVocabulary") -> tuple[int, ...]:
  """Targets the in-vocabulary accuracy skips for a Stack Overflow vocabulary of any size."""
  return (vocabulary.bos_id, vocabulary.eos_id, vocabulary.oov_id)


# --------------------------------------------------------------------------------------
# Vocabulary with fedjax's special-id layout.
# --------------------------------------------------------------------------------------
class LMVocabulary(text_lib.Vocabulary):
  """PAD 0, BOS 1, EOS 2, the symbols from 3, OOV last (module docstring).

  A `text.Vocabulary` (so `text.save_vocabulary` and the run recorder store it) whose id 1
  is BOS, not '<unk>': unknown symbols map to `oov_id`. `kind` is 'chars' (Shakespeare) or
  'words' (Stack Overflow). Read a saved one back with `load_lm_vocabulary`.
  """

  def __init__(self, symbols: Sequence[str], kind: str):  # pylint: disable=super-init-not-called
    if kind not in ("chars", "words"):
      raise ValueError(f"LMVocabulary kind must be 'chars' or 'words', got {kind!r}")
    symbols = tuple(str(s) for s in symbols)
    if not symbols:
      raise ValueError("LMVocabulary needs at least one character / word")
    if kind == "chars" and any(len(s) != 1 for s in symbols):
      bad = next(s for s in symbols if len(s) != 1)
      raise ValueError(f"LMVocabulary(kind='chars'): {bad!r} is not one character")
    if kind == "words" and any(not s or s != s.strip() or " " in s for s in symbols):
      bad = next(s for s in symbols if not s or s != s.strip() or " " in s)
      raise ValueError(f"LMVocabulary(kind='words'): {bad!r} is not a word (empty or with "
                       f"spaces)")
    if len(set(symbols)) != len(symbols):
      dup = next(s for s, c in collections.Counter(symbols).items() if c > 1)
      raise ValueError(f"LMVocabulary: {dup!r} appears twice")
    self.kind = kind
    self.symbols = symbols
    self.tokens = (PAD, BOS, EOS) + symbols + (OOV,)
    self.min_count = 1
    self.max_size = len(self.tokens)
    self._ids = {s: NUM_RESERVED + i for i, s in enumerate(symbols)}

  pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID

  @property
  def oov_id(self) -> int:
    return len(self.tokens) - 1

  @property
  def num_symbols(self) -> int:
    """K: the characters / words, special ids not included (fedjax's `vocab_size`)."""
    return len(self.symbols)

  def id(self, token: str) -> int:
    return self._ids.get(token, self.oov_id)

  def ids(self, tokens: Iterable[str]) -> list[int]:
    get, oov = self._ids.get, self.oov_id
    return [get(t, oov) for t in tokens]

  def __repr__(self) -> str:
    return f"LMVocabulary(kind={self.kind!r}, size={self.size})"

  def to_json(self) -> dict:
    return {"format": VOCAB_FORMAT, "version": VOCAB_VERSION, "kind": self.kind,
            "special": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "oov": self.oov_id},
            "tokens": list(self.tokens)}


def training_targets(ds: TokenDataset) -> TokenDataset:
  """`ds` with its next-token targets in the per-token encoding the losses read
  (`core.losses.encode_targets`): PAD counted nowhere; Shakespeare's BOS / EOS and Stack
  Overflow's BOS / EOS / OOV counted in the loss but not in the accuracy (module docstring).
  What `data.load_dataset` returns for these datasets; a classification dataset (LEAF
  Shakespeare's next character, `label_mode='sequence'`) is returned unchanged."""
  if ds.label_mode != "token":
    return ds
  from fedjax_sharp.core import losses  # pylint: disable=g-import-not-at-top
  vocab = ds.vocabulary
  accuracy_ignore = (SHAKESPEARE_ACCURACY_IGNORE_IDS if getattr(vocab, "kind", "") == "chars"
                     else stackoverflow_accuracy_ignore_ids(vocab))
  encode = lambda y: losses.encode_targets(y, (PAD_ID,), accuracy_ignore)
  return dataclasses.replace(ds, y_train=encode(ds.y_train), y_test=encode(ds.y_test))


def save_lm_vocabulary(path: str, vocabulary: LMVocabulary) -> None:
  """Writes `vocabulary` as JSON (atomically); the same as `text.save_vocabulary`."""
  if not isinstance(vocabulary, LMVocabulary):
    raise TypeError(f"save_lm_vocabulary(path, vocabulary) needs an LMVocabulary, got "
                    f"{type(vocabulary).__name__}")
  text_lib.save_vocabulary(path, vocabulary)


def load_lm_vocabulary(path: str) -> LMVocabulary:
  """Reads a file written by `save_lm_vocabulary` (or `text.save_vocabulary`)."""
  obj = text_lib.read_vocabulary_json(path, VOCAB_FORMAT, VOCAB_VERSION,
                                      "a language-model vocabulary")
  tokens = obj.get("tokens")
  if (not isinstance(tokens, list) or len(tokens) < 5 or not all(isinstance(t, str)
                                                                  for t in tokens)
      or tuple(tokens[:3]) != (PAD, BOS, EOS) or tokens[-1] != OOV):
    raise DataError(f"{path}: \"tokens\" must be a list of strings {PAD!r}, {BOS!r}, "
                    f"{EOS!r}, the symbols, {OOV!r}")
  try:
    return LMVocabulary(tokens[NUM_RESERVED:-1], kind=obj.get("kind"))
  except ValueError as e:
    raise DataError(f"{path}: {e}") from None


def shakespeare_vocabulary() -> LMVocabulary:
  """The fixed 90-id character vocabulary (module docstring)."""
  return LMVocabulary(SHAKESPEARE_CHARS, kind="chars")


_BYTE_TABLE = np.full(256, SHAKESPEARE_OOV_ID, dtype=np.int32)
for _i, _c in enumerate(SHAKESPEARE_CHARS):
  _BYTE_TABLE[ord(_c)] = NUM_RESERVED + _i
del _i, _c


def encode_chars(text) -> np.ndarray:
  """int32 ids of a snippet: `bytes` byte by byte (as fedjax), `str` character by character."""
  if isinstance(text, (bytes, bytearray, memoryview)):
    return _BYTE_TABLE[np.frombuffer(bytes(text), dtype=np.uint8)]
  codes = np.frombuffer(str(text).encode("utf-32-le"), dtype=np.uint32)
  return np.where(codes < 256, _BYTE_TABLE[np.minimum(codes, 255)],
                  SHAKESPEARE_OOV_ID).astype(np.int32)


def shakespeare_sequences(snippets: Sequence, seq_length: int = SHAKESPEARE_SEQUENCE_LENGTH
                          ) -> tuple[np.ndarray, np.ndarray]:
  """One client's snippets -> (x, y) int32 `[m, seq_length]` (module docstring's example)."""
  if not snippets:
    raise ValueError("shakespeare_sequences: no snippets")
  parts = []
  for s in snippets:
    parts += [np.array([BOS_ID], np.int32), encode_chars(s), np.array([EOS_ID], np.int32)]
  joined = np.concatenate(parts)
  n = len(joined) - 1                          # positions with an input and a target
  rows = -(-n // seq_length)
  x = np.full(rows * seq_length, PAD_ID, np.int32)
  y = np.full(rows * seq_length, PAD_ID, np.int32)
  x[:n] = joined[:-1]
  y[:n] = joined[1:]
  return x.reshape(rows, seq_length), y.reshape(rows, seq_length)


def word_sequences(posts: Sequence[Sequence[str]], vocabulary: LMVocabulary,
                   max_length: int = STACKOVERFLOW_SEQUENCE_LENGTH
                   ) -> tuple[np.ndarray, np.ndarray]:
  """Tokenised posts -> (x, y) int32 `[n, max_length]`: [BOS, w...] and [w..., EOS], cut
  and PAD-padded (module docstring)."""
  x = np.zeros((len(posts), max_length), np.int32)
  y = np.zeros((len(posts), max_length), np.int32)
  for i, words in enumerate(posts):
    ids = vocabulary.ids(words[:max_length])
    xs = ([BOS_ID] + ids)[:max_length]
    ys = (ids + [EOS_ID])[:max_length]
    x[i, :len(xs)] = xs
    y[i, :len(ys)] = ys
  return x, y


# --------------------------------------------------------------------------------------
# Assembly of per-client arrays into a TokenDataset with a natural partition.
# --------------------------------------------------------------------------------------
def _assemble_tokens(name: str, per_split: dict, vocabulary, num_classes: int,
                     label_mode: str, where: str) -> TokenDataset:
  """per_split[split] = {client_id: (x int32, y int32)} -> TokenDataset + natural clients.

  Clients: the training split's, in `_sort_key` order; test rows of each client aligned,
  those of test-only clients after them (in x_test, owned by no client).
  """
  train, test = per_split["train"], per_split["test"]
  client_ids = _sort_key(train.keys())
  (xs, ys, train_clients), (txs, tys, test_clients) = client_rows(train, test, client_ids)
  orphans = sum(len(test[c][0]) for c in test if c not in train)
  if orphans:
    _log.info("%s: %d test examples belong to clients without training data (kept in "
              "x_test, owned by no client)", where, orphans)
  try:
    return TokenDataset(
        name=name, x_train=np.concatenate(xs), y_train=np.concatenate(ys),
        x_test=np.concatenate(txs), y_test=np.concatenate(tys), num_classes=num_classes,
        vocabulary=vocabulary, train_clients=train_clients, test_clients=test_clients,
        client_ids=tuple(client_ids), label_mode=label_mode)
  except ValueError as e:
    raise DataError(f"{where}: {e}") from None


# --------------------------------------------------------------------------------------
# LEAF JSON.
# --------------------------------------------------------------------------------------
def _leaf_femnist_user(what: str, xs: list, ys: list, invert: bool):
  try:
    pixels = np.asarray(xs, dtype=np.float64)
  except (TypeError, ValueError):
    raise DataError(f"{what}: 'x' must be lists of {FEMNIST_SIDE ** 2} numbers (28x28 "
                    f"pixels) of equal length") from None
  if pixels.ndim != 2 or pixels.shape[1] != FEMNIST_SIDE ** 2:
    raise DataError(f"{what}: 'x' examples must hold {FEMNIST_SIDE ** 2} pixel values "
                    f"(28x28), got shape {pixels.shape}")
  images = _pixels_to_uint8(pixels.reshape(-1, FEMNIST_SIDE, FEMNIST_SIDE), invert, what)
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
  x = encode_chars("".join(xs)).reshape(len(xs), seq_length)
  y = encode_chars("".join(ys))
  return x, y


def _read_leaf_file(path: str, parse_user: Callable) -> dict:
  """{user: (x, y)} of one LEAF JSON file, validated (module docstring)."""
  try:
    with open(path, "rb") as f:
      obj = json.loads(f.read().decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise DataError(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
  except OSError as e:
    raise DataError(f"{path}: cannot be read ({e})") from None
  expected = "a JSON object with 'users', 'num_samples' and 'user_data'"
  if not isinstance(obj, dict) or "users" not in obj or "user_data" not in obj:
    found = sorted(obj)[:6] if isinstance(obj, dict) else type(obj).__name__
    raise DataError(f"{path}: not a LEAF data file (expected {expected}; found {found})")
  users, user_data = obj["users"], obj["user_data"]
  if not isinstance(users, list) or not isinstance(user_data, dict):
    raise DataError(f"{path}: 'users' must be a list and 'user_data' an object ({expected})")
  users = [str(u) for u in users]
  if len(set(users)) != len(users):
    dup = next(u for u, c in collections.Counter(users).items() if c > 1)
    raise DataError(f"{path}: user {dup!r} is listed twice in 'users'")
  num_samples = obj.get("num_samples")
  if num_samples is not None and (not isinstance(num_samples, list)
                                  or len(num_samples) != len(users)):
    got = len(num_samples) if isinstance(num_samples, list) else type(num_samples).__name__
    raise DataError(f"{path}: 'num_samples' must be a list with one count per user "
                    f"({len(users)} users, got {got})")
  listed = set(users)
  for u, entry in user_data.items():
    if u not in listed:
      if isinstance(entry, dict) and not entry.get("x") and not entry.get("y"):
        continue   # LEAF's split_data.py keeps an empty entry for every user it dropped
      raise DataError(f"{path}: user {u!r} has examples in 'user_data' but is not listed "
                      f"in 'users'")
  out = {}
  for k, u in enumerate(users):
    what = f"{path}: user {u!r}"
    if u not in user_data:
      raise DataError(f"{what} is listed in 'users' but has no entry in 'user_data'")
    entry = user_data[u]
    if (not isinstance(entry, dict) or not isinstance(entry.get("x"), list)
        or not isinstance(entry.get("y"), list)):
      raise DataError(f"{what}: 'user_data' entry must be an object with lists 'x' and 'y'")
    xs, ys = entry["x"], entry["y"]
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
              seq_length: int = SHAKESPEARE_SEQUENCE_LENGTH,
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
    return _assemble_federated(dataset_name, per_split, FEMNIST_NUM_CLASSES, root)
  return _assemble_tokens(dataset_name, per_split, shakespeare_vocabulary(),
                          SHAKESPEARE_VOCAB_SIZE, "sequence", root)


# --------------------------------------------------------------------------------------
# TFF SQLite text.
# --------------------------------------------------------------------------------------
def _read_tff_bytes_feature(path: str, splits: dict, feature: str,
                            clients: Sequence[str] | None) -> dict:
  """{key: {client_id: [feature value (bytes), ...]}} for `splits` = {key: split_name},
  examples in table order; checked against `client_metadata` when that table exists."""
  if not os.path.isfile(path):
    raise DataError(f"SQLite file {path!r} does not exist")
  if len(set(splits.values())) != len(splits):
    raise ValueError(f"the train and test split names must differ, got {splits}")
  pb2 = _example_pb2()
  by_name = {split: key for key, split in splits.items()}
  out: dict = {key: {} for key in splits}
  try:
    con = open_examples_table(path)
    try:
      names = list(by_name)
      query = ("SELECT split_name, client_id, serialized_example_proto FROM examples WHERE "
               f"split_name IN ({', '.join('?' * len(names))})")
      if clients is not None:
        con.execute("CREATE TEMP TABLE wanted_clients (client_id TEXT PRIMARY KEY)")
        con.executemany("INSERT OR IGNORE INTO wanted_clients VALUES (?)",
                        [(str(c),) for c in clients])
        query += " AND client_id IN (SELECT client_id FROM temp.wanted_clients)"
      for split, cid, blob in con.execute(query + " ORDER BY rowid", names):
        what = f"{path}: client {cid!r} ({split})"
        try:
          ex = pb2.Example.FromString(bytes(blob))
        except Exception as e:  # pylint: disable=broad-except  (protobuf DecodeError)
          raise DataError(f"{what}: not a serialized tf.train.Example ({e})") from None
        feats = ex.features.feature
        if feature not in feats:
          raise DataError(f"{what}: example lacks feature {feature!r} (has "
                          f"{sorted(feats.keys())})")
        f = feats[feature]
        kind = f.WhichOneof("kind")
        if kind != "bytes_list" or len(f.bytes_list.value) != 1:
          count = len(getattr(f, kind).value) if kind else 0
          raise DataError(f"{what}: feature {feature!r} must hold one bytes value, got "
                          f"{kind} of length {count}")
        out[by_name[split]].setdefault(str(cid), []).append(f.bytes_list.value[0])
      for key, split in splits.items():
        if not out[key]:
          present = [r[0] for r in con.execute("SELECT DISTINCT split_name FROM examples")]
          raise DataError(f"{path}: no examples with split_name={split!r}"
                          f"{' for the requested clients' if clients is not None else ''} "
                          f"(split names in the file: {sorted(map(str, present))})")
      _check_client_metadata(con, path, splits, out, clients)
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise DataError(f"{path}: cannot be read as SQLite ({type(e).__name__}: {e})") from None
  return out


def _check_client_metadata(con, path, splits, out, clients) -> None:
  cols = {r[1] for r in con.execute("PRAGMA table_info(client_metadata)")}
  if not {"client_id", "split_name", "num_examples"} <= cols:
    return
  wanted = None if clients is None else {str(c) for c in clients}
  for key, split in splits.items():
    for cid, n in con.execute("SELECT client_id, num_examples FROM client_metadata WHERE "
                              "split_name = ?", (split,)):
      cid = str(cid)
      if wanted is not None and cid not in wanted:
        continue
      have = len(out[key].get(cid, ()))
      if n == 0 and have == 0:
        raise DataError(f"{path}: client {cid!r} ({split}) has zero examples "
                        f"(client_metadata)")
      if n != have:
        raise DataError(f"{path}: client {cid!r} ({split}): client_metadata says {n} "
                        f"examples but the examples table holds {have}")


def _check_length(value, field: str) -> int:
  if isinstance(value, bool) or int(value) != value or value < 1:
    raise ValueError(f"{field} must be a positive integer, got {value}")
  return int(value)


def load_tff_shakespeare(path: str, seq_length: int = SHAKESPEARE_SEQUENCE_LENGTH,
                         train_split: str = "train", test_split: str = "test",
                         clients: Sequence[str] | None = None,
                         name: str = "shakespeare") -> TokenDataset:
  """TFF's Shakespeare SQLite file -> next-character sequences (module docstring).

  Returns a `TokenDataset` (`label_mode='token'`): x, y int32 `[n, seq_length]`, vocabulary
  `shakespeare_vocabulary()` (90 ids), one client per speaking role. `clients`: read only
  these client ids (default all).
  """
  seq_length = _check_length(seq_length, "seq_length")
  raw = _read_tff_bytes_feature(path, {"train": train_split, "test": test_split}, "snippets",
                                clients)
  per_split = {key: {cid: shakespeare_sequences(snips, seq_length)
                     for cid, snips in by_client.items()}
               for key, by_client in raw.items()}
  return _assemble_tokens(name, per_split, shakespeare_vocabulary(), SHAKESPEARE_VOCAB_SIZE,
                          "token", path)


def read_word_counts(path: str, vocab_size: int | None = None) -> list[tuple[str, int]]:
  """(word, count) pairs of TFF's `stackoverflow.word_count` ("word count" per line, most
  frequent first), the first `vocab_size` of them (all if None)."""
  if not os.path.isfile(path):
    raise DataError(f"word-count file {path!r} does not exist")
  pairs, seen = [], set()
  try:
    with open(path, encoding="utf-8") as f:
      for line_no, line in enumerate(f, start=1):
        if vocab_size is not None and len(pairs) >= vocab_size:
          break
        if not line.strip():
          continue
        fields = line.split()
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
          raise DataError(f"{path}, line {line_no}: expected 'word count', got "
                          f"{line.rstrip()[:60]!r}")
        if fields[0] in seen:
          raise DataError(f"{path}, line {line_no}: word {fields[0]!r} appears twice")
        seen.add(fields[0])
        pairs.append((fields[0], int(fields[1])))
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not a UTF-8 text file ({e})") from None
  if not pairs:
    raise DataError(f"{path}: no words")
  if vocab_size is not None and len(pairs) < vocab_size:
    _log.warning("%s: %d words, fewer than vocab_size=%d; the vocabulary has %d words",
                 path, len(pairs), vocab_size, len(pairs))
  return pairs


def count_words(posts_by_client: dict, count_by: str = "clients") -> collections.Counter:
  """Word counts of {client: [[word, ...], ...]}: 'clients' = clients using the word (as
  TFF's word-count file), 'tokens' = occurrences."""
  counts: collections.Counter = collections.Counter()
  for posts in posts_by_client.values():
    if count_by == "clients":
      counts.update({w for words in posts for w in words})
    elif count_by == "tokens":
      for words in posts:
        counts.update(words)
    else:
      raise ValueError(f"count_by must be 'clients' or 'tokens', got {count_by!r}")
  return counts


def stackoverflow_vocabulary(words: Iterable[str] | None = None,
                             counts: collections.Counter | None = None,
                             vocab_size: int = STACKOVERFLOW_NUM_WORDS) -> LMVocabulary:
  """Words in id order (e.g. from `read_word_counts`), or the `vocab_size` most frequent of
  `counts` (ties alphabetical)."""
  if words is None:
    if counts is None:
      raise ValueError("stackoverflow_vocabulary: give words or counts")
    words = sorted(counts, key=lambda w: (-counts[w], w))[:vocab_size]
  return LMVocabulary(list(words), kind="words")


def load_tff_stackoverflow(path: str, vocab_size: int = STACKOVERFLOW_NUM_WORDS,
                           word_counts_path: str | None = None,
                           vocabulary: "LMVocabulary | str | None" = None,
                           max_length: int = STACKOVERFLOW_SEQUENCE_LENGTH,
                           train_split: str = "train", test_split: str = "test",
                           clients: Sequence[str] | None = None, count_by: str = "clients",
                           name: str = "stackoverflow") -> TokenDataset:
  """TFF's Stack Overflow SQLite file -> next-word sequences (module docstring).

  Args:
    path: `stackoverflow.sqlite` (lzma-decompressed).
    vocab_size: K, the number of words (ids 3..K+2; OOV = K+3; size K+4).
    word_counts_path: TFF's `stackoverflow.word_count`: its first K words are the
      vocabulary. Without it (and without `vocabulary`) the K most frequent words of the
      training split read (`count_by`), ties alphabetical.
    vocabulary: an `LMVocabulary` (or the path of a saved one) to reuse; overrides both.
    max_length: L, the sequence length (fedjax / TFF: 20).
    train_split: the training split's name ('train').
    test_split: the evaluation split's name ('test'; TFF also has 'heldout').
    clients: read only these client ids (default all; the full file holds 342k training
      clients and 135M posts, far more than host memory as [n, 20] int32 arrays).
    count_by: 'clients' (TFF's definition) or 'tokens'.
  """
  max_length = _check_length(max_length, "max_length")
  vocab_size = _check_length(vocab_size, "vocab_size")
  raw = _read_tff_bytes_feature(path, {"train": train_split, "test": test_split}, "tokens",
                                clients)
  posts = {key: {cid: [v.decode("utf-8", errors="replace").split() for v in values]
                 for cid, values in by_client.items()}
           for key, by_client in raw.items()}
  if isinstance(vocabulary, str):
    vocabulary = load_lm_vocabulary(vocabulary)
  if vocabulary is None:
    if word_counts_path:
      vocabulary = stackoverflow_vocabulary(
          [w for w, _ in read_word_counts(word_counts_path, vocab_size)])
    else:
      vocabulary = stackoverflow_vocabulary(counts=count_words(posts["train"], count_by),
                                            vocab_size=vocab_size)
  if not isinstance(vocabulary, LMVocabulary) or vocabulary.kind != "words":
    raise ValueError(f"load_tff_stackoverflow: vocabulary must be a words LMVocabulary, got "
                     f"{vocabulary!r}")
  per_split = {key: {cid: word_sequences(p, vocabulary, max_length)
                     for cid, p in by_client.items()}
               for key, by_client in posts.items()}
  return _assemble_tokens(name, per_split, vocabulary, vocabulary.size, "token", path)


# --------------------------------------------------------------------------------------
# Config dispatch.
# --------------------------------------------------------------------------------------
def load_from_config(source: str, data_cfg: Any):
  """LEAF JSON (data.source='leaf') and TFF's text SQLite files (data.source=
  'federated_sqlite', data.name in TEXT_SQLITE) from config fields (`sources.load_dataset`);
  next-token targets come encoded for training (`training_targets`)."""
  name = _cfg(data_cfg, "name", "") or ""
  path = resolve_path(source, name, _cfg(data_cfg, "path", "") or "", data_cfg)
  length = _cfg(data_cfg, "max_length", 0) or 0
  if source == "leaf":
    if name not in LEAF_DATASETS:
      raise ValueError(f"data.name={name!r} is not one of {list(LEAF_DATASETS)} for "
                       f"data.source='leaf'")
    return load_leaf(path, name, invert=bool(_cfg(data_cfg, "invert_pixels", True)),
                     seq_length=length or SHAKESPEARE_SEQUENCE_LENGTH)
  if name == "shakespeare":
    return training_targets(load_tff_shakespeare(
        path, seq_length=length or SHAKESPEARE_SEQUENCE_LENGTH))
  word_counts = _cfg(data_cfg, "word_counts_path", "") or None
  if word_counts is None and _cfg(data_cfg, "download", True) and not _cfg(
      data_cfg, "vocabulary_path", ""):
    from fedjax_sharp.data import download  # pylint: disable=g-import-not-at-top
    word_counts = os.path.join(download.fetch_dataset("stackoverflow_word_count"),
                               "stackoverflow.word_count")
  return training_targets(load_tff_stackoverflow(
      path, vocab_size=int(_cfg(data_cfg, "vocab_max_size", 0) or STACKOVERFLOW_NUM_WORDS),
      word_counts_path=word_counts, vocabulary=_cfg(data_cfg, "vocabulary_path", "") or None,
      max_length=length or STACKOVERFLOW_SEQUENCE_LENGTH))
