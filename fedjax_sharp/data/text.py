"""Text pipeline: tokenizer, vocabulary, padding to fixed-length int32 token ids.

* Tokenizer (`tokenize`): lowercase, then split on every character that is not a letter or a
  digit (Unicode-aware; '_' counts as a separator). "Wall St. Bears' 2nd-day" ->
  ['wall', 'st', 'bears', '2nd', 'day'].
* Vocabulary (`build_vocabulary`): built from the TRAINING split only. Id 0 = '<pad>',
  id 1 = '<unk>', then every token seen at least `min_count` times, most frequent first
  (ties in alphabetical order, so the result is deterministic), at most `max_size` ids in
  all (0 = no limit).
* Encoding (`encode`): the first `max_length` tokens of each text, unknown tokens -> 1,
  padded with 0 at the end, int32 `[N, max_length]`.

Vocabulary files (`save_vocabulary` / `load_vocabulary`) are JSON, written atomically:

    {"format": "fedjax_sharp.vocabulary", "version": 1,
     "tokenizer": "lower_alnum", "min_count": 2, "max_size": 0,
     "tokens": ["<pad>", "<unk>", "the", "a", ...]}

`tokens[i]` is the token with id i. A run that loads the vocabulary of an earlier run
(`data.vocabulary_path`) encodes its text exactly as that run did.
"""
from __future__ import annotations

import collections
import json
import os
import re
from typing import Iterable, Sequence

import numpy as np

from fedjax_sharp.data import json_files
from fedjax_sharp.errors import DataError
from fedjax_sharp.fileio import atomic_write_bytes

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
TOKENIZER = "lower_alnum"
FORMAT = "fedjax_sharp.vocabulary"
VERSION = 1

_TOKEN_RE = re.compile(r"[^\W_]+")  # runs of Unicode letters/digits


def _as_str(text) -> str:
  if isinstance(text, (bytes, np.bytes_)):
    return bytes(text).decode("utf-8", errors="replace")
  if isinstance(text, np.ndarray) and text.ndim == 0:
    return _as_str(text.item())
  return str(text)


def tokenize(text) -> list[str]:
  """Lowercased runs of letters/digits (`str` or UTF-8 `bytes`)."""
  return _TOKEN_RE.findall(_as_str(text).lower())


class Vocabulary:
  """Token <-> id mapping with 0 = '<pad>' and 1 = '<unk>'."""

  def __init__(self, tokens: Sequence[str], min_count: int = 1, max_size: int = 0):
    tokens = [str(t) for t in tokens]
    if len(tokens) < 2 or tokens[0] != PAD or tokens[1] != UNK:
      raise ValueError(f"a vocabulary starts with {PAD!r}, {UNK!r}; got {tokens[:2]}")
    if len(set(tokens)) != len(tokens):
      dup = next(t for t, c in collections.Counter(tokens).items() if c > 1)
      raise ValueError(f"token {dup!r} appears twice in the vocabulary")
    self.tokens = tuple(tokens)
    self.min_count = int(min_count)
    self.max_size = int(max_size)
    self._ids = {t: i for i, t in enumerate(self.tokens)}

  @property
  def size(self) -> int:
    return len(self.tokens)

  def __len__(self) -> int:
    return len(self.tokens)

  def __eq__(self, other) -> bool:
    return isinstance(other, Vocabulary) and self.tokens == other.tokens

  def __hash__(self) -> int:
    return hash(self.tokens)

  def __repr__(self) -> str:
    return f"Vocabulary(size={self.size}, min_count={self.min_count})"

  @property
  def unknown_id(self) -> int:
    """The id of a token not in the vocabulary: '<unk>' here (a subclass may differ)."""
    return UNK_ID

  def id(self, token: str) -> int:
    return self._ids.get(token, self.unknown_id)

  def ids(self, tokens: Iterable[str]) -> list[int]:
    get, unknown = self._ids.get, self.unknown_id
    return [get(t, unknown) for t in tokens]

  def to_json(self) -> dict:
    return {"format": FORMAT, "version": VERSION, "tokenizer": TOKENIZER,
            "min_count": self.min_count, "max_size": self.max_size, "tokens": list(self.tokens)}

  def save(self, path: str) -> None:
    save_vocabulary(path, self)

  @staticmethod
  def load(path: str) -> "Vocabulary":
    return load_vocabulary(path)


