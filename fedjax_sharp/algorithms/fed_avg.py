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

from fedjax_sharp.algorithms import common
from fedjax_sharp.core import hparams, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm
from fedjax_sharp.core.optimizers import (client_optimizer_from_config,
                                          server_optimizer_from_config)


def fed_avg(apply_fn: common.ApplyFn, client_optimizer,
            server_optimizer: optax.GradientTransformation | None = None,
            name: str = "fedavg") -> FederatedAlgorithm:
  """FedAvg/FedOpt; `client_optimizer` is a ClientOptimizer (sgd/sam/asam) or an optax transform."""
  opt = common.as_client_optimizer(client_optimizer)
  server_optimizer = server_optimizer or optax.sgd(1.0)
  loss_fn = common.cross_entropy_loss(apply_fn)

  def broadcast(server_state, round_info):
    return server_state.params

  def client_init(w_global, client_state, client_info, round_info):
    return common.init_local(opt, w_global, round_info.learning_rate)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_idx=round_info.round)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, w_global, client_state, client_info, round_info):
    return tree.sub(w_global, state.params), client_state

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    return common.server_opt_step(server_optimizer, server_state,
                                  tree.weighted_sum(deltas_C, weights_C))

  return FederatedAlgorithm(
      name=name, server_init=lambda params: common.server_opt_init(server_optimizer, params),
      client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1))


FEDSAM_DEFAULT_RHO = 0.05   # FedGMT Table 7: rho = 5 x lr (lr 0.01); rho = lr on CIFAR-100
FEDASAM_DEFAULT_RHO = 0.5   # Caldarola et al. 2022 (FedASAM), with eta = 0.2
FEDASAM_DEFAULT_ETA = 0.2


def build_fed_avg(config, apply_fn) -> FederatedAlgorithm:
  """Registry builder: optimisers from `config.local` (`local.optimizer='sam'` is FedSAM) and
  `config.server` (FedOpt)."""
  return fed_avg(apply_fn, client_optimizer_from_config(config),
                 server_optimizer_from_config(config),
                 name=str(config.algorithm.get("name", "fedavg")))


def build_fed_sam(config, apply_fn) -> FederatedAlgorithm:
  """Registry builder for FedSAM: `config.algorithm.fedsam.rho`."""
  block = config.algorithm.get("fedsam") or {}
  opt = client_optimizer_from_config(config, gradient="sam",
                                     rho=hparams.scalar(block.get("rho", FEDSAM_DEFAULT_RHO)),
                                     owner="fedsam")
  return fed_avg(apply_fn, opt, server_optimizer_from_config(config),
                 name=str(config.algorithm.get("name", "fedsam")))


def build_fed_asam(config, apply_fn) -> FederatedAlgorithm:
  """Registry builder for FedASAM: `config.algorithm.fedasam.{rho, eta}`."""
  block = config.algorithm.get("fedasam") or {}
  opt = client_optimizer_from_config(config, gradient="asam",
                                     rho=hparams.scalar(block.get("rho", FEDASAM_DEFAULT_RHO)),
                                     eta=float(block.get("eta", FEDASAM_DEFAULT_ETA)),
                                     owner="fedasam")
  return fed_avg(apply_fn, opt, server_optimizer_from_config(config),
                 name=str(config.algorithm.get("name", "fedasam")))
