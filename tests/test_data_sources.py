"""Tests for fedjax_sharp.data.sources (embedded digits, IDX, npz, TFDS, config dispatch)."""
import csv
import gzip
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from fedjax_sharp import data
from fedjax_sharp.data import embedded
from fedjax_sharp.data import idx
from fedjax_sharp.data import tfds_reader
from fedjax_sharp.training.config import base_config

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
# Class counts of the 1797 digits (UCI test set as shipped by scikit-learn).
DIGITS_CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def cfg(**kw):
  return types.SimpleNamespace(**{**base_config().data.to_dict(), **kw})


def write_idx(path, array):
  """Writes an IDX file (uint8 or int32), gzip-compressed if path ends with .gz."""
  array = np.asarray(array)
  code = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}[array.dtype]
  header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">i4").tobytes()
  payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "wb") as f:
    f.write(payload)


def tiny_idx_dir(tmp_path, gz, n_train=12, n_test=5):
  rng = np.random.default_rng(0)
  arrays = {
      "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
      "y_train": (np.arange(n_train) % 10).astype(np.uint8),
      "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
      "y_test": (np.arange(n_test) % 10).astype(np.uint8),
  }
  ext = ".gz" if gz else ""
  for key, stem in idx.IDX_FILES.items():
    write_idx(str(tmp_path / (stem + ext)), arrays[key])
  return arrays


# ---------------------------------------------------------------------------------------
# Package hygiene.
# ---------------------------------------------------------------------------------------
def test_import_does_not_pull_tensorflow_tfds_or_sklearn():
  code = ("import sys, fedjax_sharp.data; "
          "bad = [m for m in ('tensorflow', 'tensorflow_datasets', 'sklearn') if m in sys.modules]; "
          "assert not bad, bad")
  subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---------------------------------------------------------------------------------------
# Embedded digits.
# ---------------------------------------------------------------------------------------
def test_digits_csv_parsing_matches_reference_rounding():
  images, labels = embedded._read_digits_csv()
  with gzip.open(embedded.DIGITS_PATH, "rt") as f:
    rows = [list(map(int, r)) for r in csv.reader(f)]
  assert images.shape == (1797, 8, 8, 1) and images.dtype == np.uint8
  for i in (0, 1, 500, 1796):
    expected = np.array([round(v * 255 / 16) for v in rows[i][:64]], np.uint8).reshape(8, 8, 1)
    np.testing.assert_array_equal(images[i], expected)
    assert labels[i] == rows[i][64]
  assert images.max() == 255 and images.min() == 0
  np.testing.assert_array_equal(np.bincount(labels), DIGITS_CLASS_COUNTS)


def test_load_embedded_shapes_split_and_stats():
  ds = data.load_embedded()
  assert ds.name == "digits" and ds.num_classes == 10
  assert ds.x_train.shape == (1438, 8, 8, 1) and ds.x_test.shape == (359, 8, 8, 1)
  assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int32
  assert ds.y_test.dtype == np.int32 and ds.input_shape == (8, 8, 1)
  # Stratified: per class, the test share is within one example of 20%.
  test_counts = np.bincount(ds.y_test, minlength=10)
  assert np.all(np.abs(test_counts - 0.2 * np.array(DIGITS_CLASS_COUNTS)) <= 1)
  np.testing.assert_array_equal(np.bincount(ds.y_train) + test_counts, DIGITS_CLASS_COUNTS)
  # Train and test together are exactly the 1797 images (a partition, no duplication).
  images, labels = embedded._read_digits_csv()
  key = lambda x, y: sorted(xi.tobytes() + bytes([yi]) for xi, yi in zip(x, y))
  assert key(np.concatenate([ds.x_train, ds.x_test]),
             np.concatenate([ds.y_train, ds.y_test])) == key(images, labels)
  # mean/std are those of x/255 on the train set.
  x = ds.x_train.astype(np.float64) / 255
  np.testing.assert_allclose(ds.mean, [x.mean()], rtol=1e-12)
  np.testing.assert_allclose(ds.std, [x.std()], rtol=1e-12)


def test_load_embedded_deterministic_and_seeded():
  a, b = data.load_embedded(seed=0), data.load_embedded(seed=0)
  np.testing.assert_array_equal(a.x_test, b.x_test)
  np.testing.assert_array_equal(a.y_train, b.y_train)
  c = data.load_embedded(seed=1)
  assert not np.array_equal(a.x_test, c.x_test)
  with pytest.raises(ValueError, match="data.name"):
    data.load_embedded("cifar10")


