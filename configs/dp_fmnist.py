"""DP-FedAvg and DP-FedSAM on Fashion-MNIST with 1,000 clients: a guarantee that means something.

Data: Debian's `dataset-fashion-mnist` IDX files (configs/fashion_mnist_cnn.py); the 60,000
training images split IID over 1,000 clients (60 each). Poisson sampling: each client joins a
round with probability q = clients_per_round / num_clients = 0.1 (about 100 a round), the
sampler the PLD accountant ('auto') is exact for, and the DP mean divides by q M = 100; the
noise on it is sigma C / 100 per weight, small against the linear model's clipped update (7,850
weights). E = 1, B = 20 (3 local steps), lr 0.1 without momentum, 100 rounds; client-level DP
with C = 1, server noise, delta 1e-5.

Run (the table in docs/privacy.md: 3 noise levels x 3 seeds x DP-FedAvg / DP-FedSAM):
    .venv/bin/python experiments/compare.py --config=configs/dp_fmnist.py \\
        --algorithms='fedavg[dp.noise_multiplier=1.0],fedsam[dp.noise_multiplier=1.0]' \\
        --seeds=0,1,2 --workdir=runs/dp_fmnist
Expect: DP-FedAvg above 70% test accuracy at epsilon about 7 (sigma 1).
"""
from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "dp_fmnist_1000"
  c.data.source = "idx"
  c.data.name = "fashion_mnist"
  c.data.num_clients = 1000
  c.data.partition = "iid"
  c.clients_per_round = 100
  c.model.name = "linear"
  c.local.epochs = 1
  c.local.batch_size = 20
  c.local.lr = 0.1
  c.local.momentum = 0.0
  c.rounds = 100
  c.eval.last_n = 10
  c.eval.target_accuracy = 0.7
  c.engine.sampling = "poisson"
  c.dp.enabled = True
  c.dp.clip_norm = 1.0
  return c
