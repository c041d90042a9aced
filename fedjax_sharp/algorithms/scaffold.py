"""SCAFFOLD (Karimireddy et al., ICML 2020, option II) and FedGamma (Dai et al. 2023).

Server state: `w`, the global control `c` (0 at start); client table: `c_m` (0 at start).
Round t, client m receives `(w^t, c)` and starts from `w^t` with a fresh optimiser:

    local step      the local optimiser is fed  g(w) - c_m + c
    after K_m steps c_m^+ = c_m - c + (w^t - w_{m,K}) / (K_m eta_t)            (option II)
    upload          (w^t - w_{m,K},  c_m^+ - c_m)

Server (`M` all clients, `p_m` the engine's weights, the paper's mean when uniform):

    w^{t+1} = w^t - server_opt(sum_m p_m (w^t - w_{m,K}))     (sgd(eta_g): w + eta_g mean(w_K - w))
    c      <- c + (1/M) sum_{m in N_t} (c_m^+ - c_m)            (= c + (|N_t|/M) mean(...))

`eta_t` is the round's client learning rate; with weight decay in the local optimiser the
control absorbs it (it is part of the local update). Communication: 2 models down (w, c) and
2 up (the model update and the control update).

FedGamma is SCAFFOLD with a `sam` client optimiser: the perturbation uses the raw local
gradient, the descent direction is `g_s - c_m + c` (FL-Simulator `server/FedGamma.py`), and
the server control update is the same `(1/M) sum (c_m^+ - c_m)`. `rho = 0` is SCAFFOLD (tested).
Client momentum: `config.algorithm.<name>.momentum`, 0 in both papers.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax.numpy as jnp
import optax

from typing import Annotated

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.hyperparameters import Field
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


@flax.struct.dataclass
class ScaffoldServerState(common.FedOptServerState):
  control: Any  # c (model: w^t and the server optimiser's state)


@flax.struct.dataclass
class ScaffoldLocalState:
  params: Any      # w_{m,k}
  opt_state: Any   # local optimiser state (reset every round)
  correction: Any  # c - c_m, constant during the round


def control_correction(c, c_m):
  """`c - c_m`: what a client adds to its local gradient (`g - c_m + c`), constant in a round."""
  return tree.sub(c, c_m)


def constant_step_sum(client_info, round_info):
  """`K_m eta_t`: the sum of a client's local learning rates at the round's constant rate."""
  return jnp.maximum(client_info.num_steps, 1).astype(tree.float_dtype()) * round_info.learning_rate


def option_ii_control_delta(delta, c, step_sum):
  """Option II's `c_m^+ - c_m = -c + (w^t - w_{m,K}) / step_sum`, `delta = w^t - w_{m,K}`,
  `step_sum` the sum of the round's local learning rates (`constant_step_sum(client_info,
  round_info)` at a constant rate; FedMoSWA's in-round schedule: its own sum). Shared with FedWMSAM and
  FedMoSWA, whose servers keep the same controls."""
  return tree.axpy(1.0 / step_sum, delta, tree.scale(-1.0, c))


def scaffold(apply_fn: common.ApplyFn, client_optimizer,
             server_optimizer: optax.GradientTransformation | None = None,
             name: str = "scaffold") -> FederatedAlgorithm:
  """SCAFFOLD (option II); with a `sam`/`asam` ClientOptimizer, FedGamma."""
  opt = common.as_client_optimizer(client_optimizer)
  server_optimizer = common.fed_opt_optimizer(server_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)

  def client_init(bcast, c_m, client_info, round_info):
    w_global, c = bcast
    local = common.init_local(opt, w_global, round_info.learning_rate)
    return ScaffoldLocalState(params=local.params, opt_state=local.opt_state,
                              correction=control_correction(c, c_m))

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_idx=round_info.round)
    grads = tree.add(grads, state.correction)  # g - c_m + c
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, c_m, client_info, round_info):
    w_global, c = bcast
    delta = tree.sub(w_global, state.params)  # w^t - w_{m,K}
    control_delta = option_ii_control_delta(delta, c, constant_step_sum(client_info, round_info))
    return (delta, control_delta), tree.add(c_m, control_delta)

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    deltas_C, control_deltas_C = uploads_C
    model = common.fed_opt_step(server_optimizer, server_state.model, deltas_C, weights_C)
    control = server_control_update(server_state.control, control_deltas_C, mask_C, round_info)
    return ScaffoldServerState(model=model, control=control)

  return FederatedAlgorithm(
      name=name, server_init=functools.partial(ScaffoldServerState.start, server_optimizer),
      client_state_init=tree.zeros_like, broadcast=ScaffoldServerState.broadcast,
      client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=2))


def server_control_update(c, control_deltas_C, mask_C, round_info):
  """`c + (1/M) sum_{m in N_t} (c_m^+ - c_m)` over the real clients of the cohort."""
  return tree.axpy(1.0 / round_info.num_clients, tree.weighted_sum(control_deltas_C, mask_C), c)


registration.register("scaffold", scaffold, client="own_momentum", server=True,
                      title="SCAFFOLD", paper="Karimireddy et al., ICML 2020 (option II)")


def _fedgamma_client(config, name, *,
                     rho: Annotated[float, Field(">= 0", "SAM radius (5 x lr, the FedGMT Table 7 "
                                                 "convention; FedGloSS Table 13: 0.01-0.15)")]
                     = 0.05,
                     momentum: registration.OwnMomentum = 0.0):
  return from_config.client_optimizer_from_config(config, own_momentum=float(momentum),
                                                  gradient="sam", rho=float(rho), owner=name)


registration.register("fedgamma", scaffold, client=_fedgamma_client, server=True,
                      title="FedGamma", paper="Dai et al., IEEE TNNLS 2023")
