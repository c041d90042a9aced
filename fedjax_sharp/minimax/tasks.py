"""Minimax tasks: `min_x max_{y in Y} (1/M) sum_i f_i(x, y)` as data for the round engine.

A `MinimaxTask` gives the minimax algorithms what a model gives the classification ones:
initial parameters `{'x': ..., 'y': ...}`, each client's stochastic gradients on a batch
(`gradients(params, batch, key) -> ({'x': descent gradient, 'y': ascent gradient}, value)`), the
projection `P_Y`, the clients' training data and partition, and host-side metrics of the global
`(x, y)`.

The four test problems with known solutions (spec: ../shared/spec/minimax.md) put each client's
coefficients in `TrainData` as its single "example" (one row per client), so the engine's
gather/plan machinery serves them unchanged: a client with batch size 1 and K local steps sees
its own row at every step (deterministic gradients).
  A 'quadratic'  f_i = 1/2 x'A_i x + x'B y - 1/2 y'C y + b_i'x - c_i'y      (NC-SC)
  B 'pl'         f_i = x^2 + 3 sin^2 x sin^2 y - 4 y^2 - 10 sin^2 y + a_i x - b_i y   (PL-PL)
  C 'simplex'    f_i = sum_j y_j 1/2 ||x - c_j - delta_i||^2 - lambda/2 ||y||^2, y in the simplex
  D 'bilinear'   f_i = x y, Y = [-1, 1]
Metrics: distance to the saddle point, the primal gap Phi(x) - Phi(x*) with
`Phi(x) = max_y f(x, y)`, and `||grad Phi(x)||` where it has a closed form.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core.engine import TrainData
from fedjax_sharp.hyperparameters import declare
from fedjax_sharp.minimax import projections

TOY_PROBLEMS = ("quadratic", "pl", "simplex", "bilinear")
# What `task.name` may be: classification (the classification experiments) or a minimax task.
TASKS = ("classification", *TOY_PROBLEMS, "fair_classification", "gan")


def is_minimax(config) -> bool:
  """Whether the config's `task.name` is a minimax task (not 'classification')."""
  return config.task.name != "classification"


# The config block `task` and each task's own block `task.<name>`.
FIELDS = declare(name=("classification", tuple(sorted(TASKS)), " | ".join(TASKS)))
BLOCKS = {
    "quadratic": declare(num_clients=(8, ">= 1", "clients of the quadratic game"),
                         hetero_a=(0.3, ">= 0", "heterogeneity of the quadratic terms"),
                         hetero_bc=(1.0, ">= 0", "heterogeneity of the linear terms")),
    "pl": declare(num_clients=(8, ">= 1", "clients of the PL game"),
                  hetero=(0.5, ">= 0", "client heterogeneity")),
    "simplex": declare(num_clients=(6, ">= 1", "clients of the simplex game"),
                       lam=(0.0, ">= 0", "regulariser of y"),
                       hetero=(0.5, ">= 0", "client heterogeneity")),
    "bilinear": declare(num_clients=(4, ">= 1", "clients of the bilinear game")),
    "fair_classification": declare(lam=(0.1, ">= 0", "regulariser of the group weights")),
    "gan": declare(fd_samples=(2000, ">= 2", "samples of the Frechet distance"),
                   classifier_epochs=(2, ">= 1", "epochs of the feature classifier"),
                   classifier_cache=("", None, "feature classifier file ('' = under the "
                                     "workdir)")),
}


@dataclasses.dataclass(frozen=True)
class MinimaxTask:
  name: str
  init_params: Callable[[jax.Array], dict]
  gradients: Callable[[dict, dict, jax.Array], tuple[dict, jax.Array]]
  project_y: Callable
  train_data: TrainData
  client_indices: list
  evaluate: Callable[[dict], dict]
  primary_metric: str                 # the metric summaries and tables report
  higher_is_better: bool = False
  preprocess: Callable = lambda x, key: x  # (x_batch, key) -> features, inside jit
  solution: Any = None                # the known saddle point {'x', 'y'} (test problems)
  # {'x': n, 'y': n} parameter counts of the two players (neural tasks): the communication
  # count of algorithms that send x twice (None: equal weights).
  param_sizes: dict | None = None
  # (params, directory, tag) -> None: writes task artifacts (GAN sample grids), or None.
  artifacts: Callable | None = None
  extras: dict = dataclasses.field(default_factory=dict)


def objective_gradients(objective: Callable[[dict, dict], jax.Array]):
  """gradients() of an objective f(params, batch): descent on x and ascent on y use the same
  point and the same batch (simultaneous GDA); also returns f."""
  def gradients(params, batch, key):
    value, grads = jax.value_and_grad(objective)(params, batch)
    return grads, value
  return gradients


def _one_row_per_client(rows: np.ndarray) -> tuple[TrainData, list]:
  """Coefficients in JAX's default float dtype (float64 under `jax.enable_x64`, which the
  convergence tests use to reach 1e-8; float32 otherwise)."""
  rows = np.asarray(rows, np.float64)
  data = TrainData(x=jnp.asarray(rows), y=jnp.zeros((rows.shape[0],), jnp.int32))
  return data, [np.array([i]) for i in range(rows.shape[0])]


