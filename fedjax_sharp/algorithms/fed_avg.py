"""FedAvg (McMahan et al. 2017), its FedOpt generalisation (Reddi et al. 2021), and FedSAM.

Client: K_m steps of the local optimiser on the masked cross-entropy, starting from w^t with a
fresh optimiser state (momentum reset every round). Upload: Delta_m = w^t - w_m.
Server: pseudo-gradient Delta = sum_m p_m Delta_m; the server optimiser (an optax transform)
steps on it. With `optax.sgd(1.0)` this is w^{t+1} = sum_m p_m w_m, plain FedAvg.

FedSAM (Qu et al. 2022; Caldarola et al. 2022) is this algorithm with a `sam` client optimiser
(`ClientOptimizer(tx, 'sam', rho)`), FedASAM with an `asam` one: the local step then uses the
gradient at `w + rho g/||g||` (see `fedjax_sharp.core.sam`); nothing else changes. `rho = 0`
gives FedAvg exactly (tested).
"""
from __future__ import annotations

import optax

from typing import Annotated

from absl import logging

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.hyperparameters import Field
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


def fed_avg(apply_fn: common.ApplyFn, client_optimizer,
            server_optimizer: optax.GradientTransformation | None = None,
            name: str = "fedavg") -> FederatedAlgorithm:
  """FedAvg/FedOpt; `client_optimizer` is a ClientOptimizer (sgd/sam/asam) or an optax transform."""
  opt = common.as_client_optimizer(client_optimizer)
  server_optimizer = common.fed_opt_optimizer(server_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt)   # the SAM radius of a fedsam/fedasam client optimiser

  def broadcast(server_state, round_info):
    return server_state.params

  def client_init(w_global, client_state, client_info, round_info):
    return common.init_local(opt, w_global, round_info.learning_rate)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_info=round_info)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, w_global, client_state, client_info, round_info):
    return tree.sub(w_global, state.params), client_state

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    return common.fed_opt_step(server_optimizer, server_state, deltas_C, weights_C)

  return FederatedAlgorithm(
      name=name, server_init=lambda params: common.server_opt_init(server_optimizer, params),
      client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1), hparams=values)


def _fedavg_client(config, name):
  """`config.local`'s optimiser. `local.optimizer='sam'|'asam'` with FedAvg is the deprecated
  spelling of FedSAM / FedASAM (removed in the next release): it warns and still works."""
  kind = str(config.local.optimizer)
  if name == "fedavg" and kind in ("sam", "asam"):
    new = "fedsam" if kind == "sam" else "fedasam"
    logging.warning(
        "algorithm.name='fedavg' with local.optimizer=%r and local.rho is deprecated (removed in "
        "the next release): use --config.algorithm.name=%s --config.algorithm.%s.rho=%s "
        "(and local.optimizer='sgd')", kind, new, new, config.local.rho)
  return from_config.client_optimizer_from_config(config)


registration.reads_local_rho(_fedavg_client)
registration.register("fedavg", fed_avg, client=_fedavg_client, server=True,
                      title="FedAvg / FedOpt",
                      paper="McMahan et al., AISTATS 2017; Reddi et al., ICLR 2021 (FedOpt)")


def _sam_client(config, name, *, rho: Annotated[float, Field(
    ">= 0", "SAM radius (FedGMT Table 7: 5 x lr; lr on CIFAR-100)", sweepable=True)] = 0.05):
  return from_config.client_optimizer_from_config(config, gradient="sam",
                                                  rho=float(rho), owner=name)


def _asam_client(config, name, *,
                 rho: Annotated[float, Field(">= 0", "ASAM radius (Caldarola et al. 2022)",
                                             sweepable=True)] = 0.5,
                 eta: Annotated[float, Field(">= 0", "ASAM's T = |w| + eta")] = 0.2):
  return from_config.client_optimizer_from_config(config, gradient="asam",
                                                  rho=float(rho), eta=float(eta),
                                                  owner=name)


registration.register("fedsam", fed_avg, client=_sam_client, server=True, title="FedSAM",
                      paper="Qu et al., ICML 2022; Caldarola et al., ECCV 2022")
registration.register("fedasam", fed_avg, client=_asam_client, server=True, title="FedASAM",
                      paper="Caldarola et al., ECCV 2022 (ASAM: Kwon et al., ICML 2021)")