def build_vocabulary(texts: Iterable, min_count: int = 1, max_size: int = 0) -> Vocabulary:
  """The vocabulary of `texts` (the training split): see the module docstring."""
  if isinstance(min_count, bool) or int(min_count) != min_count or min_count < 1:
    raise ValueError(f"data.vocab_min_count must be an integer >= 1, got {min_count}")
  if (isinstance(max_size, bool) or int(max_size) != max_size or max_size < 0
      or 0 < max_size < 3):
    raise ValueError(f"data.vocab_max_size must be 0 (no limit) or >= 3 (pad, unk and one "
                     f"token), got {max_size}")
  counts: collections.Counter = collections.Counter()
  for text in texts:
    counts.update(tokenize(text))
  kept = sorted((t for t, c in counts.items() if c >= min_count and t not in (PAD, UNK)),
                key=lambda t: (-counts[t], t))
  if max_size:
    kept = kept[:max_size - 2]
  return Vocabulary([PAD, UNK] + kept, min_count=min_count, max_size=max_size)


def encode(texts: Sequence, vocabulary: Vocabulary, max_length: int) -> np.ndarray:
  """int32 `[len(texts), max_length]`: first `max_length` token ids, 0-padded at the end."""
  if isinstance(max_length, bool) or int(max_length) != max_length or max_length < 1:
    raise ValueError(f"data.max_length must be a positive integer, got {max_length}")
  max_length = int(max_length)
  out = np.zeros((len(texts), max_length), dtype=np.int32)
  for i, text in enumerate(texts):
    ids = vocabulary.ids(tokenize(text)[:max_length])
    out[i, :len(ids)] = ids
  return out


def decode(ids: Sequence[int], vocabulary: Vocabulary) -> list[str]:
  """Tokens of one encoded sequence, padding dropped (for inspection)."""
  return [vocabulary.tokens[int(i)] for i in ids if int(i) != PAD_ID]


# --------------------------------------------------------------------------------------
# Files.
# --------------------------------------------------------------------------------------
def save_vocabulary(path: str, vocabulary: Vocabulary) -> None:
  """Writes `vocabulary` as JSON to `path` (atomically)."""
  if not isinstance(vocabulary, Vocabulary):
    raise TypeError(f"save_vocabulary(path, vocabulary) needs a Vocabulary, got "
                    f"{type(vocabulary).__name__}")
  payload = json.dumps(vocabulary.to_json(), ensure_ascii=False, indent=0).encode("utf-8")
  atomic_write_bytes(path, payload)


def vocabulary_schema(what: str, file_format: str, version: int,
                      *keys: json_files.Key) -> json_files.Schema:
  """The schema of a vocabulary file: "format" `file_format`, "version" `version` and
  "tokens" (a list of strings) that every vocabulary file holds, then `keys`."""
  return json_files.Schema(what, f"a JSON object with \"format\": {file_format!r}", (
      json_files.Key("format", str, repr(file_format), values=(file_format,)),
      json_files.Key("version", int, f"{version} (the version this reader supports)",
                     values=(version,)),
      json_files.Key("tokens", list, "a list of strings", items=str),
  ) + keys)


# The file `save_vocabulary` writes (module docstring); a file without "tokenizer",
# "min_count" or "max_size" reads with `build_vocabulary`'s defaults.
_FILE = vocabulary_schema(
    "a fedjax_sharp vocabulary", FORMAT, VERSION,
    json_files.Key("tokenizer", str, repr(TOKENIZER), default=TOKENIZER, values=(TOKENIZER,)),
    json_files.Key("min_count", int, "an integer", default=1),
    json_files.Key("max_size", int, "an integer", default=0))


def read_vocabulary_json(path: str, schema: json_files.Schema) -> dict:
  """The JSON object of a vocabulary file, checked against `schema` (`vocabulary_schema`);
  every problem is one `DataError` naming the file."""
  if not os.path.isfile(path):
    raise DataError(f"vocabulary file {path!r} does not exist")
  return json_files.read_object(path, schema)


def load_vocabulary(path: str) -> Vocabulary:
  """Reads a file written by `save_vocabulary`; every problem names the file."""
  obj = read_vocabulary_json(path, _FILE)
  try:
    return Vocabulary(obj["tokens"], min_count=obj["min_count"], max_size=obj["max_size"])
  except ValueError as e:
    raise DataError(f"{path}: {e}") from None
