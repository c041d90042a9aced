"""FedAvg (McMahan et al. 2017) and its FedOpt generalisation (Reddi et al. 2021).

Client: K_m steps of the local optimiser on the masked cross-entropy, starting from w^t with a
fresh optimiser state (momentum reset every round). Upload: Delta_m = w^t - w_m.
Server: pseudo-gradient Delta = sum_m p_m Delta_m; the server optimiser (an optax transform)
steps on it. With `optax.sgd(1.0)` this is w^{t+1} = sum_m p_m w_m, plain FedAvg.
"""
from __future__ import annotations

import jax
import optax

from fedjax_sharp.algorithms import common
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


def fed_avg(apply_fn: common.ApplyFn, client_optimizer: optax.GradientTransformation,
            server_optimizer: optax.GradientTransformation | None = None,
            name: str = "fedavg") -> FederatedAlgorithm:
  server_optimizer = server_optimizer or optax.sgd(1.0)
  loss_fn = common.cross_entropy_loss(apply_fn)

  def server_init(params):
    return common.ServerState(params=params, opt_state=server_optimizer.init(params))

  def broadcast(server_state, round_info):
    return server_state.params

  def client_init(w_global, client_state, client_info, round_info):
    return common.init_local(client_optimizer, w_global, round_info.learning_rate)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
    return common.optimizer_step(client_optimizer, state, grads), common.step_metrics(
        loss, logits, batch)

  def client_finalize(state, w_global, client_state, client_info, round_info):
    return tree.sub(w_global, state.params), client_state

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    return common.server_opt_step(server_optimizer, server_state,
                                  tree.weighted_sum(deltas_C, weights_C))

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1))
