"""MimeLite (Karimireddy et al., 2021, "Breaking the centralized barrier for cross-device FL").

The server's momentum `m` (0 at start) is applied in the local steps but not updated there.
Round t, client i receives `(x^t, m)` (2x down) and from `y = x^t`:

    local step  the local optimiser is fed  (1 - beta) grad f_i(y) + beta m     (client momentum 0)
    meanwhile   the full-batch gradient at the server model, grad f_i(x^t), summed over the
                client's first epoch of batches (with fixed `local.steps` fewer than one epoch,
                over the examples seen). The extra backward pass runs on every step and is
                masked after the first epoch (no data-dependent branch; see local_step), so
                every step costs two gradients rather than the paper's 1 + 1/E on average
    upload      (x^t - y_K, grad f_i(x^t))                                        (2x up)

Server: `x^{t+1}` = the server optimiser on `sum_i p_i (x^t - y_{i,K})` (FedOpt; plain average
by default) and `m <- (1 - beta) sum_i p_i grad f_i(x^t) + beta m` (the paper's EMA form of
momentum SGD; with example weights the cohort's full-batch gradient, as in FedJAX). Default
beta = 0.9. A baseline of the MoFedSAM paper's Table 1.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from typing import Annotated

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


@flax.struct.dataclass
class MimeLiteServerState(common.FedOptServerState):
  momentum: Any  # m (model: x^t and the server optimiser's state)


@flax.struct.dataclass
class MimeLiteLocalState:
  params: Any
  opt_state: Any
  anchor: Any        # x^t
  momentum: Any      # m, frozen during the round
  grad_sum: Any      # sum over first-epoch examples of grad f_i(x^t)
  examples: Any      # number of examples in grad_sum
  step: Any          # local step counter
  num_examples: Any  # n_i


@checked
def mime_lite(apply_fn: common.ApplyFn, client_optimizer,
              beta: Annotated[float, Field("[0, 1)", "server momentum (EMA) coefficient")] = 0.9,
              server_optimizer: optax.GradientTransformation | None = None,
              name: str = "mimelite") -> FederatedAlgorithm:
  beta = float(beta)
  opt = common.as_client_optimizer(client_optimizer)
  server_optimizer = common.fed_opt_optimizer(server_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)
  grad_fn = jax.grad(lambda p, batch: loss_fn(p, batch)[0])

  def client_init(bcast, client_state, client_info, round_info):
    w_global, momentum = bcast
    return MimeLiteLocalState(
        params=w_global, opt_state=opt.init(w_global, round_info.learning_rate),
        anchor=w_global, momentum=momentum, grad_sum=tree.zeros_like(w_global),
        examples=jnp.zeros((), tree.float_dtype()), step=jnp.zeros((), jnp.int32),
        num_examples=client_info.num_examples)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_idx=round_info.round)
    direction = tree.axpy(1.0 - beta, grads, tree.scale(beta, state.momentum))
    new_state = common.optimizer_step(opt, state, direction)
    # Full-batch gradient at x^t over the first epoch (masked mean per batch -> weighted sum).
    batch_size = batch["mask"].shape[0]
    first_epoch = state.step < jnp.ceil(state.num_examples / batch_size).astype(jnp.int32)
    n = jnp.sum(batch["mask"].astype(tree.float_dtype()))
    # Computed on every step and masked (not lax.cond): XLA's CPU backend runs convolutions
    # inside conditionals as slowly as inside loops (docs/performance.md), and under vmap a
    # cond becomes a select that computes both branches anyway.
    n = jnp.where(first_epoch, n, 0.0)
    grad_sum = tree.axpy(n, grad_fn(state.anchor, batch), state.grad_sum)
    examples = state.examples + n
    new_state = new_state.replace(grad_sum=grad_sum, examples=examples, step=state.step + 1)
    return new_state, common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    w_global, _ = bcast
    full_grad = tree.scale(1.0 / jnp.maximum(state.examples, 1.0), state.grad_sum)
    return (tree.sub(w_global, state.params), full_grad), client_state

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    deltas_C, grads_C = uploads_C
    model = common.fed_opt_step(server_optimizer, server_state.model, deltas_C, weights_C)
    momentum = tree.axpy(1.0 - beta, tree.weighted_sum(grads_C, weights_C),
                         tree.scale(beta, server_state.momentum))
    return MimeLiteServerState(model=model, momentum=momentum)

  return FederatedAlgorithm(
      name=name, server_init=functools.partial(MimeLiteServerState.start, server_optimizer),
      client_state_init=lambda params: (), broadcast=MimeLiteServerState.broadcast,
      client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=2))


registration.register("mimelite", mime_lite, client="own_momentum", server=True,
                      title="MimeLite", paper="Karimireddy et al., 2021")