# ---------------------------------------------------------------------------------------
# IDX.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_load_idx_tiny(tmp_path, gz):
  arrays = tiny_idx_dir(tmp_path, gz)
  ds = data.load_idx(str(tmp_path), name="fashion_mnist")
  assert ds.x_train.shape == (12, 28, 28, 1) and ds.x_test.shape == (5, 28, 28, 1)
  np.testing.assert_array_equal(ds.x_train[..., 0], arrays["x_train"])
  np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
  assert ds.y_train.dtype == np.int32 and ds.num_classes == 10
  assert ds.mean == data.DATASET_STATS["fashion_mnist"][0]


def test_read_idx_dtypes_and_errors(tmp_path):
  arr = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 5
  write_idx(str(tmp_path / "a.idx"), arr)
  out = data.read_idx(str(tmp_path / "a.idx"))
  np.testing.assert_array_equal(out, arr)
  assert out.dtype == np.int32 and out.dtype.isnative
  (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
  with pytest.raises(ValueError, match="magic"):
    data.read_idx(str(tmp_path / "bad"))
  (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + np.asarray([10], ">i4").tobytes() + b"xx")
  with pytest.raises(ValueError, match="bytes"):
    data.read_idx(str(tmp_path / "short"))
  with pytest.raises(FileNotFoundError):
    data.load_idx(str(tmp_path))  # directory exists, files missing


@pytest.mark.skipif(not os.path.isdir(FASHION_DIR), reason="dataset-fashion-mnist not installed")
def test_load_idx_real_fashion_mnist():
  start = time.perf_counter()
  ds = data.load_dataset(cfg(source="idx", name="fashion_mnist", path=""))
  elapsed = time.perf_counter() - start
  assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
  assert ds.x_train.dtype == np.uint8 and ds.num_classes == 10
  np.testing.assert_array_equal(np.bincount(ds.y_train), [6000] * 10)
  np.testing.assert_array_equal(np.bincount(ds.y_test), [1000] * 10)
  # The published constants agree with the data.
  mean, std = data.channel_stats(ds.x_train)
  np.testing.assert_allclose(mean, ds.mean, atol=1e-3)
  np.testing.assert_allclose(std, ds.std, atol=1e-3)
  assert elapsed < 10, f"loading Fashion-MNIST took {elapsed:.1f}s"


# ---------------------------------------------------------------------------------------
# npz.
# ---------------------------------------------------------------------------------------
def test_npz_roundtrip_adds_channel_axis(tmp_path):
  rng = np.random.default_rng(1)
  x_train = rng.integers(0, 256, (7, 4, 5), dtype=np.uint8)
  x_test = rng.integers(0, 256, (3, 4, 5), dtype=np.uint8)
  path = str(tmp_path / "toy.npz")
  np.savez(path, x_train=x_train, y_train=np.arange(7) % 3, x_test=x_test,
           y_test=np.array([0, 1, 2]), num_classes=5)
  ds = data.load_npz(path)
  assert ds.name == "toy" and ds.num_classes == 5 and ds.input_shape == (4, 5, 1)
  np.testing.assert_array_equal(ds.x_train[..., 0], x_train)
  np.testing.assert_array_equal(ds.y_train, np.arange(7) % 3)
  assert ds.y_train.dtype == np.int32
  mean, std = data.channel_stats(x_train[..., None])
  assert ds.mean == mean and ds.std == std


def test_npz_rgb_declared_classes_and_errors(tmp_path):
  rng = np.random.default_rng(2)
  x = rng.integers(0, 256, (6, 3, 3, 3), dtype=np.uint8)
  path = str(tmp_path / "rgb.npz")
  np.savez(path, x_train=x, y_train=np.array([0, 1, 2, 3, 0, 1]), x_test=x[:2],
           y_test=np.array([6, 0]))
  # The class count is never inferred from the labels (a stray label would widen the model).
  with pytest.raises(ValueError, match=r"rgb\.npz: the number of classes is not declared"):
    data.load_npz(path, name="rgb_toy")
  with pytest.raises(ValueError, match=r"rgb\.npz: .*labels go up to 6 but num_classes=5"):
    data.load_npz(path, name="rgb_toy", num_classes=5)
  ds = data.load_npz(path, name="rgb_toy", num_classes=7)
  assert ds.name == "rgb_toy" and ds.num_classes == 7 and len(ds.mean) == 3
  x_all = x.astype(np.float64) / 255
  np.testing.assert_allclose(ds.mean, x_all.reshape(-1, 3).mean(0), rtol=1e-12)
  np.testing.assert_allclose(ds.std, x_all.reshape(-1, 3).std(0), rtol=1e-12)
  bad = str(tmp_path / "bad.npz")
  np.savez(bad, x_train=x, y_train=np.zeros(6, int))
  with pytest.raises(ValueError, match="x_test"):
    data.load_npz(bad)


# ---------------------------------------------------------------------------------------
# load_dataset dispatch.
# ---------------------------------------------------------------------------------------
def test_load_dataset_dispatch(tmp_path):
  ds = data.load_dataset(cfg(source="embedded", name="digits", path=""))
  assert ds.num_train == 1438
  tiny_idx_dir(tmp_path, gz=True)
  ds = data.load_dataset(cfg(source="idx", name="mnist", path=str(tmp_path)))
  assert ds.name == "mnist" and ds.num_train == 12 and ds.mean == (0.1307,)
  npz = str(tmp_path / "d.npz")
  np.savez(npz, x_train=np.zeros((4, 2, 2), np.uint8), y_train=np.array([0, 1, 0, 1]),
           x_test=np.zeros((2, 2, 2), np.uint8), y_test=np.array([0, 1]), num_classes=2)
  ds = data.load_dataset(cfg(source="npz", name="", path=npz))
  assert ds.name == "d" and ds.num_classes == 2


def test_load_dataset_accepts_config_dict():
  c = base_config().data   # an ml_collections.ConfigDict
  c.max_train_examples = 50
  assert data.load_dataset(c).num_train == 50


@pytest.mark.parametrize("kw, match", [
    (dict(source="foo", name="digits"), r"data.source='foo' is not one of \['embedded', 'federated_h5', 'federated_sqlite', 'idx', 'imagefolder', 'landmarks_csv', 'leaf', 'npz', 'tfds'\]"),
    (dict(source="embedded", name="mnist"), r"data.name='mnist' is not one of \['digits'\]"),
    (dict(source="tfds", name="imagenet"), r"data.name='imagenet' is not one of \['cifar10', 'cifar100', 'fashion_mnist', 'mnist'\]"),
    (dict(source="idx", name="kmnist", path=""), r"data.path"),
    (dict(source="npz", name="x", path=""), r"data.path"),
    (dict(source="embedded", name="digits", max_train_examples=-1), r"data.max_train_examples"),
])
def test_load_dataset_errors_name_the_field(kw, match):
  with pytest.raises(ValueError, match=match):
    data.load_dataset(cfg(**kw))


def test_max_examples_stratified_seeded_subset():
  full = data.load_embedded()
  c = cfg(source="embedded", name="digits", path="", max_train_examples=200, max_test_examples=50)
  a = data.load_dataset(c, seed=3)
  b = data.load_dataset(c, seed=3)
  d = data.load_dataset(c, seed=4)
  assert a.num_train == 200 and a.num_test == 50
  np.testing.assert_array_equal(a.x_train, b.x_train)
  assert not np.array_equal(a.x_train, d.x_train)
  # Class-stratified: counts track the full set's class proportions within one example.
  for sub, ref, k in ((a.y_train, full.y_train, 200), (a.y_test, full.y_test, 50)):
    expected = k * np.bincount(ref, minlength=10) / len(ref)
    assert np.all(np.abs(np.bincount(sub, minlength=10) - expected) < 1)
  # A subset of the original train set, without repeats; stats of the full set kept.
  full_rows = {x.tobytes() + bytes([y]) for x, y in zip(full.x_train, full.y_train)}
  sub_rows = [x.tobytes() + bytes([y]) for x, y in zip(a.x_train, a.y_train)]
  assert set(sub_rows) <= full_rows
  assert a.mean == full.mean
  # 0 means all.
  assert data.load_dataset(cfg(source="embedded", max_train_examples=0)).num_train == 1438


def test_stratified_subset_exact_size_and_classes():
  labels = np.repeat(np.arange(4), [50, 30, 15, 5])
  idx = data.stratified_subset(labels, 20, seed=0)
  assert len(idx) == 20 and len(np.unique(idx)) == 20
  np.testing.assert_array_equal(np.bincount(labels[idx]), [10, 6, 3, 1])


def test_validation_examples_hold_out_part_of_the_training_set():
  full = data.load_embedded()
  c = cfg(source="embedded", name="digits", path="", validation_examples=300)
  ds = data.load_dataset(c, seed=7)
  again = data.load_dataset(c, seed=8)  # the split follows validation_seed, not the run seed
  other = data.load_dataset(cfg(source="embedded", validation_examples=300, validation_seed=1))
  assert ds.num_test == 300 and ds.num_train == full.num_train - 300
  np.testing.assert_array_equal(ds.x_test, again.x_test)
  assert not np.array_equal(ds.x_test, other.x_test)
  # Train and validation partition the original training set; the test split is unused.
  rows = lambda x, y: [a.tobytes() + bytes([b]) for a, b in zip(x, y)]
  full_rows = sorted(rows(full.x_train, full.y_train))
  assert sorted(rows(ds.x_train, ds.y_train) + rows(ds.x_test, ds.y_test)) == full_rows
  assert not set(rows(ds.x_test, ds.y_test)) & set(rows(full.x_test, full.y_test))
  expected = 300 * np.bincount(full.y_train, minlength=10) / full.num_train
  assert np.all(np.abs(np.bincount(ds.y_test, minlength=10) - expected) < 1)
  # Applied before max_train_examples, which subsets the remaining training examples.
  both = data.load_dataset(cfg(source="embedded", validation_examples=300,
                               max_train_examples=500))
  np.testing.assert_array_equal(both.x_test, ds.x_test)
  assert both.num_train == 500
  assert set(rows(both.x_train, both.y_train)) <= set(rows(ds.x_train, ds.y_train))
  for bad in (-1, full.num_train):
    with pytest.raises(ValueError, match="data.validation_examples"):
      data.load_dataset(cfg(source="embedded", validation_examples=bad))


def test_validation_hold_out_keeps_a_natural_partition():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (40, 4, 4, 1), dtype=np.uint8)
  y = np.arange(40, dtype=np.int32) % 4
  clients = (np.arange(0, 10), np.arange(10, 30), np.arange(30, 40))
  ds = data.ArrayDataset(name="t", x_train=x, y_train=y, x_test=x[:4], y_test=y[:4],
                         num_classes=4, mean=(0.,), std=(1.,), train_clients=clients,
                         client_ids=("a", "b", "c"))
  held = data.arrays.hold_out_validation(ds, 12, seed=0)
  assert held.client_ids == ("a", "b", "c")
  for m, original in enumerate(clients):
    # Each client's training + validation examples are exactly its original examples.
    got = np.concatenate([held.x_train[held.train_clients[m]], held.x_test[held.test_clients[m]]])
    assert sorted(r.tobytes() for r in got) == sorted(r.tobytes() for r in x[original])
  assert sum(len(c) for c in held.test_clients) == 12


