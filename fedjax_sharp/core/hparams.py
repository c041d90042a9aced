"""Scalar hyperparameters that may be traced: sweeps over rho, alpha, beta, gamma, mu.

A sweep (`training.sweep`, `RoundEngine.sweep_round`) runs several experiments of one algorithm
as one compiled program. Besides seeds and learning rates they may differ in the algorithm
hyperparameters its registry entry lists as sweepable (`algorithms.registry.SWEEPABLE`): inside
the vmapped round the algorithm is rebuilt from a config whose swept fields hold traced scalars
(`training.config_paths.with_values`). Builders therefore read those fields with `scalar` (a
Python number becomes a float, a tracer passes through) and guard Python-side range checks and shortcuts (`gamma == 0`
skips a teacher pass) with `is_traced`: each experiment's concrete config has already been
built, and checked, the normal way before the sweep traces anything.
"""
from __future__ import annotations

import jax


def is_traced(x) -> bool:
  """True for a value traced by jit / vmap (its Python value is unknown)."""
  return isinstance(x, jax.core.Tracer)


def scalar(x):
  """A hyperparameter as a Python float, or unchanged when it is traced (a sweep's lane)."""
  return x if is_traced(x) else float(x)
