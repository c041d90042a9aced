"""Settings of the papers' tables, shared by the files under `configs/`."""
from __future__ import annotations

import ml_collections

from fedjax_sharp.training.config import base_config

# FedGMT (Li et al., ICML 2025) Table 2 rows. CNN columns (CIFAR-10, Fashion-MNIST): the
# partition; CIFAR-100 (ResNet-8): the participation p on long-tail Dir(0.1); CINIC-10 (ViT) and
# AG News (FastText): long-tail Dir(0.1) only.
FEDGMT_ROWS = {
    "path10": dict(partition="pathological", shards_per_client=10),
    "path4": dict(partition="pathological", shards_per_client=4),
    "path2": dict(partition="pathological", shards_per_client=2),
    "dir1.0": dict(partition="dirichlet", alpha=1.0, long_tail=True),
    "dir0.1": dict(partition="dirichlet", alpha=0.1, long_tail=True),
    "dir0.01": dict(partition="dirichlet", alpha=0.01, long_tail=True),
}
FEDGMT_PARTICIPATION_ROWS = {"p20": 20, "p10": 10, "p5": 5}   # clients per round of 100
# Per dataset (paper Table 6 and Appendix E.3): data fields, model, E, B, lr, rounds, the rows
# the paper runs, the R&T target accuracy, and Table 7's "except" cases (rho = lr on CIFAR-100;
# beta = 100 on AG News).
FEDGMT_DATASETS = {
    "cifar10": dict(data=dict(source="tfds", name="cifar10", augment="crop_flip"),
                    model="mcmahan_cnn", epochs=5, batch=50, lr=0.01, rounds=500,
                    rows=tuple(FEDGMT_ROWS), target=0.0, rho_over_lr=5.0, beta=10.0),
    "fashion_mnist": dict(data=dict(source="idx", name="fashion_mnist", augment="none"),
                          model="mcmahan_cnn", epochs=5, batch=50, lr=0.01, rounds=500,
                          rows=tuple(FEDGMT_ROWS), target=0.0, rho_over_lr=5.0, beta=10.0),
    "cifar100": dict(data=dict(source="tfds", name="cifar100", augment="crop_flip"),
                     model="resnet8", epochs=2, batch=20, lr=0.01, rounds=500,
                     rows=tuple(FEDGMT_PARTICIPATION_ROWS), target=0.0, rho_over_lr=1.0,
                     beta=10.0),
    "cinic10": dict(data=dict(source="imagefolder", name="cinic10", augment="crop_flip"),
                    model="vit_small", epochs=5, batch=100, lr=0.01, rounds=1000,
                    rows=("dir0.1",), target=0.44, rho_over_lr=5.0, beta=10.0),
    "ag_news": dict(data=dict(source="tfds", name="ag_news_subset", augment="none",
                              max_length=200),
                    model="fasttext", epochs=5, batch=50, lr=0.1, rounds=1000,
                    rows=("dir0.1",), target=0.85, rho_over_lr=5.0, beta=100.0),
}


def fedgmt_paper_config(dataset: str = "cifar10", row: str = "dir0.1") -> ml_collections.ConfigDict:
  """The FedGMT paper's setting (Section 4.1, Appendix E) for one dataset and Table 2 row.

  100 clients, 10% participation (CIFAR-100 rows: p = 20/10/5%), long-tail Dirichlet rows with
  imbalance factor 2, SGD with momentum 0.9, wd 1e-5, lr decay 0.998 per round, uniform cohort
  averaging (Algorithm 1), mean of the last 50 rounds. Per dataset (Table 6): CIFAR-10 and
  Fashion-MNIST McMahan CNN E = 5, B = 50, lr 0.01, 500 rounds; CIFAR-100 ResNet-8 (GroupNorm,
  2 groups) E = 2, B = 20, lr 0.01, 500 rounds; CINIC-10 ViT E = 5, B = 100, lr 0.01, 1000
  rounds; AG News FastText (200 tokens) E = 5, B = 50, lr 0.1, 1000 rounds. Random crop + flip
  on the 32x32 images (the code's pad 4; the paper's text says 2: `data.augment_pad`).
  Baselines with the Table 7 hyperparameters (`fedgmt_table7_baselines`).
  """
  if dataset not in FEDGMT_DATASETS:
    raise ValueError(f"dataset={dataset!r} is not one of {sorted(FEDGMT_DATASETS)}")
  d = FEDGMT_DATASETS[dataset]
  if row not in d["rows"]:
    raise ValueError(f"row={row!r} is not one of {list(d['rows'])} for dataset={dataset!r}")
  c = base_config()
  c.name = f"fedgmt_table2_{dataset}_{row}"
  c.data.num_clients = 100
  c.data.dirichlet_mode = "label"
  c.data.imbalance_factor = 2.0
  c.data.update(d["data"])
  c.clients_per_round = 10
  if row in FEDGMT_PARTICIPATION_ROWS:
    c.data.update(FEDGMT_ROWS["dir0.1"])
    c.clients_per_round = FEDGMT_PARTICIPATION_ROWS[row]
  else:
    c.data.update(FEDGMT_ROWS[row])
  # FedGMT Algorithm 1 (line 17) and FedDyn average the cohort uniformly (1/N); the spec's
  # example-count default would break the identity w = mean(w_m - beta u_m) = avg - beta u.
  c.aggregation = "uniform"
  c.model.name = d["model"]
  c.local.epochs = d["epochs"]
  c.local.batch_size = d["batch"]
  c.local.lr = d["lr"]
  c.local.lr_decay = 0.998
  c.local.momentum = 0.9
  c.local.weight_decay = 1e-5
  fedgmt_table7_baselines(c, dataset)
  c.rounds = d["rounds"]
  c.eval.every = 5
  c.eval.last_n = 50
  c.eval.target_accuracy = d["target"]
  c.checkpoint_every = 25
  return c


