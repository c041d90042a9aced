"""FedLESAM and FedLESAM-D (Fan et al., ICML 2024): a locally estimated global perturbation.

No extra backward pass: the perturbation comes from the trajectory of global models. Client m
keeps `w_old`, the global model it received at its previous participation ('paper'):

    e = rho (w_old - w^t) / ||w_old - w^t||       (one global L2 norm; e = 0 at a client's first
                                                   participation, or w_old = w^0 with
                                                   first_participation='w0')
    each local step: g = grad L(w_k + e), same batch, one backward pass
    after the round: w_old <- w^t

`perturbation='broadcast'` uses the server's last change `w^{t-1} - w^t` for every client (both
public codes, FL-SAM and MediaBrain-SJTU/FedLESAM, do this; it costs a second model-sized
vector down), with one global norm: both codes' per-layer slicing bugs are not reproduced.
Loss and accuracy are reported at the perturbed point (the only forward pass).

FedLESAM-D (`dyn=True`, the FedGMT Table 2 baseline) adds FedDyn's dual and proximal terms
(`fedjax_sharp.core.dyn`, `alpha = 1/beta`) at the unperturbed `w`, and FedDyn's server;
FedLESAM (`dyn=False`) is FedAvg's server. Defaults: rho = 0.05 (5 x lr), alpha = 0.1
(FedGMT Table 7). Communication: 1 down / 1 up ('broadcast': 2 down).
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import dyn, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

PERTURBATIONS = ("paper", "broadcast")
FIRST_PARTICIPATIONS = ("zero", "w0")


@flax.struct.dataclass
class FedLESAMServerState:
  params: Any    # w^t
  h: Any         # FedDyn server dual (zeros when dyn=False, unused)
  previous: Any  # 'broadcast': w^{t-1} (w^0 in round 0, giving e = 0); () otherwise


@flax.struct.dataclass
class FedLESAMClientState:
  h: Any      # FedDyn dual h_m (() when dyn=False)
  w_old: Any  # 'paper': the global model received at the last participation; () otherwise
  seen: Any   # 'paper': bool, the client took part before; () otherwise


@flax.struct.dataclass
class FedLESAMLocalState:
  params: Any
  opt_state: Any
  anchor: Any  # w^t
  h: Any       # h_m, constant (() when dyn=False)
  e: Any       # the round's perturbation, constant


@checked
def fed_lesam(apply_fn: common.ApplyFn, client_optimizer, dyn_terms: bool = True,
              alpha: Annotated[float, Field("> 0", "FedDyn dual coefficient (FedLESAM-D)")]
              = 0.1,
              rho: Annotated[float, Field(">= 0", "SAM radius")] = 0.05,
              prox: Annotated[str, Field(doc="FedDyn proximal term (FedLESAM-D)",
                                         choices=dyn.PROX_MODES)] = "squared",
              perturbation: Annotated[str, Field(doc="'paper' (per client: the last global "
                                                 "model it received) or 'broadcast'",
                                                 choices=PERTURBATIONS)] = "paper",
              first_participation: Annotated[str, Field(doc="perturbation of a client's first "
                                                        "round: 'zero' or 'w0'",
                                                        choices=FIRST_PARTICIPATIONS)] = "zero",
              name: str = "fedlesam_d") -> FederatedAlgorithm:
  alpha, rho = float(alpha), float(rho)
  opt = common.plain_gradients(client_optimizer, name)
  loss_fn = common.cross_entropy_loss(apply_fn)
  per_client = perturbation == "paper"

  def server_init(params):
    return FedLESAMServerState(params=params, h=tree.zeros_like(params),
                               previous=() if per_client else params)

  def client_state_init(params):
    return FedLESAMClientState(h=tree.zeros_like(params) if dyn_terms else (),
                               w_old=params if per_client else (),
                               seen=jnp.zeros((), jnp.bool_) if per_client else ())

  def broadcast(server_state, round_info):
    if per_client:
      return server_state.params
    return (server_state.params, tree.sub(server_state.previous, server_state.params))

  def client_init(bcast, client_state, client_info, round_info):
    if per_client:
      w_global = bcast
      e = sam.perturbation(tree.sub(client_state.w_old, w_global), rho)
      if first_participation == "zero":
        e = tree.where(client_state.seen, e, tree.zeros_like(e))
    else:
      w_global, last_change = bcast
      e = sam.perturbation(last_change, rho)
    return FedLESAMLocalState(params=w_global,
                              opt_state=opt.init(w_global, round_info.learning_rate),
                              anchor=w_global, h=client_state.h, e=e)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = sam.grad_at(loss_fn, state.params, state.e, batch)
    if dyn_terms:
      grads = dyn.local_direction(grads, state.params, state.anchor, state.h, alpha, prox)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    w_global = bcast if per_client else bcast[0]
    if dyn_terms:
      upload, h = dyn.client_finalize(state.params, w_global, client_state.h, alpha)
    else:
      upload, h = tree.sub(state.params, w_global), ()
    return upload, FedLESAMClientState(
        h=h, w_old=w_global if per_client else (),
        seen=jnp.ones((), jnp.bool_) if per_client else ())

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    if dyn_terms:
      model = dyn.server_update(dyn.DynServerState(server_state.params, server_state.h),
                                deltas_C, weights_C, mask_C, alpha, round_info.num_clients)
    else:
      model = dyn.DynServerState(
          tree.add(server_state.params, tree.weighted_sum(deltas_C, weights_C)), server_state.h)
    return FedLESAMServerState(params=model.params, h=model.h,
                               previous=() if per_client else server_state.params)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=client_state_init,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1 if per_client else 2, up=1))


registration.register("fedlesam", fed_lesam, client="sgd", fixed=dict(dyn_terms=False),
                      title="FedLESAM", paper="Fan et al., ICML 2024")
registration.register("fedlesam_d", fed_lesam, client="sgd", fixed=dict(dyn_terms=True),
                      title="FedLESAM-D", paper="Fan et al., ICML 2024")
