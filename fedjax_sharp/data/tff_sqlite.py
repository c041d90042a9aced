"""TFF's SQLite client data (`data.source='federated_sqlite'`), read without TensorFlow.

A file (`emnist_all.sqlite`, `shakespeare.sqlite`, `stackoverflow.sqlite` after lzma
decompression) holds a table `examples(split_name TEXT, client_id TEXT,
serialized_example_proto BLOB)` of `tf.train.Example` protos, parsed with the protobuf classes
bundled in tensorflow-datasets. `read_examples` is the one reader: it reads the examples of the
wanted splits (and clients) in table order and, where the file's `client_metadata(client_id,
split_name, num_examples)` table is there, checks its counts against the examples read. The
datasets, by data.name:

  - images (federated_emnist, femnist, or any name): features `pixels` (float or int list)
    and `label` (int64), splits 'train' / 'test' (`load_federated_sqlite`); the pixel
    convention and natural partition of `hdf5.load_federated_h5`.
  - 'shakespeare' (`load_tff_shakespeare`): feature 'snippets' (one bytes value: a
    contiguous passage of one character's lines), splits 'train' / 'test', made into
    next-character sequences (`natural.shakespeare_sequences`).
  - 'stackoverflow' (`load_tff_stackoverflow`): feature 'tokens' (one bytes value: the
    post's tokens joined by spaces; 'title', 'tags', 'creation_date', 'score', 'type' are
    not read), splits 'train', 'heldout', 'test'; one next-word sequence per post
    (`natural.word_sequences`).

The text datasets are `TokenDataset`s with `label_mode='token'` (token ids: `natural`), one
client per TFF client (train split), its rows of the test split aligned (`test_clients`).
Every problem raises a one-line `DataError` naming the file and, where there is one, the
client.
"""
from __future__ import annotations

import math
import os
import sqlite3
from typing import Annotated, Any, Callable, Sequence

import numpy as np

from fedjax_sharp.data import natural
from fedjax_sharp.data.arrays import known_num_classes
from fedjax_sharp.data.federated_files import assemble_federated
from fedjax_sharp.data.federated_files import file_source_name, pixels_to_uint8, resolve_path
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.errors import DataError
from fedjax_sharp.hyperparameters import Field

TEXT_NAMES = ("shakespeare", "stackoverflow")   # data.name values read as text


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


def read_examples(path: str, splits: dict, parse: Callable[[str, Any], Any],
                  clients: Sequence[str] | None = None) -> dict:
  """{key: {client_id: [parse(what, example), ...]}} of `splits` = {key: split_name},
  examples in table order (`what` names the file, client and split for errors);
  `clients`: only these client ids (default all). Checked against `client_metadata` when the
  file has that table; a split without examples is an error."""
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
        out[by_name[split]].setdefault(str(cid), []).append(parse(what, ex.features.feature))
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


def load_federated_sqlite(path: str, name: str | None = None,
                          num_classes: int | None = None, invert: bool = True,
                          pixels_key: str = "pixels", label_key: str = "label",
                          train_split: str = "train", test_split: str = "test",
                          image_shape: tuple[int, ...] | None = None) -> ArrayDataset:
  """Federated EMNIST (or similar) from TFF's SQLite client data (module docstring).

  `image_shape` (default: a square from the pixel count, e.g. 784 -> 28x28) reshapes each
  example's flat pixel list. `name` and `num_classes` as in `hdf5.load_federated_h5`.
  """
  if num_classes is None and name:
    num_classes = known_num_classes(name)
  name = name or "federated_emnist"

  def parse(what, feats):
    if pixels_key not in feats or label_key not in feats:
      raise DataError(f"{what}: example lacks {pixels_key!r} or {label_key!r} (has "
                      f"{sorted(feats.keys())})")
    label = _feature_values(feats[label_key], what)
    if label.dtype != np.int64 or label.size != 1:
      raise DataError(f"{what}: {label_key!r} must be one int64, got {label.dtype} "
                      f"x{label.size}")
    return _feature_values(feats[pixels_key], what), int(label[0])

  raw = read_examples(path, {"train": train_split, "test": test_split}, parse)
  per_split = {}
  for key, split in (("train", train_split), ("test", test_split)):
    per_split[key] = {}
    for cid, examples in raw[key].items():
      what = f"{path}: client {cid!r} ({split})"
      lengths = {len(x) for x, _ in examples}
      if len(lengths) != 1:
        raise DataError(f"{what}: examples have {sorted(lengths)[:4]} pixels")
      flat = np.stack([x for x, _ in examples])
      shape = image_shape
      if shape is None:
        side = math.isqrt(flat.shape[1])
        if side * side != flat.shape[1]:
          raise DataError(f"{what}: {flat.shape[1]} pixels are not a square image; pass "
                          f"image_shape")
        shape = (side, side)
      try:
        images = flat.reshape((len(examples),) + tuple(shape))
      except ValueError:
        raise DataError(f"{what}: {flat.shape[1]} pixels do not fit image_shape={shape}"
                        ) from None
      per_split[key][cid] = (pixels_to_uint8(images, invert, what),
                             np.asarray([y for _, y in examples], dtype=np.int64))
  return assemble_federated(name, per_split, num_classes, path)


def _bytes_feature(feature: str) -> Callable:
  """A `read_examples` parser: the one bytes value of `feature`."""
  def parse(what, feats):
    if feature not in feats:
      raise DataError(f"{what}: example lacks feature {feature!r} (has "
                      f"{sorted(feats.keys())})")
    f = feats[feature]
    kind = f.WhichOneof("kind")
    if kind != "bytes_list" or len(f.bytes_list.value) != 1:
      count = len(getattr(f, kind).value) if kind else 0
      raise DataError(f"{what}: feature {feature!r} must hold one bytes value, got "
                      f"{kind} of length {count}")
    return f.bytes_list.value[0]
  return parse


