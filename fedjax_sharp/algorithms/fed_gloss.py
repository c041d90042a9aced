"""FedGloSS (Caldarola et al., 2024, Appendix A Algorithm 1) and NaiveFedGloSS (Table 6).

Global server-side sharpness: the server takes the SAM ascent step itself, along the previous
round's pseudo-gradient, so clients need no extra communication. State: server `w`, previous
pseudo-gradient `D~` (none in round 0), global dual `sigma` (0); client dual `sigma_k` (0).
Round t:

    w~ = w + rho_s(t) D~ / ||D~||          (w~ = w in round 0)          # server ascent step
    clients start from w_{k,0} = w~ and take steps with their optimiser (SGD, SAM or ASAM with
    its own radius rho_l(t)) fed
        g - sigma_k + (w - w_{k,0}) / beta                              # ADMM-corrected step
    after:  sigma_k <- sigma_k - (w_{k,E} - w~) / beta;   upload w_{k,E} - w~
    server: sigma <- sigma - (1/(beta M)) sum_k (w_k - w~)             # M = all clients
            D~     = sum_k p_k (w~ - w_k)                                # pseudo-gradient at w~
            w     <- w - eta_s D~ - beta sigma                          # from the UNperturbed w

rho_s(t), rho_l(t): `rho`, `rho_l`, reached by a linear ramp from `rho0` over `ramp_rounds`
(`core.schedules.linear_ramp`); beta = `beta`, eta_s = `eta_s`. NaiveFedGloSS (`naive=True`)
first sends `w` to the same cohort (same local step anchored at `w`, no dual update) to form the
current round's D = sum_k p_k (w - w_k), then runs the round above with w~ along D: 2 down, 2 up.
Reductions (tested): the ADMM terms are FedDyn's with alpha = 1/beta (`core.dyn`): rho_s = 0 is
FedDyn(alpha = 1/beta) with anchor w^t; admm=False and rho_s = 0 is FedAvg (SGD clients) or
FedSAM (SAM clients) exactly; `refresh_per_epoch=True` is the paper's step up to float rounding.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, from_config, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import dyn, sam, schedules, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm
from fedjax_sharp.core.optimizers import ClientOptimizer

DUAL_SCALES = ("paper", "code")
SERVER_SCHEDULES = ("paper", "code")
CLIENT_OPTIMIZERS = ("sgd", "sam", "asam")


@flax.struct.dataclass
class FedGloSSServerState:
  params: Any       # w (unperturbed)
  pseudo_grad: Any  # D~ of the previous round (FedGloSS) / D of this round's probe (naive)
  has_pseudo: Any   # bool: pseudo_grad is valid (False before the first round)
  sigma: Any        # global dual (() when admm=False)


@flax.struct.dataclass
class FedGloSSLocalState:
  params: Any
  opt_state: Any
  anchor: Any  # w_{k,0} = w~ (refreshed every epoch with refresh_per_epoch)
  sigma: Any   # sigma_k (() when admm=False)
  step: Any          # local step counter (refresh_per_epoch)
  num_examples: Any  # n_k (refresh_per_epoch: an epoch is ceil(n_k / B) steps)


def server_radius(rho: float, rho_l: float, rho0: float, ramp_rounds: int,
                  server_schedule: str = "paper"):
  if server_schedule == "code":
    return schedules.fedgloss_code_server_rho(rho, rho_l, rho0, ramp_rounds)
  return schedules.linear_ramp(rho, rho0, ramp_rounds)


@checked
def fed_gloss(
    apply_fn: common.ApplyFn, client_optimizer, *,
    rho: Annotated[float, Field(">= 0", "server SAM radius rho_s (CIFAR-10 CNN, Table 13)")]
    = 0.15,
    rho0: Annotated[float, Field(">= 0", "start of the radii's linear ramp")] = 0.001,
    ramp_rounds: Annotated[int, Field(">= 0", "rounds of the ramp rho0 -> rho (0 = none)")] = 0,
    beta: Annotated[float, Field("> 0", "ADMM penalty (dual coefficient 1/beta)")] = 10.0,
    eta_s: Annotated[float, Field("> 0", "server learning rate (server.lr is not used)")] = 1.0,
    admm: Annotated[bool, Field(doc="ADMM dual correction (False: plain FedSAM-style server)")]
    = True,
    dual_scale: Annotated[str, Field(doc="'paper' or 'code' (the authors' extra 1/|cohort|)",
                                     choices=DUAL_SCALES)] = "paper",
    server_schedule: Annotated[str, Field(doc="server radius schedule: 'paper' or 'code'",
                                          choices=SERVER_SCHEDULES)] = "paper",
    refresh_per_epoch: Annotated[bool, Field(doc="refresh dual and anchor every local epoch "
                                             "(the authors' code)")] = False,
    naive: bool = False, name: str = "fedgloss") -> FederatedAlgorithm:
  """FedGloSS (or NaiveFedGloSS with `naive=True`).

  `client_optimizer`: a ClientOptimizer (sgd/sam/asam; its `rho` may be a schedule, e.g.
  `linear_ramp(rho_l, rho0, ramp_rounds)`) or an optax transform (SGD). `rho` is the server
  radius; `server_schedule='code'` needs the client optimiser's final radius, taken from its
  `rho` at round `ramp_rounds`.
  """
  rho, rho0, ramp_rounds = float(rho), float(rho0), int(ramp_rounds)
  beta, eta_s = float(beta), float(eta_s)
  opt = common.as_client_optimizer(client_optimizer)
  rho_l_final = float(opt.rho_at(max(ramp_rounds, 0)))
  rho_s = server_radius(rho, rho_l_final, rho0, ramp_rounds, server_schedule)
  alpha = 1.0 / beta
  loss_fn = common.cross_entropy_loss(apply_fn)

  def server_init(params):
    return FedGloSSServerState(params=params, pseudo_grad=tree.zeros_like(params),
                               has_pseudo=jnp.zeros((), jnp.bool_),
                               sigma=tree.zeros_like(params) if admm else ())

  def perturbed(server_state, round_info):
    """w~ = w + rho_s(t) D/||D|| (w when there is no D yet, or in NaiveFedGloSS's probe)."""
    e = sam.perturbation(server_state.pseudo_grad, rho_s(round_info.round))
    use = server_state.has_pseudo
    if naive:
      use = jnp.logical_and(use, round_info.phase == 1)
    return tree.add(server_state.params, tree.where(use, e, tree.zeros_like(e)))

  def client_init(w_tilde, sigma_k, client_info, round_info):
    return FedGloSSLocalState(
        params=w_tilde, opt_state=opt.init(w_tilde, round_info.learning_rate), anchor=w_tilde,
        sigma=sigma_k, step=jnp.zeros((), jnp.int32), num_examples=client_info.num_examples)

  def local_step(state, batch, key, round_info):
    if admm and refresh_per_epoch:   # the authors' code: dual and anchor refreshed per epoch
      state = _refresh(state, batch["mask"].shape[0])
    (loss, logits), grads = opt.value_and_grad(loss_fn, state.params, batch,
                                               round_idx=round_info.round)
    if admm:
      grads = dyn.local_direction(grads, state.params, state.anchor, state.sigma, alpha,
                                  "squared")
    state = common.optimizer_step(opt, state, grads).replace(step=state.step + 1)
    return state, common.step_metrics(loss, logits, batch)

  def _refresh(state, batch_size: int):
    """At an epoch boundary (every ceil(n_k / B) real steps): sigma_k -= (w - anchor)/beta and
    the anchor moves to w, as `fedgloss_client.run_epoch` does once per epoch."""
    steps_per_epoch = jnp.maximum(jnp.ceil(state.num_examples / batch_size), 1).astype(jnp.int32)
    boundary = jnp.logical_and(state.step > 0, state.step % steps_per_epoch == 0)
    sigma = tree.axpy(-alpha, tree.sub(state.params, state.anchor), state.sigma)
    return state.replace(sigma=tree.where(boundary, sigma, state.sigma),
                         anchor=tree.where(boundary, state.params, state.anchor))

  def client_finalize(state, w_tilde, sigma_k, client_info, round_info):
    upload = tree.sub(state.params, w_tilde)            # w_k - w~
    if not admm:
      return upload, sigma_k
    new_sigma = tree.axpy(-alpha, tree.sub(state.params, state.anchor), state.sigma)
    if naive:  # the probe exchange updates no dual
      new_sigma = tree.where(round_info.phase == 1, new_sigma, sigma_k)
    return upload, new_sigma

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    pseudo_grad = tree.scale(-1.0, tree.weighted_sum(uploads_C, weights_C))  # sum p (w~ - w_k)
    if admm:
      scale = 1.0 / (beta * round_info.num_clients)
      if dual_scale == "code":
        scale = scale / jnp.maximum(jnp.sum(mask_C), 1.0)
      sigma = tree.axpy(-scale, tree.weighted_sum(uploads_C, mask_C), server_state.sigma)
    else:
      sigma = ()
    params = tree.axpy(-eta_s, pseudo_grad, server_state.params)
    if admm:
      params = tree.axpy(-beta, sigma, params)
    new_state = FedGloSSServerState(params=params, pseudo_grad=pseudo_grad,
                                    has_pseudo=jnp.ones((), jnp.bool_), sigma=sigma)
    if not naive:
      return new_state
    # Probe exchange: keep w and sigma, store this round's D for exchange 1.
    probe = server_state.replace(pseudo_grad=pseudo_grad, has_pseudo=jnp.ones((), jnp.bool_))
    return jax.tree.map(lambda a, b: jnp.where(round_info.phase == 0, a, b), probe, new_state)

  return FederatedAlgorithm(
      name=name, server_init=server_init,
      client_state_init=(tree.zeros_like if admm else (lambda params: ())),
      broadcast=perturbed, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=2, up=2) if naive else Communication(down=1, up=1),
      exchanges=2 if naive else 1,
      reads_cohort_size=("divides the server dual's sum by the cohort size (dual_scale='code')"
                         if admm and dual_scale == "code" else ""))


