"""Algorithm registry: config `algorithm.name` -> builder(config, apply_fn) -> FederatedAlgorithm.

Each algorithm module registers its factory (`registration.register`); the factory's keyword
arguments are the algorithm's hyperparameters, the one home of their defaults, ranges and docs
(`hyperparameters.Field`). From them: the blocks `config.algorithm.<name>` of `base_config()`
(`config_blocks`), their validation, the docs' tables and `SWEEPABLE`. Importing this module
imports (and so registers) every algorithm of the package; user code registers its own with
the same `register` (a module, a notebook or a config file).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import ml_collections

# Imported for their registrations, in the order of the docs and the config.
from fedjax_sharp.algorithms import fed_avg, fed_prox, scaffold, fed_cm, mime_lite  # noqa: F401
from fedjax_sharp.algorithms import fed_ntd, fed_dyn, fed_speed, fed_smoo  # noqa: F401
from fedjax_sharp.algorithms import fed_lesam, fed_gloss, fed_gmt  # noqa: F401
from fedjax_sharp.algorithms import fed_gf, fed_nsam, fed_swa, fed_wmsam  # noqa: F401
from fedjax_sharp.algorithms import dp_fedsam  # noqa: F401
from fedjax_sharp.algorithms.registration import (ALGORITHMS, MINIMAX, REGISTRY,  # noqa: F401
                                                  Registration, register)
from fedjax_sharp.core.algorithm import FederatedAlgorithm

Builder = Callable[..., FederatedAlgorithm]


class _Sweepable(Mapping):
  """`SWEEPABLE[name]`: the config paths the experiments of one compiled sweep may differ in
  (their factories list them in `FederatedAlgorithm.hparams`, `core.hparams`; `local.rho` for
  the algorithms that take `config.local`'s optimiser as is), derived from the
  `Field(sweepable=True)` declarations."""

  def _all(self):
    return {name: r.sweepable() for name, r in ALGORITHMS.items() if r.sweepable()}

  def __getitem__(self, name):
    return self._all()[name]

  def __iter__(self):
    return iter(self._all())

  def __len__(self):
    return len(self._all())


SWEEPABLE = _Sweepable()


def config_blocks() -> dict[str, ml_collections.ConfigDict]:
  """`config.algorithm.<name>` of every registered algorithm of either kind (its factory's
  defaults)."""
  return {name: r.config_block() for name, r in REGISTRY.items()}


def field_docs() -> dict[str, str]:
  """'algorithm.<name>.<field>' -> the field's one-line doc (with its range or choices)."""
  out = {}
  for name, r in REGISTRY.items():
    for k, h in r.fields().items():
      out[f"algorithm.{name}.{k}"] = h.field.line()
  return out


def build_algorithm(config, apply_fn) -> FederatedAlgorithm:
  name = config.algorithm.name
  if name not in ALGORITHMS:
    raise ValueError(f"algorithm.name={name!r} is not one of {sorted(ALGORITHMS)}")
  return ALGORITHMS[name].build(config, apply_fn)
