"""LEAF JSON and TFF SQLite text readers (`data/leaf.py`, `data/tff_sqlite.py`) on small files.

Golden token ids are written by hand from the character table (position in
`SHAKESPEARE_CHARS` + 3): 'D' 7 -> 10, ' ' 13 -> 16, 'C' 26 -> 29, 'b' 41 -> 44,
'B' 48 -> 51, '\\n' 62 -> 65, 'a' 63 -> 66, 'e' 64 -> 67, 'A' 70 -> 73, 'E' 71 -> 74;
'>' and '}' are not in the table: OOV 89. PAD 0, BOS 1, EOS 2.
"""
from __future__ import annotations

import json
import os
import sqlite3

import numpy as np
import pytest

from fedjax_sharp.data import leaf
from fedjax_sharp.data import natural as N
from fedjax_sharp.data import tff_sqlite
from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.errors import DataError

PAD, BOS, EOS, OOV = 0, 1, 2, 89


def parts(clients):
  return [list(map(int, c)) for c in clients]


def one_line_error(excinfo, *needles):
  msg = str(excinfo.value)
  assert "\n" not in msg, msg
  for n in needles:
    assert str(n) in msg, (n, msg)
  return msg


# --------------------------------------------------------------------------------------
# LEAF JSON.
# --------------------------------------------------------------------------------------
def write_leaf(path, users, num_samples=True, extra=None):
  """users: {id: (xs, ys)} in listing order."""
  obj = {"users": list(users)}
  if num_samples:
    obj["num_samples"] = [len(xs) for xs, _ in users.values()]
  obj["user_data"] = {u: {"x": xs, "y": ys} for u, (xs, ys) in users.items()}
  obj.update(extra or {})
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(obj, f)
  return str(path)


def femnist_pixels(k, at):
  """LEAF's 784 values: background 1.0 (255/255), pixel `at` (row-major) = k / 255."""
  x = [1.0] * 784
  x[at] = k / 255
  return x


