"""FedAvg with the McMahan CNN on Fashion-MNIST, IID over 100 clients (a real-data check).

Data: Debian's `dataset-fashion-mnist` IDX files (/usr/share/datasets/fashion-mnist, installed by
`.ci/run` or `apt-get install dataset-fashion-mnist`); read with NumPy, no network.
Setting: 100 clients, 10 per round, E = 1, B = 50 (12 local steps per client), lr 0.05 with
momentum 0.9 (the lr was chosen for this run; the FedGMT paper's 0.01 is slower to reach 85%),
wd 1e-5, lr decay 0.998 per round, 50 rounds.

Run:
    python experiments/run.py --config=configs/fashion_mnist_cnn.py --workdir=runs/fmnist_fedavg
Expect: test accuracy >= 0.85 within 50 rounds (measured numbers: docs/reproducing.md,
"FedAvg on Fashion-MNIST").
"""
from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "fashion_mnist_cnn_iid"
  c.data.source = "idx"
  c.data.name = "fashion_mnist"
  c.data.num_clients = 100
  c.data.partition = "iid"
  c.clients_per_round = 10
  c.model.name = "mcmahan_cnn"
  c.local.epochs = 1
  c.local.batch_size = 50
  c.local.lr = 0.05
  c.rounds = 50
  c.eval.last_n = 10
  c.eval.target_accuracy = 0.85
  return c
