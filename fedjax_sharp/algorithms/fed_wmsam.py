"""FedWMSAM (Li, Huang, Jiang, Liu, Xie, Du, Wang, Wu; NeurIPS 2025): weighted momentum + SAM.

Server state: `x^r`, the momentum `Delta` (gradient units), the SCAFFOLD-style global control `c`,
the mixing weight `alpha_r` (starting at `alpha`) and, per client, the control `c_k` (the engine's
client table; vectors 0 at start). Round r, client k receives `x^r` and its personalized momentum
`m_k = Delta + (c - c_k) alpha_r / (1 - alpha_r)` and from `x_0 = t_0 = x^r`, on each batch b:

    delta_b = t_b - x_b;   e_b = rho delta_b / (||delta_b|| + eps)     # variant='paper'
    G       = clip(alpha_r grad f_k(x_b + e_b; b) + (1 - alpha_r) m_k,  C)   # global L2 norm
    x_{b+1} = x_b - eta_r opt(G);   t_{b+1} = t_b + m_k

and uploads `Delta_k = x_K - x^r`. The server, with the previous round's `Delta`:

    value_k = cos(Delta_k, Delta) + 1   (0 when ||Delta_k|| ||Delta|| = 0)
    alpha   <- (1 - lambda) alpha + lambda clip(mean_k value_k, ALPHA_HAT_BOUNDS)
    c_k, c  <- SCAFFOLD option II with the step sum K_k eta_r (`scaffold`)
    Delta   <- gamma sum_k p_k (x^r - x_K) / (K_k eta_r)
    x^{r+1} = ServerOpt(x^r; sum_k p_k (x^r - x_K))

rho = `rho`, lambda = `alpha_smoothing`, gamma = `momentum_decay`, C = `max_grad_norm`, eps =
`PERTURBATION_EPS`; opt: SGD with the block's `momentum` and `weight_decay`. 'code_intended'
perturbs along -e_b; 'code_exact' shifts tensor i by -rho d_i / (sum_{j<P} |d_j| + eps), d the
flattened delta_b (the authors' indexing).
Reductions (tested): rho = 0, alpha_smoothing = 0, control_variates=False, momentum_decay = 1 is
the registered `fedcm` with `beta = alpha` while the clip is inactive.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.algorithms.fed_cm import momentum_mix
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.algorithms.scaffold import (option_ii_control_delta, server_control_update,
                                              constant_step_sum)
from fedjax_sharp.core import hparams, optimizers, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

VARIANTS = ("paper", "code_exact", "code_intended")
PERTURBATION_EPS = 1e-7        # WMSAM.py L40: rho / (grad_norm + 1e-7)
ALPHA_HAT_BOUNDS = (0.1, 0.9)  # FedWMSAM.py L49: max(0.1, min(value, 0.9))


@flax.struct.dataclass
class FedWMSAMServerState:
  model: common.ServerState  # x^r and the server optimiser's state
  momentum: Any              # Delta, gradient units
  control: Any               # c (zeros, unused, when control_variates=False)
  alpha: jax.Array           # alpha_r, a scalar in the run's float dtype

  @property
  def params(self):
    return self.model.params


@flax.struct.dataclass
class FedWMSAMLocalState:
  params: Any      # x_b
  opt_state: Any   # local optimiser state (reset every round)
  target: Any      # t_b = x^r + b m_k
  momentum: Any    # m_k, constant during the round
  alpha: jax.Array  # alpha_r


def code_exact_perturbation(delta, rho):
  """The authors' WMSAM.first_step: parameter tensor i (of P, in leaf order) is shifted by the
  scalar `-rho d_i / (sum_{j<P} |d_j| + 1e-7)`, `d` the flattened `delta`."""
  leaves, treedef = jax.tree.flatten(delta)
  num = len(leaves)
  first, taken = [], 0
  for leaf in leaves:
    if taken >= num:
      break
    first.append(jnp.ravel(leaf)[:num - taken])
    taken += first[-1].shape[0]
  if taken < num:
    raise ValueError(f"variant 'code_exact' reads the first {num} entries of the flattened "
                     f"model, which has only {taken}")
  d = jnp.concatenate(first)
  shift = -rho * d / (jnp.sum(jnp.abs(d)) + PERTURBATION_EPS)
  return jax.tree.unflatten(treedef, [jnp.full_like(leaf, shift[i])
                                      for i, leaf in enumerate(leaves)])


def perturbation(variant: str, delta, rho):
  """e_b of `variant` for `delta = t_b - x_b`."""
  if variant == "code_exact":
    return code_exact_perturbation(delta, rho)
  e = sam.perturbation(delta, rho, eps=PERTURBATION_EPS)
  return tree.scale(-1.0, e) if variant == "code_intended" else e


def alignment_value(update, momentum):
  """`cos(update, momentum) + 1`, or 0 when either is zero (FedWMSAM.py L77-84)."""
  denom = tree.global_norm(update) * tree.global_norm(momentum)
  safe = jnp.where(denom == 0, 1.0, denom)
  return jnp.where(denom == 0, 0.0, tree.vdot(update, momentum) / safe + 1.0)


@checked
def fed_wmsam(apply_fn: common.ApplyFn, client_optimizer,
              server_optimizer: optax.GradientTransformation | None = None,
              rho: Annotated[float, Field(">= 0", "perturbation radius (the paper's sec. 5.1; "
                                          "the code's default: 0.1)", sweepable=True)] = 0.01,
              alpha: Annotated[float, Field("(0, 1)", "initial weight alpha_0 of the gradient "
                                            "against the momentum")] = 0.1,
              alpha_smoothing: Annotated[float, Field("[0, 1]", "lambda of alpha <- (1-lambda) "
                                                      "alpha + lambda clip(mean value, 0.1, "
                                                      "0.9); 0 freezes alpha")] = 0.01,
              momentum_decay: Annotated[float, Field("(0, 1]", "factor on the server momentum "
                                                     "Delta (the code's lr_decay)")] = 0.998,
              max_grad_norm: Annotated[float, Field(">= 0", "clip the mixed direction G to this "
                                                    "global L2 norm (0: no clipping)")] = 10.0,
              variant: Annotated[str, Field(doc="perturbation: 'paper' (+delta/||delta||), "
                                            "'code_exact' (the authors' per-tensor scalars), "
                                            "'code_intended' (-delta/||delta||)",
                                            choices=VARIANTS)] = "paper",
              control_variates: Annotated[bool, Field(doc="SCAFFOLD controls in m_k (False: "
                                                      "m_k = Delta, the FedCM base)")] = True,
              name: str = "fedwmsam") -> FederatedAlgorithm:
  """FedWMSAM; `client_optimizer` applies G (plain gradients: the perturbation is the
  algorithm's own)."""
  alpha0, smoothing, decay = float(alpha), float(alpha_smoothing), float(momentum_decay)
  max_grad_norm = float(max_grad_norm)
  opt = common.plain_gradients(client_optimizer, name)
  server_optimizer = server_optimizer or optax.sgd(1.0)
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, rho=rho)

  def server_init(params):
    return FedWMSAMServerState(model=common.server_opt_init(server_optimizer, params),
                               momentum=tree.zeros_like(params),
                               control=tree.zeros_like(params),
                               alpha=jnp.asarray(alpha0, tree.float_dtype()))

  def client_state_init(params):
    return tree.zeros_like(params) if control_variates else ()

  def broadcast(server_state, round_info):
    return (server_state.params, server_state.momentum, server_state.control,
            server_state.alpha)

  def client_init(bcast, c_k, client_info, round_info):
    x, momentum, c, a = bcast
    if control_variates:   # m_k = Delta + (c - c_k) alpha / (1 - alpha)
      momentum = tree.axpy(a / (1.0 - a), tree.sub(c, c_k), momentum)
    local = common.init_local(opt, x, round_info.learning_rate)
    return FedWMSAMLocalState(params=local.params, opt_state=local.opt_state, target=x,
                              momentum=momentum, alpha=a)

  def local_step(state, batch, key, round_info):
    rho_r = hparams.of(round_info, values)["rho"]
    e = perturbation(variant, tree.sub(state.target, state.params), rho_r)
    (loss, logits), grads = sam.grad_at(loss_fn, state.params, e, batch)
    direction = momentum_mix(state.alpha, grads, state.momentum)
    direction = optimizers.clip_by_global_norm(direction, max_grad_norm)   # 0: no clipping
    state = common.optimizer_step(opt, state, direction)
    return (state.replace(target=tree.add(state.target, state.momentum)),
            common.step_metrics(loss, logits, batch))

  def client_finalize(state, bcast, c_k, client_info, round_info):
    x, momentum, c, _ = bcast
    delta = tree.sub(x, state.params)                       # x^r - x_K = -Delta_k
    upload = {"delta": delta,
              "num_steps": client_info.num_steps.astype(tree.float_dtype()),
              "value": alignment_value(tree.scale(-1.0, delta), momentum)}
    if not control_variates:
      return upload, c_k
    control_delta = option_ii_control_delta(delta, c, constant_step_sum(client_info, round_info))
    upload["control_delta"] = control_delta
    return upload, tree.add(c_k, control_delta)

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    deltas_C = uploads_C["delta"]
    mask = mask_C.astype(tree.float_dtype())
    value = (jnp.sum(jnp.where(mask > 0, uploads_C["value"], 0.0))
             / jnp.maximum(jnp.sum(mask), 1.0))            # uniform mean over the cohort
    a = server_state.alpha
    a = (1.0 - smoothing) * a + smoothing * jnp.clip(value, *ALPHA_HAT_BOUNDS)
    control = (server_control_update(server_state.control, uploads_C["control_delta"], mask_C,
                                     round_info)
               if control_variates else server_state.control)
    per_step = 1.0 / (round_info.learning_rate * jnp.maximum(uploads_C["num_steps"], 1.0))
    momentum = tree.scale(decay, tree.weighted_sum(deltas_C, weights_C * per_step))
    model = common.server_opt_step(server_optimizer, server_state.model,
                                   tree.weighted_sum(deltas_C, weights_C))
    return FedWMSAMServerState(model=model, momentum=momentum, control=control,
                               alpha=a.astype(tree.float_dtype()))

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=client_state_init,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=1), hparams=values,
      dp_unsupported="uploads its step count and an alignment value and divides each delta by "
                     "that client's own number of local steps (data-dependent weights the DP "
                     "sensitivity bound does not cover)",
      reads_cohort_size="averages the cohort's alignment values")


# The authors' local SGD: momentum 0, coupled weight decay 1e-3.
registration.register("fedwmsam", fed_wmsam, client=registration.client_optimizers.own_sgd(1e-3),
                      server=True, title="FedWMSAM",
                      paper='Li et al., "Fast & Flat Federated Learning via Weighted Momentum '
                            'and Sharpness-Aware Minimization", NeurIPS 2025',
                      weighting="uniform",
                      weighting_source="the authors' code: torch.mean over the cohort "
                                       "(FedWMSAM.py, global_update)")
