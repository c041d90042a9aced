"""DP-FedSAM (Shi et al., CVPR 2023): FedSAM / FedASAM with client-level differential privacy
of the uploads. It is FedAvg with a SAM/ASAM client optimiser (`fed_avg`) wrapped by the
library's DP mechanism (`core.privacy.with_dp`) with the method's own defaults; nothing is copied.

Round t, sampled clients N_t (|N_t| = m, fixed size without replacement):

    client m: K_m local steps from w^t with a fresh SGD (lr_t, `momentum`, `weight_decay`),
              each with the gradient at the perturbed point w + e:
              e = rho * w^2 g / (||(|w|) g|| + eps)   (adaptive=True: ASAM, biases included)
              e = rho * g / (||g|| + eps)             (adaptive=False: SAM)
    upload:   Delta_m = w^t - w_m, clipped tensor by tensor to norm C (clip='global': one norm
              over the update), plus N(0, sigma^2 C^2 / m) (noise='server': one draw on the sum)
    server:   w^{t+1} = w^t - (1/m) sum_m Delta~_m      (the uniform weights DP needs)

C = `clip_norm`, sigma = `noise_multiplier`, rho = `rho`, eps = `core.tree.NORM_EPS`. The run
reports epsilon(delta) each round (`config.dp.delta`, `config.dp.accountant`); with per-tensor
clipping of L tensors the sensitivity it counts is C sqrt(L).

Reductions (tested): sigma = 0, C = inf and adaptive=False is FedSAM, and rho = 0 as well is
FedAvg (with the same client optimiser); clip='global', noise='server', adaptive=False is
FedSAM under `core.privacy.with_dp` with the same mechanism.
"""
from __future__ import annotations

from typing import Annotated

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import privacy
from fedjax_sharp.core.algorithm import FederatedAlgorithm


@checked
def dp_fedsam(apply_fn: common.ApplyFn, client_optimizer, *,
              clip_norm: Annotated[float, Field("(0, inf]", "C, the clip norm of each upload "
                                                "(code: 0.2)")] = 0.2,
              noise_multiplier: Annotated[float, Field(">= 0", "sigma (code: 0.95)")] = 0.95,
              clip: Annotated[str, Field(doc="'per_tensor' (the code) | 'global' (one norm over "
                                         "the update, the abstract's reading)",
                                         choices=privacy.CLIPS)] = "per_tensor",
              noise: Annotated[str, Field(doc="'client' (each adds N(0, sigma^2 C^2 / m), the "
                                          "code) | 'server' (one draw on the sum)",
                                          choices=privacy.NOISES)] = "client",
              name: str = "dp_fedsam") -> FederatedAlgorithm:
  """FedAvg with the SAM/ASAM `client_optimizer`, its uploads clipped and noised."""
  mechanism = privacy.Mechanism(float(clip_norm), float(noise_multiplier), clip=str(clip),
                                noise=str(noise), prefix=f"algorithm.{name}")
  return privacy.with_dp(fed_avg(apply_fn, client_optimizer, name=name), mechanism)


def _client(config, name, *,
            rho: Annotated[float, Field(">= 0", "SAM / ASAM radius (code: 0.5)",
                                        sweepable=True)] = 0.5,
            adaptive: Annotated[bool, Field(doc="ASAM (the code's default, which its command "
                                            "line cannot switch off); False: SAM")] = True,
            momentum: registration.OwnMomentum = 0.5,
            weight_decay: Annotated[float, Field(">= 0", "client weight decay (code: 5e-4; "
                                                 "local.weight_decay is not used)")] = 5e-4):
  return from_config.client_optimizer_from_config(
      config, gradient="asam" if adaptive else "sam", rho=float(rho), eta=0.0, owner=name,
      own_momentum=float(momentum), own_weight_decay=float(weight_decay), asam_biases=True)


registration.register("dp_fedsam", dp_fedsam, client=_client, private=True, title="DP-FedSAM",
                      paper="Shi et al., CVPR 2023 (arXiv 2303.11242); code YMJS-Irfan/DP-FedSAM",
                      weighting="uniform",
                      weighting_source="differential privacy (the sensitivity bound); the "
                                       "authors' n_m / sum n is 1/m on their equal clients")
