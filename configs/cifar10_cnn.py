"""The FedGMT paper's CIFAR-10 CNN setting (Li et al., ICML 2025, Table 2).

McMahan CNN on CIFAR-10, 100 clients, 10% participation, B = 50, E = 5, lr 0.01, momentum 0.9,
wd 1e-5, lr decay 0.998 per round, 500 rounds, pad-4 random crop + horizontal flip, uniform
cohort averaging. Default partition: long-tail Dirichlet(0.1) (imbalance factor 2); use
`--config.data.partition=pathological --config.data.shards_per_client=2` for Path(2), or
configs/fedgmt_table2.py for every row of the paper's table.

Data: TFDS `cifar10`, prepared once with network access
(`pip install 'fedjax_sharp[prepare]' && tfds build cifar10 --file_format=array_record`),
or an `.npz` file with `--config.data.source=npz --config.data.path=cifar10.npz`.

Run (GPU recommended; ~10 clients x 50 steps x 5 epochs per round):
    python experiments/run.py --config=configs/cifar10_cnn.py --workdir=runs/c10_fedavg \
        --config.algorithm.name=fedavg
Expect (paper Table 2, long-tail Dir(0.1)): FedAvg 70.61 (3.51), FedDyn 75.71 (0.95),
FedGMT 79.17 (0.49): mean (std) test accuracy over the last 50 rounds.
"""
from fedjax_sharp.training.paper_configs import fedgmt_paper_config


def get_config():
  c = fedgmt_paper_config("cifar10", "dir0.1")
  c.name = "cifar10_cnn"
  return c
