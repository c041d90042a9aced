"""Algorithm registry: config `algorithm.name` -> builder(config, apply_fn) -> FederatedAlgorithm.

Every builder reads its hyperparameters from its block `config.algorithm.<name>`, the local
optimiser from `config.local` and the server optimiser from `config.server`. Only this module
imports the algorithm modules.
"""
from __future__ import annotations

from typing import Callable

from fedjax_sharp.algorithms.fed_avg import build_fed_asam, build_fed_avg, build_fed_sam
from fedjax_sharp.algorithms.fed_cm import build_fed_cm, build_mofedsam
from fedjax_sharp.algorithms.fed_dyn import build_fed_dyn, build_fed_dyn_sam
from fedjax_sharp.algorithms.fed_gloss import build_fed_gloss, build_naive_fed_gloss
from fedjax_sharp.algorithms.fed_gmt import build_fed_gmt, build_fed_gmt_v2
from fedjax_sharp.algorithms.fed_lesam import build_fed_lesam, build_fed_lesam_d
from fedjax_sharp.algorithms.fed_ntd import build_fed_ntd
from fedjax_sharp.algorithms.fed_prox import build_fed_prox
from fedjax_sharp.algorithms.fed_smoo import build_fed_smoo
from fedjax_sharp.algorithms.fed_speed import build_fed_speed
from fedjax_sharp.algorithms.mime_lite import build_mime_lite
from fedjax_sharp.algorithms.scaffold import build_fed_gamma, build_scaffold
from fedjax_sharp.core.algorithm import FederatedAlgorithm

Builder = Callable[..., FederatedAlgorithm]

ALGORITHMS: dict[str, Builder] = {
    # Heterogeneity-oriented baselines.
    "fedavg": build_fed_avg,
    "fedprox": build_fed_prox,
    "scaffold": build_scaffold,
    "fedcm": build_fed_cm,
    "mimelite": build_mime_lite,
    "fedntd": build_fed_ntd,
    "feddyn": build_fed_dyn,
    # Client-side sharpness-aware family.
    "fedsam": build_fed_sam,
    "fedasam": build_fed_asam,
    "mofedsam": build_mofedsam,
    "fedgamma": build_fed_gamma,
    "feddyn_sam": build_fed_dyn_sam,
    "fedspeed": build_fed_speed,
    "fedsmoo": build_fed_smoo,
    "fedlesam": build_fed_lesam,
    "fedlesam_d": build_fed_lesam_d,
    # Global (server-side) sharpness.
    "fedgloss": build_fed_gloss,
    "naive_fedgloss": build_naive_fed_gloss,
    # Global model trajectory.
    "fedgmt": build_fed_gmt,
    "fedgmt_v2": build_fed_gmt_v2,
}


# The hyperparameters a sweep may vary inside one compiled program (`training.sweep`), besides
# seeds and learning rates: their builders read them with `core.hparams.scalar`, so the sweep can
# rebuild the algorithm with traced values (`RoundEngine.algorithm_factory`). `local.rho` is the
# radius of `local.optimizer='sam'|'asam'` for the algorithms that take the local optimiser as is.
SWEEPABLE: dict[str, tuple[str, ...]] = {
    "fedavg": ("local.rho",),
    "fedprox": ("algorithm.fedprox.mu", "local.rho"),
    "fedntd": ("algorithm.fedntd.beta", "local.rho"),
    "feddyn": ("algorithm.feddyn.alpha", "local.rho"),
    "fedsam": ("algorithm.fedsam.rho",),
    "fedasam": ("algorithm.fedasam.rho",),
    "feddyn_sam": ("algorithm.feddyn_sam.alpha", "algorithm.feddyn_sam.rho"),
    "fedgmt": ("algorithm.fedgmt.gamma", "algorithm.fedgmt.alpha", "algorithm.fedgmt.beta"),
    "fedgmt_v2": ("algorithm.fedgmt_v2.gamma", "algorithm.fedgmt_v2.alpha",
                  "algorithm.fedgmt_v2.beta"),
}


def register(name: str, builder: Builder, sweepable: tuple[str, ...] = ()) -> None:
  """Adds an algorithm; `sweepable`: the config paths its builder reads with
  `core.hparams.scalar` (see SWEEPABLE)."""
  ALGORITHMS[name] = builder
  SWEEPABLE[name] = tuple(sweepable)


def build_algorithm(config, apply_fn) -> FederatedAlgorithm:
  name = config.algorithm.name
  if name not in ALGORITHMS:
    raise ValueError(f"algorithm.name={name!r} is not one of {sorted(ALGORITHMS)}")
  return ALGORITHMS[name](config, apply_fn)