def femnist_image(k, at):
  """The expected uint8 image with ink bright: 255 - 255 * value."""
  img = np.zeros((28, 28, 1), np.uint8)
  img[at // 28, at % 28, 0] = 255 - k
  return img


def leaf_femnist_tree(base):
  d = base / "data"
  write_leaf(d / "train" / "all_data_0_niid_train_9.json", {
      "f0001_40": ([femnist_pixels(0, 0), femnist_pixels(55, 29)], [5, 61]),
      "f0002_41": ([femnist_pixels(200, 783)], [0]),
  }, extra={"hierarchies": ["ignored"]})
  # LEAF's split_data.py leaves an empty, unlisted entry for every user it dropped.
  p = d / "train" / "all_data_0_niid_train_9.json"
  obj = json.loads(p.read_text())
  obj["user_data"]["f0099_dropped"] = {"x": [], "y": []}
  p.write_text(json.dumps(obj))
  write_leaf(d / "train" / "all_data_1_niid_train_9.json", {
      "f0001_40": ([femnist_pixels(100, 100)], [36]),     # the same writer's second shard
      "f0003_42": ([femnist_pixels(254, 400)], [10]),
  })
  write_leaf(d / "test" / "all_data_0_niid_test_9.json", {
      "f0003_42": ([femnist_pixels(1, 1), femnist_pixels(2, 2)], [9, 8]),
      "f0001_40": ([femnist_pixels(3, 3)], [7]),
      "f9999_00": ([femnist_pixels(4, 4)], [1]),          # test-only user
  })
  return base


def test_leaf_femnist_pixels_labels_clients_and_shards(tmp_path):
  base = leaf_femnist_tree(tmp_path / "femnist")
  ds = leaf.load_leaf(str(base), "femnist")
  assert isinstance(ds, ArrayDataset)
  assert ds.name == "leaf_femnist" and ds.num_classes == 62
  assert ds.client_ids == ("f0001_40", "f0002_41", "f0003_42")
  expected_train = np.stack([femnist_image(0, 0), femnist_image(55, 29),
                             femnist_image(100, 100), femnist_image(200, 783),
                             femnist_image(254, 400)])
  np.testing.assert_array_equal(ds.x_train, expected_train)
  assert ds.x_train[1, 1, 1, 0] == 200 and ds.x_train[0].max() == 255   # spot values by hand
  np.testing.assert_array_equal(ds.y_train, [5, 61, 36, 0, 10])
  assert parts(ds.train_clients) == [[0, 1, 2], [3], [4]]
  # Test split: f0001 first (client order), f0002 has none, f0003, then the test-only user.
  np.testing.assert_array_equal(ds.y_test, [7, 9, 8, 1])
  np.testing.assert_array_equal(ds.x_test, np.stack([
      femnist_image(3, 3), femnist_image(1, 1), femnist_image(2, 2), femnist_image(4, 4)]))
  assert parts(ds.test_clients) == [[0], [], [1, 2]]
  # LEAF's values kept (invert=False), and the directory holding train/ given directly.
  raw = leaf.load_leaf(str(base / "data"), "femnist", invert=False, dataset_name="femnist")
  assert raw.name == "femnist"
  np.testing.assert_array_equal(raw.x_train, 255 - expected_train)


def shakespeare_row(tail, pad_char=" "):
  return pad_char * (80 - len(tail)) + tail


def leaf_shakespeare_tree(base):
  write_leaf(base / "train" / "a_train.json", {
      "ROMEO": ([shakespeare_row("Abe"), shakespeare_row("E>")], ["e", "}"]),
  }, extra={"hierarchies": ["ROMEO AND JULIET"]})
  write_leaf(base / "train" / "b_train.json", {
      "JULIET": ([shakespeare_row("aD")], ["\n"]),
      "ROMEO": ([shakespeare_row("BC")], ["A"]),
  }, num_samples=False)
  write_leaf(base / "test" / "a_test.json", {
      "ROMEO": ([shakespeare_row("CC")], ["b"]),
      "JULIET": ([shakespeare_row("D")], ["E"]),
  })
  return base


def test_leaf_shakespeare_next_char_ids(tmp_path):
  ds = leaf.load_leaf(str(leaf_shakespeare_tree(tmp_path / "shakespeare")), "shakespeare")
  assert isinstance(ds, TokenDataset) and ds.label_mode == "sequence"
  assert ds.name == "leaf_shakespeare"
  assert ds.num_classes == 90 and ds.vocab_size == 90 and ds.input_shape == (80,)
  assert ds.client_ids == ("JULIET", "ROMEO")

  def row(*tail):
    return [16] * (80 - len(tail)) + list(tail)

  np.testing.assert_array_equal(ds.x_train, [row(66, 10),              # JULIET 'aD'
                                             row(73, 44, 67),          # ROMEO 'Abe'
                                             row(74, OOV),             # 'E>'
                                             row(51, 29)])             # 'BC' (second shard)
  np.testing.assert_array_equal(ds.y_train, [65, 67, OOV, 73])         # '\n' 'e' '}' 'A'
  assert parts(ds.train_clients) == [[0], [1, 2, 3]]
  np.testing.assert_array_equal(ds.x_test, [row(10), row(29, 29)])
  np.testing.assert_array_equal(ds.y_test, [74, 44])
  assert parts(ds.test_clients) == [[0], [1]]
  assert ds.x_train.dtype == np.int32 and ds.y_train.dtype == np.int32


def test_leaf_errors_name_the_file_and_the_user(tmp_path):
  with pytest.raises(ValueError, match="femnist"):
    leaf.load_leaf(str(tmp_path), "sent140")
  with pytest.raises(DataError) as e:
    leaf.load_leaf(str(tmp_path / "nope"), "femnist")
  one_line_error(e, "nope", "does not exist")

  def tree(name, train_users, test_users=None, **kw):
    base = tmp_path / name
    path = write_leaf(base / "train" / "t.json", train_users, **kw)
    write_leaf(base / "test" / "t.json",
               test_users or {"u": ([femnist_pixels(0, 0)], [1])})
    return str(base), path

  good = {"u": ([femnist_pixels(0, 0)], [1])}
  # A missing split directory.
  base, _ = tree("nosplit", good)
  os.remove(os.path.join(base, "test", "t.json"))
  os.rmdir(os.path.join(base, "test"))
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, base, "no test/ directory")
  # A split directory without JSON files.
  base, path = tree("nojson", good)
  os.rename(path, path + ".bak")
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, os.path.join(base, "train"), "no .json files")
  # Malformed JSON (a truncated file).
  base, path = tree("truncated", good)
  with open(path) as f:
    content = f.read()
  with open(path, "w") as f:
    f.write(content[:len(content) // 2])
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, path, "not valid JSON")
  # Valid JSON, unknown schema.
  base, path = tree("schema", good)
  with open(path, "w") as f:
    json.dump({"clients": ["u"], "data": {}}, f)
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, path, "not a LEAF data file", "'clients'")
  with open(path, "w") as f:
    json.dump([1, 2], f)
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, path, "not a LEAF data file")

  cases = [
      # (train users, write_leaf kwargs, needles)
      ({"u": ([], [])}, {}, ("user 'u'", "zero examples")),
      ({"u": ([femnist_pixels(0, 0)] * 2, [1])}, {}, ("user 'u'", "2 examples in 'x'",
                                                      "1 labels")),
      ({"u": ([femnist_pixels(0, 0)], [62])}, {}, ("user 'u'", "label 62", "[0, 62)")),
      ({"u": ([femnist_pixels(0, 0)], [-1])}, {}, ("user 'u'", "label -1")),
      ({"u": ([femnist_pixels(0, 0)], [1.5])}, {}, ("user 'u'", "not an integer")),
      ({"u": ([femnist_pixels(0, 0)[:783]], [1])}, {}, ("user 'u'", "784")),
      ({"u": ([[2.0] * 784], [1])}, {}, ("user 'u'", "[0, 1]")),
      ({"u": ([femnist_pixels(0, 0)], [1])}, {"extra": {"num_samples": [3]}},
       ("user 'u'", "num_samples says 3", "holds 1")),
      ({"u": ([femnist_pixels(0, 0)], [1])}, {"extra": {"num_samples": [1, 1]}},
       ("'num_samples'", "1 users, got 2")),
      ({"u": ([femnist_pixels(0, 0)], [1])}, {"extra": {"users": ["u", "v"],
                                                        "num_samples": [1, 1]}},
       ("user 'v'", "no entry in 'user_data'")),
      ({"u": ([femnist_pixels(0, 0)], [1])}, {"extra": {"users": []}, "num_samples": False},
       ("user 'u'", "not listed in 'users'")),
  ]
  for i, (users, kw, needles) in enumerate(cases):
    base, path = tree(f"case{i}", users, **kw)
    with pytest.raises(DataError) as e:
      leaf.load_leaf(base, "femnist")
    one_line_error(e, path, *needles)
  # The test split is validated the same way.
  base, _ = tree("badtest", good, test_users={"u": ([femnist_pixels(0, 0)], [99])})
  with pytest.raises(DataError) as e:
    leaf.load_leaf(base, "femnist")
  one_line_error(e, os.path.join(base, "test", "t.json"), "user 'u'", "label 99")

  # Shakespeare: x of the wrong length, y not one character.
  for i, (xs, ys, needles) in enumerate([
      ([shakespeare_row("ab")[1:]], ["c"], ("example 0", "80 characters", "got 79")),
      ([shakespeare_row("ab")], ["cd"], ("'y' of example 0", "'cd'")),
      ([shakespeare_row("ab")], [3], ("'y' of example 0", "one character")),
      ([5], ["c"], ("'x' of example 0", "got int"))]):
    base, path = tree(f"shake{i}", {"ROMEO": (xs, ys)},
                      test_users={"ROMEO": ([shakespeare_row("x")], ["y"])})
    with pytest.raises(DataError) as e:
      leaf.load_leaf(base, "shakespeare")
    one_line_error(e, path, "user 'ROMEO'", *needles)


