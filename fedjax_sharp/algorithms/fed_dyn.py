"""FedDyn (Acar et al., ICLR 2021): federated learning with dynamic regularisation.

Each client keeps a dual vector `h_m` (starts at 0, in the engine's client table); the server
keeps `h` (starts at 0). Round t, client m starting from `w_{m,0} = w^t` with a fresh optimiser:

    local objective   L_m(w) - <h_m, w> + R(w - w^t)
    local step        the local optimiser (momentum, weight decay) is fed
                      g = grad CE(w) - h_m + grad R(w - w^t)
    after K_m steps   h_m <- h_m - alpha (w_m - w^t)
    upload            Delta_m = w_m - w^t

Server (`M` = all clients, `p_m` the engine's aggregation weights, sum 1 over the cohort):

    h       <- h - alpha (1/M) sum_{m in N_t} (w_m - w^t)
    w^{t+1}  = sum_m p_m w_m - h / alpha            (= w^t + sum_m p_m Delta_m - h / alpha)

Proximal term `R` (option `prox`):
  'squared'   (alpha/2) ||w - w^t||^2, gradient alpha (w - w^t)                   (the paper)
  'unsquared' (alpha/2) ||w - w^t||, gradient (alpha/2) (w - w^t) / (||w - w^t|| + 1e-12),
              i.e. constant length alpha/2 and 0 at w = w^t (the FedGMT authors' code)
  'none'      no proximal term (FedGMT with gamma = 0 is FedDyn('none', alpha = 1/beta)).
Norms are one global L2 norm over the whole parameter pytree.

The paper averages uniformly over the cohort (1/|N_t|); here the average uses the engine's
weights, so `aggregation='uniform'` reproduces the paper exactly.
Communication: 1 model down, 1 up.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import optax

from fedjax_sharp.algorithms import common
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

PROX_MODES = ("squared", "unsquared", "none")
DEFAULT_ALPHA = 0.1  # FedGMT paper Table 7: FedDyn beta = 10 with penalty 1/(2 beta), alpha = 1/beta


@flax.struct.dataclass
class FedDynServerState:
  params: Any  # w^t
  h: Any       # server dual h (0 at start)


@flax.struct.dataclass
class FedDynLocalState:
  params: Any     # w_{m,k}
  opt_state: Any  # local optimiser state (reset every round)
  anchor: Any     # w^t, the round's global model
  h: Any          # h_m, the client's dual (constant during the round)


def prox_gradient(params, anchor, alpha: float, prox: str = "squared"):
  """Gradient of the FedDyn proximal term R(w - w^t) at w = `params` (see module docstring)."""
  if prox == "squared":
    return tree.scale(alpha, tree.sub(params, anchor))
  if prox == "unsquared":
    return tree.scale(0.5 * alpha, tree.normalize(tree.sub(params, anchor)))
  if prox == "none":
    return tree.zeros_like(params)
  raise ValueError(f"algorithm.feddyn.prox={prox!r} is not one of {list(PROX_MODES)}")


def fed_dyn(apply_fn: common.ApplyFn, client_optimizer: optax.GradientTransformation,
            alpha: float = DEFAULT_ALPHA, prox: str = "squared",
            name: str = "feddyn") -> FederatedAlgorithm:
  """FedDyn with dual coefficient `alpha` and proximal term `prox` (see module docstring)."""
  if prox not in PROX_MODES:
    raise ValueError(f"algorithm.feddyn.prox={prox!r} is not one of {list(PROX_MODES)}")
  if not alpha > 0:
    raise ValueError(f"algorithm.feddyn.alpha must be > 0, got {alpha}")
  loss_fn = common.cross_entropy_loss(apply_fn)

  def server_init(params):
    return FedDynServerState(params=params, h=tree.zeros_like(params))

  def client_state_init(params):
    return tree.zeros_like(params)  # h_m

  def broadcast(server_state, round_info):
    return server_state.params

  def client_init(w_global, h_m, client_info, round_info):
    local = common.init_local(client_optimizer, w_global, round_info.learning_rate)
    return FedDynLocalState(params=local.params, opt_state=local.opt_state, anchor=w_global,
                            h=h_m)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
    grads = tree.add(tree.sub(grads, state.h),
                     prox_gradient(state.params, state.anchor, alpha, prox))
    return common.optimizer_step(client_optimizer, state, grads), common.step_metrics(
        loss, logits, batch)

  def client_finalize(state, w_global, h_m, client_info, round_info):
    delta = tree.sub(state.params, w_global)
    return delta, tree.axpy(-alpha, delta, h_m)

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    num_clients = round_info.num_clients
    cohort_sum = tree.weighted_sum(deltas_C, mask_C)
    h = tree.axpy(-alpha / num_clients, cohort_sum, server_state.h)
    avg = tree.add(server_state.params, tree.weighted_sum(deltas_C, weights_C))
    return FedDynServerState(params=tree.axpy(-1.0 / alpha, h, avg), h=h)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=client_state_init,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1))


def build_fed_dyn(config, apply_fn) -> FederatedAlgorithm:
  """Registry builder: `config.algorithm.feddyn.{alpha, prox}`, local optimiser from
  `config.local`."""
  from fedjax_sharp.algorithms.registry import client_optimizer_from_config
  block = config.algorithm.get("feddyn") or {}
  return fed_dyn(apply_fn, client_optimizer_from_config(config),
                 alpha=float(block.get("alpha", DEFAULT_ALPHA)),
                 prox=str(block.get("prox", "squared")),
                 name=str(config.algorithm.get("name", "feddyn")))