def _client(config, name, *,
            client_optimizer: Annotated[str, Field(doc="local gradient: 'sgd', 'sam', 'asam'",
                                                   choices=CLIENT_OPTIMIZERS)] = "sgd",
            rho_l: Annotated[float, Field(">= 0", "client SAM radius (client_optimizer "
                                          "'sam'/'asam')")] = 0.15,
            asam_eta: Annotated[float, Field(">= 0", "ASAM's T = |w| + eta")] = 0.0,
            rho0, ramp_rounds):
  """The local optimiser: `config.local`'s momentum and weight decay, the block's gradient
  with the radius ramp rho0 -> rho_l over ramp_rounds."""
  base = from_config.client_optimizer_from_config(config, gradient="sgd", owner=name)
  rho_l = (schedules.linear_ramp(float(rho_l), float(rho0), int(ramp_rounds))
           if client_optimizer != "sgd" else 0.0)
  return ClientOptimizer(base.tx, gradient=client_optimizer, rho=rho_l, eta=float(asam_eta))


# The paper the docs page cites (title in quotes).
_PAPER = (
    '"Beyond Local Sharpness: Communication-Efficient Global Sharpness-aware '
    'Minimization for Federated Learning"')

registration.register("fedgloss", fed_gloss, client=_client, server_step="algorithm.fedgloss.eta_s",
                      title="FedGloSS",
                      paper=f"Caldarola et al., {_PAPER}, 2024, Appendix A Algorithm 1")
registration.register("naive_fedgloss", fed_gloss, client=_client, fixed=dict(naive=True),
                      server_step="algorithm.naive_fedgloss.eta_s", title="NaiveFedGloSS",
                      paper=f"Caldarola et al., {_PAPER}, 2024, Table 6")
