"""`register`: adds an algorithm from its factory; the factory's keyword arguments are its
hyperparameters (`hyperparameters.Field`), the one place their defaults, ranges and docs live.

    @register("my_fedprox", title="My FedProx", paper="Li et al., MLSys 2020")
    def my_fedprox(apply_fn, client_optimizer, *,
                   mu: Annotated[float, Field(">= 0", "proximal weight")] = 0.01,
                   name: str = "my_fedprox") -> FederatedAlgorithm:
      ...

makes `--config.algorithm.name=my_fedprox --config.algorithm.my_fedprox.mu=0.1` work (the
block `config.algorithm.my_fedprox` is derived from the signature by `base_config()`), from a
package module, a notebook or a config file. The builder calls

    factory(apply_fn, client_optimizer, [server_optimizer=...,] name=..., **block)

with the client optimiser built by `client` from `config.local` (`client_optimizers.local`:
whatever `local.optimizer` says; `client_optimizers.sgd`: plain gradients, the algorithm makes
its own perturbation), the server optimiser of `config.server` when `server=True`, and the
block `config.algorithm.<name>` checked against the declared fields (an unknown field is refused
with the closest declared name). A `client` function may declare fields of its own (SAM radius,
the client momentum an algorithm fixes); a plain keyword argument of it takes the value of the
factory's field of that name.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import MutableMapping
from typing import Annotated, Any, Callable, Mapping

import ml_collections

from fedjax_sharp.algorithms import from_config
from fedjax_sharp.core import cohort
from fedjax_sharp.hyperparameters import Field, Hyperparameter, block_values, fields, fill
from fedjax_sharp.core.algorithm import FederatedAlgorithm
from fedjax_sharp.errors import ConfigError


# Client weightings an algorithm may declare as its default (where `aggregation='auto'` resolves
# without DP; under DP 'uniform', which the sensitivity bound needs).
WEIGHTINGS = cohort.WEIGHTINGS
# Why an algorithm weighs by examples unless it says otherwise.
SPEC_WEIGHTING = "p_m = n_m / sum n, the specification's aggregation (FedAvg's)"


# The client momentum of an algorithm whose paper fixes it (a `client` function declaring
# `momentum`: `own_momentum`, `own_sgd`), so the FedGMT setting's local.momentum = 0.9 never
# leaks into it; which algorithms do is read from the registry (`owns_field`).
OwnMomentum = Annotated[float, Field("[0, 1)", "client momentum (the paper's; local.momentum is "
                                     "not used)")]
# The client weight decay of an algorithm whose authors fix it (`own_sgd`'s default), so
# local.weight_decay never leaks into it.
OwnWeightDecay = Annotated[float, Field(">= 0", "client weight decay, coupled (the authors'; "
                                        "local.weight_decay is not used)")]
OwnClipNorm = Annotated[float, Field(">= 0", "clip the raw local gradient to this global L2 norm "
                                     "(the authors'; 0: no clipping)")]


class client_optimizers:  # pylint: disable=invalid-name
  """Stock `client` functions: (config, name, **fields) -> ClientOptimizer."""

  @staticmethod
  def local(config, name):
    """The optimiser `config.local` describes (`local.optimizer` sgd / sam / asam, `local.rho`)."""
    return from_config.client_optimizer_from_config(config)

  @staticmethod
  def sgd(config, name):
    """Plain gradients: the algorithm makes its own perturbation (`local.optimizer` must stay
    'sgd')."""
    return from_config.client_optimizer_from_config(config, gradient="sgd", owner=name)


  @staticmethod
  def own_momentum(config, name, *, momentum: OwnMomentum = 0.0):
    """`config.local` with the client momentum the algorithm's paper fixes (its block's
    `momentum`, not `local.momentum`)."""
    return from_config.client_optimizer_from_config(config, own_momentum=float(momentum))

  @staticmethod
  def own_sgd(weight_decay: float, clip_norm: float | None = None) -> Callable:
    """The `client` function of an algorithm whose authors fix their local optimiser: plain
    gradients (the algorithm makes its own perturbation) through SGD with the block's own
    `momentum` (0), coupled `weight_decay` (this default) and, given `clip_norm`, a clip of the
    raw gradient to that global norm; `config.local`'s momentum and weight decay are not used.
    """
    def make(config, name, momentum, decay, clip=None):
      return from_config.client_optimizer_from_config(
          config, own_momentum=float(momentum), own_weight_decay=float(decay),
          **({} if clip is None else {"clip_norm": float(clip)}), gradient="sgd", owner=name)

    if clip_norm is None:
      def own_sgd_client(config, name, *, momentum: OwnMomentum = 0.0,
                         weight_decay: OwnWeightDecay = weight_decay):
        return make(config, name, momentum, weight_decay)
      return own_sgd_client

    def own_sgd_clipped_client(config, name, *, momentum: OwnMomentum = 0.0,
                               weight_decay: OwnWeightDecay = weight_decay,
                               clip_norm: OwnClipNorm = clip_norm):
      return make(config, name, momentum, weight_decay, clip_norm)
    return own_sgd_clipped_client


# Client functions that read `local.rho` (a sweep may trace it: SWEEPABLE).
_READS_LOCAL_RHO = {client_optimizers.local}


def reads_local_rho(fn: Callable) -> Callable:
  """Marks a `client` function that takes `local.rho` (sweepable as `local.rho`)."""
  _READS_LOCAL_RHO.add(fn)
  return fn


@dataclasses.dataclass(frozen=True)
class Registration:
  name: str
  factory: Callable[..., FederatedAlgorithm]
  client: Callable
  server: bool = False
  server_step: str | None = None
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  title: str = ""
  paper: str = ""
  # The algorithm applies its own client-level DP (DP-FedSAM): `dp.enabled` is refused with it,
  # and the run accounts for its mechanism (`core.privacy`).
  private: bool = False
  # Where `aggregation='auto'` resolves without DP ('examples' | 'uniform'), and why: the source
  # the algorithm follows (its paper where it states one, else its authors' code).
  weighting: str = "examples"
  weighting_source: str = SPEC_WEIGHTING
  # 'classification' (factory(apply_fn, client_optimizer, ...)) or 'minimax' (factory(task,
  # player_optimizers, ...): `config.minimax`'s two players, `minimax.algorithms`).
  kind: str = "classification"

  @property
  def prefix(self) -> str:
    return f"algorithm.{self.name}"

  def fields(self) -> dict[str, Hyperparameter]:
    """The block's fields: the factory's, then those of the client function."""
    out = dict(fields(self.factory))
    for k, h in fields(self.client).items():
      out.setdefault(k, h)
    return out

  def defaults(self) -> dict[str, Any]:
    return {k: h.default for k, h in self.fields().items()}

  def config_block(self) -> ml_collections.ConfigDict:
    """`config.algorithm.<name>`: the defaults (None -> a typed placeholder)."""
    return fill(ml_collections.ConfigDict(), self.fields())

  def sweepable(self) -> tuple[str, ...]:
    paths = [f"{self.prefix}.{k}" for k, h in self.fields().items() if h.field.sweepable]
    if self.client in _READS_LOCAL_RHO:
      paths.append("local.rho")
    return tuple(paths)

  def values(self, config) -> dict[str, Any]:
    """The block of `config` (checked) over the declared defaults."""
    # A block registered after the config was made is absent: the declared defaults.
    given = dict(config.algorithm[self.name]) if self.name in config.algorithm else {}
    return block_values(self.prefix, given, self.fields())

  def check_server(self, config) -> None:
    """An algorithm without a server optimiser refuses `config.server` settings it would
    silently ignore."""
    if self.server:
      return
    overrides = from_config.server_overrides(config)
    if overrides:
      instead = (f"its server step is {self.server_step}" if self.server_step else
                 "its server update is fixed by the algorithm")
      raise ConfigError(f"{overrides[0]} has no effect with algorithm.name={self.name!r} "
                        f"({instead}): leave config.server at its defaults "
                        f"{from_config.SERVER_DEFAULTS}")

  def build(self, config, apply_fn) -> FederatedAlgorithm:
    """The algorithm `config` asks for: `apply_fn` is the model's (classification) or the
    minimax task (`kind='minimax'`, whose `client` builds the two players' optimisers)."""
    values = self.values(config)
    if self.kind == "classification":
      self.check_server(config)
    client_params = list(inspect.signature(self.client).parameters)[2:]
    client = self.client(config, self.name, **{k: values[k] for k in client_params
                                               if k in values})
    kwargs = {k: values[k] for k in fields(self.factory)}
    kwargs.update(self.fixed)
    if self.server:
      kwargs["server_optimizer"] = from_config.server_optimizer_from_config(config)
    name = str(config.algorithm.name)
    return self.factory(apply_fn, client, name=name, **kwargs)


KINDS = ("classification", "minimax")
# The one registry: every algorithm of either kind, by its config name.
REGISTRY: dict[str, Registration] = {}


class _Kind(MutableMapping):
  """The registrations of one kind, a live view of REGISTRY (ALGORITHMS: classification;
  MINIMAX: minimax). Deleting through it removes the registration."""

  def __init__(self, kind: str):
    self.kind = kind

  def __getitem__(self, name):
    r = REGISTRY[name]
    if r.kind != self.kind:
      raise KeyError(name)
    return r

  def __setitem__(self, name, registration):
    REGISTRY[name] = dataclasses.replace(registration, kind=self.kind)

  def __delitem__(self, name):
    self[name]   # pylint: disable=pointless-statement  (KeyError for the other kind)
    del REGISTRY[name]

  def __iter__(self):
    return (name for name, r in REGISTRY.items() if r.kind == self.kind)

  def __len__(self):
    return sum(1 for _ in self)


ALGORITHMS = _Kind("classification")
MINIMAX = _Kind("minimax")


def register(name: str, factory: Callable | None = None, *, client: Callable | str = "local",
             server: bool = False, server_step: str | None = None,
             fixed: Mapping[str, Any] | None = None, title: str = "", paper: str = "",
             private: bool = False, weighting: str = "examples",
             weighting_source: str = SPEC_WEIGHTING, kind: str = "classification"):
  """Registers `factory` as `config.algorithm.name=<name>`; usable as a decorator.

  Args:
    name: the config name (also the block `config.algorithm.<name>`).
    factory: `(apply_fn, client_optimizer, *, <hyperparameters>, name) -> FederatedAlgorithm`.
    client: 'local' (the optimiser of `config.local`), 'sgd' (plain gradients), or a function
      `(config, name, **fields) -> ClientOptimizer`.
    server: pass `server_optimizer=` built from `config.server`; without it a non-default
      `config.server` is refused, naming `server_step` (the field to use instead) if given.
    fixed: keyword arguments passed as they are (not configurable).
    title: the algorithm's display name on the generated docs page (`docs/gen_algorithm_pages.py`).
    paper: the paper it follows, for the same page.
    private: the factory applies its own client-level DP (`core.privacy.with_dp`).
    weighting: the client weighting `aggregation='auto'` gives without DP: 'examples'
      (n_m / sum n) or 'uniform' (1/m), the choice of the source the algorithm follows.
    weighting_source: that source, in a few words (the docs' table of algorithms shows it).
    kind: 'classification', or 'minimax' for a factory `(task, player_optimizers, *,
      <hyperparameters>, name)` of `fedjax_sharp.minimax`, whose `client(config, name)` builds
      the players' optimisers (`server` unused).
  Returns:
    the factory (unchanged), so that it can decorate.
  """
  if factory is None:
    return functools.partial(register, name, client=client, server=server,
                             server_step=server_step, fixed=fixed, title=title, paper=paper,
                             private=private, weighting=weighting,
                             weighting_source=weighting_source, kind=kind)
  if kind not in KINDS:
    raise ValueError(f"register({name!r}): kind={kind!r} is not one of {list(KINDS)}")
  if weighting not in WEIGHTINGS:
    raise ValueError(f"register({name!r}): weighting={weighting!r} is not one of "
                     f"{list(WEIGHTINGS)}")
  if isinstance(client, str):
    client = getattr(client_optimizers, client)
  REGISTRY[name] = Registration(name, factory, client, server, server_step, dict(fixed or {}),
                                title or name, paper, private, weighting, weighting_source, kind)
  return factory
