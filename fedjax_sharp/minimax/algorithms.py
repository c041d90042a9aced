"""Federated minimax algorithms on the standard round engine: FESS-GDA and its baselines.

Parameters are `{'x': min player, 'y': max player}`. Every client starts from the broadcast
`(x_t, y_t)` and takes K simultaneous stochastic steps on one minibatch per step (same point,
same batch for both gradients), each player through its own optax transform:

    x <- x - eta_xl * grad_x f_i(x, y; xi)
    y <- P_Y(y + eta_yl * grad_y f_i(x, y; xi))        (Local SGDA+: grad_y at (x~, y))

and uploads `(x_K - x_t, y_K - y_t)` with its step count. Servers (`p_i` the engine's weights;
`K` the weighted mean of the clients' steps):

  fess_gda        x_{t+1} = x_t + eta_xg (xbar - x_t) - eta_xl eta_xg K p (x_t - z_t)
                  y_{t+1} = P_Y(y_t + eta_yg (ybar - y_t))
                  z_{t+1} = z_t + beta (x_{t+1} - z_t)          (z_0 = x_0, never sent)
  local_sgda      x_{t+1} = xbar, y_{t+1} = ybar
  local_sgda_plus local_sgda with the snapshot x~ refreshed to x_{t+1} every S rounds; x~ is
                  sent down with (x, y)
  fed_norm_sgda   h_i = (x_t - x_{i,K}) / (eta_xl tau_i) (and y alike), tau_eff = sum p_i tau_i,
                  x_{t+1} = x_t - gamma_x tau_eff sum p_i h_x,i,
                  y_{t+1} = P_Y(y_t + gamma_y tau_eff sum p_i h_y,i)
  fed_norm_sgda_plus  fed_norm_sgda with local_sgda_plus's snapshot.

Reductions (tested): FESS-GDA with p = 0 and eta_g = 1 is Local SGDA; with K = 1, full
participation and eta_g = 1 it is centralised simultaneous GDA on f(x, y) + p/2 ||x - z||^2.
"""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


from fedjax_sharp.algorithms import registration
from fedjax_sharp.hyperparameters import Field, declare
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm
from fedjax_sharp.core.optimizers import ClientOptimizer, local_sgd

SERVER_RULES = ("fess_gda", "local_sgda", "fed_norm_sgda")


@dataclasses.dataclass(frozen=True)
class PlayerOptimizers:
  """Local learning rates and optax transforms of the two players (plain SGD by default)."""
  lr_x: float
  lr_y: float
  tx_x: optax.GradientTransformation = dataclasses.field(
      default_factory=lambda: local_sgd(0.0, 0.0))
  tx_y: optax.GradientTransformation = dataclasses.field(
      default_factory=lambda: local_sgd(0.0, 0.0))


@flax.struct.dataclass
class MinimaxServerState:
  params: Any    # {'x': x_t, 'y': y_t}
  z: Any         # FESS-GDA's smoothing variable (() otherwise); never broadcast
  snapshot: Any  # SGDA+'s x~ (() otherwise)


@flax.struct.dataclass
class MinimaxLocalState:
  params: Any
  opt_x: Any
  opt_y: Any
  snapshot: Any  # x~ for the y gradient (SGDA+), () otherwise


