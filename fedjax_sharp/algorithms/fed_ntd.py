"""FedNTD (Lee et al., NeurIPS 2022): not-true distillation from the received global model.

Client m starts from `w^t` and keeps `w^t` frozen as the teacher; the local loss is

    CE(f(w; x), y) + beta * tau^2 * KL( q~(f(w^t; x)/tau) || q~(f(w; x)/tau) )

where `q~` is the softmax over the NOT-true classes only (the true class's logit removed) and
the KL is "batchmean" over the real examples (authors' code: `tau**2 * KLDivLoss(batchmean)`).
One extra forward pass of the teacher per step, no extra backward. Upload and server are
FedAvg's (FedOpt with `config.server`). `beta = 0` is FedAvg exactly (tested).
FedGMT Table 7: beta = 1, tau = 1 (its "gamma" is this beta). Communication 1 down, 1 up.
"""
from __future__ import annotations

import dataclasses
from typing import Annotated

import jax.numpy as jnp
import optax

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, losses
from fedjax_sharp.core.algorithm import FederatedAlgorithm


def ntd_loss(apply_fn: common.ApplyFn, beta: float, tau: float):
  """(params, teacher, batch) -> (CE + beta tau^2 KL_not-true, (ce, kl, logits)).

  `beta` may be traced (the round's value, `core.hparams`); at `beta == 0` the KL is weighted
  by 0 and reported as 0 (FedAvg's loss and gradient exactly)."""
  weight = beta * float(tau) ** 2

  def loss_fn(params, teacher, batch):
    logits = apply_fn(params, batch["x"])
    ce = losses.masked_cross_entropy(logits, batch["y"], batch["mask"])
    kl = losses.not_true_kl(apply_fn(teacher, batch["x"]), logits, batch["y"], tau,
                            batch["mask"])
    kl = jnp.where(beta == 0, jnp.zeros_like(kl), kl)
    return ce + weight * kl, (ce, kl, logits)
  return loss_fn


@checked
def fed_ntd(apply_fn: common.ApplyFn, client_optimizer,
            beta: Annotated[float, Field(">= 0", "weight of the not-true distillation "
                                         "(FedGMT Table 7: 1)", sweepable=True)] = 1.0,
            tau: Annotated[float, Field("> 0", "distillation temperature (FedGMT Table 7: 1)")]
            = 1.0,
            server_optimizer: optax.GradientTransformation | None = None,
            name: str = "fedntd") -> FederatedAlgorithm:
  tau = float(tau)
  opt = common.as_client_optimizer(client_optimizer)
  values = common.hyperparameters(opt, beta=beta)

  def client_init(w_global, client_state, client_info, round_info):
    return common.init_anchored(opt, w_global, round_info.learning_rate)  # anchor: teacher

  def local_step(state, batch, key, round_info):
    loss_fn = ntd_loss(apply_fn, hparams.of(round_info, values)["beta"], tau)
    (_, (ce, kl, logits)), grads = opt.value_and_grad(loss_fn, state.params, state.anchor,
                                                      batch, round_info=round_info)
    metrics = common.step_metrics(ce, logits, batch)
    metrics["ntd_kl_sum"] = kl * metrics["examples"]
    return common.optimizer_step(opt, state, grads), metrics

  return dataclasses.replace(fed_avg(apply_fn, opt, server_optimizer, name=name),
                             client_init=client_init, local_step=local_step, hparams=values)


registration.register("fedntd", fed_ntd, server=True, title="FedNTD",
                      paper="Lee et al., NeurIPS 2022")
