"""The natural federated benchmarks end to end: one round of each config under configs/
(FEMNIST, Shakespeare, Stack Overflow) on tiny files in the published formats, and the
download path's one-line errors. Tiny models (the configs' architectures, shrunk widths)."""
import json
import os
import socket
import sys

import numpy as np
import pytest

from fedjax_sharp.data import download as download_lib
from fedjax_sharp.data import load_dataset
from fedjax_sharp.data import natural
from fedjax_sharp.errors import DataError
from fedjax_sharp.training import loop
from fedjax_sharp.training.config import load_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_natural_formats import example_pb2, proto, write_tff_sqlite  # pylint: disable=g-import-not-at-top,wrong-import-position


def _run_one_round(config_name, tmp_path, **overrides):
  c = load_config_file(os.path.join(ROOT, "configs", config_name))
  c.rounds, c.clients_per_round, c.checkpoint_every = 1, 2, 0
  c.eval.every, c.eval.last_n, c.eval.batch_size = 1, 1, 8
  c.data.download = False           # tests never touch the network
  for path, value in overrides.items():
    node = c
    *parents, leaf = path.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  workdir = str(tmp_path / "run")
  loop.run(c, workdir, progress=False)
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    last = [json.loads(line) for line in f][-1]
  assert summary["status"] == "completed" and summary["completed_rounds"] == 1
  assert np.isfinite(last["train_loss"]) and 0.0 <= last["test_accuracy"] <= 1.0
  return last


def _text(rng, n):
  return "".join(rng.choice(list("abcdef ,.\n")) for _ in range(n)).encode()


def test_shakespeare_config_one_round(tmp_path):
  pb2, rng = example_pb2(), np.random.default_rng(0)
  rows = [(split, f"ROLE{c}", proto(pb2, snippets=_text(rng, 30 + 7 * c)))
          for c in range(4) for split in ("train", "train", "test")]
  path = write_tff_sqlite(str(tmp_path / "shakespeare.sqlite"), rows)
  last = _run_one_round("shakespeare_lstm.py", tmp_path, **{
      "data.path": path, "data.max_length": 12, "local.batch_size": 2,
      "model.char_lstm.hidden": 8, "model.char_lstm.embed": 4})
  assert "train_accuracy" in last


def test_stackoverflow_config_one_round(tmp_path):
  pb2, rng = example_pb2(), np.random.default_rng(1)
  words = ["how", "to", "sort", "a", "list", "python", "error", "in", "my", "code"]
  post = lambda: proto(pb2, tokens=" ".join(rng.choice(words, 6)).encode(),  # noqa: E731
                       title=b"t", tags=b"x", type=b"answer", score=1)
  rows = [(split, f"{c:08d}", post()) for c in range(4) for split in ("train",) * 3 + ("test",)]
  path = write_tff_sqlite(str(tmp_path / "stackoverflow.sqlite"), rows)
  counts = tmp_path / "stackoverflow.word_count"
  counts.write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(words[:6])))
  last = _run_one_round("stackoverflow_lstm.py", tmp_path, **{
      "data.path": path, "data.federated_sqlite.word_counts_path": str(counts), "data.vocab_max_size": 6,
      "data.max_length": 8, "local.batch_size": 2, "model.word_lstm.hidden": 8,
      "model.word_lstm.embed": 4})
  assert "train_accuracy" in last


def test_femnist_config_one_round(tmp_path):
  pb2, rng = example_pb2(), np.random.default_rng(2)

  def image(label):
    ex = pb2.Example()
    ex.features.feature["pixels"].float_list.value.extend(rng.random(784).tolist())
    ex.features.feature["label"].int64_list.value.append(label)
    return ex.SerializeToString()
  rows = [(split, f"f{c:04d}_00", image(int(rng.integers(0, 62))))
          for c in range(3) for split in ("train",) * 4 + ("test",)]
  path = write_tff_sqlite(str(tmp_path / "emnist.sqlite"), rows, metadata=False)
  _run_one_round("femnist_cnn.py", tmp_path, **{"data.path": path, "local.batch_size": 2})


def test_token_targets_reach_training_encoded(tmp_path):
  """load_dataset gives the per-token encoding: PAD -> -1, Shakespeare's BOS/EOS -> -id-2."""
  pb2 = example_pb2()
  path = write_tff_sqlite(str(tmp_path / "s.sqlite"),
                          [("train", "A", proto(pb2, snippets=b"ab")),
                           ("test", "A", proto(pb2, snippets=b"a"))])
  cfg = load_config_file(os.path.join(ROOT, "configs", "shakespeare_lstm.py")).data
  cfg.path, cfg.max_length, cfg.download = path, 5, False
  ds = load_dataset(cfg)
  a, b = natural.encode_chars("ab").tolist()
  # inputs [BOS a b EOS PAD]'s targets [a b EOS PAD PAD] -> [a, b, -EOS-2, -1, -1].
  np.testing.assert_array_equal(ds.y_train[0], [a, b, -natural.EOS_ID - 2, -1, -1])


def _closed_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def test_download_with_no_network_is_one_line(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_SHARP_DATA", str(tmp_path / "cache"))
  url = f"http://127.0.0.1:{_closed_port()}/shakespeare.sqlite.lzma"
  resource = download_lib.RESOURCES["shakespeare"][0]
  monkeypatch.setitem(download_lib.RESOURCES, "shakespeare",
                      (download_lib.dataclasses.replace(resource, urls=(url,)),))
  cfg = load_config_file(os.path.join(ROOT, "configs", "shakespeare_lstm.py")).data
  with pytest.raises(DataError) as err:
    load_dataset(cfg)
  msg = str(err.value)
  assert "\n" not in msg and "shakespeare" in msg and str(tmp_path / "cache") in msg
  assert "offline" in msg and "shakespeare.sqlite.lzma" in msg


def test_empty_path_without_download_names_the_ways(tmp_path):
  cfg = load_config_file(os.path.join(ROOT, "configs", "shakespeare_lstm.py")).data
  cfg.download = False
  with pytest.raises(ValueError, match=r"data.path must name the SQLite file.*data.download"):
    load_dataset(cfg)
