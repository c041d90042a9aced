"""ResNet-8 (GroupNorm, 2 groups: the FedGMT authors' model) on heterogeneous Fashion-MNIST:
FedAvg vs FedGMT (offline).

The setting of configs/fedgmt_fmnist_hetero.py (Fashion-MNIST from Debian's IDX files,
long-tail Dirichlet(0.1) over 100 clients, imbalance factor 2, 10 clients per round, B = 50, lr 0.01, momentum 0.9, wd 1e-5, 100 rounds, FedGMT's Table 2 hyperparameters) with the
McMahan CNN replaced by the FedGMT code's ResNet-8 (ImageNet-style stem, GroupNorm with 2
groups; 28x28x1 inputs, 10 classes) and E = 1 instead of 2: a ResNet-8 round costs 39-53 s on
the 2-core CPU machine at E = 1 (docs/reproducing.md), so the pair of 100-round runs takes about
2.5 hours.

    python experiments/compare.py --config=configs/fedgmt_fmnist_resnet8.py --reuse \
        --algorithms=fedavg,fedgmt --seeds=0 --workdir=runs/resnet8_fmnist

Reported: mean test accuracy over the last 20 rounds (all evaluated), rounds to 80%, time per
round. Measured numbers and the command that produced them: docs/reproducing.md, "Ten
algorithms on long-tail Dir(0.1) Fashion-MNIST" (its ResNet-8 table).
"""
from fedjax_sharp.training.paper_configs import fedgmt_paper_config


def get_config():
  c = fedgmt_paper_config("fashion_mnist", "dir0.1")
  c.local.epochs = 1
  c.rounds = 100
  c.eval.last_n = 20
  c.eval.target_accuracy = 0.80
  c.checkpoint_every = 25
  c.name = "fedgmt_fmnist_longtail_dir0.1_resnet8"
  c.model.name = "resnet8"
  return c
