"""The FedGMT paper's CIFAR-10 CNN setting (Li et al., ICML 2025, Table 2).

McMahan CNN on CIFAR-10, 100 clients, 10% participation, B = 50, E = 5, lr 0.01, momentum 0.9,
wd 1e-5, lr decay 0.998 per round, 500 rounds, pad-4 random crop + horizontal flip. Default
partition: long-tail Dirichlet(0.1) (imbalance factor 2); use
`--config.data.partition=pathological --config.data.shards_per_client=2` for Path(2).

Data: TFDS `cifar10`, prepared once with network access
(`pip install 'fedjax_sharp[prepare]' && tfds build cifar10`), or an `.npz` file with
`--config.data.source=npz --config.data.path=cifar10.npz`.

Run (GPU recommended; ~10 clients x 50 steps x 5 epochs per round):
    python experiments/run.py --config=configs/cifar10_cnn.py --workdir=runs/c10_fedavg \
        --config.algorithm.name=fedavg
Expect (paper Table 2, long-tail Dir(0.1)): FedAvg 70.61 (3.51), FedDyn 75.71 (0.95),
FedGMT 79.17 (0.49): mean (std) test accuracy over the last 50 rounds.
"""
from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "cifar10_cnn"
  c.data.source = "tfds"
  c.data.name = "cifar10"
  c.data.num_clients = 100
  c.data.partition = "dirichlet"
  c.data.dirichlet_mode = "label"
  c.data.alpha = 0.1
  c.data.long_tail = True
  c.data.imbalance_factor = 2.0
  c.data.augment = "crop_flip"
  c.clients_per_round = 10
  c.model.name = "mcmahan_cnn"
  c.local.epochs = 5
  c.local.batch_size = 50
  c.local.lr = 0.01
  c.local.momentum = 0.9
  c.local.weight_decay = 1e-5
  c.rounds = 500
  c.eval.every = 5
  c.checkpoint_every = 25
  c.eval.last_n = 50
  return c
