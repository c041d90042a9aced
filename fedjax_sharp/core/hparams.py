"""Hyperparameters as round data: the scalars a sweep may vary (rho, alpha, beta, gamma, mu).

In the spirit of optax's `inject_hyperparams`, an algorithm does not close over these values:
its factory lists them in `FederatedAlgorithm.hparams` ({name: value}) and its functions read
them from the round (`of(round_info, values)`). The engine passes them in `RoundInfo.hparams`
as traced scalars, so

- a sweep (`RoundEngine.sweep_round`) stacks each experiment's values along the experiment
  axis like any other state: one compiled program, experiment e computing exactly its own run;
- changing a value between rounds never recompiles.

Structural choices (a proximal term's kind, ADMM on or off, a temperature that only scales)
stay closed over; a hyperparameter in `hparams` never decides what is computed, only with which
value (FedGMT's gamma = 0 weighs the teacher's KL by 0 rather than skipping it).
"""
from __future__ import annotations

from typing import Mapping

from fedjax_sharp.core import tree


def of(round_info, values: Mapping[str, float]) -> dict:
  """This round's hyperparameters: `round_info.hparams` (the engine's traced values) over
  `values` (the factory's, which a direct call outside the engine gets)."""
  return {**values, **round_info.hparams}


def as_arrays(values: Mapping[str, float]) -> dict:
  """{name: scalar}: the form `RoundInfo.hparams` carries, weakly typed in the run's float dtype
  (`tree.as_float`: float64 under jax_enable_x64, so a float64 run is exact; a float32 model
  stays float32). Values that are already JAX arrays (a caller's traced values, a sweep's
  stacked lanes) keep their dtype."""
  return {k: tree.as_float(v) for k, v in values.items()}