def fedgmt_table7_baselines(c: ml_collections.ConfigDict, dataset: str) -> None:
  """The FedGMT paper's Table 7 baseline settings, in this library's parameterisation.

  `beta = 10` (AG News: 100) is the penalty `1/(2 beta)||.||^2`: FedDyn/FedSMOO/FedLESAM-D
  alpha = 1/beta = 0.1, FedSpeed lambda = beta, FedGMT(-v2) beta. rho = 5 x lr (rho = lr on
  CIFAR-100) for FedSAM,
  FedSpeed, FedSMOO, FedLESAM-D (and MoFedSAM, FedGamma, which the table does not run).
  FedNTD beta = 1, tau = 1 (Table 7 calls it gamma). The table's numbers come from the
  authors' code (FL-SAM), whose FedSpeed is plain normalised SAM with FedDyn's server: the
  'code' variant here (the library default is the paper's box; docs/algorithms/fedspeed.md).
  SCAFFOLD, MoFedSAM, FedCM, MimeLite and FedGamma keep client momentum 0 (their blocks), the
  others use the table's 0.9.
  """
  d = FEDGMT_DATASETS[dataset]
  rho = c.local.lr * d["rho_over_lr"]
  for name in ("fedsam", "fedspeed", "fedsmoo", "fedlesam_d", "fedlesam", "mofedsam",
               "fedgamma", "feddyn_sam"):
    c.algorithm[name].rho = rho
  for name in ("feddyn", "fedsmoo", "fedlesam_d", "feddyn_sam"):
    c.algorithm[name].alpha = 1.0 / d["beta"]
  c.algorithm.fedspeed.lam = d["beta"]
  c.algorithm.fedgmt.beta = c.algorithm.fedgmt_v2.beta = d["beta"]
  c.algorithm.fedspeed.variant = "code"
  c.algorithm.fedntd.update(beta=1.0, tau=1.0)


# FedGloSS (Caldarola et al., 2024) Table 3 / Table 12: CNN rows.
FEDGLOSS_DATASETS = {
    "cifar10": dict(source="tfds", name="cifar10", augment="crop_flip", rounds=10000,
                    alphas=(0.0, 0.05)),
    "cifar100": dict(source="tfds", name="cifar100", augment="crop_flip", rounds=20000,
                     alphas=(0.0, 0.5)),
    "fashion_mnist": dict(source="idx", name="fashion_mnist", augment="none", rounds=1000,
                          alphas=(0.0, 0.05)),
}
# Chosen values: FedGloSS from the spec / the authors' scripts (paper_experiments/*.sh); the
# baselines' bold entries of Table 13 are lost in the seed's text, so the values below are
# picks from its grids consistent with FedGloSS's own.
FEDGLOSS_HPARAMS = {
    "cifar10": dict(rho=0.15, rho_l=0.15, beta=10.0, ramp_rounds=2000, fedsam_rho=0.1,
                    sam_rho=0.15, dyn_alpha=0.1, smoo_rho=0.15, gamma_rho=0.15),
    "cifar100": dict(rho=0.01, rho_l=0.2, beta=100.0, ramp_rounds=15000, fedsam_rho=0.02,
                     sam_rho=0.01, dyn_alpha=0.01, smoo_rho=0.05, gamma_rho=0.01),
}
# Fashion-MNIST (offline) uses the CIFAR-10 values with the ramp scaled to its 1,000 rounds.
FEDGLOSS_HPARAMS["fashion_mnist"] = dict(FEDGLOSS_HPARAMS["cifar10"], ramp_rounds=200)
# ResNet-18 (GroupNorm) columns (CIFAR-10 alpha 0.05, CIFAR-100 alpha 0.5; Table 12): 10 clients
# per round, wd 1e-5, client momentum 0.7, 10k rounds, rho_l = 0.01 and no ramp (T_s = 0) from
# the spec. The server rho and beta are not recoverable (grids {0.01, 0.05, 0.1, 0.5} and
# {1, 2, 5, 10} / {5, 10, 100}): OUR picks below, from the grids. Baselines: Table 13's ResNet-18
# grids (FedSAM {0.01, 0.02, 0.05}, FedDyn alpha 0.01, SAM-based rho 0.01).
FEDGLOSS_RESNET18 = {
    "cifar10": dict(alpha=0.05, rho=0.05, rho_l=0.01, beta=10.0, ramp_rounds=0, fedsam_rho=0.02,
                    sam_rho=0.01, dyn_alpha=0.01, smoo_rho=0.01, gamma_rho=0.01),
    "cifar100": dict(alpha=0.5, rho=0.05, rho_l=0.01, beta=10.0, ramp_rounds=0, fedsam_rho=0.02,
                     sam_rho=0.01, dyn_alpha=0.01, smoo_rho=0.01, gamma_rho=0.01),
}
FEDGLOSS_MODELS = ("cnn", "resnet18")


