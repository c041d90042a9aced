"""DP-FedSAM (Shi et al., "Make Landscape Flatter in Differentially Private Federated Learning",
CVPR 2023, arXiv 2303.11242): FedSAM / FedASAM with client-level differential privacy of the
uploads. It is FedAvg with a SAM/ASAM client optimiser (`fed_avg`) wrapped by the library's DP
mechanism (`core.privacy.with_dp`) with the method's own defaults; nothing is copied.

Round t, sampled clients N_t (|N_t| = m, fixed size without replacement):

    client m: K_m local steps from w^t with a fresh SGD (lr_t = lr * lr_decay^t, momentum 0.5,
              weight decay 5e-4), each with the gradient at the ASAM-perturbed point
              e = rho * w^2 g / (||(|w|) g|| + 1e-12)   (adaptive; SAM: rho g / (||g|| + 1e-12))
    upload:   Delta_m = w^t - w_m, clipped tensor by tensor to norm C, plus N(0, sigma^2 C^2 / m)
    server:   w^{t+1} = w^t - (1/m) sum_m Delta~_m

Sources: the authors' code, YMJS-Irfan/DP-FedSAM at commit 016bd7fc (2023-08-11), read through
the spec (../shared/spec/new_algorithms.md, Part 2 section 3):
- local step: fedml_api/dpfedsam/my_model_trainer.py L55-74 and sam.py L5-80 (first_step /
  second_step; ASAM scales every tensor, biases included: `asam_biases`, `eta` = 0);
- `--adaptive` defaults to True and cannot be switched off from the command line
  (main_dpfedsam.py L81: `type=bool`), so the code always runs ASAM: `adaptive=True` here;
- DP: dpfedsam_api.py L61-85: `Delta_m[l] *= min(1, C / ||Delta_m[l]||)` per tensor (L76) and
  noise std `sigma * C / sqrt(client_num_per_round)` added per client (L73, L77);
- aggregation L148-163: weights n_m / sum n, all n_m equal in its partitions, so 1/m; here the
  uniform weights DP needs (`aggregation='auto'` resolves to 'uniform');
- defaults (main_dpfedsam.py L36-110 and the README's commands): C = 0.2, sigma = 0.95,
  rho = 0.5, local momentum 0.5, weight decay 5e-4, lr 0.1 with decay 0.998 per round (the
  learning rate is `config.local.lr` / `local.lr_decay`, set by the run's config).
Paper vs code: the paper body was not readable (only the abstract: "clipping local updates and
adding random noise", "Sharpness Aware Minimization"), so the code's choices are the defaults
(the library's rule where only the code is known): per-tensor clipping (`clip='global'` is the
abstract's reading, one norm over the whole update), client-side noise (`noise='server'`: one
draw on the sum, the same distribution of the aggregate), ASAM (`adaptive=False`: SAM). The
arXiv page (ar5iv 2303.11242) could be read only to the introduction here; a third-party summary
of the paper (junaidaliop.github.io/zij/math/dpfedsam, not checked against the PDF) writes its
rule as SAM with rho g/||g||, one global clip min(1, C/||Delta||) and client noise
N(0, sigma^2 C^2/m): `adaptive=False, clip='global'` here.
Accounting: the run reports epsilon(delta) each round with `config.dp.delta` and
`config.dp.accountant` (`core.privacy`). With 'per_tensor' clipping the sensitivity of the
clipped update is C sqrt(L) for L tensors, which the accountant counts; the authors' offline
script (eps_computer.py) does not (`core.privacy.dpfedsam_epsilon` reproduces that script).
"""
from __future__ import annotations

from typing import Annotated

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.hyperparameters import Field, checked
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
