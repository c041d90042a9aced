"""FedSMOO (Sun et al., ICML 2023): dynamic regularisation + a globally corrected SAM step.

Client m keeps the FedDyn dual `h_m` (`fedjax_sharp.core.dyn`, `alpha = 1/beta`) and the
perturbation dual `mu_m` (both 0 at start); the server keeps `w` and the global perturbation
`s` (0 at start) and sends both down (2x). Round t, from `w_{m,0} = w^t`, on each batch:

    g    = grad L(w_k)                               (value and accuracy reported here)
    e    = rho (g - mu_m - s) / ||g - mu_m - s||      # corrected ascent direction
    mu_m <- mu_m + (e - s)                            # dual ascent on the constraint e_m = s
    g_s  = grad L(w_k + e), same batch
    the local optimiser is fed  g_s - h_m + grad R(w_k - w^t)    (R: (alpha/2)||.||^2)
    after K steps: h_m <- h_m - alpha (w_{m,K} - w^t)

Upload (2x): the FedDyn model update and `s_m = mu_m - e_K` (`e_K` the last step's
perturbation; FL-SAM); `s_update='mu'` uploads `mu_m` (FL-Simulator, the authors' code, which
drops `e_K` as small). Server: the FedDyn model step (`dual_average`, default 'all' as the
spec), then `s = rho * sum_m p_m s_m / ||sum_m p_m s_m||`.

Defaults: beta = 10 (alpha = 0.1; FedGMT Table 7), rho = 0.05 (5 x lr). Cost: 2 backward passes
per step. Never reproduced: the per-layer slicing bug of FL-Simulator's `mu_m`/`s` between its
commits 653ebb5 and 502bec6.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import dyn, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

S_UPDATES = ("paper", "mu")


@flax.struct.dataclass
class FedSMOOServerState:
  params: Any  # w^t
  h: Any       # FedDyn server dual
  s: Any       # global perturbation


@flax.struct.dataclass
class FedSMOOClientState:
  h: Any   # FedDyn dual h_m
  mu: Any  # perturbation dual mu_m


@flax.struct.dataclass
class FedSMOOLocalState:
  params: Any
  opt_state: Any
  anchor: Any  # w^t
  h: Any       # h_m (constant during the round)
  s: Any       # the round's global perturbation (constant)
  mu: Any      # mu_m, updated every step
  last_e: Any  # the last step's perturbation e_K


@checked
def fed_smoo(apply_fn: common.ApplyFn, client_optimizer,
             alpha: Annotated[float, Field("> 0", "FedDyn dual coefficient")] = 0.1,
             rho: Annotated[float, Field(">= 0", "SAM radius")] = 0.05,
             prox: Annotated[str, Field(doc="proximal term", choices=dyn.PROX_MODES)]
             = "squared",
             dual_average: Annotated[str, Field(doc="server dual averaged over 'all' clients or "
                                                "the 'active' cohort",
                                                choices=dyn.DUAL_AVERAGES)] = "all",
             s_update: Annotated[str, Field(doc="global perturbation update: 'paper' or 'mu'",
                                            choices=S_UPDATES)] = "paper",
             name: str = "fedsmoo") -> FederatedAlgorithm:
  alpha, rho = float(alpha), float(rho)
  opt = common.plain_gradients(client_optimizer, name)
  loss_fn = common.cross_entropy_loss(apply_fn)

  def server_init(params):
    # Each leaf its own array: the round donates the server state (core.donation).
    return FedSMOOServerState(params=params, h=tree.zeros_like(params), s=tree.zeros_like(params))

  def client_state_init(params):
    return FedSMOOClientState(h=tree.zeros_like(params), mu=tree.zeros_like(params))

  def broadcast(server_state, round_info):
    return (server_state.params, server_state.s)

  def client_init(bcast, client_state, client_info, round_info):
    w_global, s = bcast
    return FedSMOOLocalState(params=w_global,
                             opt_state=opt.init(w_global, round_info.learning_rate),
                             anchor=w_global, h=client_state.h, s=s, mu=client_state.mu,
                             last_e=tree.zeros_like(w_global))

  def local_step(state, batch, key, round_info):
    (loss, logits), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
    e = sam.perturbation(tree.sub(tree.sub(g, state.mu), state.s), rho)
    mu = tree.add(state.mu, tree.sub(e, state.s))
    _, g_s = sam.grad_at(loss_fn, state.params, e, batch)
    direction = dyn.local_direction(g_s, state.params, state.anchor, state.h, alpha, prox)
    state = common.optimizer_step(opt, state, direction).replace(mu=mu, last_e=e)
    return state, common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    w_global, _ = bcast
    model_upload, h = dyn.client_finalize(state.params, w_global, client_state.h, alpha,
                                          dual_average)
    s_m = tree.sub(state.mu, state.last_e) if s_update == "paper" else state.mu
    return (model_upload, s_m), FedSMOOClientState(h=h, mu=state.mu)

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    model_C, s_C = uploads_C
    model = dyn.server_update(dyn.DynServerState(server_state.params, server_state.h), model_C,
                              weights_C, mask_C, alpha, round_info.num_clients, dual_average)
    s = sam.perturbation(tree.weighted_sum(s_C, weights_C), rho)
    return FedSMOOServerState(params=model.params, h=model.h, s=s)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=client_state_init,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=2))


registration.register("fedsmoo", fed_smoo, client="sgd", title="FedSMOO",
                      paper="Sun et al., ICML 2023")
