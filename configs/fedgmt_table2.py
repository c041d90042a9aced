"""The FedGMT paper's heterogeneity experiments (Li et al., ICML 2025, Table 2, CNN columns).

One config, one command per row; the argument after ':' is `DATASET,ROW`:

    python experiments/compare.py --config=configs/fedgmt_table2.py:cifar10,dir0.1 \
        --algorithms=fedavg,feddyn,fedgmt,fedgmt_v2 --seeds=0,1,2 --workdir=runs/t2_c10_dir0.1

DATASET: cifar10 (TFDS; prepare once with `pip install '.[prepare]' && tfds build cifar10`,
or `--config.data.source=npz --config.data.path=cifar10.npz`) or fashion_mnist (Debian's IDX
files, offline). ROW: path10, path4, path2 (pathological, Path(r)), dir1.0, dir0.1, dir0.01
(long-tail Dirichlet, imbalance factor 2).

Setting (paper Section 4.1 and Appendix E): McMahan CNN, 100 clients, 10% participation,
B = 50, E = 5, lr 0.01, momentum 0.9, weight decay 1e-5, lr decay 0.998 per round, 500 rounds,
random crop + flip on CIFAR-10; FedGMT gamma = 1, tau = 3, alpha = 0.95 (v2: 0.5), beta = 10;
FedDyn alpha = 1/beta = 0.1. Reported: mean (std) test accuracy over the last 50 rounds.

Paper numbers (CIFAR-10 CNN; FedAvg / FedDyn / FedGMT / FedGMT-v2):
    Path(10) 78.91 / 80.69 / 83.64 / 83.25     Dir(1.0)  75.73 / 78.15 / 80.48 / 80.00
    Path(4)  75.24 / 78.99 / 82.79 / 82.44     Dir(0.1)  70.61 / 75.71 / 79.17 / 78.73
    Path(2)  65.28 / 74.13 / 78.04 / 78.01     Dir(0.01) 61.94 / 70.52 / 74.67 / 74.11
The Fashion-MNIST rows are this library's own (no paper numbers); see BUILD_NOTES.md.
"""
from fedjax_sharp.training.config import base_config

ROWS = {
    "path10": dict(partition="pathological", shards_per_client=10),
    "path4": dict(partition="pathological", shards_per_client=4),
    "path2": dict(partition="pathological", shards_per_client=2),
    "dir1.0": dict(partition="dirichlet", alpha=1.0, long_tail=True),
    "dir0.1": dict(partition="dirichlet", alpha=0.1, long_tail=True),
    "dir0.01": dict(partition="dirichlet", alpha=0.01, long_tail=True),
}
DATASETS = {
    "cifar10": dict(source="tfds", name="cifar10", augment="crop_flip"),
    "fashion_mnist": dict(source="idx", name="fashion_mnist", augment="none"),
}


def get_config(arg: str = "cifar10,dir0.1"):
  parts = [p.strip() for p in arg.split(",")]
  if len(parts) != 2 or parts[0] not in DATASETS or parts[1] not in ROWS:
    raise ValueError(f"config argument {arg!r}: expected 'DATASET,ROW' with DATASET in "
                     f"{sorted(DATASETS)} and ROW in {list(ROWS)}")
  dataset, row = parts
  c = base_config()
  c.name = f"fedgmt_table2_{dataset}_{row}"
  c.data.num_clients = 100
  c.data.dirichlet_mode = "label"
  c.data.imbalance_factor = 2.0
  c.data.update(DATASETS[dataset])
  c.data.update(ROWS[row])
  c.clients_per_round = 10
  # FedGMT Algorithm 1 (line 17) and FedDyn average the cohort uniformly (1/N); the spec's
  # example-count default would break the identity w = mean(w_m - beta u_m) = avg - beta u.
  c.aggregation = "uniform"
  c.model.name = "mcmahan_cnn"
  c.local.epochs = 5
  c.local.batch_size = 50
  c.local.lr = 0.01
  c.local.lr_decay = 0.998
  c.local.momentum = 0.9
  c.local.weight_decay = 1e-5
  c.rounds = 500
  c.eval.every = 5
  c.checkpoint_every = 25
  c.eval.last_n = 50
  return c
