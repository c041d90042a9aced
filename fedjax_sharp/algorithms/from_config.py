"""The config glue of the optimisers: `config.local` and `config.server` -> the plain arguments
of `core.optimizers` (which never sees a ConfigDict)."""
from __future__ import annotations

import optax

from fedjax_sharp.core import sam
from fedjax_sharp.core.optimizers import (SERVER_OPTIMIZERS, ClientOptimizer, local_sgd,
                                          server_optimizer)
from fedjax_sharp.hyperparameters import declare

DEFAULT_MOMENTUM = 0.9  # the FedGMT paper's common setting

# The config blocks `local` (the clients' optimiser and steps) and `server`.
LOCAL_FIELDS = declare(
    epochs=(1, ">= 0", "E; K_m = E * ceil(n_m / B) (>= 1 unless local.steps > 0)"),
    steps=(0, ">= 0", "> 0: a fixed K for every client instead of epochs"),
    batch_size=(50, ">= 1", "B, examples per local step"),
    lr=(0.01, "> 0", "client learning rate"),
    lr_decay=(0.998, "(0, 1]", "eta_t = lr * lr_decay ** t (once per round)"),
    momentum=(None, "[0, 1)", f"client momentum; None = {DEFAULT_MOMENTUM} (the FedGMT "
              "setting); an algorithm whose paper fixes its own uses its block's momentum "
              "instead (docs/algorithms/index.md)", float),
    weight_decay=(1e-5, ">= 0", "client weight decay"),
    optimizer=("sgd", tuple(sorted(sam.GRADIENTS)), "local gradient of the algorithms that "
               "take any client optimiser (fedavg + sam is the deprecated spelling of fedsam)"),
    rho=(0.05, ">= 0", "SAM radius (FedGMT Table 7: 5 x lr)"),
    asam_eta=(0.0, ">= 0", "ASAM's T = |w| + eta"))
# Plain averaging (FedAvg) by default; an algorithm without a server optimiser refuses other
# values (`registration`).
SERVER_FIELDS = declare(
    optimizer=("sgd", tuple(sorted(SERVER_OPTIMIZERS)), "sgd (FedAvg with lr 1) | adam | yogi | "
               "adagrad"),
    lr=(1.0, "> 0", "server learning rate"),
    momentum=(0.0, "[0, 1)", "server momentum"))
SERVER_DEFAULTS = {k: h.default for k, h in SERVER_FIELDS.items()}


def resolve_momentum(config, own_momentum: float | None = None) -> float:
  """Client momentum. An algorithm whose paper fixes it passes `own_momentum` (its block's
  `momentum` field: `registration.client_optimizers.own_momentum` / `own_sgd`), so the FedGMT
  setting's 0.9 never leaks into it; the others use `config.local.momentum`, and 0.9 (the FedGMT
  paper's) when that is None."""
  if own_momentum is not None:
    return float(own_momentum)
  momentum = config.local.momentum
  return float(DEFAULT_MOMENTUM if momentum is None else momentum)


def client_optimizer_from_config(config, *, own_momentum: float | None = None,
                                 own_weight_decay: float | None = None,
                                 gradient: str | None = None, rho=None,
                                 eta: float | None = None,
                                 owner: str | None = None,
                                 asam_biases: bool = False,
                                 clip_norm: float = 0.0) -> ClientOptimizer:
  """The client optimiser of `config.local` (`optimizer`, `rho`, `asam_eta`, `momentum`,
  `weight_decay`); the momentum as `resolve_momentum(config, own_momentum)` says. An
  algorithm whose method fixes the weight decay (FedWMSAM, FedNSAM and the FedSWA family: 1e-3,
  FedGF: 4e-4, DP-FedSAM: 5e-4) passes `own_weight_decay` (its block's field), which replaces
  `local.weight_decay`.

  The FedSWA family also fixes gradient clipping at norm 10: `clip_norm`
  (`ClientOptimizer.clip_norm`; 0: no clipping).

  An algorithm that fixes its own gradient estimator (FedSAM: 'sam' with the rho of its block;
  FedSpeed, FedSMOO, FedLESAM, FedGMT: their own, 'sgd' here) passes `gradient` (and `rho`,
  `eta`); `local.optimizer` must then be left at 'sgd', otherwise the two settings would
  silently disagree, and the error says so. `owner` names the algorithm in that error.
  `asam_biases`: ASAM scales biases too (`ClientOptimizer`; DP-FedSAM's code).
  """
  local = config.local
  requested = str(local.optimizer)
  if requested not in sam.GRADIENTS:
    raise ValueError(f"local.optimizer={requested!r} is not one of {list(sam.GRADIENTS)}")
  if gradient is not None and requested != "sgd":
    own = ("takes no SAM client optimiser" if gradient == "sgd" else
           f"sets its own local gradient ({gradient!r}, radius config.algorithm.{owner}.rho)")
    raise ValueError(f"local.optimizer={requested!r} conflicts with algorithm.name={owner!r}, "
                     f"which {own}: leave local.optimizer='sgd'")
  if gradient is None:
    gradient = requested
    rho = float(local.rho) if rho is None else rho
    eta = float(local.asam_eta) if eta is None else eta
  tx = local_sgd(momentum=resolve_momentum(config, own_momentum),
                 weight_decay=float(local.weight_decay if own_weight_decay is None
                                    else own_weight_decay))
  return ClientOptimizer(tx, gradient=gradient, rho=0.0 if rho is None else rho,
                         eta=0.0 if eta is None else float(eta), asam_biases=bool(asam_biases),
                         clip_norm=float(clip_norm))


def server_optimizer_from_config(config) -> optax.GradientTransformation:
  s = config.server
  return server_optimizer(s.optimizer, s.lr, momentum=s.momentum)


def server_overrides(config) -> list[str]:
  """`server.<field>=value` for every field of `config.server` not at its default."""
  return [f"server.{k}={config.server[k]!r}" for k, v in SERVER_DEFAULTS.items()
          if config.server[k] != v]