def _centred(rng, num_clients, shape, scale):
  """Per-client offsets with mean exactly 0 over the clients."""
  v = rng.normal(size=(num_clients, *shape)) * scale
  return v - v.mean(axis=0, keepdims=True)


def _distance(params, solution):
  return float(np.sqrt(sum(np.sum((np.asarray(params[k], np.float64) - solution[k]) ** 2)
                           for k in ("x", "y"))))


# ------------------------------------------------------------------------------------------
def quadratic(num_clients: int = 8, hetero_a: float = 0.0, hetero_bc: float = 1.0,
              seed: int = 0, dx: int = 4, dy: int = 5) -> MinimaxTask:
  """A: nonconvex-strongly-concave quadratic. Mean A has eigenvalues (-1, 0.5, 1, 2), B = 1.5 Q
  with Q Q' = I, C = I, so H = A + B C^{-1} B' is positive definite. `hetero_a` scales
  symmetric zero-mean perturbations of A_i (0: identical A_i), `hetero_bc` the offsets of
  b_i, c_i (the heterogeneity of b_i, c_i alone cancels in the averaged affine maps)."""
  if dx != 4 or dy < dx:
    raise ValueError("task 'quadratic' has dx = 4 (the spectrum of A) and needs dy >= dx")
  rng = np.random.default_rng(seed)
  u, _ = np.linalg.qr(rng.normal(size=(dx, dx)))
  a_mean = u @ np.diag([-1.0, 0.5, 1.0, 2.0]) @ u.T
  q, _ = np.linalg.qr(rng.normal(size=(dy, dx)))
  b_mat = 1.5 * q.T                                   # dx x dy, B B' = 2.25 I
  c_mat = np.eye(dy)
  e = _centred(rng, num_clients, (dx, dx), hetero_a)
  a_i = a_mean + 0.5 * (e + np.swapaxes(e, 1, 2))
  b_i = rng.normal(size=dx) + _centred(rng, num_clients, (dx,), hetero_bc)
  c_i = rng.normal(size=dy) + _centred(rng, num_clients, (dy,), hetero_bc)
  bbar, cbar = b_i.mean(0), c_i.mean(0)
  c_inv = np.linalg.inv(c_mat)
  h = a_mean + b_mat @ c_inv @ b_mat.T
  x_star = np.linalg.solve(h, b_mat @ c_inv @ cbar - bbar)
  y_star = c_inv @ (b_mat.T @ x_star - cbar)
  rows = np.concatenate([a_i.reshape(num_clients, -1), b_i, c_i], axis=1)
  data, parts = _one_row_per_client(rows)
  bj, cj = jnp.asarray(b_mat), jnp.asarray(c_mat)

  def objective(params, batch):
    row = batch["x"][0]
    a = row[:dx * dx].reshape(dx, dx)
    b, c = row[dx * dx:dx * dx + dx], row[dx * dx + dx:]
    x, y = params["x"], params["y"]
    return 0.5 * x @ a @ x + x @ bj @ y - 0.5 * y @ cj @ y + b @ x - c @ y

  def phi(x):
    r = b_mat.T @ x - cbar
    return 0.5 * x @ a_mean @ x + bbar @ x + 0.5 * r @ c_inv @ r

  def evaluate(params):
    x = np.asarray(params["x"], np.float64)
    return {"distance_to_saddle": _distance(params, {"x": x_star, "y": y_star}),
            "phi_gap": float(phi(x) - phi(x_star)),
            "grad_phi_norm": float(np.linalg.norm(h @ x + bbar - b_mat @ c_inv @ cbar))}

  return MinimaxTask(
      name="quadratic", init_params=lambda key: {"x": jnp.zeros((dx,)), "y": jnp.zeros((dy,))},
      gradients=objective_gradients(objective), project_y=projections.identity,
      train_data=data, client_indices=parts, evaluate=evaluate,
      primary_metric="distance_to_saddle", solution={"x": x_star, "y": y_star},
      extras={"H": h, "lipschitz": float(np.max(np.abs(np.linalg.eigvalsh(
          np.block([[a_mean, b_mat], [b_mat.T, -c_mat]])))))})


