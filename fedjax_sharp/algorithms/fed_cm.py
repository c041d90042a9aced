"""FedCM (Xu et al. 2021, client-level momentum) and MoFedSAM (Qu et al., ICML 2022).

Server state: `w` and the global momentum `Delta` in gradient units (`Delta^0 = 0`). Round r,
client i receives `(w^r, Delta^r)` (2 model-sized vectors down) and from `w^r`:

    local step   v = beta * g + (1 - beta) * Delta^r;   w <- w - eta_l v   (through the optax
                 transform: weight decay at w if configured, client momentum 0 by default)
    upload       w^r - w_{i,K}  (1 vector up)

where `g` is the plain gradient (FedCM) or SAM's gradient at `w + rho g/||g||` (MoFedSAM: a
`sam` client optimiser; the slides print `+ eta v`, a sign typo, and `g` where the SAM
gradient is meant). Server:

    Delta^{r+1} = sum_i p_i (w^r - w_{i,K}) / (eta_l K_i)        # gradient units
    w^{r+1}     = w^r - eta_g Delta^{r+1}

with `eta_l` the learning rate of round r. The server step is exposed relative to plain
averaging: `server_lr_relative = s` means `eta_g = s * eta_l K_i` client by client, i.e.
`w^{r+1} = w^r - s * sum_i p_i (w^r - w_{i,K})`; `s = 1` (default) is the model average, as in
the paper when all clients take K steps (its Algorithm 2 writes `Delta = (1/(eta_l K S)) sum`,
which is this with equal K and uniform weights).

`beta = 1` is FedAvg (FedCM) / FedSAM (MoFedSAM) exactly (tested). Defaults follow FL-Simulator
(woodenchild95, the only public code): beta 0.1 (its `alpha`), MoFedSAM rho 0.1; client momentum
0 (the momentum is Delta).
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


@flax.struct.dataclass
class FedCMServerState:
  params: Any    # w^r
  momentum: Any  # Delta^r, gradient units


@flax.struct.dataclass
class FedCMLocalState:
  params: Any
  opt_state: Any
  momentum: Any  # Delta^r, constant during the round


@checked
def fed_cm(apply_fn: common.ApplyFn, client_optimizer,
           beta: Annotated[float, Field("(0, 1]", "weight of the local gradient against the "
                                        "global momentum (FL-Simulator's alpha)")] = 0.1,
           server_lr_relative: Annotated[float, Field("> 0", "server step relative to plain "
                                                      "averaging (1 = the model average)")] = 1.0,
           name: str = "fedcm") -> FederatedAlgorithm:
  """FedCM; with a `sam` ClientOptimizer, MoFedSAM."""
  beta, server_lr_relative = float(beta), float(server_lr_relative)
  opt = common.as_client_optimizer(client_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)

  def server_init(params):
    return FedCMServerState(params=params, momentum=tree.zeros_like(params))

  def broadcast(server_state, round_info):
    return (server_state.params, server_state.momentum)

  def client_init(bcast, client_state, client_info, round_info):
    w_global, momentum = bcast
    local = common.init_local(opt, w_global, round_info.learning_rate)
    return FedCMLocalState(params=local.params, opt_state=local.opt_state, momentum=momentum)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_idx=round_info.round)
    v = momentum_mix(beta, grads, state.momentum)
    return common.optimizer_step(opt, state, v), common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    w_global, _ = bcast
    return {"delta": tree.sub(w_global, state.params),
            "num_steps": client_info.num_steps.astype(tree.float_dtype())}, client_state

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    deltas_C = uploads_C["delta"]
    per_step = 1.0 / (round_info.learning_rate * jnp.maximum(uploads_C["num_steps"], 1.0))
    momentum = tree.weighted_sum(deltas_C, weights_C * per_step)
    params = tree.axpy(-server_lr_relative, tree.weighted_sum(deltas_C, weights_C),
                       server_state.params)
    return FedCMServerState(params=params, momentum=momentum)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=1),
      dp_unsupported="divides each client's delta by that client's own number of local steps "
                     "(a data-dependent weight the DP sensitivity bound does not cover)")


def momentum_mix(beta: float, grads, momentum):
  """beta * g + (1 - beta) * Delta."""
  return tree.axpy(beta, grads, tree.scale(1.0 - beta, momentum))


registration.register("fedcm", fed_cm, client="own_momentum", title="FedCM",
                      paper="Xu et al., 2021 (client-level momentum)")


def _mofedsam_client(config, name, *,
                     rho: Annotated[float, Field(">= 0", "SAM radius (FL-Simulator: 0.1)")] = 0.1,
                     momentum: registration.OwnMomentum = 0.0):
  return from_config.client_optimizer_from_config(config, own_momentum=float(momentum),
                                                  gradient="sam", rho=float(rho), owner=name)


# The paper the docs page cites (title in quotes).
_PAPER = (
    '"Generalized Federated Learning via Sharpness Aware Minimization"')

registration.register("mofedsam", fed_cm, client=_mofedsam_client, title="MoFedSAM",
                      paper=f"Qu et al., {_PAPER}, ICML 2022")
