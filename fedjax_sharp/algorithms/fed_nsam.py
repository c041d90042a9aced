"""FedNSAM (Liu et al., "FedNSAM: Consistency of Local and Global Flatness for Federated
Learning", 2026): global Nesterov momentum with local SAM.

Server state: `w` and the momentum `m` (`m^0 = 0`); clients keep nothing. variant='n2'
(default): the server sends the extrapolated start `w_hat = w^t + gamma m^t`; client m starts
from `y_0 = w_hat` with a fresh SGD (`momentum`, `weight_decay`) and takes K local SAM steps:

    g = grad L(y_k; b),  e = rho g / (||g|| + eps)                    (core.sam)
    y_{k+1} = y_k - eta_t opt(clip(grad L(y_k + e; b), C))            (global L2 norm)

and uploads `Delta_m = y_K - w_hat`. Server:

    Delta = sum_m p_m Delta_m,   m^{t+1} = gamma m^t + Delta,   w^{t+1} = w^t + m^{t+1}

so `w^{t+1}` is the average of the clients' endpoints and `m^{t+1} = w^{t+1} - w^t`.
variant='n1': the same client; the server sets m^{t+1} = (1 + gamma) Delta for t >= 1.
variant='n3': the server sends (w^t, m^t); y_0 = w^t and each step, with no SAM ascent and no
clipping, is y_{k+1} = y_k - eta_t opt(grad L(y_k + gamma m^t; b)); upload y_K - w^t; n2's
server. variant='n4': n3 with the gradient at y_k + gamma m^t - rho m^t / (||m^t|| + eps4).
rho = `rho`, gamma = `gamma` (the extrapolation and the server momentum), C = `clip_norm`
(None: the variant's); eps = `core.tree.NORM_EPS`, eps4 = `N4_NORM_EPS`.
Reductions (tested): rho = 0, gamma = 0 and clip_norm = 0 is FedAvg with the same client
optimiser exactly; round 0 (m = 0) is a FedSAM round.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, optimizers, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

VARIANTS = ("n2", "n1", "n3", "n4")
N4_NORM_EPS = 1e-7   # `grad_norm + 1e-7` in the HEAD optimizer/Nesterov.py L46


@flax.struct.dataclass
class FedNSAMServerState:
  params: Any    # w^t
  momentum: Any  # m^t (0 at the start)


@flax.struct.dataclass
class FedNSAMLocalState:
  params: Any     # y_k
  opt_state: Any  # local SGD (reset every round)
  momentum: Any   # n3/n4: m^t, constant during the round; () for n1/n2


@checked
def fed_nsam(apply_fn: common.ApplyFn, client_optimizer, *,
             rho: Annotated[float, Field(">= 0", "local SAM radius (authors' code, hard-coded; "
                                         "n4: the radius along -m/||m||; n3: unused)",
                                         sweepable=True)] = 0.05,
             gamma: Annotated[float, Field("[0, 1)", "Nesterov extrapolation and server "
                                           "momentum factor", sweepable=True)] = 0.85,
             clip_norm: Annotated[float | None, Field(
                 ">= 0", "clip the local gradient at this global norm (0: off; None: the "
                 "variant's, 10 for n1/n2, off for n3/n4)")] = None,
             variant: Annotated[str, Field(
                 doc="'n2' authors' HEAD code (default), 'n1' main_FedNSAM.py's server as "
                 "written, 'n3' July 2025 per-step Nesterov, 'n4' HEAD Nesterov.py perturbation",
                 choices=VARIANTS)] = "n2",
             name: str = "fednsam") -> FederatedAlgorithm:
  """FedNSAM; `client_optimizer` supplies the SGD update (momentum 0, weight decay 1e-3 by
  default through the registry); the SAM / Nesterov gradients are made here."""
  opt = common.plain_gradients(client_optimizer, name, "makes its own SAM gradient")
  if clip_norm is None:
    clip_norm = 10.0 if variant in ("n1", "n2") else 0.0
  clip_norm = float(clip_norm)
  extrapolate_start = variant in ("n1", "n2")
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, rho=rho, gamma=gamma)

  def server_init(params):
    return FedNSAMServerState(params=params, momentum=tree.zeros_like(params))

  def broadcast(server_state, round_info):
    if extrapolate_start:
      gamma_t = hparams.of(round_info, values)["gamma"]
      return tree.axpy(gamma_t, server_state.momentum, server_state.params)   # w_hat
    return (server_state.params, server_state.momentum)

  def client_init(bcast, client_state, client_info, round_info):
    start, momentum = (bcast, ()) if extrapolate_start else bcast
    local = common.init_local(opt, start, round_info.learning_rate)
    return FedNSAMLocalState(params=local.params, opt_state=local.opt_state, momentum=momentum)

  def local_step(state, batch, key, round_info):
    hp = hparams.of(round_info, values)
    if extrapolate_start:
      (loss, logits), _, grads = sam.sam_value_and_grad(loss_fn, state.params, batch,
                                                        rho=hp["rho"])
    else:
      e = tree.scale(hp["gamma"], state.momentum)                       # n3: y + gamma m
      if variant == "n4":                                               # - rho m / ||m||
        e = tree.axpy(-hp["rho"], tree.normalize(state.momentum, N4_NORM_EPS), e)
      (loss, logits), grads = sam.grad_at(loss_fn, state.params, e, batch)
    grads = optimizers.clip_by_global_norm(grads, clip_norm)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    start = bcast if extrapolate_start else bcast[0]
    return tree.sub(state.params, start), client_state          # y_K - start

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    gamma_t = hparams.of(round_info, values)["gamma"]
    mean_delta = tree.weighted_sum(deltas_C, weights_C)
    if variant == "n1":
      factor = jnp.where(round_info.round == 0, 1.0, 1.0 + gamma_t)
      momentum = tree.scale(factor, mean_delta)
    else:
      momentum = tree.axpy(gamma_t, server_state.momentum, mean_delta)
    return FedNSAMServerState(params=tree.add(server_state.params, momentum),
                              momentum=momentum)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1 if extrapolate_start else 2, up=1), hparams=values)


# The authors' local SGD: momentum 0, coupled weight decay 1e-3.
registration.register("fednsam", fed_nsam, client=registration.client_optimizers.own_sgd(1e-3),
                      title="FedNSAM",
                      paper='Liu et al., "FedNSAM: Consistency of Local and Global Flatness for '
                            'Federated Learning", arXiv:2602.23827, 2026',
                      weighting="uniform",
                      weighting_source="the authors' code: 1/|N_t| over the cohort "
                                       "(junkangLiu0/FedSWA, apply_weights_avgACG)")