def fedgloss_paper_config(dataset: str = "cifar10", alpha: float = 0.0,
                          model: str = "cnn") -> ml_collections.ConfigDict:
  """The FedGloSS paper's setting (Table 12) for one dataset, Dirichlet alpha and model.

  CNN: LeNet-5 (VALID convolutions), 100 clients x 500 images (balanced Dirichlet, alpha = 0:
  one class per client), 5 clients per round, E = 1, B = 64, constant lr 0.01, weight decay
  4e-4, no client momentum, 10k rounds (CIFAR-100: 20k); accuracy averaged over the last 100
  rounds (evaluated every round there, every 100 rounds before); seeds 0, 42, 200299.
  ResNet-18 (GroupNorm; CIFAR-10 alpha 0.05 and CIFAR-100 alpha 0.5 only): 10 clients per
  round, wd 1e-5, client momentum 0.7, 10k rounds, the `FEDGLOSS_RESNET18` values.
  """
  if dataset not in FEDGLOSS_DATASETS:
    raise ValueError(f"dataset={dataset!r} is not one of {sorted(FEDGLOSS_DATASETS)}")
  if model not in FEDGLOSS_MODELS:
    raise ValueError(f"model={model!r} is not one of {list(FEDGLOSS_MODELS)}")
  d, hp = FEDGLOSS_DATASETS[dataset], FEDGLOSS_HPARAMS[dataset]
  if model == "resnet18":
    if dataset not in FEDGLOSS_RESNET18:
      raise ValueError(f"the paper runs ResNet-18 on {sorted(FEDGLOSS_RESNET18)} only")
    hp = FEDGLOSS_RESNET18[dataset]
    if float(alpha) != hp["alpha"]:
      raise ValueError(f"the paper runs ResNet-18 on {dataset} with alpha = {hp['alpha']:g} "
                       f"only, got {alpha:g}")
    d = dict(d, rounds=10000)
  c = base_config()
  c.name = f"fedgloss_{dataset}_alpha{alpha:g}" + ("_resnet18" if model == "resnet18" else "")
  c.data.source, c.data.name, c.data.augment = d["source"], d["name"], d["augment"]
  c.data.num_clients = 100
  c.data.partition = "dirichlet"
  c.data.dirichlet_mode = "balanced"
  c.data.alpha = float(alpha)
  c.data.examples_per_client = 500
  c.clients_per_round = 5
  c.model.name = "lenet5"
  c.local.epochs = 1
  c.local.batch_size = 64
  c.local.lr = 0.01
  c.local.lr_decay = 1.0
  c.local.momentum = 0.0
  c.local.weight_decay = 4e-4
  if model == "resnet18":
    c.model.name = "resnet18"
    c.clients_per_round = 10
    c.local.weight_decay = 1e-5
    c.local.momentum = 0.7
  c.rounds = d["rounds"]
  g = c.algorithm.fedgloss
  g.update(rho=hp["rho"], rho_l=hp["rho_l"], beta=hp["beta"], ramp_rounds=hp["ramp_rounds"],
           rho0=0.001, eta_s=1.0)
  c.algorithm.naive_fedgloss.update(g.to_dict())
  c.algorithm.naive_fedgloss.client_optimizer = "sam"
  c.algorithm.fedsam.rho = hp["fedsam_rho"]
  c.algorithm.feddyn.alpha = hp["dyn_alpha"]
  c.algorithm.feddyn_sam.update(rho=hp["sam_rho"], alpha=hp["dyn_alpha"])
  c.algorithm.fedsmoo.update(rho=hp["smoo_rho"], alpha=1.0 / hp["beta"])
  c.algorithm.fedgamma.rho = hp["gamma_rho"]
  c.algorithm.fedspeed.update(rho=hp["sam_rho"], lam=hp["beta"], alpha=0.95)
  c.eval.every = max(c.rounds // 100, 1)
  c.eval.last_n = 100
  c.eval.average_last = 100
  c.checkpoint_every = max(c.rounds // 20, 1)
  return c
