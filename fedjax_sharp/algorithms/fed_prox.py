"""FedProx (Li et al., MLSys 2020): FedAvg with a proximal term on the client.

Local objective `L_m(w) + (mu/2) ||w - w^t||^2`: the local optimiser is fed
`g(w) + mu (w - w^t)`. Upload and server update are FedAvg's (FedOpt with `config.server`).
`mu = 0` is FedAvg exactly (tested). Default `mu = 0.01` (the paper's grid is
{0.001, 0.01, 0.1, 1}). Communication: 1 down, 1 up. Client momentum follows the FedGMT
setting's 0.9 unless the config sets it (the FedProx paper uses plain SGD).
"""
from __future__ import annotations

import dataclasses
from typing import Annotated

import optax

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, tree
from fedjax_sharp.core.algorithm import FederatedAlgorithm


@checked
def fed_prox(apply_fn: common.ApplyFn, client_optimizer,
             mu: Annotated[float, Field(">= 0", "proximal weight (the paper's grid: "
                                        "0.001, 0.01, 0.1, 1)", sweepable=True)] = 0.01,
             server_optimizer: optax.GradientTransformation | None = None,
             name: str = "fedprox") -> FederatedAlgorithm:
  opt = common.as_client_optimizer(client_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, mu=mu)

  def client_init(w_global, client_state, client_info, round_info):
    return common.init_anchored(opt, w_global, round_info.learning_rate)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_info=round_info)
    mu = hparams.of(round_info, values)["mu"]
    grads = tree.axpy(mu, tree.sub(state.params, state.anchor), grads)  # g + mu (w - w^t)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  return dataclasses.replace(fed_avg(apply_fn, opt, server_optimizer, name=name),
                             client_init=client_init, local_step=local_step, hparams=values)


registration.register("fedprox", fed_prox, server=True, title="FedProx",
                      paper="Li et al., MLSys 2020")
