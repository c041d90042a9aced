"""The FedGMT paper's Table 2 (Li et al., ICML 2025): every column, one command per row.

The argument after ':' is `DATASET,ROW`:

    python experiments/compare.py --config=configs/fedgmt_table2.py:cifar10,dir0.1 --reuse \
        --algorithms=fedavg,feddyn,fedntd,fedsam,fedspeed,fedsmoo,fedlesam_d,fedgmt,fedgmt_v2 \
        --seeds=0,1,2 --workdir=runs/t2_c10_dir0.1

  DATASET        model        ROWS                                      data
  cifar10        McMahan CNN  path10 path4 path2 dir1.0 dir0.1 dir0.01  TFDS cifar10 (a)
  fashion_mnist  McMahan CNN  the same six                              Debian IDX (offline)
  cifar100       ResNet-8 GN  p20 p10 p5 (participation, Dir(0.1))      TFDS cifar100 (a)
  cinic10        ViT          dir0.1                                    ImageFolder (b)
  ag_news        FastText     dir0.1                                    TFDS ag_news_subset (a)

(a) prepared once with network: `pip install '.[prepare]' &&
tfds build cifar10 --file_format=array_record` (cifar100, ag_news_subset), or an .npz with
`--config.data.source=npz --config.data.path=...`.
(b) CINIC-10 unpacked from its public tarball: `--config.data.path=/data/cinic10` (train/,
valid/, test/; the paper trains on train = 90,000 and tests on test = 90,000).
Dirichlet rows are long-tailed (imbalance factor 2); Path(r) gives each client r shards.

Setting (Section 4.1, Appendix E, Table 6; paper_configs.fedgmt_paper_config): 100 clients,
10% participation (CIFAR-100: p), SGD momentum 0.9, wd 1e-5, lr decay 0.998 per round,
uniform cohort averaging; CIFAR-10 / Fashion-MNIST: E = 5, B = 50, lr 0.01, 500 rounds;
CIFAR-100: E = 2, B = 20, lr 0.01, 500 rounds; CINIC-10: E = 5, B = 100, lr 0.01, 1000 rounds;
AG News: E = 5, B = 50, lr 0.1, 1000 rounds, 200 tokens; crop + flip on the 32x32 images.
FedGMT gamma = 1, tau = 3, alpha = 0.95 (v2: 0.5), beta = 10 (AG News 100). Baselines
(Table 7, `paper_configs.fedgmt_table7_baselines`): FedDyn/FedSMOO/FedLESAM-D alpha = 1/beta,
FedSpeed lambda = beta (its 'code' variant, what the authors ran), rho = 5 x lr (CIFAR-100:
rho = lr), FedNTD beta = tau = 1. Reported: mean (std) test accuracy over the last 50 rounds;
CINIC-10 and AG News also rounds to 44% / 85% (the table's R&T columns, `rounds_to_target`).

Paper numbers:
                Path(10) Path(4) Path(2) | Dir(1.0) Dir(0.1) Dir(0.01) | C100 p=20  p=10  p=5  | CINIC ViT | AG News
    FedAvg       78.91   75.24   65.28  |  75.73    70.61    61.94   |    41.96  39.34  35.13 |   39.77   |  77.48
    FedDyn       80.69   78.99   74.13  |  78.15    75.71    70.52   |    46.93  44.81  43.04 |   44.01   |  85.72
    FedNTD       79.65   78.25   73.36  |  76.60    72.62    66.96   |    41.39  39.74  37.52 |   48.65   |  83.55
    FedSAM       80.60   75.34   66.07  |  78.31    70.96    61.05   |    41.78  38.95  34.63 |   39.27   |  80.25
    FedSpeed     83.49   80.40   76.74  |  80.38    77.51    71.96   |    48.13  45.73  43.38 |   47.57   |  85.88
    FedSMOO      82.92   80.51   76.59  |  80.22    77.08    72.11   |    48.26  45.69  43.06 |   49.07   |  85.74
    FedLESAM-D   81.48   79.79   74.99  |  78.02    76.11    71.10   |    46.97  45.21  42.39 |   43.00   |  85.68
    FedGMT       83.64   82.79   78.04  |  80.48    79.17    74.67   |    48.65  47.42  45.46 |   57.84   |  88.39
    FedGMT-v2    83.25   82.44   78.01  |  80.00    78.73    74.11   |    48.64  46.95  44.66 |   57.61   |  88.31
The Fashion-MNIST rows are this library's own (no paper numbers); what has run:
docs/reproducing.md, "FedGMT (Li et al., ICML 2025)".
"""
from fedjax_sharp.training.paper_configs import FEDGMT_DATASETS, fedgmt_paper_config


def get_config(arg: str = "cifar10,dir0.1"):
  parts = [p.strip() for p in arg.split(",")]
  if len(parts) != 2 or parts[0] not in FEDGMT_DATASETS or parts[1] not in FEDGMT_DATASETS[
      parts[0]]["rows"]:
    rows = {k: list(v["rows"]) for k, v in FEDGMT_DATASETS.items()}
    raise ValueError(f"config argument {arg!r}: expected 'DATASET,ROW' with DATASET: ROWS in "
                     f"{rows}")
  return fedgmt_paper_config(*parts)
