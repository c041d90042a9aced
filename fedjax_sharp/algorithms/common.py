"""Pieces shared by the algorithms: local state, losses, metrics, the local and server steps."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedjax_sharp.core import losses, tree
from fedjax_sharp.core.optimizers import (ClientOptimizer, as_client_optimizer, local_sgd,
                                          with_learning_rate)

__all__ = ["AnchoredLocalState", "ApplyFn", "ClientOptimizer", "FedOptServerState",
           "LocalSGDState", "ServerState", "as_client_optimizer", "cross_entropy_loss",
           "fed_opt_optimizer", "fed_opt_step", "hyperparameters", "init_anchored", "init_local",
           "local_sgd", "optimizer_step", "server_opt_init", "server_opt_step", "step_metrics",
           "with_learning_rate"]

ApplyFn = Callable[[Any, jax.Array], jax.Array]  # (params, x) -> logits


@flax.struct.dataclass
class LocalSGDState:
  params: Any
  opt_state: Any


@flax.struct.dataclass
class AnchoredLocalState:
  """Local state of algorithms that keep the round's global model `w^t` beside the iterate
  (FedProx's prox centre, FedNTD's frozen teacher)."""
  params: Any
  opt_state: Any
  anchor: Any


@flax.struct.dataclass
class ServerState:
  params: Any
  opt_state: Any


@flax.struct.dataclass
class FedOptServerState:
  """Base of the server states that keep model-sized vectors of their own beside a FedOpt model
  (the subclass's fields: SCAFFOLD's control, MimeLite's momentum), each 0 at the start and sent
  to the clients with the model. `model` holds `w^t` and the server optimiser's state."""
  model: ServerState

  @property
  def params(self):
    return self.model.params

  @classmethod
  def start(cls, server_optimizer: optax.GradientTransformation, params):
    """The first state: `w^0` with the server optimiser's initial state, every vector 0."""
    vectors = {f.name: tree.zeros_like(params) for f in dataclasses.fields(cls)[1:]}
    return cls(model=server_opt_init(server_optimizer, params), **vectors)

  def broadcast(self, round_info=None):
    """`FederatedAlgorithm.broadcast`: `(w^t, *the vectors)`, in the order of the fields."""
    return (self.params, *(getattr(self, f.name) for f in dataclasses.fields(self)[1:]))


def cross_entropy_loss(apply_fn: ApplyFn):
  """(params, batch) -> (mean masked CE, logits)."""
  def loss_fn(params, batch):
    logits = apply_fn(params, batch["x"])
    return losses.masked_cross_entropy(logits, batch["y"], batch["mask"]), logits
  return loss_fn


def hyperparameters(optimizer: ClientOptimizer, **own) -> dict[str, float]:
  """An algorithm's `FederatedAlgorithm.hparams`: its own sweepable values (`own`) and its
  client optimiser's SAM radius ('rho', read by `ClientOptimizer.value_and_grad`)."""
  clash = sorted(set(own) & set(optimizer.hparams))
  if clash:
    raise ValueError(f"hyperparameters {clash} are both the algorithm's and its client "
                     f"optimiser's")
  return {**optimizer.hparams, **{k: float(v) for k, v in own.items()}}


def step_metrics(loss, logits, batch) -> dict:
  """Sums (not means) so the engine can add them over steps and clients.

  'examples' is the weight of the step's mean loss: its real examples, or for per-token labels
  (`core.losses`) the tokens counted in the loss, so that every `*_sum / examples` the recorder
  reports (train loss, FedGMT's KL, ...) is a mean per example or per token. Per-token labels
  add 'accuracy_tokens', the accuracy's denominator (tokens counted in the accuracy).
  """
  y, mask = batch["y"], batch["mask"]
  n = losses.loss_count(y, mask)
  metrics = {"loss_sum": loss * n, "correct": losses.correct_count(logits, y, mask),
             "examples": n, "steps": jnp.ones((), tree.float_dtype())}
  if losses.is_per_token(y, mask):
    metrics["accuracy_tokens"] = losses.accuracy_count(y, mask)
  return metrics


def plain_gradients(client_optimizer, name: str,
                    why: str = "makes its own perturbation") -> ClientOptimizer:
  """`client_optimizer` as a `ClientOptimizer`, refused (ValueError naming the algorithm) if it
  computes SAM/ASAM gradients: for an algorithm that makes its own perturbation or ascent."""
  opt = as_client_optimizer(client_optimizer)
  if opt.is_sam:
    raise ValueError(f"algorithm.{name} {why} (got the {opt.gradient!r} client optimiser): give "
                     f"it a plain ('sgd') one")
  return opt


def init_local(optimizer: ClientOptimizer, params, learning_rate) -> LocalSGDState:
  """A fresh local state (optimiser state reset: momentum does not carry over rounds)."""
  return LocalSGDState(params=params, opt_state=optimizer.init(params, learning_rate))


def init_anchored(optimizer: ClientOptimizer, w_global, learning_rate) -> AnchoredLocalState:
  return AnchoredLocalState(params=w_global, opt_state=optimizer.init(w_global, learning_rate),
                            anchor=w_global)


def optimizer_step(optimizer: ClientOptimizer, state, grads):
  """Applies `grads` through the client optimiser; `state` is any dataclass with
  `params` and `opt_state` fields (other fields are carried unchanged)."""
  params, opt_state = optimizer.apply(state.params, state.opt_state, grads)
  return state.replace(params=params, opt_state=opt_state)


def fed_opt_optimizer(server_optimizer: optax.GradientTransformation | None
                      ) -> optax.GradientTransformation:
  """The server optimiser of a FedOpt algorithm: `server_optimizer`, or without one
  `optax.sgd(1.0)`, which makes the server step the plain weighted average (FedAvg)."""
  return server_optimizer or optax.sgd(1.0)


def server_opt_init(server_optimizer: optax.GradientTransformation, params) -> ServerState:
  return ServerState(params=params, opt_state=server_optimizer.init(params))


def server_opt_step(server_optimizer: optax.GradientTransformation, state: ServerState,
                    pseudo_grad) -> ServerState:
  """FedOpt: the server optimiser treats `pseudo_grad = w - aggregate` as a gradient."""
  updates, opt_state = server_optimizer.update(pseudo_grad, state.opt_state, state.params)
  return ServerState(params=optax.apply_updates(state.params, updates), opt_state=opt_state)


def fed_opt_step(server_optimizer: optax.GradientTransformation, state: ServerState, deltas_C,
                 weights_C) -> ServerState:
  """FedOpt's server step on the clients' uploads `deltas_C = w^t - w_m`: the pseudo-gradient is
  their sum weighted by the engine's weights `p_m`."""
  return server_opt_step(server_optimizer, state, tree.weighted_sum(deltas_C, weights_C))