# ---------------------------------------------------------------------------------------
# TFDS.
# ---------------------------------------------------------------------------------------
@pytest.fixture(name="tfds")
def tfds_fixture():
  return pytest.importorskip("tensorflow_datasets")


@pytest.mark.parametrize("name, shape, classes", [
    ("cifar10", (32, 32, 3), 10), ("cifar100", (32, 32, 3), 100),
    ("fashion_mnist", (28, 28, 1), 10), ("mnist", (28, 28, 1), 10)])
def test_tfds_data_source_path_with_mock_data(tfds, monkeypatch, name, shape, classes):
  def no_tf_load(*a, **k):
    raise AssertionError("tfds.load fallback must not be used when data_source works")
  monkeypatch.setattr(tfds, "load", no_tf_load)
  with tfds.testing.mock_data(num_examples=9, policy=tfds.testing.MockPolicy.USE_CODE):
    ds = data.load_dataset(cfg(source="tfds", name=name, path="/nonexistent/tfds"))
  assert ds.name == name and ds.num_classes == classes
  assert ds.x_train.shape == (9,) + shape and ds.x_test.shape == (9,) + shape
  assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int32
  assert ds.y_train.min() >= 0 and ds.y_train.max() < classes
  assert len({x.tobytes() for x in ds.x_train}) > 1  # real (random) examples, not a constant
  assert ds.mean == data.DATASET_STATS[name][0]


