"""Client and server optimisers (plain arguments; `algorithms/from_config.py` reads the config).

A client's local optimiser is a `ClientOptimizer`: a gradient estimator (`sgd`, `sam` or
`asam`, see `fedjax_sharp.core.sam`) plus an optax transform that applies the update at the
unperturbed weights (momentum, weight decay). Every algorithm whose paper allows it takes one,
so FedSAM is FedAvg with a `sam` client optimiser, FedGamma is SCAFFOLD with one, MoFedSAM is
FedCM with one, and FedDyn+SAM needs no code of its own.

Gradient clipping (`ClientOptimizer.clip_norm`, off by default) acts on the gradient
`value_and_grad` returns, before the algorithm adds any correction to it and before the optax
transform adds weight decay: PyTorch's `clip_grad_norm_` between `backward()` and the
algorithm's edits of `.grad` (the FedSWA family's authors' code: max_norm 10).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Union

import jax
import jax.numpy as jnp
import optax

from fedjax_sharp.core import sam, tree

Schedule = Callable[[jax.Array], jax.Array]


def local_sgd(momentum: float = 0.9, weight_decay: float = 1e-5,
              nesterov: bool = False) -> optax.GradientTransformation:
  """SGD with momentum and L2 weight decay added to the gradient (PyTorch `SGD` semantics).

  `buf <- momentum * buf + (g + wd * w);  w <- w - lr * buf`. The learning rate is an injected
  hyperparameter so that the per-round decayed rate is a traced value (no recompiles); set it
  with `with_learning_rate`. Momentum is reset whenever the state is re-initialised, i.e. at
  the start of every round.
  """
  def make(learning_rate):
    parts = []
    if weight_decay:
      parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov))
    return optax.chain(*parts)
  return optax.inject_hyperparams(make)(learning_rate=0.0)


# The server optimisers `server_optimizer` builds (config field `server.optimizer`).
SERVER_OPTIMIZERS = ("sgd", "adam", "yogi", "adagrad")
CLIP_EPS = 1e-6   # PyTorch's clip_grad_norm_: max_norm / (norm + 1e-6)


def clip_by_global_norm(grads, max_norm: float):
  """PyTorch's `clip_grad_norm_`: `grads * min(1, max_norm / (||grads|| + CLIP_EPS))`, one global
  L2 norm over the pytree; `max_norm <= 0` returns `grads` unchanged (no clipping)."""
  if max_norm <= 0:
    return grads
  factor = jnp.minimum(1.0, max_norm / (tree.global_norm(grads) + CLIP_EPS))
  return jax.tree.map(lambda g: (factor * g).astype(g.dtype), grads)


def with_learning_rate(opt_state, learning_rate):
  """Returns `opt_state` (of an `inject_hyperparams` optimiser) with the learning rate set."""
  if not hasattr(opt_state, "hyperparams") or "learning_rate" not in opt_state.hyperparams:
    raise ValueError("the client optimiser must be wrapped by optax.inject_hyperparams with a "
                     "'learning_rate' hyperparameter (see fedjax_sharp.core.optimizers.local_sgd)")
  hyper = dict(opt_state.hyperparams)
  hyper["learning_rate"] = jnp.asarray(learning_rate, hyper["learning_rate"].dtype)
  return opt_state._replace(hyperparams=hyper)


@dataclasses.dataclass(frozen=True)
class ClientOptimizer:
  """A client's local optimiser: gradient estimator + optax update at the unperturbed weights.

  Attributes:
    tx: an optax transform with an injected `learning_rate` (see `local_sgd`).
    gradient: 'sgd' (plain gradient), 'sam' or 'asam' (gradient at `w + e`, `fedjax_sharp.core.sam`).
    rho: SAM radius, a float or a schedule `round -> rho` (traced: no recompiles). A float
      radius is a hyperparameter as data (`hparams`, key 'rho'): the round's value is
      `round_info.hparams['rho']` when the algorithm lists it (a sweep's lane), else `rho`.
    eta: ASAM's `T = |w| + eta`.
    asam_biases: ASAM scales biases too (`T = |w| + eta` on every tensor; DP-FedSAM's code);
      False: `T = 1` on biases (the official ASAM code).
    clip_norm: > 0 clips the gradient `value_and_grad` returns (SAM's: the one at the perturbed
      weights) to this global L2 norm (`clip_by_global_norm`); 0: no clipping.
  """
  tx: optax.GradientTransformation
  gradient: str = "sgd"
  rho: Union[float, Schedule] = 0.0
  eta: float = 0.0
  asam_biases: bool = False
  clip_norm: float = 0.0

  def __post_init__(self):
    if self.gradient not in sam.GRADIENTS:
      raise ValueError(f"local.optimizer={self.gradient!r} is not one of {list(sam.GRADIENTS)}")
    if not callable(self.rho) and self.rho < 0:
      raise ValueError(f"the SAM radius rho must be >= 0, got {self.rho}")
    if self.eta < 0:
      raise ValueError(f"the ASAM eta must be >= 0, got {self.eta}")
    if self.clip_norm < 0:
      raise ValueError(f"the gradient clipping norm must be >= 0, got {self.clip_norm}")

  @property
  def is_sam(self) -> bool:
    return self.gradient != "sgd"

  @property
  def hparams(self) -> dict:
    """{'rho': radius} for a SAM/ASAM optimiser with a float radius (else {}): what an
    algorithm adds to its `FederatedAlgorithm.hparams`."""
    return {"rho": float(self.rho)} if self.is_sam and not callable(self.rho) else {}

  def rho_at(self, round_idx, round_info=None) -> jax.Array:
    if callable(self.rho):
      return self.rho(round_idx)
    rho = self.rho if round_info is None else round_info.hparams.get("rho", self.rho)
    return tree.as_float(rho)

  def init(self, params, learning_rate):
    return with_learning_rate(self.tx.init(params), learning_rate)

  def apply(self, params, opt_state, grads):
    """One update with `grads`, taken at `params` (weight decay and momentum see `params`)."""
    updates, opt_state = self.tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  def value_and_grad(self, loss_fn, params, *args, round_idx=0, round_info=None):
    """`((loss, aux), grads)`: the plain gradient, or SAM's `g_s`; value and aux at `params`;
    clipped to `clip_norm` when that is > 0. An algorithm's local step passes its `round_info`
    (the round index and the round's radius, `hparams`); `round_idx` alone serves a direct
    call."""
    if not self.is_sam:
      value, grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *args)
      return value, clip_by_global_norm(grads, self.clip_norm)
    if round_info is not None:
      round_idx = round_info.round
    value, _, perturbed = sam.sam_value_and_grad(
        loss_fn, params, *args, rho=self.rho_at(round_idx, round_info),
        adaptive=self.gradient == "asam",
        eta=self.eta, scale_biases=self.asam_biases)
    return value, clip_by_global_norm(perturbed, self.clip_norm)


def as_client_optimizer(optimizer: Any) -> ClientOptimizer:
  """Accepts a ClientOptimizer or a bare optax transform (plain SGD gradients)."""
  if isinstance(optimizer, ClientOptimizer):
    return optimizer
  if isinstance(optimizer, optax.GradientTransformation):
    return ClientOptimizer(optimizer)
  raise TypeError(f"expected a ClientOptimizer or an optax.GradientTransformation, got "
                  f"{type(optimizer).__name__}")


def server_optimizer(name: str, learning_rate: float, momentum: float = 0.0, b1: float = 0.9,
                     b2: float = 0.99, eps: float = 1e-3,
                     prefix: str = "server") -> optax.GradientTransformation:
  """FedAvg (sgd, lr 1), FedAvgM (sgd + momentum), FedAdam, FedYogi, FedAdagrad (Reddi et al.)."""
  if name == "sgd":
    return optax.sgd(learning_rate, momentum=momentum or None)
  if name == "adam":
    return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == "yogi":
    return optax.yogi(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == "adagrad":
    return optax.adagrad(learning_rate, eps=eps)
  raise ValueError(f"{prefix}.optimizer={name!r} is not one of {sorted(SERVER_OPTIMIZERS)}")