# --------------------------------------------------------------------------------------
# TFF SQLite text.
# --------------------------------------------------------------------------------------
def example_pb2():
  try:
    from tensorflow_datasets.proto import tf_example_pb2  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    pytest.skip(f"tensorflow_datasets.proto.tf_example_pb2 cannot be imported: {e}")
  return tf_example_pb2


def proto(pb2, **features):
  ex = pb2.Example()
  for k, v in features.items():
    if isinstance(v, int):
      ex.features.feature[k].int64_list.value.append(v)
    else:
      ex.features.feature[k].bytes_list.value.append(v)
  return ex.SerializeToString()


def write_tff_sqlite(path, rows, metadata=True, metadata_override=None):
  """rows: [(split, client, serialized proto)] in table order; client_metadata as TFF's."""
  con = sqlite3.connect(path)
  con.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
              "serialized_example_proto BLOB NOT NULL)")
  con.executemany("INSERT INTO examples VALUES (?, ?, ?)", rows)
  if metadata:
    counts = {}
    for split, cid, _ in rows:
      counts[(cid, split)] = counts.get((cid, split), 0) + 1
    counts.update(metadata_override or {})
    con.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT "
                "NULL, num_examples INTEGER NOT NULL)")
    con.executemany("INSERT INTO client_metadata VALUES (?, ?, ?)",
                    [(c, s, n) for (c, s), n in counts.items()])
  con.commit()
  con.close()
  return str(path)