def test_tfds_tf_fallback_path(tfds, monkeypatch):
  """When tfds.data_source fails (e.g. tfrecord data), tfds.load(batch_size=-1) is used."""
  rng = np.random.default_rng(0)
  batches = {s: {"image": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 "label": rng.integers(0, 100, n), "coarse_label": np.zeros(n, int)}
             for s, n in (("train", 8), ("test", 4))}
  calls = {}

  def fake_data_source(*a, **k):
    raise NotImplementedError("Random access data source for file format TFRECORD")

  def fake_load(name, split, data_dir, batch_size, download, with_info):
    calls.update(name=name, split=split, data_dir=data_dir, batch_size=batch_size,
                 download=download)
    info = types.SimpleNamespace(features={"label": types.SimpleNamespace(num_classes=100)})
    return [batches[s] for s in split], info

  monkeypatch.setattr(tfds, "data_source", fake_data_source)
  monkeypatch.setattr(tfds, "load", fake_load)
  monkeypatch.setattr(tfds, "as_numpy", lambda x: x)
  ds = data.load_tfds("cifar100", data_dir="/d")
  assert calls == dict(name="cifar100", split=["train", "test"], data_dir="/d", batch_size=-1,
                       download=False)
  np.testing.assert_array_equal(ds.x_train, batches["train"]["image"])
  np.testing.assert_array_equal(ds.y_test, batches["test"]["label"])  # fine labels
  assert ds.num_classes == 100 and ds.y_train.dtype == np.int32


