"""Federated EMNIST (FEMNIST): 62 classes, 3,400 writers, TFF's SQLite file.

Data: TFF's `emnist_all.sqlite`, fetched once (170 MB, pinned SHA-256) into
~/.cache/fedjax_sharp (or $FEDJAX_SHARP_DATA) because data.path is empty and data.download is
True; offline, put `emnist_all.sqlite.lzma` in <cache>/downloads/, or point data.path at the
decompressed file (or use data.source='federated_h5' with fedjax's HDF5 files, or
data.source='leaf' with LEAF's JSON: docs/datasets.md). Images are turned MNIST-style (ink
bright). Natural partition: one client per writer, each with its own test examples.
Model: the CNN of TFF's original FedAvg model (McMahan et al. 2017: conv 32 5x5, pool, conv 64
5x5, pool, dense 512, dense 62), which is this library's `mcmahan_cnn`. Setting of Reddi et
al. (2021) for FedAvg: 10 clients per round sampled uniformly, aggregated by example count, 1
epoch, batch 20, client SGD lr 10^-1.5, server SGD lr 1, 1,500 rounds.

    python experiments/run.py --config=configs/femnist_cnn.py --workdir=runs/femnist

Expected: Reddi et al. (2021, Table 2) report about 85% test accuracy for FedAvg on this task
(84.9 with their dropout CNN; this model has no dropout). Not measured here: the dataset cannot
be fetched on the build machine (docs/known_gaps.md, "Data").
"""
from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "femnist_cnn"
  c.data.source, c.data.name, c.data.path = "federated_sqlite", "federated_emnist", ""
  c.data.partition, c.data.num_clients = "natural", 0
  c.model.name = "mcmahan_cnn"
  c.algorithm.name = "fedavg"
  c.clients_per_round = 10
  c.aggregation = "examples"
  c.local.update(epochs=1, batch_size=20, lr=10 ** -1.5, lr_decay=1.0, momentum=0.0,
                 weight_decay=0.0)
  c.rounds = 1500
  c.eval.every = 25
  c.eval.last_n = 4
  c.checkpoint_every = 100
  return c