def shakespeare_rows(pb2):
  s = lambda text: proto(pb2, snippets=text)  # noqa: E731
  return [("train", "c1", s(b"ABCD")), ("test", "c3", s(b"E")), ("train", "c2", s(b"a}")),
          ("validation", "c1", s(b"ignored")), ("train", "c1", s(b"E")),
          ("test", "c1", s(b"D"))]


def test_tff_shakespeare_sequences_clients_and_splits(tmp_path):
  pb2 = example_pb2()
  path = write_tff_sqlite(str(tmp_path / "shakespeare.sqlite"), shakespeare_rows(pb2))
  ds = tff_sqlite.load_tff_shakespeare(path, seq_length=3)
  assert isinstance(ds, TokenDataset) and ds.label_mode == "token"
  assert ds.name == "shakespeare" and ds.num_classes == 90 and ds.vocab_size == 90
  assert ds.vocabulary.tokens[:3] == ("<pad>", "<bos>", "<eos>")
  assert ds.vocabulary.tokens[73] == "A" and ds.vocabulary.tokens[89] == "<oov>"
  assert ds.client_ids == ("c1", "c2")
  # c1: [b'ABCD', b'E'] (fedjax's docstring example); c2: [b'a}'] ('}' is OOV).
  np.testing.assert_array_equal(ds.x_train, [[BOS, 73, 51], [29, 10, EOS], [BOS, 74, PAD],
                                             [BOS, 66, OOV]])
  np.testing.assert_array_equal(ds.y_train, [[73, 51, 29], [10, EOS, BOS], [74, EOS, PAD],
                                             [66, OOV, EOS]])
  assert parts(ds.train_clients) == [[0, 1, 2], [3]]
  # Test: c1 'D', then the test-only client c3 'E' (owned by no client).
  np.testing.assert_array_equal(ds.x_test, [[BOS, 10, PAD], [BOS, 74, PAD]])
  np.testing.assert_array_equal(ds.y_test, [[10, EOS, PAD], [74, EOS, PAD]])
  assert parts(ds.test_clients) == [[0], []]
  # Default length 80: one row per client here, padded with PAD.
  ds80 = tff_sqlite.load_tff_shakespeare(path)
  assert ds80.x_train.shape == (2, 80) and ds80.max_length == 80
  np.testing.assert_array_equal(ds80.x_train[0, :9], [BOS, 73, 51, 29, 10, EOS, BOS, 74, PAD])
  assert not ds80.x_train[0, 8:].any()
  # Another split as test; only some clients.
  sub = tff_sqlite.load_tff_shakespeare(path, seq_length=3, test_split="validation", clients=["c1"])
  assert sub.client_ids == ("c1",)
  # b'ignored': targets 'i' (position 65), 'g' (21), 'n' (44), each + 3.
  np.testing.assert_array_equal(sub.y_test[0], [68, 24, 47])


def stackoverflow_rows(pb2):
  def post(tokens, kind=b"answer"):
    return proto(pb2, tokens=tokens, title=b"t", tags=b"python|list",
                 creation_date=b"2010-01-08 09:34:05 UTC", score=3, type=kind)
  return [("train", "00000001", post(b"how do i sort a list .", b"question")),
          ("train", "00000002", post(b"a list of lists")),
          ("test", "00000001", post(b"use sorted ( list )")),
          ("train", "00000001", post(b"sort it")),
          ("heldout", "00000009", post(b"hello world"))]


