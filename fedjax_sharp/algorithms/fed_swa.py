"""FedSWA and FedMoSWA (Liu et al., ICML 2025, "Improving Generalization in Federated Learning
with Highly Heterogeneous Data via Momentum-Based Stochastic Controlled Weight Averaging").

FedSWA averages no client weights: its "SWA" is a cyclic local learning rate, restarted every
round and decayed linearly within it from eta to rho * eta, plus a LookAhead-style server step.
Client m of round t starts from y_0 = w^t with a fresh optimiser and takes K = K_m steps:

    eta_k   = s * eta_t * (1 - (1 - rho) k / K)
    y_{k+1} = y_k - eta_k * opt(clip(g(y_k)) [- c_i + m])     k = 0 .. K - 1
    upload  Delta_m = w^t - y_K;   server  w^{t+1} = w^t - alpha * sum_m p_m Delta_m

`eta_t` is the round's client learning rate, `s` the variant's peak factor, `p_m` the engine's
weights; k counts the client's real steps, so ragged clients each run their own schedule.
FedMoSWA adds SCAFFOLD's control variates with a momentum on the server's (the bracket; client
i keeps c_i in the engine's client table, the server keeps m; both 0 at start). Option II with
the round's own step sum (`scaffold.option_ii_control_delta`):

    S_i = sum_k eta_k,   c_i^+ = c_i - m + (w^t - y_K) / S_i,   upload (w^t - y_K, c_i^+ - m)
    server  m <- m + gamma * (1/|N_t|) sum_{i in N_t} (c_i^+ - m)

opt: SGD with the block's `momentum` and coupled `weight_decay`; clip: the raw gradient's global
L2 norm capped at `clip_norm`, before the control correction. `variant` ('paper', 'code') sets
s and the fields left None (`FEDSWA_PRESETS`, `FEDMOSWA_PRESETS`).
Reductions (tested): FedSWA with rho = 1 and alpha = 1 is FedAvg; FedMoSWA with full
participation, gamma = rho = alpha = 1 is SCAFFOLD (option II); its first round is FedSWA's.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration, scaffold
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

# Presets of the fields left None, and the peak factor s of the in-round schedule.
VARIANTS = ("paper", "code")
FEDSWA_PRESETS = {"paper": dict(rho=0.1, alpha=1.5, peak=1.0),
                  "code": dict(rho=0.0, alpha=1.0, peak=2.0)}
FEDMOSWA_PRESETS = {"paper": dict(rho=0.1, alpha=1.5, gamma=0.2, peak=1.0),
                    "code": dict(rho=1.0, alpha=1.0, gamma=0.4, peak=1.0)}

Variant = Annotated[str, Field(doc="'paper' (Algorithm 1 as transcribed) or 'code' (the "
                               "authors' HEAD code); presets the fields left None",
                               choices=VARIANTS)]
Rho = Annotated[float | None, Field("[0, 1]", "in-round learning rate decays linearly from eta "
                                    "to rho * eta (None: the variant's; paper 0.1, code: FedSWA 0, "
                                    "FedMoSWA 1)",
                                    sweepable=True)]
Alpha = Annotated[float | None, Field("> 0", "server step w + alpha (mean y_K - w); 1 = the "
                                      "plain average (None: the variant's: paper 1.5, code 1)",
                                      sweepable=True)]


@flax.struct.dataclass
class SWALocalState:
  params: Any      # y_k
  opt_state: Any   # local optimiser state (reset every round; its learning rate set per step)
  step: Any        # int32 k, the real steps taken so far
  num_steps: Any   # K_m (the run's float dtype)
  correction: Any  # FedMoSWA: m - c_i, constant during the round; () for FedSWA


def swa_learning_rate(eta, k, num_steps, rho, peak: float = 1.0):
  """`peak * eta * (1 - (1 - rho) k / K)`: linear from `peak * eta` at k = 0 towards
  `peak * rho * eta` at k = K (exactly `peak * eta` for every k when rho = 1)."""
  dtype = tree.float_dtype()
  frac = jnp.asarray(k, dtype) / jnp.maximum(jnp.asarray(num_steps, dtype), 1.0)
  return peak * eta * (1.0 - (1.0 - rho) * frac)


def swa_learning_rate_sum(eta, num_steps, rho, peak: float = 1.0):
  """`sum_{k<K} swa_learning_rate(...) = peak * eta * (K (1 + rho) + (1 - rho)) / 2`
  (K >= 1; K = 0 counts as 1, a client that took no step uploads a zero delta)."""
  k = jnp.maximum(jnp.asarray(num_steps, tree.float_dtype()), 1.0)
  return peak * eta * (k * (1.0 + rho) + (1.0 - rho)) / 2.0


def _preset(presets, variant, **given):
  out = dict(presets[variant])
  out.update({k: float(v) for k, v in given.items() if v is not None})
  return out


def _swa_algorithm(apply_fn, client_optimizer, *, controls: bool, variant: str, values: dict,
                   peak: float, name: str) -> FederatedAlgorithm:
  opt = common.plain_gradients(client_optimizer, name, "takes no SAM client optimiser")
  values = common.hyperparameters(opt, **values)   # rho, alpha [, gamma]: round data
  loss_fn = common.cross_entropy_loss(apply_fn)
  first_round_mean = controls and variant == "code"

  def server_init(params):
    model = common.ServerState(params=params, opt_state=())
    if not controls:
      return model
    return scaffold.ScaffoldServerState(model=model, control=tree.zeros_like(params))

  def broadcast(server_state, round_info):
    if not controls:
      return server_state.params
    return (server_state.params, server_state.control)

  def client_init(bcast, c_m, client_info, round_info):
    w_global = bcast[0] if controls else bcast
    correction = scaffold.control_correction(bcast[1], c_m) if controls else ()
    return SWALocalState(params=w_global, opt_state=opt.init(w_global, round_info.learning_rate),
                         step=jnp.zeros((), jnp.int32),
                         num_steps=client_info.num_steps.astype(tree.float_dtype()),
                         correction=correction)

  def local_step(state, batch, key, round_info):
    hp = hparams.of(round_info, values)
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_info=round_info)   # clipped here
    if controls:
      grads = tree.add(grads, state.correction)   # clip(g) - c_i + m
    lr = swa_learning_rate(round_info.learning_rate, state.step, state.num_steps, hp["rho"],
                           peak)
    params, opt_state = opt.apply(state.params, common.with_learning_rate(state.opt_state, lr),
                                  grads)
    return (state.replace(params=params, opt_state=opt_state, step=state.step + 1),
            common.step_metrics(loss, logits, batch))

  def client_finalize(state, bcast, c_m, client_info, round_info):
    delta = tree.sub(bcast[0] if controls else bcast, state.params)   # w^t - y_K
    if not controls:
      return delta, c_m
    m = bcast[1]
    hp = hparams.of(round_info, values)
    step_sum = swa_learning_rate_sum(round_info.learning_rate, client_info.num_steps,
                                     hp["rho"], peak)
    c_plus = tree.add(c_m, scaffold.option_ii_control_delta(delta, m, step_sum))
    return (delta, tree.sub(c_plus, m)), c_plus

  def server_step(model, deltas_C, weights_C, alpha):
    params = tree.axpy(-alpha, tree.weighted_sum(deltas_C, weights_C), model.params)
    return model.replace(params=params)

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    hp = hparams.of(round_info, values)
    if not controls:
      return server_step(server_state, uploads_C, weights_C, hp["alpha"])
    deltas_C, control_uploads_C = uploads_C
    gamma = hp["gamma"]
    if first_round_mean:
      gamma = jnp.where(round_info.round == 0, jnp.ones_like(gamma), gamma)
    cohort = jnp.maximum(jnp.sum(mask_C.astype(tree.float_dtype())), 1.0)
    control = tree.axpy(gamma / cohort, tree.weighted_sum(control_uploads_C, mask_C),
                        server_state.control)
    return scaffold.ScaffoldServerState(
        model=server_step(server_state.model, deltas_C, weights_C, hp["alpha"]),
        control=control)

  return FederatedAlgorithm(
      name=name, server_init=server_init,
      client_state_init=tree.zeros_like if controls else (lambda params: ()),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=2) if controls else Communication(down=1, up=1),
      hparams=values,
      reads_cohort_size="averages the control deltas over the cohort" if controls else "")


@checked
def fed_swa(apply_fn: common.ApplyFn, client_optimizer, rho: Rho = None, alpha: Alpha = None,
            variant: Variant = "paper", name: str = "fedswa") -> FederatedAlgorithm:
  """FedSWA: cyclic in-round learning rate and the server step w + alpha (mean y_K - w)."""
  p = _preset(FEDSWA_PRESETS, variant, rho=rho, alpha=alpha)
  return _swa_algorithm(apply_fn, client_optimizer, controls=False, variant=variant,
                        values=dict(rho=p["rho"], alpha=p["alpha"]), peak=p["peak"], name=name)


@checked
def fed_moswa(apply_fn: common.ApplyFn, client_optimizer, rho: Rho = None, alpha: Alpha = None,
              gamma: Annotated[float | None, Field(
                  "(0, 1]", "momentum of the server control m <- m + gamma mean(c^+ - m) "
                  "(None: the variant's: paper 0.2, code 0.4 and 1 in round 0)",
                  sweepable=True)] = None,
              variant: Variant = "paper", name: str = "fedmoswa") -> FederatedAlgorithm:
  """FedMoSWA: FedSWA with per-client controls c_m and the server's momentum control m."""
  p = _preset(FEDMOSWA_PRESETS, variant, rho=rho, alpha=alpha, gamma=gamma)
  return _swa_algorithm(apply_fn, client_optimizer, controls=True, variant=variant,
                        values=dict(rho=p["rho"], alpha=p["alpha"], gamma=p["gamma"]),
                        peak=p["peak"], name=name)