def test_tfds_not_prepared_error_explains_how_to_prepare(tfds, tmp_path):
  with pytest.raises(data.DatasetNotPreparedError) as err:
    data.load_dataset(cfg(source="tfds", name="cifar10", path=str(tmp_path)))
  msg = str(err.value)
  assert "not prepared" in msg and "tfds build cifar10" in msg
  assert "fedjax_sharp[prepare]" in msg and "data.source='idx'" in msg


def test_tfds_real_array_record_roundtrip(tfds, tmp_path, monkeypatch):
  """Prepares a tiny array_record dataset (no TensorFlow) and reads it via tfds.data_source."""
  import PIL.Image  # pylint: disable=g-import-not-at-top
  from tensorflow_datasets.core import registered  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  xs = {"train": rng.integers(0, 256, (23, 6, 5, 3), dtype=np.uint8),
        "test": rng.integers(0, 256, (7, 6, 5, 3), dtype=np.uint8)}
  ys = {"train": np.arange(23) % 4, "test": np.arange(7) % 4}

  with registered.skip_registration():
    class FedjaxSharpTinyImages(tfds.core.GeneratorBasedBuilder):
      VERSION = tfds.core.Version("1.0.0")

      def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(6, 5, 3)),
            "label": tfds.features.ClassLabel(num_classes=4)}))

      def _split_generators(self, dl_manager):
        return {s: self._generate_examples(s) for s in ("train", "test")}

      def _generate_examples(self, split):
        for i in range(len(ys[split])):
          yield i, {"image": PIL.Image.fromarray(xs[split][i]), "label": int(ys[split][i])}

  builder = FedjaxSharpTinyImages(data_dir=str(tmp_path), file_format="array_record")
  builder.download_and_prepare()
  monkeypatch.setattr(tfds_reader, "_GETITEMS_CHUNK", 5)  # several batched reads
  ds = data.load_tfds(builder.name, data_dir=str(tmp_path))
  assert ds.num_classes == 4 and ds.input_shape == (6, 5, 3)
  for split in ("train", "test"):
    got_x, got_y = getattr(ds, f"x_{split}"), getattr(ds, f"y_{split}")
    want = {x.tobytes(): y for x, y in zip(xs[split], ys[split])}
    assert len(got_y) == len(want) == len({x.tobytes() for x in got_x})
    assert all(want[x.tobytes()] == y for x, y in zip(got_x, got_y))


def _closed_port() -> int:
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]   # closed once the socket is: connections are refused