def test_tff_stackoverflow_vocabularies_bos_eos_pad_oov(tmp_path):
  pb2 = example_pb2()
  path = write_tff_sqlite(str(tmp_path / "stackoverflow.sqlite"), stackoverflow_rows(pb2))
  # Vocabulary from the training split, counted by clients: a 2, list 2, then the words of
  # one client alphabetically: '.', 'do' ('sort' is used twice but by one client).
  ds = tff_sqlite.load_tff_stackoverflow(path, vocab_size=4, max_length=5)
  assert ds.vocabulary.tokens == ("<pad>", "<bos>", "<eos>", "a", "list", ".", "do", "<oov>")
  assert ds.vocabulary.oov_id == 7 and ds.num_classes == 8 and ds.label_mode == "token"
  assert ds.client_ids == ("00000001", "00000002")
  o = 7
  np.testing.assert_array_equal(ds.x_train, [[BOS, o, 6, o, o],          # how do i sort ...
                                             [BOS, o, o, PAD, PAD],      # sort it
                                             [BOS, 3, 4, o, o]])         # a list of lists
  np.testing.assert_array_equal(ds.y_train, [[o, 6, o, o, 3],            # cut: no EOS
                                             [o, o, EOS, PAD, PAD],
                                             [3, 4, o, o, EOS]])         # EOS just fits
  assert parts(ds.train_clients) == [[0, 1], [2]]
  np.testing.assert_array_equal(ds.x_test, [[BOS, o, o, o, 4]])          # use sorted ( list
  np.testing.assert_array_equal(ds.y_test, [[o, o, o, 4, o]])
  assert parts(ds.test_clients) == [[0], []]
  # Counted by occurrences: 'sort' (2) joins 'a' and 'list'.
  by_tokens = tff_sqlite.load_tff_stackoverflow(path, vocab_size=4, max_length=5, count_by="tokens")
  assert by_tokens.vocabulary.symbols == ("a", "list", "sort", ".")
  # TFF's word-count file: its first vocab_size lines.
  counts = tmp_path / "stackoverflow.word_count"
  counts.write_text("list 100\nthe 90\nsort 80\ni 70\n")
  wc = tff_sqlite.load_tff_stackoverflow(path, vocab_size=3, max_length=5,
                                word_counts_path=str(counts), test_split="heldout")
  assert wc.vocabulary.tokens == ("<pad>", "<bos>", "<eos>", "list", "the", "sort", "<oov>")
  o = 6
  np.testing.assert_array_equal(wc.x_train, [[BOS, o, o, o, 5], [BOS, 5, o, PAD, PAD],
                                             [BOS, o, 3, o, o]])
  np.testing.assert_array_equal(wc.y_train, [[o, o, o, 5, o], [5, o, EOS, PAD, PAD],
                                             [o, 3, o, o, EOS]])
  # heldout users are not training users: their rows are in x_test, owned by no client.
  np.testing.assert_array_equal(wc.x_test, [[BOS, o, o, PAD, PAD]])
  np.testing.assert_array_equal(wc.y_test, [[o, o, EOS, PAD, PAD]])
  assert parts(wc.test_clients) == [[], []]
  # The vocabulary saved as the run recorder does, and reused.
  vpath = str(tmp_path / "vocabulary.json")
  text_lib.save_vocabulary(vpath, wc.vocabulary)
  assert N.load_lm_vocabulary(vpath) == wc.vocabulary
  again = tff_sqlite.load_tff_stackoverflow(path, max_length=5, vocabulary=vpath, test_split="heldout")
  np.testing.assert_array_equal(again.x_train, wc.x_train)
  with pytest.raises(DataError):
    text_lib.load_vocabulary(vpath)   # the classification loader refuses it, loudly


def test_metric_constants():
  assert (N.PAD_ID, N.BOS_ID, N.EOS_ID) == (0, 1, 2)
  assert N.SHAKESPEARE_OOV_ID == 89 and N.SHAKESPEARE_VOCAB_SIZE == 90
  assert N.shakespeare_vocabulary().size == 90
  assert N.STACKOVERFLOW_OOV_ID == 10003 and N.STACKOVERFLOW_VOCAB_SIZE == 10004
  assert N.STACKOVERFLOW_ACCURACY_IGNORE_IDS == (1, 2, 10003)
  assert N.SHAKESPEARE_ACCURACY_IGNORE_IDS == (1, 2)
  words = N.stackoverflow_vocabulary([f"w{i}" for i in range(10000)])
  assert words.size == 10004 and words.oov_id == 10003 and words.id("nope") == 10003
  assert words.id("w0") == 3
  assert N.stackoverflow_accuracy_ignore_ids(words) == N.STACKOVERFLOW_ACCURACY_IGNORE_IDS
  # Every LEAF letter but '>' and '}' has an id below OOV.
  oov = [c for c in leaf.LEAF_SHAKESPEARE_LETTERS if N.encode_chars(c)[0] == N.SHAKESPEARE_OOV_ID]
  assert oov == [">", "}"]


