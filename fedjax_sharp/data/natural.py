"""Language-model data: token ids, vocabularies and next-token sequences, for the text
datasets with a natural partition (Shakespeare and Stack Overflow from TFF's SQLite files,
`tff_sqlite`; LEAF's Shakespeare, `leaf`). The datasets' own files are read by those modules;
the one file read here is a saved LM vocabulary (`json_files` schema).

  - Shakespeare (`shakespeare_sequences`): per client, fedjax's preprocessing: every
    snippet becomes BOS, its bytes' ids, EOS; the client's snippets are joined into one
    sequence s; inputs s[:-1] and targets s[1:] are cut into rows of `seq_length` (80),
    the last row padded with PAD. With seq_length 3, [b'ABCD', b'E'] becomes
    x = [[BOS, A, B], [C, D, EOS], [BOS, E, PAD]], y = [[A, B, C], [D, EOS, BOS],
    [E, EOS, PAD]]. Bytes are mapped one by one (a non-ASCII character is several OOVs).
  - Stack Overflow (`word_sequences`): each post is one sequence: x = [BOS, w1, ..., wn] and
    y = [w1, ..., wn, EOS], each cut to `max_length` (20) and padded with PAD (fedjax's
    `StackoverflowTokenizer`; a post longer than max_length - 1 words loses its EOS).

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
import logging
import os
from typing import Iterable, Sequence

import numpy as np

from fedjax_sharp.data import json_files
from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data.federated_files import client_rows, sort_key
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

STACKOVERFLOW_NUM_WORDS = 10000
STACKOVERFLOW_OOV_ID = NUM_RESERVED + STACKOVERFLOW_NUM_WORDS        # 10003
STACKOVERFLOW_VOCAB_SIZE = STACKOVERFLOW_OOV_ID + 1                 # 10004
STACKOVERFLOW_SEQUENCE_LENGTH = 20
STACKOVERFLOW_SPLITS = ("train", "heldout", "test")
STACKOVERFLOW_LOSS_IGNORE_IDS = (PAD_ID,)
# With the default 10,000 words; for another vocabulary use `stackoverflow_accuracy_ignore_ids`.
STACKOVERFLOW_ACCURACY_IGNORE_IDS = (BOS_ID, EOS_ID, STACKOVERFLOW_OOV_ID)
STACKOVERFLOW_UNPREDICTABLE_IDS = (PAD_ID, BOS_ID, EOS_ID, STACKOVERFLOW_OOV_ID)


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

  @property
  def unknown_id(self) -> int:
    """Unknown symbols map to OOV (`text.Vocabulary.id` / `ids` read this)."""
    return self.oov_id

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


# The file `save_lm_vocabulary` writes (`LMVocabulary.to_json`); "special" is not read back:
# the ids follow from "tokens".
_VOCAB_FILE = text_lib.vocabulary_schema(
    "a language-model vocabulary", VOCAB_FORMAT, VOCAB_VERSION,
    json_files.Key("kind", str, "'chars' or 'words'", values=("chars", "words")))


def load_lm_vocabulary(path: str) -> LMVocabulary:
  """Reads a file written by `save_lm_vocabulary` (or `text.save_vocabulary`)."""
  obj = text_lib.read_vocabulary_json(path, _VOCAB_FILE)
  tokens = obj["tokens"]
  if len(tokens) < 5 or tuple(tokens[:3]) != (PAD, BOS, EOS) or tokens[-1] != OOV:
    raise DataError(f"{path}: \"tokens\" must be a list of strings {PAD!r}, {BOS!r}, "
                    f"{EOS!r}, the symbols, {OOV!r}")
  try:
    return LMVocabulary(tokens[NUM_RESERVED:-1], kind=obj["kind"])
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
def assemble_tokens(name: str, per_split: dict, vocabulary, num_classes: int,
                    label_mode: str, where: str) -> TokenDataset:
  """per_split[split] = {client_id: (x int32, y int32)} -> TokenDataset + natural clients.

  Clients: the training split's, in `sort_key` order; test rows of each client aligned,
  those of test-only clients after them (in x_test, owned by no client).
  """
  train, test = per_split["train"], per_split["test"]
  client_ids = sort_key(train.keys())
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


