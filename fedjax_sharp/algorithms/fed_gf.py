"""FedGF (Lee and Yoon, "Rethinking the Flat Minima Searching in Federated Learning", ICML 2024):
local SAM steps pulled towards a perturbed global model, by a weight `c` that the server adapts
to the clients' divergence.

Server state: `w`, the perturbed global model `w~` (unused until the first update), the weight
`c` (0 at the start) and a window of the last `W` divergence flags. Round t, the server sends
`(w^t, w~^t, c)`; client m starts from `w^t` with a fresh SGD (`momentum`, `weight_decay`) and
on each batch b (the same batch for both passes):

    g   = grad L(w; b),   w_a = w + rho g / (||g|| + eps)      (core.sam)
    w_p = c w~^t + (1 - c) w_a
    w  <- w - eta opt(grad L(w_p; b))

It keeps nothing and uploads `Delta_m = w^t - w_m`. Server, in this order:

    D_t      = mean over the cohort of ||w^t - w_m||   (unweighted, real clients only)
    window  <- the last W of its entries followed by 1[D_t > T_D];   c = mean(window)
    w^{t+1}  = w^t - sum_m p_m Delta_m                   (FedAvg)
    w~^{t+1} = w^{t+1} + g_rho Delta / (||Delta|| + eps),   Delta = w^t - w^{t+1}

rho = `rho`, g_rho = `g_rho` (None: rho), T_D = `T_D`, W = `W`, eps = `core.tree.NORM_EPS`.
Each round's record has `gf_divergence` (D_t) and `gf_c` (the c set for round t + 1): T_D is a
distance in parameter space, so its scale is the model's, the learning rate's and K's.
Reductions (tested): c = 0 (T_D above every divergence) is FedSAM with the same client
optimiser and rho, exactly; so is round 0.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm


@flax.struct.dataclass
class FedGFServerState:
  params: Any     # w^t
  perturbed: Any  # w~^t (= w^0 until the first update, when c is still 0)
  c: Any          # scalar (the run's float dtype), the weight of w~ in the clients' perturbation
  window: Any     # [W] (the run's float dtype), the last W flags 1[D > T_D], newest last (zeros before)
  filled: Any     # int32 scalar, min(rounds so far, W): the window's length
  divergence: Any  # scalar (the run's float dtype), the last round's D_t (0 before the first; recorded only)


@flax.struct.dataclass
class FedGFLocalState:
  params: Any     # w_{m,k}
  opt_state: Any  # local SGD (reset for every client)
  perturbed: Any  # w~^t, constant during the round
  c: Any          # c, constant during the round


def divergence_window(window, filled, divergence, threshold):
  """Appends the flag `1[divergence > threshold]` to the window (dropping its oldest entry)
  and returns `(window, filled, c)`, `c` the mean of the `filled` real entries."""
  flag = (divergence > threshold).astype(window.dtype)
  window = jnp.concatenate([window[1:], flag[None]])
  filled = jnp.minimum(filled + 1, window.shape[0])
  return window, filled, jnp.sum(window) / filled.astype(window.dtype)


@checked
def fed_gf(apply_fn: common.ApplyFn, client_optimizer, *,
           rho: Annotated[float, Field(">= 0", "local SAM radius", sweepable=True)] = 0.05,
           g_rho: Annotated[float | None, Field(
               ">= 0", "global perturbation radius (None: rho)")] = None,
           T_D: Annotated[float, Field(  # noqa: N803 (the paper's symbol)
               "> 0", "divergence threshold on the mean ||w^t - w_m|| (the example script's "
               "--c_o grid: 0.2, 0.3)", sweepable=True)] = 0.2,
           W: Annotated[int, Field(">= 1", "window of divergence flags (rounds)")] = 30,  # noqa: N803
           name: str = "fedgf") -> FederatedAlgorithm:
  """FedGF; `client_optimizer` supplies the SGD update (momentum 0, weight decay 4e-4 by default
  through the registry); the SAM gradients are made here."""
  opt = common.plain_gradients(client_optimizer, name, "makes its own SAM gradient")
  window_size = int(W)
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, rho=rho, T_D=T_D)

  def global_radius(hp):
    return hp["rho"] if g_rho is None else float(g_rho)

  def server_init(params):
    dtype = tree.float_dtype()
    return FedGFServerState(params=params, perturbed=params, c=jnp.zeros((), dtype),
                            window=jnp.zeros((window_size,), dtype),
                            filled=jnp.zeros((), jnp.int32),
                            divergence=jnp.zeros((), dtype))

  def broadcast(server_state, round_info):
    return (server_state.params, server_state.perturbed, server_state.c)

  def client_init(bcast, client_state, client_info, round_info):
    w_global, perturbed, c = bcast
    local = common.init_local(opt, w_global, round_info.learning_rate)
    return FedGFLocalState(params=local.params, opt_state=local.opt_state, perturbed=perturbed,
                           c=c)

  def local_step(state, batch, key, round_info):
    hp = hparams.of(round_info, values)
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
    w_ascent = tree.add(state.params, sam.perturbation(grads, hp["rho"]))
    c = state.c
    w_p = jax.tree.map(lambda p, a: c * p + (1.0 - c) * a, state.perturbed, w_ascent)
    perturbed_grads = jax.grad(lambda p: loss_fn(p, batch)[0])(w_p)
    return (common.optimizer_step(opt, state, perturbed_grads),
            common.step_metrics(loss, logits, batch))

  def client_finalize(state, bcast, client_state, client_info, round_info):
    w_global, _, _ = bcast
    return tree.sub(w_global, state.params), client_state

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    hp = hparams.of(round_info, values)
    real_C = mask_C > 0
    norms_C = jax.vmap(tree.global_norm)(deltas_C)
    divergence = (jnp.sum(jnp.where(real_C, norms_C, 0.0)) /
                  jnp.maximum(jnp.sum(real_C), 1).astype(norms_C.dtype))
    window, filled, c = divergence_window(server_state.window, server_state.filled, divergence,
                                          hp["T_D"])
    mean_delta = tree.weighted_sum(deltas_C, weights_C)
    params = tree.sub(server_state.params, mean_delta)
    perturbed = tree.add(params, sam.perturbation(mean_delta, global_radius(hp)))
    return FedGFServerState(params=params, perturbed=perturbed, c=c, window=window,
                            filled=filled, divergence=divergence.astype(tree.float_dtype()))

  def round_stats(server_state):
    # metrics.jsonl per round: D_t of the round just run, and the c it set for the next round.
    return {"gf_divergence": server_state.divergence, "gf_c": server_state.c}

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=1), hparams=values,
      round_stats=round_stats,
      dp_unsupported="reads each client's update norm on the server (its divergence window), "
                     "which noise on the sum does not cover",
      reads_cohort_size="averages the cohort's update norms (its divergence)")


# The authors' local SGD: momentum 0, coupled weight decay 4e-4 (their parser's defaults).
registration.register("fedgf", fed_gf, client=registration.client_optimizers.own_sgd(4e-4),
                      title="FedGF",
                      paper='Lee and Yoon, "Rethinking the Flat Minima Searching in Federated '
                            'Learning", ICML 2024',
                      weighting="examples",
                      weighting_source="the authors' code: n_m / sum n (FedLab's FedAvg "
                                       "aggregator, aggregator.py)")