def test_tff_sqlite_errors_name_the_file_and_the_client(tmp_path):
  pb2 = example_pb2()
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_shakespeare(str(tmp_path / "missing.sqlite"))
  one_line_error(e, "missing.sqlite", "does not exist")
  junk = tmp_path / "junk.sqlite"
  junk.write_bytes(b"this is not a database" * 100)
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_shakespeare(str(junk))
  one_line_error(e, str(junk), "cannot be read as SQLite")
  empty = str(tmp_path / "empty.sqlite")
  sqlite3.connect(empty).close()
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_shakespeare(empty)
  one_line_error(e, empty, "no table 'examples'")

  rows = shakespeare_rows(pb2)
  path = write_tff_sqlite(str(tmp_path / "shakespeare.sqlite"), rows)
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_shakespeare(path, test_split="heldout")
  one_line_error(e, path, "split_name='heldout'", "['test', 'train', 'validation']")
  with pytest.raises(ValueError, match="differ"):
    tff_sqlite.load_tff_shakespeare(path, test_split="train")
  # A Stack Overflow file read as Shakespeare: no 'snippets' feature.
  so = write_tff_sqlite(str(tmp_path / "so.sqlite"), stackoverflow_rows(pb2))
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_shakespeare(so)
  one_line_error(e, so, "client '00000001' (train)", "lacks feature 'snippets'", "tokens")
  # A blob that is not a tf.train.Example; a feature of the wrong kind.
  for name, blob, needle in [("badproto", b"\xff\xff\xff", "not a serialized"),
                             ("kind", proto(pb2, snippets=7), "int64_list")]:
    bad = write_tff_sqlite(str(tmp_path / f"{name}.sqlite"),
                           rows + [("train", "c9", blob)])
    with pytest.raises(DataError) as e:
      tff_sqlite.load_tff_shakespeare(bad)
    one_line_error(e, bad, "client 'c9' (train)", needle)
  # client_metadata disagreeing with the examples, or listing a client with none.
  for name, override, needles in [
      ("meta", {("c2", "train"): 5}, ("client 'c2' (train)", "says 5", "holds 1")),
      ("zero", {("c7", "test"): 0}, ("client 'c7' (test)", "zero examples"))]:
    bad = write_tff_sqlite(str(tmp_path / f"{name}.sqlite"), rows, metadata_override=override)
    with pytest.raises(DataError) as e:
      tff_sqlite.load_tff_shakespeare(bad)
    one_line_error(e, bad, *needles)
  # Without client_metadata (older copies) the file still reads.
  plain = write_tff_sqlite(str(tmp_path / "plain.sqlite"), rows, metadata=False)
  assert tff_sqlite.load_tff_shakespeare(plain, seq_length=3).num_train == 4
  # Word-count files.
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_stackoverflow(so, word_counts_path=str(tmp_path / "nope.word_count"))
  one_line_error(e, "nope.word_count", "does not exist")
  wc = tmp_path / "bad.word_count"
  wc.write_text("the 10\nfoo bar baz\n")
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_stackoverflow(so, word_counts_path=str(wc))
  one_line_error(e, str(wc), "line 2", "'word count'")
  wc.write_text("the 10\nthe 9\n")
  with pytest.raises(DataError) as e:
    tff_sqlite.load_tff_stackoverflow(so, word_counts_path=str(wc))
  one_line_error(e, str(wc), "line 2", "twice")


def test_leaf_nan_pixel_is_named(tmp_path):
  pixels = femnist_pixels(0, 0)
  pixels[29] = float("nan")
  base = tmp_path / "nan"
  write_leaf(base / "train" / "t.json", {"u": ([femnist_pixels(3, 3), pixels], [1, 2])})
  write_leaf(base / "test" / "t.json", {"u": ([femnist_pixels(0, 0)], [1])})
  with pytest.raises(DataError) as e:
    leaf.load_leaf(str(base), "femnist")
  one_line_error(e, "1 float pixel(s) are nan", "image 1, at (1, 1, 0)")
  assert "got 0" not in str(e.value)    # not a misleading range
