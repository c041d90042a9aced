"""Pieces shared by the SGD-based algorithms: local optimiser, local state, losses, server step."""
from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedjax_sharp.core import losses

ApplyFn = Callable[[Any, jax.Array], jax.Array]  # (params, x) -> logits


def local_sgd(momentum: float = 0.9, weight_decay: float = 1e-5,
              nesterov: bool = False) -> optax.GradientTransformation:
  """SGD with momentum and L2 weight decay added to the gradient (PyTorch `SGD` semantics).

  `buf <- momentum * buf + (g + wd * w);  w <- w - lr * buf`. The learning rate is an injected
  hyperparameter so that the per-round decayed rate is a traced value (no recompiles); set it
  with `with_learning_rate`. Momentum is reset whenever the state is re-initialised, i.e. at
  the start of every round.
  """
  def make(learning_rate):
    parts = []
    if weight_decay:
      parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov))
    return optax.chain(*parts)
  return optax.inject_hyperparams(make)(learning_rate=0.0)


def with_learning_rate(opt_state, learning_rate):
  """Returns `opt_state` (of an `inject_hyperparams` optimiser) with the learning rate set."""
  if not hasattr(opt_state, "hyperparams") or "learning_rate" not in opt_state.hyperparams:
    raise ValueError("the client optimiser must be wrapped by optax.inject_hyperparams with a "
                     "'learning_rate' hyperparameter (see fedjax_sharp.algorithms.local_sgd)")
  hyper = dict(opt_state.hyperparams)
  hyper["learning_rate"] = jnp.asarray(learning_rate, hyper["learning_rate"].dtype)
  return opt_state._replace(hyperparams=hyper)


@flax.struct.dataclass
class LocalSGDState:
  params: Any
  opt_state: Any


@flax.struct.dataclass
class ServerState:
  params: Any
  opt_state: Any


def cross_entropy_loss(apply_fn: ApplyFn):
  """(params, batch) -> (mean masked CE, logits)."""
  def loss_fn(params, batch):
    logits = apply_fn(params, batch["x"])
    return losses.masked_cross_entropy(logits, batch["y"], batch["mask"]), logits
  return loss_fn


def step_metrics(loss, logits, batch) -> dict:
  """Sums (not means) so the engine can add them over steps and clients."""
  n = jnp.sum(batch["mask"].astype(jnp.float32))
  return {"loss_sum": loss * n, "correct": losses.correct_count(logits, batch["y"], batch["mask"]),
          "examples": n, "steps": jnp.ones((), jnp.float32)}


def optimizer_step(optimizer: optax.GradientTransformation, state: LocalSGDState, grads):
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  return state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state)


def init_local(optimizer: optax.GradientTransformation, params, learning_rate) -> LocalSGDState:
  return LocalSGDState(params=params,
                       opt_state=with_learning_rate(optimizer.init(params), learning_rate))


def server_opt_step(server_optimizer: optax.GradientTransformation, state: ServerState,
                    pseudo_grad) -> ServerState:
  """FedOpt: the server optimiser treats `pseudo_grad = w - aggregate` as a gradient."""
  updates, opt_state = server_optimizer.update(pseudo_grad, state.opt_state, state.params)
  return ServerState(params=optax.apply_updates(state.params, updates), opt_state=opt_state)


def server_optimizer_from_config(name: str, learning_rate: float, momentum: float = 0.0,
                                 b1: float = 0.9, b2: float = 0.99, eps: float = 1e-3,
                                 prefix: str = "server") -> optax.GradientTransformation:
  """FedAvg (sgd, lr 1), FedAvgM (sgd + momentum), FedAdam, FedYogi, FedAdagrad (Reddi et al.)."""
  if name == "sgd":
    return optax.sgd(learning_rate, momentum=momentum or None)
  if name == "adam":
    return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == "yogi":
    return optax.yogi(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == "adagrad":
    return optax.adagrad(learning_rate, eps=eps)
  raise ValueError(f"{prefix}.optimizer={name!r} is not one of ['adagrad', 'adam', 'sgd', 'yogi']")