def _check_length(value, field: str) -> int:
  if isinstance(value, bool) or int(value) != value or value < 1:
    raise ValueError(f"{field} must be a positive integer, got {value}")
  return int(value)


def load_tff_shakespeare(path: str, seq_length: int = natural.SHAKESPEARE_SEQUENCE_LENGTH,
                         train_split: str = "train", test_split: str = "test",
                         clients: Sequence[str] | None = None,
                         name: str = "shakespeare") -> TokenDataset:
  """TFF's Shakespeare SQLite file -> next-character sequences (module docstring).

  Returns a `TokenDataset` (`label_mode='token'`): x, y int32 `[n, seq_length]`, vocabulary
  `natural.shakespeare_vocabulary()` (90 ids), one client per speaking role. `clients`: read
  only these client ids (default all).
  """
  seq_length = _check_length(seq_length, "seq_length")
  raw = read_examples(path, {"train": train_split, "test": test_split},
                      _bytes_feature("snippets"), clients)
  per_split = {key: {cid: natural.shakespeare_sequences(snips, seq_length)
                     for cid, snips in by_client.items()}
               for key, by_client in raw.items()}
  return natural.assemble_tokens(name, per_split, natural.shakespeare_vocabulary(),
                                 natural.SHAKESPEARE_VOCAB_SIZE, "token", path)


def load_tff_stackoverflow(path: str, vocab_size: int = natural.STACKOVERFLOW_NUM_WORDS,
                           word_counts_path: str | None = None,
                           vocabulary: "natural.LMVocabulary | str | None" = None,
                           max_length: int = natural.STACKOVERFLOW_SEQUENCE_LENGTH,
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
    vocabulary: a `natural.LMVocabulary` (or the path of a saved one) to reuse; overrides
      both.
    max_length: L, the sequence length (fedjax / TFF: 20).
    train_split: the training split's name ('train').
    test_split: the evaluation split's name ('test'; TFF also has 'heldout').
    clients: read only these client ids (default all; the full file holds 342k training
      clients and 135M posts, far more than host memory as [n, 20] int32 arrays).
    count_by: 'clients' (TFF's definition) or 'tokens'.
  """
  max_length = _check_length(max_length, "max_length")
  vocab_size = _check_length(vocab_size, "vocab_size")
  raw = read_examples(path, {"train": train_split, "test": test_split},
                      _bytes_feature("tokens"), clients)
  posts = {key: {cid: [v.decode("utf-8", errors="replace").split() for v in values]
                 for cid, values in by_client.items()}
           for key, by_client in raw.items()}
  if isinstance(vocabulary, str):
    vocabulary = natural.load_lm_vocabulary(vocabulary)
  if vocabulary is None:
    if word_counts_path:
      vocabulary = natural.stackoverflow_vocabulary(
          [w for w, _ in natural.read_word_counts(word_counts_path, vocab_size)])
    else:
      vocabulary = natural.stackoverflow_vocabulary(
          counts=natural.count_words(posts["train"], count_by), vocab_size=vocab_size)
  if not isinstance(vocabulary, natural.LMVocabulary) or vocabulary.kind != "words":
    raise ValueError(f"load_tff_stackoverflow: vocabulary must be a words LMVocabulary, got "
                     f"{vocabulary!r}")
  per_split = {key: {cid: natural.word_sequences(p, vocabulary, max_length)
                     for cid, p in by_client.items()}
               for key, by_client in posts.items()}
  return natural.assemble_tokens(name, per_split, vocabulary, vocabulary.size, "token", path)


def from_config(data_cfg, *, word_counts_path: Annotated[
    str, Field(doc="stackoverflow: TFF's stackoverflow.word_count ('' = fetched with "
               "data.download, else counted from the training split)")] = ""
                ) -> ArrayDataset | TokenDataset:
  """data.path ('' with a DOWNLOADABLE data.name and data.download: fetched); data.name:
  'shakespeare' / 'stackoverflow' (text: next-token targets encoded for training,
  `natural.training_targets`) or an image dataset ('' = federated_emnist); images:
  data.num_classes (0 = known by name, else from the labels), data.invert_pixels; text:
  data.max_length (0 = the dataset's length), Stack Overflow: data.vocab_max_size (0 =
  10,000 words), data.vocabulary_path; its own block: data.federated_sqlite.word_counts_path
  ('' with data.download: TFF's word counts, fetched)."""
  name = file_source_name(data_cfg)
  path = resolve_path("federated_sqlite", name, data_cfg.path, data_cfg.download)
  if name not in TEXT_NAMES:
    return load_federated_sqlite(path, name=name or None,
                                 num_classes=data_cfg.num_classes or None,
                                 invert=bool(data_cfg.invert_pixels))
  if name == "shakespeare":
    return natural.training_targets(load_tff_shakespeare(
        path, seq_length=data_cfg.max_length or natural.SHAKESPEARE_SEQUENCE_LENGTH))
  word_counts = word_counts_path or None
  if word_counts is None and data_cfg.download and not data_cfg.vocabulary_path:
    from fedjax_sharp.data import download  # pylint: disable=g-import-not-at-top
    word_counts = os.path.join(download.fetch_dataset("stackoverflow_word_count"),
                               "stackoverflow.word_count")
  return natural.training_targets(load_tff_stackoverflow(
      path, vocab_size=int(data_cfg.vocab_max_size or natural.STACKOVERFLOW_NUM_WORDS),
      word_counts_path=word_counts, vocabulary=data_cfg.vocabulary_path or None,
      max_length=data_cfg.max_length or natural.STACKOVERFLOW_SEQUENCE_LENGTH))