def minimax_algorithm(task, optimizers: PlayerOptimizers, *, rule: str = "fess_gda",
                      eta_xg: float = 1.0, eta_yg: float = 1.0, p: float = 0.0,
                      beta: float = 0.1, gamma_x: float = 1.0, gamma_y: float = 1.0,
                      snapshot_every: int = 0, name: str = "fess_gda") -> FederatedAlgorithm:
  """One of the algorithms of the module docstring (`rule` + `snapshot_every > 0` for '+')."""
  prefix = f"algorithm.{name}"
  if rule not in SERVER_RULES:
    raise ValueError(f"rule={rule!r} is not one of {list(SERVER_RULES)}")
  if rule == "fess_gda" and not 0.0 < beta < 1.0:
    raise ValueError(f"{prefix}.beta must be in (0, 1), got {beta}")
  if p < 0:
    raise ValueError(f"{prefix}.p must be >= 0, got {p}")
  if snapshot_every < 0:
    raise ValueError(f"{prefix}.snapshot_every must be >= 0, got {snapshot_every}")
  opt_x, opt_y = ClientOptimizer(optimizers.tx_x), ClientOptimizer(optimizers.tx_y)
  lr_x, lr_y = float(optimizers.lr_x), float(optimizers.lr_y)
  plus = snapshot_every > 0
  project = task.project_y

  def server_init(params):
    return MinimaxServerState(params=params,
                              z=jax.tree.map(jnp.copy, params["x"]) if rule == "fess_gda" else (),
                              snapshot=jax.tree.map(jnp.copy, params["x"]) if plus else ())

  def broadcast(server_state, round_info):
    return (server_state.params, server_state.snapshot)   # z stays on the server

  def client_init(bcast, client_state, client_info, round_info):
    params, snapshot = bcast
    return MinimaxLocalState(params=params, opt_x=opt_x.init(params["x"], lr_x),
                             opt_y=opt_y.init(params["y"], lr_y), snapshot=snapshot)

  def local_step(state, batch, key, round_info):
    grads, value = task.gradients(state.params, batch, key)
    g_y = grads["y"]
    if plus:  # Local SGDA+: the max player's gradient at the snapshot x~
      g_y = task.gradients({"x": state.snapshot, "y": state.params["y"]}, batch, key)[0]["y"]
    x, o_x = opt_x.apply(state.params["x"], state.opt_x, grads["x"])
    y, o_y = opt_y.apply(state.params["y"], state.opt_y, tree.scale(-1.0, g_y))  # ascent
    n = jnp.sum(batch["mask"].astype(tree.float_dtype()))
    metrics = {"loss_sum": value * n, "examples": n, "steps": jnp.ones((), n.dtype)}
    return state.replace(params={"x": x, "y": project(y)}, opt_x=o_x, opt_y=o_y), metrics

  def client_finalize(state, bcast, client_state, client_info, round_info):
    params, _ = bcast
    return {"delta": tree.sub(state.params, params),
            "steps": client_info.num_steps.astype(tree.float_dtype())}, client_state

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    x_t, y_t = server_state.params["x"], server_state.params["y"]
    steps_C = jnp.maximum(uploads_C["steps"], 1.0)
    if rule == "fed_norm_sgda":
      tau_eff = jnp.sum(weights_C * steps_C)
      dx = tree.weighted_sum(uploads_C["delta"]["x"], weights_C / (lr_x * steps_C))
      dy = tree.weighted_sum(uploads_C["delta"]["y"], weights_C / (lr_y * steps_C))
      x = tree.axpy(gamma_x * tau_eff, dx, x_t)          # x_t - gamma tau sum p h_x
      y = project(tree.axpy(gamma_y * tau_eff, dy, y_t))
      z = server_state.z
    else:
      mean = tree.weighted_sum(uploads_C["delta"], weights_C)   # (xbar - x_t, ybar - y_t)
      if rule == "local_sgda":
        x, y, z = tree.add(x_t, mean["x"]), tree.add(y_t, mean["y"]), server_state.z
      else:
        k = jnp.sum(weights_C * steps_C)
        x = tree.axpy(eta_xg, mean["x"], x_t)
        x = tree.axpy(-lr_x * eta_xg * k * p, tree.sub(x_t, server_state.z), x)
        y = project(tree.axpy(eta_yg, mean["y"], y_t))
        z = tree.axpy(beta, tree.sub(x, server_state.z), server_state.z)
    snapshot = server_state.snapshot
    if plus:
      refresh = (round_info.round + 1) % snapshot_every == 0
      snapshot = tree.where(refresh, x, server_state.snapshot)
    return MinimaxServerState(params={"x": x, "y": y}, z=z, snapshot=snapshot)

  sizes = task.param_sizes
  down = 1.0
  if plus and sizes:
    down = 1.0 + sizes["x"] / (sizes["x"] + sizes["y"])
  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=down, up=1.0),
      dp_unsupported="is a minimax algorithm: it uploads its step counts and its server "
                     "divides by them (no DP mechanism for minimax tasks)")


# ------------------------------------------------------------------------------------------
# Registry (config.algorithm.name for minimax tasks): each factory's keyword arguments are its
# hyperparameters (`fedjax_sharp.hyperparameters.Field`), the one home of their defaults.
EtaG = Annotated[float, Field("> 0", "server step size (1 = plain averaging)")]
SnapshotEvery = Annotated[int, Field(">= 1", "rounds between refreshes of the snapshot x~")]
GammaX = Annotated[float | None, Field("> 0", "server rate of x (None: local.lr_x, plain "
                                       "averaging)")]
GammaY = Annotated[float | None, Field("> 0", "server rate of y (None: lr_y, plain averaging)")]


def fess_gda(task, optimizers: PlayerOptimizers, *, eta_xg: EtaG = 1.0, eta_yg: EtaG = 1.0,
             p: Annotated[float, Field(">= 0", "smoothing weight (0: Local SGDA)")] = 0.0,
             beta: Annotated[float, Field("(0, 1)", "step of the smoothing variable z")] = 0.1,
             name: str = "fess_gda") -> FederatedAlgorithm:
  return minimax_algorithm(task, optimizers, rule="fess_gda", eta_xg=float(eta_xg),
                           eta_yg=float(eta_yg), p=float(p), beta=float(beta), name=name)


def local_sgda(task, optimizers: PlayerOptimizers, *,
               name: str = "local_sgda") -> FederatedAlgorithm:
  return minimax_algorithm(task, optimizers, rule="local_sgda", name=name)


