"""Dynamic regularisation (FedDyn-style ADMM) shared by FedDyn, FedSpeed, FedSMOO, FedLESAM-D.

Notation of FedDyn (Acar et al. 2021): coefficient `alpha` (= 1/beta of FedGMT Table 7 and
FL-SAM's `-be`, = 1/lambda of FedSpeed). Client m keeps `h_m` (0 at start), the server `h`:

    local direction  g - h_m + grad R(w - w^t)                 (R: the proximal term below)
    after K_m steps  h_m <- h_m - alpha (w_m - w^t)
    server, 'all'    h <- h - (alpha / M) sum_{m in N_t} (w_m - w^t)          (FedDyn, codes)
                     w^{t+1} = sum_m p_m w_m - h / alpha
    server, 'active' w^{t+1} = sum_m p_m (w_m - h_m / alpha)  (FedSpeed's box: the cohort's own
                     duals; each client uploads w_m - h_m/alpha, still one model up)

The two coincide under full participation (all h_m start at 0, so h = mean over all clients).
Proximal term `prox`:
  'squared'   (alpha/2) ||w - w^t||^2, gradient alpha (w - w^t)                 (the papers)
  'unsquared' (alpha/2) ||w - w^t||, gradient (alpha/2)(w - w^t)/(||w - w^t|| + 1e-12): constant
              length alpha/2, 0 at w = w^t (FL-SAM, the FedGMT authors' code, for every
              FedDyn-type baseline)
  'none'      no proximal term.
Norms are one global L2 norm over the whole parameter pytree.
"""
from __future__ import annotations

from typing import Any

import flax.struct

from fedjax_sharp.core import tree

PROX_MODES = ("squared", "unsquared", "none")
DUAL_AVERAGES = ("all", "active")


@flax.struct.dataclass
class DynServerState:
  params: Any  # w^t
  h: Any       # server dual h (0 at start; unused by 'active')


def validate(alpha: float, prox: str, dual_average: str = "all", prefix: str = "algorithm") -> None:
  if not alpha > 0:
    raise ValueError(f"{prefix}.alpha must be > 0, got {alpha}")
  if prox not in PROX_MODES:
    raise ValueError(f"{prefix}.prox={prox!r} is not one of {list(PROX_MODES)}")
  if dual_average not in DUAL_AVERAGES:
    raise ValueError(f"{prefix}.dual_average={dual_average!r} is not one of {list(DUAL_AVERAGES)}")


def prox_gradient(params, anchor, alpha: float, prox: str = "squared"):
  """Gradient of the proximal term R(w - w^t) at w = `params` (see the module docstring)."""
  if prox == "squared":
    return tree.scale(alpha, tree.sub(params, anchor))
  if prox == "unsquared":
    return tree.scale(0.5 * alpha, tree.normalize(tree.sub(params, anchor)))
  if prox == "none":
    return tree.zeros_like(params)
  raise ValueError(f"prox={prox!r} is not one of {list(PROX_MODES)}")


def local_direction(grads, params, anchor, h_m, alpha: float, prox: str):
  """`g - h_m + grad R(w - w^t)`: what the local optimiser is fed."""
  return tree.add(tree.sub(grads, h_m), prox_gradient(params, anchor, alpha, prox))


def server_init(params) -> DynServerState:
  return DynServerState(params=params, h=tree.zeros_like(params))


def client_finalize(params, w_global, h_m, alpha: float, dual_average: str = "all"):
  """Returns (upload, new h_m): the dual step, and `w_m - w^t` ('all') or
  `w_m - h_m/alpha - w^t` ('active')."""
  delta = tree.sub(params, w_global)
  new_h = tree.axpy(-alpha, delta, h_m)
  if dual_average == "active":
    return tree.axpy(-1.0 / alpha, new_h, delta), new_h
  return delta, new_h


def server_update(state: DynServerState, uploads_C, weights_C, mask_C, alpha: float,
                  num_clients: int, dual_average: str = "all") -> DynServerState:
  """The FedDyn server step ('all') or the cohort-dual average ('active')."""
  avg = tree.add(state.params, tree.weighted_sum(uploads_C, weights_C))
  if dual_average == "active":
    return DynServerState(params=avg, h=state.h)
  h = tree.axpy(-alpha / num_clients, tree.weighted_sum(uploads_C, mask_C), state.h)
  return DynServerState(params=tree.axpy(-1.0 / alpha, h, avg), h=h)
