"""Tests for the local-file and text data layer: `data.text`, `data.federated_files`
(ImageFolder / CINIC-10, Landmarks-User-160k CSVs, Federated EMNIST HDF5 and SQLite), their
config dispatch through `load_dataset`, the token pipeline of the training loop (FastText,
`vocabulary.json`) and `experiments/run.py --save_partition`.

Every test writes its own tiny data under `tmp_path`; nothing is downloaded.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import sqlite3
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp import data as data_lib
from fedjax_sharp.data import hdf5
from fedjax_sharp.data import image_files
from fedjax_sharp.data import tff_sqlite
from fedjax_sharp.data import tfds_reader
from fedjax_sharp.data import text
from fedjax_sharp.errors import DataError
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def same_parts(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def tiny_config(**data):
  """A base config for a 1-round run of a tiny model on a few examples."""
  c = config_lib.base_config()
  c.name = "test_data_files"
  c.rounds = 1
  c.clients_per_round = 2
  c.model.name = "linear"
  c.local.steps = 1
  c.local.batch_size = 4
  c.eval.batch_size = 4
  c.eval.last_n = 1
  for k, v in data.items():
    c.data[k] = v
  return c


# =========================================================================================
# 1. Text: tokenizer, vocabulary, encoding, vocabulary files.
# =========================================================================================
def test_tokenize_docstring_examples():
  assert text.tokenize("Wall St. Bears' 2nd-day") == ["wall", "st", "bears", "2nd", "day"]
  # UTF-8 bytes (what TFDS returns) are decoded; '_' is a separator; Unicode letters count.
  assert text.tokenize(b"Caf\xc3\xa9 snake_case,  X2!") == ["café", "snake", "case", "x2"]
  assert text.tokenize(np.bytes_(b"Hello World")) == ["hello", "world"]
  assert text.tokenize("") == [] and text.tokenize("... --- !!!") == []


def test_vocabulary_order_min_count_max_size():
  texts = ["b a c", "a b d", "a c e", "b"]
  # counts: a 3, b 3, c 2, d 1, e 1  -> frequency, then alphabetical.
  v = text.build_vocabulary(texts, min_count=1)
  assert v.tokens == ("<pad>", "<unk>", "a", "b", "c", "d", "e")
  assert (text.PAD_ID, text.UNK_ID) == (0, 1)
  assert v.id("<pad>") == 0 and v.id("<unk>") == 1
  assert v.id("a") == 2 and v.id("e") == 6 and v.id("zzz") == 1
  assert len(v) == v.size == 7
  # Ties broken alphabetically, not by first appearance.
  assert text.build_vocabulary(["z y", "y z", "x"]).tokens[2:] == ("y", "z", "x")
  v2 = text.build_vocabulary(texts, min_count=2)
  assert v2.tokens == ("<pad>", "<unk>", "a", "b", "c")
  v3 = text.build_vocabulary(texts, min_count=1, max_size=4)  # pad + unk + 2 tokens
  assert v3.tokens == ("<pad>", "<unk>", "a", "b") and len(v3) == 4
  assert text.build_vocabulary(texts, max_size=100).tokens == v.tokens  # limit not reached
  for bad in (dict(min_count=0), dict(max_size=2), dict(max_size=-1)):
    with pytest.raises(ValueError):
      text.build_vocabulary(texts, **bad)


def test_encode_truncates_pads_and_maps_unknowns_to_1():
  v = text.build_vocabulary(["the cat sat", "the dog"], min_count=1)
  # the 2, cat 3, dog 4, sat 5
  assert v.tokens == ("<pad>", "<unk>", "the", "cat", "dog", "sat")
  x = text.encode(["The cat", "the bird sat on the dog", "", "dog"], v, max_length=4)
  assert x.dtype == np.int32 and x.shape == (4, 4)
  np.testing.assert_array_equal(x, [[2, 3, 0, 0],
                                    [2, 1, 5, 1],    # first 4 tokens; 'bird', 'on' unknown
                                    [0, 0, 0, 0],
                                    [4, 0, 0, 0]])
  assert text.decode(x[1], v) == ["the", "<unk>", "sat", "<unk>"]
  assert text.decode(x[0], v) == ["the", "cat"]
  with pytest.raises(ValueError, match="max_length"):
    text.encode(["a"], v, max_length=0)


def test_vocabulary_save_load_round_trip(tmp_path):
  v = text.build_vocabulary(["Ünïcode wörds", "wörds again", "x"], min_count=1, max_size=5)
  path = str(tmp_path / "sub" / "vocab.json")
  text.save_vocabulary(path, v)
  back = text.load_vocabulary(path)
  assert back == v and back.tokens == v.tokens
  assert (back.min_count, back.max_size) == (1, 5)
  with open(path, encoding="utf-8") as f:
    obj = json.load(f)
  assert obj["format"] == "fedjax_sharp.vocabulary" and obj["version"] == 1
  assert obj["tokens"] == list(v.tokens)
  # Encoding with the loaded vocabulary is identical.
  texts = ["wörds x again ünïcode nope"]
  np.testing.assert_array_equal(text.encode(texts, back, 6), text.encode(texts, v, 6))
  assert data_lib.Vocabulary.load(path) == v


def _write(path, content: bytes):
  with open(path, "wb") as f:
    f.write(content)
  return str(path)


def test_vocabulary_load_errors_name_the_file(tmp_path):
  good = text.build_vocabulary(["a b"]).to_json()
  cases = {
      "missing.json": None,
      "bad_json.json": b"{not json",
      "not_utf8.json": b"\xff\xfe\x00garbage",
      "list.json": b"[1, 2]",
      "wrong_format.json": json.dumps({**good, "format": "something_else"}).encode(),
      "wrong_version.json": json.dumps({**good, "version": 99}).encode(),
      "wrong_tokenizer.json": json.dumps({**good, "tokenizer": "bpe"}).encode(),
      "tokens_not_list.json": json.dumps({**good, "tokens": "abc"}).encode(),
      "no_pad.json": json.dumps({**good, "tokens": ["a", "b", "c"]}).encode(),
      "duplicate.json": json.dumps({**good, "tokens": ["<pad>", "<unk>", "a", "a"]}).encode(),
  }
  for name, content in cases.items():
    path = str(tmp_path / name)
    if content is not None:
      _write(path, content)
    with pytest.raises(DataError) as e:
      text.load_vocabulary(path)
    assert path in str(e.value), (name, str(e.value))


# =========================================================================================
# 2. ImageFolder (CINIC-10 layout).
# =========================================================================================
def _save_png(path, arr):
  from PIL import Image
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(arr).save(path)


def _imagefolder_tree(root, rng, with_valid=True):
  """Writes root/{train,test,valid}/<class>/*.png; returns {split: (images, labels)} in the
  order the loader must return them (sorted classes, sorted file names)."""
  classes = ["cat", "airplane", "bird"]       # created unsorted; labels follow sorted names
  sorted_classes = sorted(classes)
  counts = {"train": {"cat": 3, "airplane": 2, "bird": 2},
            "test": {"cat": 1, "airplane": 2},          # a class without test images is fine
            "valid": {"bird": 1, "airplane": 1}}
  expected = {}
  for split, per_class in counts.items():
    if split == "valid" and not with_valid:
      continue
    files = {}
    for cls in classes:
      for i in range(per_class.get(cls, 0)):
        arr = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)   # H=4, W=5: not square
        fname = f"img_{10 - i}.png"     # 'img_10' < 'img_9' < 'img_8' as strings
        _save_png(os.path.join(root, split, cls, fname), arr)
        files[(cls, fname)] = arr
    # Ignored: a non-image file and a hidden file.
    os.makedirs(os.path.join(root, split, classes[0]), exist_ok=True)
    _write(os.path.join(root, split, classes[0], "notes.txt"), b"not an image")
    _write(os.path.join(root, split, classes[0], ".hidden.png"), b"not an image")
    order = sorted(files, key=lambda k: (sorted_classes.index(k[0]), k[1]))
    expected[split] = (np.stack([files[k] for k in order]),
                       np.array([sorted_classes.index(k[0]) for k in order], np.int32))
  return expected


def test_imagefolder_shapes_labels_and_exact_pixels(tmp_path):
  rng = np.random.default_rng(0)
  root = str(tmp_path / "cinic_tiny")
  expected = _imagefolder_tree(root, rng)
  ds = image_files.load_imagefolder(root)
  assert isinstance(ds, data_lib.ArrayDataset) and ds.modality == "image"
  assert ds.name == "cinic_tiny"
  assert ds.class_names == ("airplane", "bird", "cat") and ds.num_classes == 3
  assert ds.x_train.dtype == np.uint8 and ds.x_test.dtype == np.uint8
  assert ds.x_train.shape == (7, 4, 5, 3) and ds.x_test.shape == (3, 4, 5, 3)
  assert ds.y_train.dtype == np.int32
  np.testing.assert_array_equal(ds.x_train, expected["train"][0])
  np.testing.assert_array_equal(ds.y_train, expected["train"][1])
  np.testing.assert_array_equal(ds.x_test, expected["test"][0])
  np.testing.assert_array_equal(ds.y_test, expected["test"][1])
  assert not ds.has_natural_partition
  # mean/std: the channel statistics of the training images (not a published constant).
  np.testing.assert_allclose(ds.mean, (expected["train"][0] / 255.0).mean(axis=(0, 1, 2)),
                             rtol=1e-6)
  np.testing.assert_allclose(ds.std, (expected["train"][0] / 255.0).std(axis=(0, 1, 2)),
                             rtol=1e-6)

  # merge_valid: valid/ appended after train/.
  merged = image_files.load_imagefolder(root, merge_valid=True)
  np.testing.assert_array_equal(
      merged.x_train, np.concatenate([expected["train"][0], expected["valid"][0]]))
  np.testing.assert_array_equal(
      merged.y_train, np.concatenate([expected["train"][1], expected["valid"][1]]))
  np.testing.assert_array_equal(merged.x_test, expected["test"][0])

  # The same through the config path.
  c = tiny_config(source="imagefolder", path=root)
  c.data.imagefolder.merge_valid = True
  via_cfg = data_lib.load_dataset(c.data)
  np.testing.assert_array_equal(via_cfg.x_train, merged.x_train)
  np.testing.assert_array_equal(via_cfg.y_train, merged.y_train)
  assert via_cfg.name == "cinic_tiny"   # data.name='digits' (the default) means "no name"


def test_imagefolder_resize_grayscale_and_cinic_stats(tmp_path):
  root = str(tmp_path / "cinic10")
  colors = {("train", "a", "1.png"): (10, 200, 30), ("train", "a", "2.png"): (250, 0, 128),
            ("train", "b", "1.png"): (7, 7, 7), ("test", "b", "1.png"): (99, 1, 254)}
  sizes = [(6, 6), (5, 9), (12, 7), (3, 3)]
  for (key, color), (h, w) in zip(colors.items(), sizes):
    _save_png(os.path.join(root, *key), np.broadcast_to(np.uint8(color), (h, w, 3)).copy())
  # A grayscale PNG becomes RGB with equal channels.
  _save_png(os.path.join(root, "test", "a", "g.png"), np.full((4, 4), 77, np.uint8))

  # Different sizes and image_size=0: the error names a file and the field to set.
  with pytest.raises(DataError, match="data.image_size") as e:
    image_files.load_imagefolder(root)
  assert root in str(e.value)

  ds = image_files.load_imagefolder(root, image_size=3)
  assert ds.x_train.shape == (3, 3, 3, 3) and ds.x_test.shape == (2, 3, 3, 3)
  for x, color in zip(ds.x_train, list(colors.values())[:3]):
    assert np.all(x == np.uint8(color)), (x, color)    # uniform images resize exactly
  np.testing.assert_array_equal(ds.y_train, [0, 0, 1])
  np.testing.assert_array_equal(ds.y_test, [0, 1])       # test/a/g.png, test/b/1.png
  assert np.all(ds.x_test[0] == 77)
  assert np.all(ds.x_test[1] == np.uint8(colors[("test", "b", "1.png")]))
  # 'cinic10' uses CINIC-10's published mean/std.
  assert ds.name == "cinic10" and ds.mean == data_lib.DATASET_STATS["cinic10"][0]
  # decode_images takes (H, W) for a non-square size.
  rect = image_files.decode_images([os.path.join(root, "train", "a", "1.png"),
                           os.path.join(root, "test", "a", "g.png")], (2, 5))
  assert rect.shape == (2, 2, 5, 3) and rect.dtype == np.uint8
  assert np.all(rect[0] == np.uint8(colors[("train", "a", "1.png")])) and np.all(rect[1] == 77)
  # Through the config: data.image_size.
  c = tiny_config(source="imagefolder", path=root, image_size=2)
  assert data_lib.load_dataset(c.data).x_train.shape == (3, 2, 2, 3)


def test_imagefolder_errors_name_the_path(tmp_path):
  missing = str(tmp_path / "nope")
  with pytest.raises(DataError) as e:
    image_files.load_imagefolder(missing)
  assert missing in str(e.value)
  with pytest.raises(DataError) as e:
    data_lib.load_dataset(tiny_config(source="imagefolder", path=missing).data)
  assert missing in str(e.value)

  root = str(tmp_path / "tree")
  _save_png(os.path.join(root, "train", "a", "1.png"), np.zeros((2, 2, 3), np.uint8))
  with pytest.raises(DataError, match="no test/ directory") as e:  # no test/
    image_files.load_imagefolder(root)
  assert root in str(e.value)
  _save_png(os.path.join(root, "test", "a", "1.png"), np.zeros((2, 2, 3), np.uint8))
  assert image_files.load_imagefolder(root).num_train == 1
  with pytest.raises(DataError, match="valid") as e:
    image_files.load_imagefolder(root, merge_valid=True)
  assert root in str(e.value)
  # test/ may not add classes.
  _save_png(os.path.join(root, "test", "zebra", "1.png"), np.zeros((2, 2, 3), np.uint8))
  with pytest.raises(DataError, match="zebra") as e:
    image_files.load_imagefolder(root)
  assert os.path.join(root, "test") in str(e.value)
  os.remove(os.path.join(root, "test", "zebra", "1.png"))
  os.rmdir(os.path.join(root, "test", "zebra"))
  # A corrupt image names the file.
  bad = _write(os.path.join(root, "train", "a", "2.png"), b"\x89PNG garbage")
  with pytest.raises(DataError) as e:
    image_files.load_imagefolder(root)
  assert bad in str(e.value)
  with pytest.raises(ValueError, match="data.path"):
    data_lib.load_dataset(tiny_config(source="imagefolder", path="").data)


# =========================================================================================
# 3. Landmarks-User-160k (federated_train.csv, test.csv, <image_id>.jpg).
# =========================================================================================
def _save_jpeg(path, color, size=(10, 14)):
  from PIL import Image
  os.makedirs(os.path.dirname(path), exist_ok=True)
  arr = np.broadcast_to(np.uint8(color), size + (3,)).copy()
  Image.fromarray(arr).save(path, format="JPEG", quality=95)


def _write_csv(path, header, rows):
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(rows)
  return str(path)


def _landmarks_dir(root):
  """Numeric user ids and classes whose string order differs from their numeric order."""
  train = [  # (user_id, image_id, class)
      ("10", "aa01", "100"), ("2", "aa02", "25"), ("10", "aa03", "3"),
      ("7", "aa04", "25"), ("2", "aa05", "100"), ("10", "6e158a47eb2ca3f6", "25")]
  test = [("aa11", "3"), ("aa12", "100"), ("aa13", "25")]
  ids = [r[1] for r in train] + [r[0] for r in test]
  colors = {i: (20 * k + 10, 240 - 20 * k, (60 * k) % 256) for k, i in enumerate(ids)}
  images = os.path.join(root, "images")
  for i in ids:
    if i == "6e158a47eb2ca3f6":   # GLDv2's nested layout <a>/<b>/<c>/<id>.jpg
      _save_jpeg(os.path.join(images, "6", "e", "1", i + ".jpg"), colors[i])
    else:
      _save_jpeg(os.path.join(images, i + ".jpg"), colors[i])
  _write_csv(os.path.join(root, "federated_train.csv"), ["user_id", "image_id", "class"], train)
  _write_csv(os.path.join(root, "test.csv"), ["image_id", "class"], test)
  return train, test, colors


def test_landmarks_csv_natural_clients_labels_and_pixels(tmp_path):
  root = str(tmp_path / "landmarks")
  train, test, colors = _landmarks_dir(root)
  ds = image_files.load_landmarks_csv(os.path.join(root, "federated_train.csv"),
                             os.path.join(root, "test.csv"), os.path.join(root, "images"),
                             image_size=4)
  assert ds.x_train.shape == (6, 4, 4, 3) and ds.x_test.shape == (3, 4, 4, 3)
  assert ds.x_train.dtype == np.uint8
  # Classes renumbered in numeric order: 3 -> 0, 25 -> 1, 100 -> 2.
  assert ds.class_names == ("3", "25", "100") and ds.num_classes == 3
  cls = {"3": 0, "25": 1, "100": 2}
  np.testing.assert_array_equal(ds.y_train, [cls[r[2]] for r in train])
  np.testing.assert_array_equal(ds.y_test, [cls[r[1]] for r in test])
  # Clients = users, in numeric order (2, 7, 10), indices = CSV rows.
  assert ds.client_ids == ("2", "7", "10")
  assert same_parts(ds.train_clients, [np.array([1, 4]), np.array([3]), np.array([0, 2, 5])])
  assert ds.test_clients is None
  # Row i of the CSV is image i (JPEG: a uniform colour survives to within a few levels).
  for x, row in zip(ds.x_train, train):
    np.testing.assert_allclose(x.astype(int), np.broadcast_to(colors[row[1]], x.shape), atol=4)
  for x, row in zip(ds.x_test, test):
    np.testing.assert_allclose(x.astype(int), np.broadcast_to(colors[row[0]], x.shape), atol=4)
  # Natural partition through the partitioner.
  c = tiny_config(partition="natural", num_clients=0)
  assert same_parts(data_lib.partition_dataset(ds, c.data, seed=0), ds.train_clients)

  # The config path: default CSV names, images/ subdirectory, image_size 0 -> 64.
  c = tiny_config(source="landmarks_csv", path=root)
  via_cfg = data_lib.load_dataset(c.data)
  assert via_cfg.name == "landmarks_user_160k"
  assert via_cfg.x_train.shape == (6, 64, 64, 3)
  np.testing.assert_array_equal(via_cfg.y_train, ds.y_train)
  assert same_parts(via_cfg.train_clients, ds.train_clients)
  # Explicit CSV / image_dir fields.
  os.rename(os.path.join(root, "test.csv"), os.path.join(root, "my_test.csv"))
  c = tiny_config(source="landmarks_csv", path=root, image_size=2)
  c.data.landmarks_csv.update(test_csv=os.path.join(root, "my_test.csv"),
                              image_dir=os.path.join(root, "images"))
  assert data_lib.load_dataset(c.data).x_test.shape == (3, 2, 2, 3)


def test_landmarks_csv_errors_name_the_file(tmp_path):
  root = str(tmp_path / "landmarks")
  _landmarks_dir(root)
  train_csv, test_csv = os.path.join(root, "federated_train.csv"), os.path.join(root, "test.csv")
  images = os.path.join(root, "images")
  # A missing image: the error names the image path and the CSV that lists it.
  os.remove(os.path.join(images, "aa12.jpg"))
  with pytest.raises(DataError) as e:
    image_files.load_landmarks_csv(train_csv, test_csv, images, image_size=4)
  assert os.path.join(images, "aa12.jpg") in str(e.value) and test_csv in str(e.value)
  _save_jpeg(os.path.join(images, "aa12.jpg"), (1, 2, 3))
  # A missing column.
  bad = _write_csv(os.path.join(root, "bad_train.csv"), ["user_id", "image_id", "landmark_id"],
                   [("1", "aa01", "3")])
  with pytest.raises(DataError, match="class") as e:
    image_files.load_landmarks_csv(bad, test_csv, images, image_size=4)
  assert bad in str(e.value)
  bad = _write_csv(os.path.join(root, "bad_test.csv"), ["image_id"], [("aa11",)])
  with pytest.raises(DataError, match="class") as e:
    image_files.load_landmarks_csv(train_csv, bad, images, image_size=4)
  assert bad in str(e.value)
  # An empty cell, a missing CSV, a missing image directory.
  bad = _write_csv(os.path.join(root, "empty_cell.csv"), ["user_id", "image_id", "class"],
                   [("1", "aa01", "3"), ("1", "", "3")])
  with pytest.raises(DataError, match="line 3") as e:
    image_files.load_landmarks_csv(bad, test_csv, images, image_size=4)
  assert bad in str(e.value)
  missing = os.path.join(root, "nope.csv")
  with pytest.raises(DataError) as e:
    image_files.load_landmarks_csv(missing, test_csv, images, image_size=4)
  assert missing in str(e.value)
  with pytest.raises(DataError) as e:
    image_files.load_landmarks_csv(train_csv, test_csv, os.path.join(root, "no_images"), image_size=4)
  assert os.path.join(root, "no_images") in str(e.value)
  # A file that is not an image.
  _write(os.path.join(images, "aa01.jpg"), b"garbage")
  with pytest.raises(DataError) as e:
    image_files.load_landmarks_csv(train_csv, test_csv, images, image_size=4)
  assert os.path.join(images, "aa01.jpg") in str(e.value)


# =========================================================================================
# 4-5. Federated EMNIST: HDF5 and SQLite.
# =========================================================================================
# Writer ids (string order f0001 < f0002 < f0003), examples per split; 'f0009_00' is in the
# test file only.
WRITERS = {"train": {"f0003_12": 2, "f0001_40": 3, "f0002_07": 1},
           "test": {"f0002_07": 2, "f0003_12": 1, "f0001_40": 1, "f0009_00": 1}}
SIDE = 6


def _federated_content(seed=0):
  """{split: {writer: (float32 pixels [n, 6, 6] in [0, 1] with white background, int32 labels,
  expected uint8 after inversion)}}."""
  rng = np.random.default_rng(seed)
  out = {}
  for split, writers in WRITERS.items():
    out[split] = {}
    for w, n in writers.items():
      ink = rng.integers(0, 256, (n, SIDE, SIDE))              # expected uint8 after 1 - p
      pixels = (1.0 - ink / 255.0).astype(np.float32)           # TFF: background 1.0
      labels = rng.integers(0, 10, n).astype(np.int32)
      out[split][w] = (pixels, labels, ink.astype(np.uint8))
  # Make sure label 9 is the largest one seen, so num_classes inferred = 10.
  out["train"]["f0001_40"][1][0] = 9
  return out


def _write_h5(path, per_writer):
  import h5py
  with h5py.File(path, "w") as f:
    g = f.create_group("examples")
    for w, (pixels, labels, _) in per_writer.items():
      g.create_dataset(f"{w}/pixels", data=pixels)
      g.create_dataset(f"{w}/label", data=labels)
  return str(path)


def _write_federated_h5(directory, content=None):
  content = content or _federated_content()
  train = _write_h5(os.path.join(directory, "fed_emnist_train.h5"), content["train"])
  test = _write_h5(os.path.join(directory, "fed_emnist_test.h5"), content["test"])
  return train, test, content


def _check_federated(ds, content, invert=True):
  order = sorted(WRITERS["train"])                         # f0001_40, f0002_07, f0003_12
  assert ds.client_ids == tuple(order)
  counts = [WRITERS["train"][w] for w in order]
  assert [len(c) for c in ds.train_clients] == counts
  assert same_parts(ds.train_clients, [np.arange(s, s + n) for s, n in
                                       zip(np.cumsum([0] + counts[:-1]), counts)])
  test_counts = [WRITERS["test"][w] for w in order]
  assert same_parts(ds.test_clients, [np.arange(s, s + n) for s, n in
                                      zip(np.cumsum([0] + test_counts[:-1]), test_counts)])
  assert ds.num_train == 6 and ds.num_test == 5     # the test-only writer's example comes last
  assert ds.x_train.shape == (6, SIDE, SIDE, 1) and ds.x_train.dtype == np.uint8

  def expected(split, writers):
    if invert:
      xs = [content[split][w][2] for w in writers]
    else:
      xs = [np.rint(content[split][w][0] * 255).astype(np.uint8) for w in writers]
    return (np.concatenate(xs)[..., None],
            np.concatenate([content[split][w][1] for w in writers]))
  x, y = expected("train", order)
  np.testing.assert_array_equal(ds.x_train, x)
  np.testing.assert_array_equal(ds.y_train, y)
  x, y = expected("test", order + ["f0009_00"])
  np.testing.assert_array_equal(ds.x_test, x)
  np.testing.assert_array_equal(ds.y_test, y)
  for m, w in enumerate(order):   # the natural partition points at each writer's own examples
    np.testing.assert_array_equal(ds.y_train[ds.train_clients[m]], content["train"][w][1])
    np.testing.assert_array_equal(ds.y_test[ds.test_clients[m]], content["test"][w][1])


def test_default_test_path_rule():
  assert hdf5.default_test_path("/d/train/fed_emnist_train.h5") == "/d/train/fed_emnist_test.h5"
  assert hdf5.default_test_path("fed_emnist_digitsonly_train.h5") == \
      "fed_emnist_digitsonly_test.h5"
  assert hdf5.default_test_path("/d/emnist.h5") is None


def test_federated_h5_natural_clients_inverted_pixels_and_test_path(tmp_path):
  pytest.importorskip("h5py")
  train, _, content = _write_federated_h5(str(tmp_path))
  ds = hdf5.load_federated_h5(train)          # test file found by 'train' -> 'test'
  assert ds.name == "federated_emnist" and ds.num_classes == 10   # inferred: 1 + max label
  _check_federated(ds, content)
  # A background pixel (1.0) is 0 and full ink (0.0) is 255.
  assert ds.x_train.max() <= 255 and content["train"]["f0001_40"][2].max() > 200
  # Not inverted.
  _check_federated(hdf5.load_federated_h5(train, invert=False), content, invert=False)
  # A known name fixes the class count.
  assert hdf5.load_federated_h5(train, name="federated_emnist").num_classes == 62
  assert hdf5.load_federated_h5(train, name="federated_emnist_digits").num_classes == 10
  # Natural partition: 3 clients with the right counts.
  c = tiny_config(source="federated_h5", path=train, partition="natural", num_clients=0)
  via_cfg = data_lib.load_dataset(c.data)
  _check_federated(via_cfg, content)
  parts = data_lib.partition_dataset(via_cfg, c.data, seed=0)
  assert [len(p) for p in parts] == [3, 1, 2]
  assert data_lib.natural_client_ids(via_cfg, c.data, 0) == ["f0001_40", "f0002_07", "f0003_12"]
  # data.invert_pixels=False through the config.
  c.data.invert_pixels = False
  _check_federated(data_lib.load_dataset(c.data), content, invert=False)


def test_federated_h5_integer_pixels_explicit_test_path_and_errors(tmp_path):
  h5py = pytest.importorskip("h5py")
  content = _federated_content(seed=1)
  # uint8 pixels are taken as 0..255 (inverted: 255 - q).
  ints = {s: {w: (255 - ink, y, ink) for w, (_, y, ink) in ws.items()}
          for s, ws in content.items()}
  train = _write_h5(str(tmp_path / "a.h5"), ints["train"])
  test = _write_h5(str(tmp_path / "b.h5"), ints["test"])
  with pytest.raises(ValueError, match="data.federated_h5.test_path"):   # no 'train' in the name
    hdf5.load_federated_h5(train)
  ds = hdf5.load_federated_h5(train, test)
  _check_federated(ds, content)
  c = tiny_config(source="federated_h5", path=train)
  c.data.federated_h5.test_path = test
  _check_federated(data_lib.load_dataset(c.data), content)

  train2, test2, _ = _write_federated_h5(str(tmp_path))
  os.remove(test2)
  with pytest.raises(DataError) as e:
    hdf5.load_federated_h5(train2)
  assert test2 in str(e.value)
  missing = str(tmp_path / "nope_train.h5")
  with pytest.raises(DataError) as e:
    hdf5.load_federated_h5(missing, test)
  assert missing in str(e.value)
  # Not HDF5, no 'examples' group, pixels out of range, a client without labels.
  bad = _write(tmp_path / "garbage_train.h5", b"this is not hdf5")
  with pytest.raises(DataError) as e:
    hdf5.load_federated_h5(bad, test)
  assert bad in str(e.value)
  bad = str(tmp_path / "empty.h5")
  with h5py.File(bad, "w") as f:
    f.create_dataset("pixels", data=np.zeros((1, 2, 2), np.float32))
  with pytest.raises(DataError, match="'examples'") as e:
    hdf5.load_federated_h5(bad, test)
  assert bad in str(e.value)
  bad = _write_h5(str(tmp_path / "range.h5"),
                  {"w": (np.full((1, 2, 2), 2.0, np.float32), np.zeros(1, np.int32), None)})
  with pytest.raises(DataError, match=r"\[0, 1\]") as e:
    hdf5.load_federated_h5(bad, test)
  assert bad in str(e.value)
  bad = str(tmp_path / "nolabel.h5")
  with h5py.File(bad, "w") as f:
    f.create_dataset("examples/w/pixels", data=np.zeros((1, 2, 2), np.float32))
  with pytest.raises(DataError, match="label") as e:
    hdf5.load_federated_h5(bad, test)
  assert bad in str(e.value)


def example_pb2():
  """tf.train.Example classes as the loader imports them (skip if unavailable)."""
  try:
    from tensorflow_datasets.proto import tf_example_pb2  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    pytest.skip(f"tensorflow_datasets.proto.tf_example_pb2 cannot be imported: {e}")
  return tf_example_pb2


def _example(pb2, pixels, label):
  ex = pb2.Example()
  feats = ex.features.feature
  if np.issubdtype(np.asarray(pixels).dtype, np.floating):
    feats["pixels"].float_list.value.extend(np.asarray(pixels, np.float32).ravel().tolist())
  else:
    feats["pixels"].int64_list.value.extend(np.asarray(pixels).ravel().tolist())
  feats["label"].int64_list.value.append(int(label))
  return ex.SerializeToString()


def _write_sqlite(path, content, pb2, interleave=True):
  con = sqlite3.connect(path)
  con.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
              "serialized_example_proto BLOB NOT NULL)")
  rows = []
  for split, writers in content.items():
    for w, (pixels, labels, _) in writers.items():
      for i in range(len(labels)):
        rows.append((i, split, w, _example(pb2, pixels[i], labels[i])))
  if interleave:   # rows of one client need not be contiguous in the table
    rows.sort(key=lambda r: r[0])
  con.executemany("INSERT INTO examples VALUES (?, ?, ?)", [r[1:] for r in rows])
  # A split that is neither train nor test is ignored.
  con.execute("INSERT INTO examples VALUES (?, ?, ?)",
              ("validation", "f0001_40", _example(pb2, np.zeros(SIDE * SIDE, np.float32), 3)))
  con.commit()
  con.close()
  return str(path)


def test_federated_sqlite_matches_the_h5_loader(tmp_path):
  pb2 = example_pb2()
  content = _federated_content()
  path = _write_sqlite(str(tmp_path / "emnist_all.sqlite"), content, pb2)
  ds = tff_sqlite.load_federated_sqlite(path)
  assert ds.name == "federated_emnist" and ds.num_classes == 10
  _check_federated(ds, content)
  _check_federated(tff_sqlite.load_federated_sqlite(path, invert=False), content, invert=False)
  assert tff_sqlite.load_federated_sqlite(path, name="femnist").num_classes == 62
  c = tiny_config(source="federated_sqlite", path=path, partition="natural", num_clients=0)
  via_cfg = data_lib.load_dataset(c.data)
  _check_federated(via_cfg, content)
  assert [len(p) for p in data_lib.partition_dataset(via_cfg, c.data, 0)] == [3, 1, 2]
  # Identical to the HDF5 loader on the same content.
  if importlib.util.find_spec("h5py") is not None:
    train, _, _ = _write_federated_h5(str(tmp_path), content)
    h5 = hdf5.load_federated_h5(train)
    for field in ("x_train", "y_train", "x_test", "y_test"):
      np.testing.assert_array_equal(getattr(ds, field), getattr(h5, field))
    assert same_parts(ds.train_clients, h5.train_clients)
    assert same_parts(ds.test_clients, h5.test_clients)
  # Integer pixel lists (0..255).
  ints = {s: {w: (255 - ink, y, ink) for w, (_, y, ink) in ws.items()}
          for s, ws in content.items()}
  path2 = _write_sqlite(str(tmp_path / "ints.sqlite"), ints, pb2, interleave=False)
  _check_federated(tff_sqlite.load_federated_sqlite(path2), content)
  # Non-square pixel lists need image_shape.
  rect = {s: {w: (p.reshape(len(p), 4, 9), y, ink) for w, (p, y, ink) in ws.items()}
          for s, ws in content.items()}
  path3 = _write_sqlite(str(tmp_path / "rect.sqlite"), rect, pb2)
  ds3 = tff_sqlite.load_federated_sqlite(path3, image_shape=(4, 9))
  assert ds3.x_train.shape == (6, 4, 9, 1)
  np.testing.assert_array_equal(ds3.x_train.reshape(6, -1), ds.x_train.reshape(6, -1))


def test_federated_sqlite_errors_name_the_file(tmp_path):
  pb2 = example_pb2()
  missing = str(tmp_path / "nope.sqlite")
  with pytest.raises(DataError) as e:
    tff_sqlite.load_federated_sqlite(missing)
  assert missing in str(e.value)
  bad = _write(tmp_path / "garbage.sqlite", b"definitely not sqlite" * 100)
  with pytest.raises(DataError) as e:
    tff_sqlite.load_federated_sqlite(bad)
  assert bad in str(e.value)
  other = str(tmp_path / "other.sqlite")
  con = sqlite3.connect(other)
  con.execute("CREATE TABLE clients (client_id TEXT)")
  con.commit()
  con.close()
  with pytest.raises(DataError, match="examples") as e:
    tff_sqlite.load_federated_sqlite(other)
  assert other in str(e.value)
  # No test split.
  content = _federated_content()
  only_train = _write_sqlite(str(tmp_path / "train_only.sqlite"),
                             {"train": content["train"]}, pb2)
  with pytest.raises(DataError, match="test") as e:
    tff_sqlite.load_federated_sqlite(only_train)
  assert only_train in str(e.value)
  # A blob that is not an Example / an example without a label.
  broken = str(tmp_path / "broken.sqlite")
  con = sqlite3.connect(broken)
  con.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, "
              "serialized_example_proto BLOB)")
  con.execute("INSERT INTO examples VALUES ('train', 'w', ?)", (b"\xff\xff\xff\xff",))
  con.commit()
  con.close()
  with pytest.raises(DataError) as e:
    tff_sqlite.load_federated_sqlite(broken)
  assert broken in str(e.value)
  nolabel = str(tmp_path / "nolabel.sqlite")
  con = sqlite3.connect(nolabel)
  con.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, "
              "serialized_example_proto BLOB)")
  ex = pb2.Example()
  ex.features.feature["pixels"].float_list.value.extend([0.0] * 4)
  con.execute("INSERT INTO examples VALUES ('train', 'w', ?)", (ex.SerializeToString(),))
  con.commit()
  con.close()
  with pytest.raises(DataError, match="label") as e:
    tff_sqlite.load_federated_sqlite(nolabel)
  assert nolabel in str(e.value)


# =========================================================================================
# 6. End to end: federated_h5 + natural partition through build_experiment and run.
# =========================================================================================
def test_federated_h5_natural_end_to_end(tmp_path):
  pytest.importorskip("h5py")
  train, _, content = _write_federated_h5(str(tmp_path))
  config = tiny_config(source="federated_h5", path=train, partition="natural", num_clients=0)
  exp = loop.build_experiment(config)
  assert len(exp.client_indices) == 3
  assert same_parts(exp.client_indices, exp.dataset.train_clients)
  _check_federated(exp.dataset, content)
  assert exp.dataset.input_shape == (SIDE, SIDE, 1)

  workdir = str(tmp_path / "run")
  summary = loop.run(config, workdir, progress=False)
  assert summary["status"] == "completed" and summary["completed_rounds"] == 1
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  assert len(records) == 1 and np.isfinite(records[0]["train_loss"])
  assert 0.0 <= records[0]["test_accuracy"] <= 1.0
  assert not os.path.exists(os.path.join(workdir, loop.VOCABULARY_FILE))   # images: none

  # max_train_examples keeps every example with its writer (subsample carries the partition).
  config.data.max_train_examples = 4
  sub = data_lib.load_dataset(config.data)
  assert sub.num_train == 4 and sub.has_natural_partition
  owner = {}
  for cid, c in zip(exp.dataset.client_ids, exp.dataset.train_clients):
    for i in c:
      owner[exp.dataset.x_train[i].tobytes()] = cid
  for cid, c in zip(sub.client_ids, sub.train_clients):
    assert all(owner[sub.x_train[i].tobytes()] == cid for i in c)
  assert sorted(np.concatenate(sub.train_clients).tolist()) == list(range(4))


# =========================================================================================
# 7. Token pipeline: TFDS ag_news_subset (faked reader), FastText, vocabulary.json.
# =========================================================================================
NEWS = {
    "train": [(b"Stocks rally", b"Wall St. Bears' 2nd-day loss", 2),
              (b"Team wins cup", b"The team wins the final", 1),
              (b"New chip", b"Chip maker unveils a new chip", 3),
              (b"Peace talks", b"Talks resume in the capital", 0),
              (b"Stocks fall", b"Wall St. slips, stocks fall", 2),
              (b"Cup final", b"The final of the cup", 1),
              (b"Chip sales", b"Sales of the chip rise", 3),
              (b"Talks stall", b"The talks stall again", 0)],
    "test": [(b"Stocks rise", b"Stocks rise on Wall St.", 2),
             (b"Unknown words", b"Zzyzx qwerty", 0),
             (b"Team loses", b"The team loses the cup", 1),
             (b"A chip", b"A new chip", 3)],
}


def _fake_read_tfds(calls):
  def read(name, data_dir, splits, keys, download):
    calls.append((name, tuple(splits), tuple(keys)))
    assert name == "ag_news_subset" and tuple(keys) == ("title", "description", "label")
    cols = []
    for split in splits:
      rows = NEWS[split]
      cols.append({"title": [np.bytes_(r[0]) for r in rows],
                   "description": [np.bytes_(r[1]) for r in rows],
                   "label": np.array([r[2] for r in rows], np.int64)})
    return cols, None
  return read


def _texts(split):
  return [(r[0] + b" " + r[1]).decode() for r in NEWS[split]]


def test_make_preprocess_passes_token_ids_through():
  v = text.build_vocabulary(_texts("train"), min_count=1)
  ds = data_lib.TokenDataset(
      name="tiny_news", x_train=text.encode(_texts("train"), v, 6),
      y_train=np.array([r[2] for r in NEWS["train"]], np.int32),
      x_test=text.encode(_texts("test"), v, 6),
      y_test=np.array([r[2] for r in NEWS["test"]], np.int32), num_classes=4, vocabulary=v)
  assert loop.is_token_dataset(ds) and ds.modality == "tokens"
  assert not loop.is_token_dataset(data_lib.load_embedded())
  pre = loop.make_preprocess(ds, "none", True)
  out = jax.jit(pre)(jnp.asarray(ds.x_train), jax.random.key(0))
  assert out.dtype == jnp.int32
  np.testing.assert_array_equal(np.asarray(out), ds.x_train)
  with pytest.raises(ValueError, match="token dataset"):
    loop.make_preprocess(ds, "crop_flip", True)
  c = tiny_config()
  c.model.name = "fasttext"
  fields = loop.model_fields(c, ds)
  assert fields["vocab_size"] == len(v) and fields["pool"] == "nonpad"
  c.model.name = "linear"
  assert "vocab_size" not in loop.model_fields(c, ds)


def _news_config(**data):
  fields = dict(source="tfds", name="ag_news_subset", path="", partition="iid", num_clients=4,
                max_length=8, vocab_min_count=1)
  c = tiny_config(**{**fields, **data})
  c.model.name = "fasttext"
  return c


def test_ag_news_token_dataset_from_the_config(tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr(tfds_reader, "read_tfds", _fake_read_tfds(calls))
  c = _news_config()
  ds = data_lib.load_dataset(c.data)
  assert calls == [("ag_news_subset", ("train", "test"), ("title", "description", "label"))]
  assert isinstance(ds, data_lib.TokenDataset)
  assert ds.num_classes == 4 and ds.max_length == 8 and ds.x_train.dtype == np.int32
  # The vocabulary is built from the training split only (title + ' ' + description).
  v = text.build_vocabulary(_texts("train"), min_count=1)
  assert ds.vocabulary == v and "zzyzx" not in v.tokens
  np.testing.assert_array_equal(ds.x_train, text.encode(_texts("train"), v, 8))
  np.testing.assert_array_equal(ds.x_test, text.encode(_texts("test"), v, 8))
  assert text.decode(ds.x_test[1], v) == ["<unk>"] * 4
  np.testing.assert_array_equal(ds.y_train, [r[2] for r in NEWS["train"]])
  # vocab_min_count / vocab_max_size reach the builder.
  ds2 = data_lib.load_dataset(_news_config(vocab_min_count=2, vocab_max_size=6).data)
  assert ds2.vocabulary == text.build_vocabulary(_texts("train"), min_count=2, max_size=6)
  assert ds2.vocab_size == 6 and ds2.x_train.max() < 6


def test_fasttext_one_round_writes_the_vocabulary(tmp_path, monkeypatch):
  monkeypatch.setattr(tfds_reader, "read_tfds", _fake_read_tfds([]))
  c = _news_config()
  workdir = str(tmp_path / "news")
  summary = loop.run(c, workdir, progress=False)
  assert summary["status"] == "completed" and summary["completed_rounds"] == 1
  vocab_path = os.path.join(workdir, loop.VOCABULARY_FILE)
  saved = text.load_vocabulary(vocab_path)
  expected = text.build_vocabulary(_texts("train"), min_count=1)
  assert saved == expected
  # The model's embedding table has one row per vocabulary entry.
  exp = loop.build_experiment(c)
  assert exp.dataset.vocabulary == saved
  assert exp.init_params["embedding"]["embedding"].shape[0] == len(saved)

  # A later run that reuses the vocabulary encodes exactly as this one did, even with a
  # different training text (its vocabulary is not rebuilt).
  c2 = _news_config(vocabulary_path=vocab_path, vocab_min_count=2)
  again = data_lib.load_dataset(c2.data)
  assert again.vocabulary == saved
  np.testing.assert_array_equal(again.x_train, exp.dataset.x_train)
  np.testing.assert_array_equal(again.x_test, exp.dataset.x_test)
  with pytest.raises(DataError) as e:
    data_lib.load_dataset(_news_config(vocabulary_path=str(tmp_path / "none.json")).data)
  assert str(tmp_path / "none.json") in str(e.value)


# =========================================================================================
# 8. experiments/run.py --save_partition.
# =========================================================================================
@pytest.mark.parametrize("ext", ["json", "npz"])
def test_run_py_save_partition_matches_the_partitioner(tmp_path, ext):
  demo = os.path.join(ROOT, "configs", "demo.py")
  out = str(tmp_path / f"p.{ext}")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = cli_runner.run([sys.executable, "experiments/run.py", f"--config={demo}",
                         f"--save_partition={out}"], cwd=ROOT, capture_output=True, text=True,
                        env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.path.isfile(out) and "wrote 20 clients" in proc.stdout
  spec = importlib.util.spec_from_file_location("demo_config_for_test", demo)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  cfg = module.get_config()
  ds = data_lib.load_dataset(cfg.data)
  expected = data_lib.partition_dataset(ds, cfg.data, seed=cfg.seed)
  loaded = data_lib.load_partition(out, len(ds.y_train))
  assert same_parts(loaded, expected)
  # The file feeds data.partition='file' back to the same partition.
  cfg.data.partition, cfg.data.partition_path, cfg.data.num_clients = "file", out, 0
  cfg.data.long_tail = False
  assert same_parts(data_lib.partition_dataset(ds, cfg.data, seed=cfg.seed), expected)


def test_run_py_save_partition_natural_records_the_writer_ids(tmp_path):
  pytest.importorskip("h5py")
  train, _, content = _write_federated_h5(str(tmp_path))
  out = str(tmp_path / "natural.json")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = cli_runner.run(
      [sys.executable, "experiments/run.py", "--config=configs/demo.py",
       "--config.data.source=federated_h5", f"--config.data.path={train}",
       "--config.data.partition=natural", "--config.data.num_clients=0",
       "--config.data.long_tail=False", "--config.clients_per_round=2",
       f"--save_partition={out}"],
      cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  pf = data_lib.partition_files.read_partition_file(out)
  assert pf.client_ids == ["f0001_40", "f0002_07", "f0003_12"]
  assert pf.num_examples == 6
  ds = hdf5.load_federated_h5(train)
  assert same_parts(data_lib.load_partition(out, ds.num_train), ds.train_clients)
