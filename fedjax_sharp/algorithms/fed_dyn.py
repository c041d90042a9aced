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

Proximal term `prox` ('squared', the paper; 'unsquared', the FedGMT authors' code; 'none') and
the shared math: `fedjax_sharp.core.dyn`. With a `sam` client optimiser this is FedDyn+SAM (the
cross-entropy gradient at the perturbed weights, the dual and proximal terms at `w`); `rho = 0`
gives FedDyn exactly (tested).

The paper averages uniformly over the cohort (1/|N_t|); here the average uses the engine's
weights, so `aggregation='uniform'` reproduces the paper exactly.
Communication: 1 model down, 1 up.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import dyn, hparams, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm



@flax.struct.dataclass
class FedDynLocalState:
  params: Any     # w_{m,k}
  opt_state: Any  # local optimiser state (reset every round)
  anchor: Any     # w^t, the round's global model
  h: Any          # h_m, the client's dual (constant during the round)


@checked
def fed_dyn(apply_fn: common.ApplyFn, client_optimizer,
            alpha: Annotated[float, Field("> 0", "dual coefficient (FedGMT Table 7: 1/beta, "
                                          "beta = 10)", sweepable=True)] = 0.1,
            prox: Annotated[str, Field(doc="proximal term: 'squared' (paper), 'unsquared' "
                                       "(FedGMT code), 'none'", choices=dyn.PROX_MODES)]
            = "squared",
            name: str = "feddyn") -> FederatedAlgorithm:
  """FedDyn with dual coefficient `alpha` and proximal term `prox` (see module docstring).

  `client_optimizer`: a ClientOptimizer (`sam` gives FedDyn+SAM) or an optax transform."""
  opt = common.as_client_optimizer(client_optimizer)
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, alpha=alpha)
  alpha_of = lambda round_info: hparams.of(round_info, values)["alpha"]

  def broadcast(server_state, round_info):
    return server_state.params

  def client_init(w_global, h_m, client_info, round_info):
    return FedDynLocalState(params=w_global, opt_state=opt.init(w_global,
                                                                round_info.learning_rate),
                            anchor=w_global, h=h_m)

  def local_step(state, batch, key, round_info):
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_info=round_info)
    grads = dyn.local_direction(grads, state.params, state.anchor, state.h, alpha_of(round_info),
                                prox)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, w_global, h_m, client_info, round_info):
    return dyn.client_finalize(state.params, w_global, h_m, alpha_of(round_info))

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    return dyn.server_update(server_state, deltas_C, weights_C, mask_C, alpha_of(round_info),
                             round_info.num_clients)

  return FederatedAlgorithm(
      name=name, server_init=dyn.server_init, client_state_init=tree.zeros_like,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1), hparams=values)


# The paper's Algorithm 1 averages uniformly; the specification weighs by examples.
_WEIGHTING = (f"{registration.SPEC_WEIGHTING}; the paper's Algorithm 1 averages 1/|P_t| "
              "(aggregation='uniform')")
registration.register("feddyn", fed_dyn, title="FedDyn", paper="Acar et al., ICLR 2021",
                      weighting_source=_WEIGHTING)


def _sam_client(config, name, *, rho: Annotated[float, Field(">= 0", "SAM radius",
                                                             sweepable=True)] = 0.05):
  return from_config.client_optimizer_from_config(config, gradient="sam",
                                                  rho=float(rho), owner=name)


registration.register("feddyn_sam", fed_dyn, client=_sam_client, title="FedDyn + SAM",
                      paper="FedDyn (Acar et al.) with a SAM client optimiser",
                      weighting_source=_WEIGHTING)