def local_sgda_plus(task, optimizers: PlayerOptimizers, *, snapshot_every: SnapshotEvery = 10,
                    name: str = "local_sgda_plus") -> FederatedAlgorithm:
  return minimax_algorithm(task, optimizers, rule="local_sgda",
                           snapshot_every=int(snapshot_every), name=name)


def fed_norm_sgda(task, optimizers: PlayerOptimizers, *, gamma_x: GammaX = None,
                  gamma_y: GammaY = None, snapshot_every: int = 0,
                  name: str = "fed_norm_sgda") -> FederatedAlgorithm:
  """Default server rates (None): plain averaging, gamma = the local rate."""
  return minimax_algorithm(task, optimizers, rule="fed_norm_sgda",
                           gamma_x=float(gamma_x or optimizers.lr_x),
                           gamma_y=float(gamma_y or optimizers.lr_y),
                           snapshot_every=int(snapshot_every), name=name)


def fed_norm_sgda_plus(task, optimizers: PlayerOptimizers, *, gamma_x: GammaX = None,
                       gamma_y: GammaY = None, snapshot_every: SnapshotEvery = 10,
                       name: str = "fed_norm_sgda_plus") -> FederatedAlgorithm:
  return fed_norm_sgda(task, optimizers, gamma_x=gamma_x, gamma_y=gamma_y,
                       snapshot_every=snapshot_every, name=name)


# The paper the docs page cites (title in quotes).
_FESS_PAPER = (
    '"Stochastic Smoothed Gradient Descent Ascent for Federated Minimax Optimization"')
for _name, _factory, _title, _paper in (
    ("fess_gda", fess_gda, "FESS-GDA",
     "Shen et al., " + _FESS_PAPER + ", AISTATS 2024 (arXiv:2311.00944)"),
    ("local_sgda", local_sgda, "Local SGDA",
     "Deng and Mahdavi, AISTATS 2021; Sharma et al., ICML 2022"),
    ("local_sgda_plus", local_sgda_plus, "Local SGDA+", "Sharma et al., ICML 2022"),
    ("fed_norm_sgda", fed_norm_sgda, "Fed-Norm-SGDA", "Sharma et al., TMLR 2023"),
    ("fed_norm_sgda_plus", fed_norm_sgda_plus, "Fed-Norm-SGDA+", "Sharma et al., TMLR 2023")):
  registration.register(_name, _factory, kind="minimax", title=_title, paper=_paper,
                        client=lambda config, name: player_optimizers_from_config(config))
# The minimax algorithms: a live view of the one registry (`registration.MINIMAX`).
MINIMAX_ALGORITHMS = registration.MINIMAX
PLAYER_OPTIMIZERS = ("adam", "sgd")
# The config block `minimax`: the two players' local optimisers.
FIELDS = declare(
    lr_x=(0.02, "> 0", "learning rate of the min player x"),
    lr_y=(0.2, "> 0", "learning rate of the max player y"),
    optimizer_x=("sgd", PLAYER_OPTIMIZERS, "local optimiser of x"),
    optimizer_y=("sgd", PLAYER_OPTIMIZERS, "local optimiser of y"),
    momentum=(0.0, "[0, 1)", "'sgd' players' momentum"),
    b1=(0.5, "[0, 1)", "'adam' players' b1"),
    b2=(0.999, "[0, 1)", "'adam' players' b2"))


def player_optimizers_from_config(config) -> PlayerOptimizers:
  """`config.minimax.{lr_x, lr_y, optimizer_x, optimizer_y, b1, b2}`: 'sgd' or 'adam' per
  player (the GAN uses Adam, the test problems SGD)."""
  m = config.minimax

  def make(kind, field):
    if kind == "sgd":
      return local_sgd(float(m.momentum), 0.0)
    if kind == "adam":
      b1, b2 = float(m.b1), float(m.b2)
      return optax.inject_hyperparams(lambda learning_rate: optax.adam(learning_rate, b1, b2))(
          learning_rate=0.0)
    raise ValueError(f"minimax.{field}={kind!r} is not one of {list(PLAYER_OPTIMIZERS)}")
  return PlayerOptimizers(lr_x=float(m.lr_x), lr_y=float(m.lr_y),
                          tx_x=make(str(m.optimizer_x), "optimizer_x"),
                          tx_y=make(str(m.optimizer_y), "optimizer_y"))


def build_minimax_algorithm(config, task) -> FederatedAlgorithm:
  """The minimax algorithm `config.algorithm.name` on `task` (its block checked)."""
  name = config.algorithm.name
  if name not in MINIMAX_ALGORITHMS:
    raise ValueError(f"algorithm.name={name!r} is not one of {list(MINIMAX_ALGORITHMS)} "
                     f"(the minimax algorithms; task.name={config.task.name!r})")
  return MINIMAX_ALGORITHMS[name].build(config, task)