def pl_game(num_clients: int = 8, hetero: float = 0.0, seed: int = 0) -> MinimaxTask:
  """B: PL-PL game f = x^2 + 3 sin^2 x sin^2 y - 4 y^2 - 10 sin^2 y, saddle (0, 0); clients add
  a_i x - b_i y with sum a_i = sum b_i = 0. Phi(x) = x^2 (the y-part is <= 0, 0 at y = 0)."""
  rng = np.random.default_rng(seed)
  rows = np.concatenate([_centred(rng, num_clients, (1,), hetero),
                         _centred(rng, num_clients, (1,), hetero)], axis=1)
  data, parts = _one_row_per_client(rows)

  def objective(params, batch):
    a, b = batch["x"][0, 0], batch["x"][0, 1]
    x, y = params["x"][0], params["y"][0]
    sx, sy = jnp.sin(x) ** 2, jnp.sin(y) ** 2
    return x ** 2 + 3 * sx * sy - 4 * y ** 2 - 10 * sy + a * x - b * y

  def evaluate(params):
    x = float(params["x"][0])
    return {"distance_to_saddle": _distance(params, {"x": np.zeros(1), "y": np.zeros(1)}),
            "phi_gap": x * x, "grad_phi_norm": abs(2 * x)}

  return MinimaxTask(
      name="pl", init_params=lambda key: {"x": jnp.full((1,), 1.0), "y": jnp.full((1,), -0.8)},
      gradients=objective_gradients(objective), project_y=projections.identity,
      train_data=data, client_indices=parts, evaluate=evaluate,
      primary_metric="distance_to_saddle", solution={"x": np.zeros(1), "y": np.zeros(1)})


SIMPLEX_CENTRES = np.array([[0.0, 0.0], [4.0, 0.0], [1.0, 3.0]])
SIMPLEX_SOLUTIONS = {0.0: ((2.0, 1.0), (1 / 4, 5 / 12, 1 / 3)),
                     1.0: ((375 / 191, 189 / 191), (50 / 191, 78 / 191, 63 / 191))}


def simplex_game(num_clients: int = 6, lam: float = 0.0, hetero: float = 0.5,
                 seed: int = 0) -> MinimaxTask:
  """C: f_i = sum_j y_j 1/2 ||x - c_j - delta_i||^2 - lam/2 ||y||^2, y in the 3-simplex; one
  offset delta_i per client with sum_i delta_i = 0. Known saddles for lam = 0 and 1."""
  rng = np.random.default_rng(seed)
  deltas = _centred(rng, num_clients, (2,), hetero)
  data, parts = _one_row_per_client(deltas)
  centres = jnp.asarray(SIMPLEX_CENTRES)
  spread = 0.5 * float(np.mean(np.sum(deltas ** 2, axis=1)))   # the constant the offsets add

  def objective(params, batch):
    d = batch["x"][0]
    x, y = params["x"], params["y"]
    dist = 0.5 * jnp.sum((x[None, :] - centres - d[None, :]) ** 2, axis=1)
    return y @ dist - 0.5 * lam * y @ y

  def phi(x):
    a = 0.5 * np.sum((x[None, :] - SIMPLEX_CENTRES) ** 2, axis=1) + spread
    if lam == 0:
      return float(a.max())
    y = np.asarray(projections.simplex(jnp.asarray(a / lam)), np.float64)
    return float(y @ a - 0.5 * lam * y @ y)

  solution = None
  if lam in SIMPLEX_SOLUTIONS:
    xs, ys = SIMPLEX_SOLUTIONS[lam]
    solution = {"x": np.array(xs), "y": np.array(ys)}

  def evaluate(params):
    x = np.asarray(params["x"], np.float64)
    out = {"phi": phi(x), "y": [float(v) for v in np.asarray(params["y"])]}
    if solution is not None:
      out["distance_to_saddle"] = _distance(params, solution)
      out["phi_gap"] = out["phi"] - phi(solution["x"])
    return out

  return MinimaxTask(
      name="simplex",
      init_params=lambda key: {"x": jnp.asarray([3.0, 2.0]), "y": jnp.full((3,), 1 / 3)},
      gradients=objective_gradients(objective), project_y=projections.make("simplex"),
      train_data=data, client_indices=parts, evaluate=evaluate,
      primary_metric="distance_to_saddle" if solution is not None else "phi",
      solution=solution)


def bilinear(num_clients: int = 4, seed: int = 0) -> MinimaxTask:
  """D: f = x y with Y = [-1, 1]: Phi(x) = |x|, x* = 0 (and y* = 0). Identical clients."""
  data, parts = _one_row_per_client(np.zeros((num_clients, 1)))

  def objective(params, batch):
    return params["x"][0] * params["y"][0] + 0.0 * batch["x"][0, 0]

  def evaluate(params):
    x = float(params["x"][0])
    return {"abs_x": abs(x), "phi_gap": abs(x),
            "distance_to_saddle": _distance(params, {"x": np.zeros(1), "y": np.zeros(1)})}

  return MinimaxTask(
      name="bilinear", init_params=lambda key: {"x": jnp.full((1,), 1.0), "y": jnp.zeros((1,))},
      gradients=objective_gradients(objective), project_y=projections.make("box"),
      train_data=data, client_indices=parts, evaluate=evaluate, primary_metric="abs_x",
      solution={"x": np.zeros(1), "y": np.zeros(1)})


def toy_problem(name: str, **kwargs) -> MinimaxTask:
  builders = {"quadratic": quadratic, "pl": pl_game, "simplex": simplex_game,
              "bilinear": bilinear}
  if name not in builders:
    raise ValueError(f"task.name={name!r} is not one of {sorted(builders)}")
  return builders[name](**kwargs)