# The authors' code averages the cohort's updates with 1/(M C) (its clients hold equal data).
_UNIFORM = ("the authors' code: 1/|N_t| over the cohort (junkangLiu0/FedSWA, "
            "apply_weights_avgSWA)")


# The FedSWA family's local optimiser, the authors': SGD without momentum (their code rebuilds
# its SGD every batch, so a momentum there would restart at every step; > 0 here carries the
# buffer through the client's round), coupled weight decay 1e-3, the raw gradient clipped to 10
# before the correction.
_swa_client = registration.client_optimizers.own_sgd(1e-3, clip_norm=10.0)


_PAPER = ('"Improving Generalization in Federated Learning with Highly Heterogeneous Data via '
          'Momentum-Based Stochastic Controlled Weight Averaging"')

registration.register("fedswa", fed_swa, client=_swa_client, server_step="algorithm.fedswa.alpha",
                      title="FedSWA", paper=f"Liu et al., {_PAPER}, ICML 2025",
                      weighting="uniform", weighting_source=_UNIFORM)
registration.register("fedmoswa", fed_moswa, client=_swa_client,
                      server_step="algorithm.fedmoswa.alpha", title="FedMoSWA",
                      paper=f"Liu et al., {_PAPER}, ICML 2025", weighting="uniform",
                      weighting_source=_UNIFORM)
