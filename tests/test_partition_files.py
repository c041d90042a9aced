"""Tests for partition files (data.partition='file') and natural partitions ('natural')."""
import json
import os
import re
import types

import numpy as np
import pytest

from fedjax_sharp import data
from fedjax_sharp.data import partition_files as PF
from fedjax_sharp.errors import DataError
from fedjax_sharp.training.config import base_config


def cfg(**kw):
  return types.SimpleNamespace(**{**base_config().data.to_dict(), **kw})


def labels_1000():
  return np.random.default_rng(0).permutation(np.repeat(np.arange(10), 100)).astype(np.int32)


def same(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def write_json(path, obj):
  with open(path, "w") as f:
    json.dump(obj, f)
  return str(path)


# ---------------------------------------------------------------------------------------
# Round trips.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ext", [".json", ".npz"])
def test_dirichlet_partition_roundtrip(tmp_path, ext):
  labels = labels_1000()
  parts = data.dirichlet_label(labels, 20, 0.3, seed=0)
  path = str(tmp_path / "sub" / f"part{ext}")  # the directory is created
  meta = {"partition": "dirichlet", "alpha": 0.3, "seed": 0}
  data.save_partition(path, parts, meta, num_examples=len(labels))
  loaded = data.load_partition(path, len(labels))
  assert same(loaded, parts)
  assert all(p.dtype == np.int64 for p in loaded)
  pf = PF.read_partition_file(path)
  assert pf.metadata == meta and pf.num_examples == 1000 and len(pf) == 20
  # Through the config dispatch: num_clients = the file's count, or 0 (take the file's).
  for n in (20, 0):
    got = data.partition_dataset(labels, cfg(partition="file", partition_path=path,
                                             num_clients=n), seed=123)
    assert same(got, parts)
  assert not [f for f in os.listdir(tmp_path / "sub") if f.endswith(".tmp")]


def test_json_file_is_readable_and_npz_client_layout(tmp_path):
  path = str(tmp_path / "p.json")
  data.save_partition(path, [np.array([3, 1]), [0, 2]], client_ids=["a", "b"])
  obj = json.load(open(path))
  assert obj["clients"] == [[3, 1], [0, 2]] and obj["client_ids"] == ["a", "b"]
  assert obj["format"] == "fedjax_sharp.partition" and obj["metadata"] == {}
  assert same(data.load_partition(path, 4), [np.array([1, 3]), np.array([0, 2])])  # sorted
  npz = str(tmp_path / "c.npz")
  np.savez(npz, client_0=np.array([4, 0]), client_1=np.array([1]), client_2=np.array([2, 3]))
  assert same(data.load_partition(npz, 5), [np.array([0, 4]), np.array([1]), np.array([2, 3])])
  # A minimal hand-written JSON file (only "clients") is fine too.
  minimal = write_json(tmp_path / "m.json", {"clients": [[0], [1, 2]]})
  assert same(data.load_partition(minimal, 3), [np.array([0]), np.array([1, 2])])


def test_save_is_atomic_old_file_survives_a_failed_save(tmp_path):
  path = str(tmp_path / "p.json")
  data.save_partition(path, [[0, 1], [2]])
  before = open(path).read()
  with pytest.raises(TypeError):
    data.save_partition(path, [[0], [1]], metadata={"bad": object()})
  assert open(path).read() == before
  with pytest.raises(ValueError, match="client 1 must be a 1-D integer array"):
    data.save_partition(path, [[0], [0.5]])
  assert open(path).read() == before
  assert os.listdir(tmp_path) == ["p.json"]


# ---------------------------------------------------------------------------------------
# Invalid files: every error names the file and the problem.
# ---------------------------------------------------------------------------------------
def _bad_cases(tmp_path):
  d = tmp_path
  flat = str(d / "offsets.npz")
  np.savez(flat, indices=np.array([0, 1, 2]), offsets=np.array([0, 2]))
  gap = str(d / "gap.npz")
  np.savez(gap, client_0=np.array([0]), client_2=np.array([1]))
  (d / "bad.json").write_text('{"clients": [[0, 1], [2,]]')
  (d / "trunc.npz").write_bytes(b"PK\x03\x04garbage")
  return [
      (write_json(d / "range.json", {"clients": [[0, 1], [2, 10]]}),
       r"client 1 holds index 10, out of range \[0, 10\)"),
      (write_json(d / "neg.json", {"clients": [[0, -1]]}), r"client 0 holds index -1"),
      (write_json(d / "empty.json", {"clients": [[0, 1], []]}), r"client 1 is empty"),
      (write_json(d / "none.json", {"clients": []}), r"no clients"),
      (str(d / "bad.json"), r"not valid JSON"),
      (write_json(d / "nolist.json", [[0, 1]]), r"object with a \"clients\" list"),
      (write_json(d / "dup.json", {"clients": [[0, 1], [1, 2]]}),
       r"index 1 is in more than one client \(clients \[0, 1\]; duplicates"),
      (write_json(d / "dupin.json", {"clients": [[0, 3, 3], [1]]}),
       r"client 0 lists index 3 more than once"),
      (write_json(d / "float.json", {"clients": [[0, 1.0]]}), r"client 0 holds 1.0, which is "
       r"not an integer"),
      (write_json(d / "bool.json", {"clients": [[0, True]]}), r"holds True, which is not an "
       r"integer"),
      (write_json(d / "n.json", {"num_examples": 11, "clients": [[0]]}),
       r"made for a training split of 11 examples, but this one has 10"),
      (flat, r"'offsets' must be non-decreasing, start at 0 and end at len\(indices\)=3"),
      (gap, r"client_0 \.\.\. client_1 without gaps"),
      (str(d / "trunc.npz"), r"cannot be read as \.npz"),
      (str(d / "missing.json"), r"does not exist"),
  ]


def test_invalid_files_name_the_file_and_the_problem(tmp_path):
  for path, problem in _bad_cases(tmp_path):
    with pytest.raises(DataError) as err:
      data.load_partition(path, 10)
    msg = str(err.value)
    assert path in msg, msg
    assert re.search(problem, msg), (problem, msg)


def test_duplicates_allowed_on_request_and_client_count_checked(tmp_path):
  path = write_json(tmp_path / "dup.json", {"clients": [[0, 1], [1, 2], [2, 2]]})
  c = cfg(partition="file", partition_path=path, num_clients=3,
          partition_allow_duplicates=True)
  parts = data.partition_dataset(np.zeros(5, np.int32), c, seed=0)
  assert same(parts, [np.array([0, 1]), np.array([1, 2]), np.array([2, 2])])
  with pytest.raises(DataError, match=re.escape(path) + r": the file has 3 clients but "
                     r"data.num_clients=4"):
    data.partition_dataset(np.zeros(5, np.int32), cfg(partition="file", partition_path=path,
                                                      num_clients=4,
                                                      partition_allow_duplicates=True), 0)
  with pytest.raises(DataError, match="duplicates"):
    data.partition_dataset(np.zeros(5, np.int32),
                           cfg(partition="file", partition_path=path, num_clients=3), 0)


def test_file_partition_config_errors(tmp_path):
  labels = np.zeros(4, np.int32)
  with pytest.raises(ValueError, match="data.partition_path must name"):
    data.partition_dataset(labels, cfg(partition="file", partition_path="", num_clients=0), 0)
  with pytest.raises(DataError, match=r"x\.csv: a partition file must end in \.json or \.npz"):
    data.partition_dataset(labels, cfg(partition="file", partition_path="x.csv"), 0)
  path = write_json(tmp_path / "p.json", {"clients": [[0], [1]]})
  with pytest.raises(ValueError, match="data.long_tail=True cannot be combined"):
    data.partition_dataset(labels, cfg(partition="file", partition_path=path, long_tail=True), 0)
  with pytest.raises(ValueError, match=r"data.partition='foo' is not one of .*'file', 'natural'"):
    data.partition_dataset(labels, cfg(partition="foo", num_clients=2), 0)


def test_config_dict_fields_default(tmp_path):
  path = write_json(tmp_path / "p.json", {"clients": [[0], [1, 2]]})
  c = base_config().data   # an ml_collections.ConfigDict; the other fields keep their defaults
  c.partition, c.partition_path, c.num_clients = "file", path, 2
  assert len(data.partition_dataset(np.zeros(3, np.int32), c, seed=0)) == 2


# ---------------------------------------------------------------------------------------
# Natural partitions.
# ---------------------------------------------------------------------------------------
def natural_dataset():
  rng = np.random.default_rng(0)
  n = 30
  owners = np.repeat(np.arange(6), 5)  # 6 writers, 5 examples each
  y = (np.arange(n) % 3).astype(np.int32)
  return data.ArrayDataset(
      name="toy", x_train=rng.integers(0, 256, (n, 2, 2, 1), dtype=np.uint8), y_train=y,
      x_test=np.zeros((6, 2, 2, 1), np.uint8), y_test=np.arange(6, dtype=np.int32) % 3,
      num_classes=3, mean=(0.5,), std=(0.2,),
      train_clients=[np.flatnonzero(owners == m) for m in range(6)],
      test_clients=[np.array([m]) for m in range(6)],
      client_ids=[f"w{m}" for m in range(6)])


def test_natural_partition_all_and_seeded_subset(caplog):
  ds = natural_dataset()
  assert ds.has_natural_partition and "natural_clients=6" in repr(ds)
  parts = data.partition_dataset(ds, cfg(partition="natural", num_clients=0), seed=0)
  assert same(parts, ds.train_clients)
  assert data.natural_client_ids(ds, cfg(partition="natural", num_clients=0), 0) == \
      [f"w{m}" for m in range(6)]
  c = cfg(partition="natural", num_clients=4)
  sub = data.partition_dataset(ds, c, seed=1)
  assert len(sub) == 4 and same(sub, data.partition_dataset(ds, c, seed=1))
  ids = data.natural_client_ids(ds, c, seed=1)
  assert same(sub, [ds.train_clients[ds.client_ids.index(i)] for i in ids])
  assert "using 4 of the 6 natural clients" in caplog.text
  with pytest.raises(ValueError, match="data.num_clients=7 but the dataset has only 6"):
    data.partition_dataset(ds, cfg(partition="natural", num_clients=7), 0)


def test_natural_partition_errors():
  ds = natural_dataset()
  with pytest.raises(ValueError, match=r"pass the dataset|needs the dataset"):
    data.partition_dataset(ds.y_train, cfg(partition="natural", num_clients=0), 0)
  plain = data.load_embedded()
  with pytest.raises(ValueError, match="'digits' has no natural clients"):
    data.partition_dataset(plain, cfg(partition="natural", num_clients=0), 0)
  with pytest.raises(ValueError, match="data.long_tail"):
    data.partition_dataset(ds, cfg(partition="natural", num_clients=0, long_tail=True), 0)
  # Other partitions accept the dataset in place of its labels.
  parts = data.partition_dataset(ds, cfg(partition="iid", num_clients=3), seed=0)
  assert same(parts, data.partition_dataset(ds.y_train, cfg(partition="iid", num_clients=3), 0))


def test_natural_partition_validated_and_subsampled():
  ds = natural_dataset()
  with pytest.raises(ValueError, match="train_clients use an example twice"):
    data.ArrayDataset(name="t", x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test,
                      y_test=ds.y_test, num_classes=3, mean=(0.5,), std=(0.2,),
                      train_clients=[[0, 1], [1]])
  with pytest.raises(ValueError, match=r"train_clients\[0\] holds indices 0..30 outside"):
    data.ArrayDataset(name="t", x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test,
                      y_test=ds.y_test, num_classes=3, mean=(0.5,), std=(0.2,),
                      train_clients=[[0, 30]])
  sub = data.subsample(ds, max_train=9, seed=0)
  assert sub.num_train == 9 and sub.has_natural_partition
  flat = np.concatenate(sub.train_clients)
  assert sorted(flat.tolist()) == list(range(9))
  # Every subset example keeps its writer.
  owner = {x.tobytes(): ds.client_ids[m] for m, c in enumerate(ds.train_clients)
           for x in ds.x_train[c]}
  for cid, c in zip(sub.client_ids, sub.train_clients):
    assert all(owner[x.tobytes()] == cid for x in sub.x_train[c])
  assert len(sub.test_clients) == len(sub.client_ids)
