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
from fedjax_sharp.training.paper_configs import FEDGMT_DATASETS, FEDGMT_ROWS, fedgmt_paper_config


def get_config(arg: str = "cifar10,dir0.1"):
  parts = [p.strip() for p in arg.split(",")]
  if len(parts) != 2 or parts[0] not in FEDGMT_DATASETS or parts[1] not in FEDGMT_ROWS:
    raise ValueError(f"config argument {arg!r}: expected 'DATASET,ROW' with DATASET in "
                     f"{sorted(FEDGMT_DATASETS)} and ROW in {list(FEDGMT_ROWS)}")
  return fedgmt_paper_config(*parts)
