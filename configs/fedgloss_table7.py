"""FedGloSS Table 7 (Caldarola et al., 2024): what global consistency (ADMM) and global
flatness (server-side SAM) each contribute. Same settings as Table 3 (configs/fedgloss_table3.py):
the argument after ':' is `DATASET,ALPHA[,MODEL]`, the paper's columns being cifar10,0 and
cifar100,0 (CNN) and cifar10,0.05,resnet18 and cifar100,0.5,resnet18.

    python experiments/compare.py --config=configs/fedgloss_table7.py:cifar10,0 --reuse \
        --algorithms='fedsam,feddyn_sam,fedgloss[client_optimizer=sam],fedavg,feddyn,fedgloss' \
        --seeds=0,42,200299 --workdir=runs/fedgloss_t7_c10_a0

Rows: client SAM -- FedSAM (neither), FedDyn+SAM (consistency only), FedGloSS (both); client
SGD -- FedAvg, FedDyn, FedGloSS. Paper (accuracy %, CNN CIFAR-10 / CIFAR-100, ResNet-18
CIFAR-10 / CIFAR-100):
    SAM  FedSAM    70.2 / 28.7 / 72.8 / 38.5    SGD  FedAvg    59.9 / 28.6 / 72.6 / 37.4
         FedDyn    79.3 /  (x) / 72.6 / 39.6         FedDyn    65.5 /  (x) / 70.2 / 38.8
         FedGloSS  83.9 / 50.6 / 80.0 / 47.2         FedGloSS  69.5 / 42.5 / 79.1 / 46.7
((x): FedDyn does not converge on CIFAR-100 with alpha = 0.)
"""
from fedjax_sharp.training.config import load_config_file
import os


def get_config(arg: str = "cifar10,0"):
  c = load_config_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "fedgloss_table3.py"), arg)
  c.name = c.name.replace("fedgloss_", "fedgloss_table7_", 1)
  return c