def test_tfds_download_without_tensorflow_names_the_extra_and_the_command(tfds, tmp_path,
                                                                         monkeypatch):
  monkeypatch.setattr(tfds_reader, "_tensorflow_available", lambda: False)
  monkeypatch.setattr(tfds_reader, "_probe", lambda *a, **k: pytest.fail("no probe without TF"))
  with pytest.raises(data.DatasetNotPreparedError) as err:
    data.load_dataset(cfg(source="tfds", name="cifar10", path=str(tmp_path), download=True))
  msg = str(err.value)
  assert "\n" not in msg and "data.name='cifar10'" in msg and str(tmp_path) in msg
  assert "pip install 'fedjax_sharp[prepare]'" in msg
  assert f"tfds build cifar10 --file_format=array_record --data_dir={tmp_path}" in msg


def test_tfds_download_with_no_network_fails_fast_in_one_line(tfds, tmp_path, monkeypatch):
  port = _closed_port()
  monkeypatch.setattr(tfds_reader, "_tensorflow_available", lambda: True)
  monkeypatch.setitem(tfds_reader.DOWNLOAD_HOSTS, "cifar10", ("127.0.0.1", port))
  with pytest.raises(data.DatasetNotPreparedError) as err:
    data.load_dataset(cfg(source="tfds", name="cifar10", path=str(tmp_path)))  # default: True
  msg = str(err.value)
  assert "\n" not in msg and "data.name='cifar10'" in msg and str(tmp_path) in msg
  assert f"cannot be downloaded (no connection to 127.0.0.1:{port}" in msg
  assert "tfds build cifar10" in msg and "data.source='idx'" in msg   # the offline ways


def test_tfds_download_false_never_prepares(tfds, tmp_path, monkeypatch):
  monkeypatch.setattr(tfds_reader, "_download_and_prepare",
                      lambda *a: pytest.fail("data.download=False must not prepare"))
  with pytest.raises(data.DatasetNotPreparedError, match="not prepared"):
    data.load_dataset(cfg(source="tfds", name="cifar10", path=str(tmp_path), download=False))


def test_tfds_download_prepares_once_in_array_record_then_reads_offline(tfds, tmp_path,
                                                                        monkeypatch):
  """data.download=True on an unprepared (registered) dataset: TFDS prepares it once, in
  array_record, and it is read back; the second load neither probes nor prepares."""
  import PIL.Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  xs = {"train": rng.integers(0, 256, (9, 4, 4, 3), dtype=np.uint8),
        "test": rng.integers(0, 256, (5, 4, 4, 3), dtype=np.uint8)}
  ys = {"train": np.arange(9) % 3, "test": np.arange(5) % 3}
  prepared_formats = []

  class FedjaxSharpDownloadProbe(tfds.core.GeneratorBasedBuilder):  # registered: tfds.builder
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
          "image": tfds.features.Image(shape=(4, 4, 3)),
          "label": tfds.features.ClassLabel(num_classes=3)}))

    def _split_generators(self, dl_manager):
      prepared_formats.append(self.info.file_format)
      return {s: self._generate_examples(s) for s in ("train", "test")}

    def _generate_examples(self, split):
      for i in range(len(ys[split])):
        yield i, {"image": PIL.Image.fromarray(xs[split][i]), "label": int(ys[split][i])}

  name = FedjaxSharpDownloadProbe.name
  monkeypatch.setattr(tfds_reader, "_tensorflow_available", lambda: True)
  probes = []
  monkeypatch.setattr(tfds_reader, "_probe", lambda host, port: probes.append(host))
  ds = data.load_tfds(name, data_dir=str(tmp_path), download=True)
  assert len(probes) == 1 and len(prepared_formats) == 1
  assert "array_record" in str(prepared_formats[0]).lower()
  np.testing.assert_array_equal(np.sort(ds.y_train), np.sort(ys["train"]))
  assert ds.num_classes == 3 and ds.input_shape == (4, 4, 3)
  again = data.load_tfds(name, data_dir=str(tmp_path), download=True)
  assert len(probes) == 1 and len(prepared_formats) == 1   # cached: no network, no preparing
  np.testing.assert_array_equal(again.x_test, ds.x_test)


def test_tfds_wrong_key_is_reported_not_mistaken_for_unprepared(tfds, monkeypatch):
  monkeypatch.setattr(tfds, "load", lambda *a, **k: pytest.fail("no fallback for a key error"))
  with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
    with pytest.raises(ValueError, match="no key 'img'"):
      data.load_tfds("mnist", image_key="img")
