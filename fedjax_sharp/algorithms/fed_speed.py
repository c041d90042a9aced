"""FedSpeed (Sun et al., ICLR 2023): prox-correction + a quasi-gradient from an ascent step.

Client i keeps the prox-correction `g^_i` (0 at start; the FedDyn dual `h_m` with
`alpha = 1/lambda`, in `fedjax_sharp.core.dyn`). Round t, from `x_{i,0} = x^t`, on each batch:

    g1 = grad f_i(x_k)                          (value and accuracy reported here)
    x' = x_k + rho * g1                          ('paper': unnormalised extra ascent step)
         x_k + rho * g1 / ||g1||                 ('code': normalised SAM step)
    g2 = grad f_i(x'), same batch
    g~ = (1 - alpha) g1 + alpha g2               (quasi-gradient)
    the local optimiser is fed  g~ - g^_i + (1/lambda)(x_k - x^t)
    after K steps: g^_i <- g^_i - (1/lambda)(x_{i,K} - x^t)

Server ('paper', `dual_average='active'`): x^{t+1} = sum_i p_i (x_{i,K} - lambda g^_i), the
cohort's own prox-corrected models (uniform p_i in the paper's box); one model up.
'code' (`dual_average='all'`): both public codes (FL-Simulator `client/fedspeed.py`, the
authors'; FL-SAM, the FedGMT authors', whose runs produced FedGMT Table 2) run plain normalised
SAM (`alpha = 1`) with FedDyn's server, the dual averaged over all M clients. FL-SAM's proximal term
is the unsquared norm: `prox='unsquared'`. The paper box is as quoted in FL-Simulator#6 and
implemented by FLGo (the stored copies of the paper stop at the introduction). Defaults: lambda = 10
(FedGMT Table 7 "beta = 10"), rho = 0.05 (5 x lr), alpha = 0.95 (the middle of the FedGloSS grid
{0.9, 0.95, 0.99}). Cost: 2 backward passes per step. Communication 1 down, 1 up.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import dyn, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

VARIANTS = {
    "paper": dict(alpha=0.95, normalize_ascent=False, dual_average="active", prox="squared"),
    "code": dict(alpha=1.0, normalize_ascent=True, dual_average="all", prox="squared"),
}


@flax.struct.dataclass
class FedSpeedLocalState:
  params: Any     # x_{i,k}
  opt_state: Any  # local optimiser state (reset every round)
  anchor: Any     # x^t
  h: Any          # g^_i, constant during the round


@checked
def fed_speed(
    apply_fn: common.ApplyFn, client_optimizer,
    lam: Annotated[float, Field("> 0", "prox-correction penalty lambda (dual coefficient 1/lam)")]
    = 10.0,
    rho: Annotated[float, Field(">= 0", "ascent radius")] = 0.05,
    variant: Annotated[str, Field(doc="presets of the options left None: 'paper' or 'code'",
                                  choices=tuple(VARIANTS))] = "paper",
    alpha: Annotated[float | None, Field("[0, 1]", "gradient mix (None: the variant's)")] = None,
    normalize_ascent: Annotated[bool | None, Field(doc="normalise the ascent step (None: the "
                                                   "variant's)")] = None,
    dual_average: Annotated[str | None, Field(doc="'all' or 'active' (None: the variant's)",
                                              choices=dyn.DUAL_AVERAGES)] = None,
    prox: Annotated[str | None, Field(doc="proximal term (None: the variant's)",
                                      choices=dyn.PROX_MODES)] = None,
    name: str = "fedspeed") -> FederatedAlgorithm:
  """FedSpeed; `variant` ('paper' | 'code') presets the options left as None."""
  prefix = f"algorithm.{name}"
  lam, rho = float(lam), float(rho)
  preset = VARIANTS[variant]
  alpha = preset["alpha"] if alpha is None else float(alpha)
  normalize_ascent = preset["normalize_ascent"] if normalize_ascent is None else normalize_ascent
  dual_average = preset["dual_average"] if dual_average is None else dual_average
  prox = preset["prox"] if prox is None else prox
  dyn_alpha = 1.0 / lam
  dyn.validate(dyn_alpha, prox, dual_average, prefix=prefix)
  opt = common.plain_gradients(client_optimizer, name, "makes its own ascent step")
  loss_fn = common.cross_entropy_loss(apply_fn)

  def client_init(w_global, h_m, client_info, round_info):
    return FedSpeedLocalState(params=w_global,
                              opt_state=opt.init(w_global, round_info.learning_rate),
                              anchor=w_global, h=h_m)

  def local_step(state, batch, key, round_info):
    (loss, logits), g1, g2 = sam.sam_value_and_grad(loss_fn, state.params, batch, rho=rho,
                                                     normalize=normalize_ascent)
    quasi = tree.axpy(alpha, g2, tree.scale(1.0 - alpha, g1))
    direction = dyn.local_direction(quasi, state.params, state.anchor, state.h, dyn_alpha, prox)
    return common.optimizer_step(opt, state, direction), common.step_metrics(loss, logits, batch)

  def client_finalize(state, w_global, h_m, client_info, round_info):
    return dyn.client_finalize(state.params, w_global, h_m, dyn_alpha, dual_average)

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    return dyn.server_update(server_state, uploads_C, weights_C, mask_C, dyn_alpha,
                             round_info.num_clients, dual_average)

  return FederatedAlgorithm(
      name=name, server_init=dyn.server_init, client_state_init=tree.zeros_like,
      broadcast=lambda server_state, round_info: server_state.params, client_init=client_init,
      local_step=local_step, client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1))


registration.register("fedspeed", fed_speed, client="sgd", title="FedSpeed",
                      paper="Sun et al., ICLR 2023")
