"""FedGMT and FedGMT-v2 (Li et al., ICML 2025, "global model trajectory"; Algorithm 1).

State: server `w`, EMA model `e` (= w^0 at start), global dual `u` (0); client dual `u_m` (0,
in the engine's client table). Round t, client m starts from `w_{m,0} = w^t` with a fresh
local optimiser and receives `w^t` and `e^t`:

    L_m(w) = CE(f(w; x), y) + gamma * tau^2 * KL(softmax(f(e; x)/tau) || softmax(f(w; x)/tau))
    local step: the local optimiser (momentum, weight decay) is fed  grad L_m(w_{m,k}) - u_m
    after K_m steps: u_m <- u_m - (1/beta) (w_{m,K} - w^t);  upload Delta_m = w_{m,K} - w^t

KL is "batchmean" over the real examples; the EMA (teacher) is frozen: one extra forward of
`e`, no extra backward. Server (`M` all clients, `p_m` the engine's weights):

    u       <- u - (1/(beta M)) sum_{m in N_t} (w_{m,K} - w^t)
    w^{t+1}  = sum_m p_m w_{m,K} - beta u
    e^{t+1}  = alpha e^t + (1 - alpha) w^{t+1}

gamma, tau, alpha, beta: the fields of those names. `tau_squared=False` drops tau^2;
`admm=False` keeps u_m = u = 0; `bookkeeping='authors'` keeps D_m = -beta u_m and
S = -beta M u instead. FedGMT-v2 sends only `w^t`: each client keeps its own EMA `e_m` in the
client table and on arrival sets e_m <- alpha e_m + (1 - alpha) w^t before training with it
(`v2_ema_init`: what e_m is before the client's first participation).
Reductions (tested): gamma = 0 and admm=False is FedAvg; gamma = 0 is FedDyn(alpha = 1/beta)
without its proximal term; FedGMT-v2 with alpha = 0 is FedGMT with alpha = 0; the two
bookkeepings agree up to float rounding.
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, losses, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

BOOKKEEPINGS = ("paper", "authors")
V2_EMA_INITS = ("first_received", "w0")
Gamma = Annotated[float, Field(">= 0", "weight of the KL to the EMA teacher", sweepable=True)]
Tau = Annotated[float, Field("> 0", "distillation temperature")]
Beta = Annotated[float, Field("> 0", "ADMM penalty (100 for AG News)", sweepable=True)]
Admm = Annotated[bool, Field(doc="dual (ADMM) correction; False: the Table 3 ablation")]
Bookkeeping = Annotated[str, Field(doc="'paper' (u_m, u) or 'authors' (D_m, S; their code)",
                                   choices=BOOKKEEPINGS)]
TauSquared = Annotated[bool, Field(doc="scale the KL by tau^2 (distillation convention)")]


@flax.struct.dataclass
class FedGMTServerState:
  params: Any  # w^t
  ema: Any     # e^t (FedGMT); () for FedGMT-v2
  dual: Any    # 'paper': u; 'authors': S = sum over all clients of D_m; () when admm=False


@flax.struct.dataclass
class FedGMTClientState:
  dual: Any  # 'paper': u_m; 'authors': D_m; () when admm=False
  ema: Any   # FedGMT-v2: e_m as last updated; () for FedGMT
  seen: Any  # FedGMT-v2: bool, the client has received a global model before; () for FedGMT


@flax.struct.dataclass
class FedGMTLocalState:
  params: Any     # w_{m,k}
  opt_state: Any  # local optimiser state (reset every round)
  teacher: Any    # the EMA model used in the KL term this round (e^t, or e_m for v2)
  dual: Any       # the client's dual (u_m or D_m), constant during the round; () if no ADMM


def trajectory_loss(apply_fn: common.ApplyFn, gamma: float, tau: float,
                    tau_squared: bool = True):
  """(params, teacher, batch) -> (CE + gamma [tau^2] KL, (ce, kl, logits)).

  `gamma` may be traced (the round's value, `core.hparams`); at `gamma == 0` the KL is weighted
  by 0 and reported as 0 (the cross-entropy's value and gradient exactly).
  """
  kl_weight = gamma * (float(tau) ** 2 if tau_squared else 1.0)

  def loss_fn(params, teacher, batch):
    logits = apply_fn(params, batch["x"])
    ce = losses.masked_cross_entropy(logits, batch["y"], batch["mask"])
    teacher_logits = apply_fn(teacher, batch["x"])
    kl = losses.tempered_kl(teacher_logits, logits, tau,
                            losses.loss_mask(batch["y"], batch["mask"]))  # tokens, if per-token
    kl = jnp.where(gamma == 0, jnp.zeros_like(kl), kl)
    return ce + kl_weight * kl, (ce, kl, logits)
  return loss_fn


def global_dual(server_state: FedGMTServerState, beta: float, num_clients: int,
                bookkeeping: str = "paper"):
  """The paper's global dual `u` from either bookkeeping (u = -S / (beta M) for 'authors')."""
  if bookkeeping == "paper":
    return server_state.dual
  return tree.scale(-1.0 / (beta * num_clients), server_state.dual)


def client_dual(client_state: FedGMTClientState, beta: float, bookkeeping: str = "paper"):
  """The paper's client dual `u_m` from either bookkeeping (u_m = -D_m / beta for 'authors')."""
  if bookkeeping == "paper":
    return client_state.dual
  return tree.scale(-1.0 / beta, client_state.dual)


def _fed_gmt(apply_fn, client_optimizer, *, gamma, tau, alpha, beta, admm, bookkeeping,
             tau_squared, v2, v2_ema_init, name) -> FederatedAlgorithm:
  tau = float(tau)
  opt = common.plain_gradients(client_optimizer, name, "measures sharpness with its trajectory "
                               "loss and takes no SAM client optimiser")
  # gamma, alpha, beta: round data (`core.hparams`), read in each function from its round_info.
  values = common.hyperparameters(opt, gamma=gamma, alpha=alpha, beta=beta)
  authors = admm and bookkeeping == "authors"

  def train_loss(params, teacher, dual, batch, hp):
    total, aux = trajectory_loss(apply_fn, hp["gamma"], tau, tau_squared)(params, teacher, batch)
    if authors:  # + (1/beta) <w, D_m>: its gradient D_m / beta = -u_m
      total = total + tree.vdot(params, dual) / hp["beta"]
    return total, aux

  # --- server ---------------------------------------------------------------------------
  def server_init(params):
    return FedGMTServerState(params=params, ema=() if v2 else jax.tree.map(jnp.copy, params),
                             dual=tree.zeros_like(params) if admm else ())

  def client_state_init(params):
    return FedGMTClientState(dual=tree.zeros_like(params) if admm else (),
                             ema=params if v2 else (),
                             seen=jnp.zeros((), jnp.bool_) if v2 else ())

  def broadcast(server_state, round_info):
    if v2:
      return server_state.params
    return (server_state.params, server_state.ema)

  def _global(bcast):
    return bcast if v2 else bcast[0]

  # --- client ---------------------------------------------------------------------------
  def client_init(bcast, client_state, client_info, round_info):
    w_global = _global(bcast)
    if v2:
      alpha = hparams.of(round_info, values)["alpha"]
      e_prev = client_state.ema
      if v2_ema_init == "first_received":
        e_prev = tree.where(client_state.seen, e_prev, w_global)
      teacher = jax.tree.map(lambda e, w: alpha * e + (1.0 - alpha) * w, e_prev, w_global)
    else:
      teacher = bcast[1]
    local = common.init_local(opt, w_global, round_info.learning_rate)
    return FedGMTLocalState(params=local.params, opt_state=local.opt_state, teacher=teacher,
                            dual=client_state.dual)

  def local_step(state, batch, key, round_info):
    (_, (ce, kl, logits)), grads = jax.value_and_grad(train_loss, has_aux=True)(
        state.params, state.teacher, state.dual, batch, hparams.of(round_info, values))
    if admm and not authors:
      grads = tree.sub(grads, state.dual)  # g - u_m
    metrics = common.step_metrics(ce, logits, batch)
    metrics["kl_sum"] = kl * metrics["examples"]
    return common.optimizer_step(opt, state, grads), metrics

  def client_finalize(state, bcast, client_state, client_info, round_info):
    delta = tree.sub(state.params, _global(bcast))
    if not admm:
      dual = ()
    elif authors:
      dual = tree.add(client_state.dual, delta)            # D_m += w_{m,K} - w^t
    else:
      beta = hparams.of(round_info, values)["beta"]
      dual = tree.axpy(-1.0 / beta, delta, client_state.dual)  # u_m -= (w_{m,K} - w^t)/beta
    new_state = FedGMTClientState(
        dual=dual, ema=state.teacher if v2 else (),
        seen=jnp.ones((), jnp.bool_) if v2 else ())
    return delta, new_state

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    num_clients = round_info.num_clients
    hp = hparams.of(round_info, values)
    alpha, beta = hp["alpha"], hp["beta"]
    avg = tree.add(server_state.params, tree.weighted_sum(deltas_C, weights_C))
    if not admm:
      dual, params = (), avg
    else:
      cohort_sum = tree.weighted_sum(deltas_C, mask_C)
      if authors:
        dual = tree.add(server_state.dual, cohort_sum)                 # S += sum_cohort
        params = tree.axpy(1.0 / num_clients, dual, avg)               # avg + S / M
      else:
        dual = tree.axpy(-1.0 / (beta * num_clients), cohort_sum, server_state.dual)
        params = tree.axpy(-beta, dual, avg)                           # avg - beta u
    ema = () if v2 else jax.tree.map(lambda e, w: alpha * e + (1.0 - alpha) * w,
                                     server_state.ema, params)
    return FedGMTServerState(params=params, ema=ema, dual=dual)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=client_state_init,
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1, up=1) if v2 else Communication(down=2, up=1),
      hparams=values)


@checked
def fed_gmt(apply_fn: common.ApplyFn, client_optimizer, gamma: Gamma = 1.0, tau: Tau = 3.0,
            alpha: Annotated[float, Field("[0, 1]", "EMA coefficient of the global trajectory",
                                          sweepable=True)] = 0.95,
            beta: Beta = 10.0, admm: Admm = True, bookkeeping: Bookkeeping = "paper",
            tau_squared: TauSquared = True, name: str = "fedgmt") -> FederatedAlgorithm:
  """FedGMT (server-side EMA sent to the clients; 2 models down, 1 up)."""
  return _fed_gmt(apply_fn, client_optimizer, gamma=gamma, tau=tau, alpha=alpha, beta=beta,
                  admm=admm, bookkeeping=bookkeeping, tau_squared=tau_squared, v2=False,
                  v2_ema_init="first_received", name=name)


@checked
def fed_gmt_v2(apply_fn: common.ApplyFn, client_optimizer, gamma: Gamma = 1.0, tau: Tau = 3.0,
               alpha: Annotated[float, Field("[0, 1]", "EMA coefficient of each client's "
                                             "trajectory (Table 7)", sweepable=True)] = 0.5,
               beta: Beta = 10.0, admm: Admm = True, bookkeeping: Bookkeeping = "paper",
               v2_ema_init: Annotated[str, Field(doc="e_m before the first participation",
                                                 choices=V2_EMA_INITS)] = "first_received",
               tau_squared: TauSquared = True, name: str = "fedgmt_v2") -> FederatedAlgorithm:
  """FedGMT-v2 (per-client EMA kept in the client table; 1 model down, 1 up)."""
  return _fed_gmt(apply_fn, client_optimizer, gamma=gamma, tau=tau, alpha=alpha, beta=beta,
                  admm=admm, bookkeeping=bookkeeping, tau_squared=tau_squared, v2=True,
                  v2_ema_init=v2_ema_init, name=name)


# The paper the docs page cites (title in quotes).
_PAPER = (
    '"One Arrow, Two Hawks: Sharpness-aware Minimization for Federated Learning via '
    'Global Model Trajectory"')

# Algorithm 1 averages uniformly; the specification weighs by examples.
_WEIGHTING = (f"{registration.SPEC_WEIGHTING}; the paper's Algorithm 1 averages 1/|N_t| "
              "(aggregation='uniform')")
registration.register("fedgmt", fed_gmt, client="sgd", title="FedGMT",
                      paper=f"Li et al., {_PAPER}, ICML 2025, Algorithm 1",
                      weighting_source=_WEIGHTING)
registration.register("fedgmt_v2", fed_gmt_v2, client="sgd", title="FedGMT-v2",
                      paper=f"Li et al., {_PAPER}, ICML 2025, Section 3.3",
                      weighting_source=_WEIGHTING)
