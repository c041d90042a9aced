"""Schedules of a traced round index (optax-style: `round -> value`, no recompiles).

`linear_ramp(target, initial, ramp_rounds)`: FedGloSS Appendix C.2,

    rho(t) = initial + (target - initial) * t / T_s   for t <= T_s,   target afterwards,

with `ramp_rounds <= 0` meaning the constant `target`. (optax.linear_schedule is the same ramp
but returns `initial` forever when its transition is 0 steps, so it is not used directly.)
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from fedjax_sharp.core import tree

Schedule = Callable[[object], object]


def constant(value: float) -> Schedule:
  return lambda t: tree.as_float(value)


def linear_ramp(target: float, initial: float = 0.001, ramp_rounds: int = 0) -> Schedule:
  """`initial` at round 0, `target` at round `ramp_rounds` and after (FedGloSS's rho ramp)."""
  if ramp_rounds <= 0:
    return constant(target)

  def schedule(t):
    frac = jnp.clip(jnp.asarray(t, tree.float_dtype()) / ramp_rounds, 0.0, 1.0)
    return initial + (target - initial) * frac
  return schedule


def fedgloss_code_server_rho(target: float, client_target: float, initial: float = 0.001,
                             ramp_rounds: int = 0) -> Schedule:
  """The server rho of the FedGloSS authors' code (`fedgloss_server.py`, lines 36-41): `initial`
  at round 0, `client_target + (target - initial) / T_s` for rounds 1..T_s (it appends to the
  *client* list's last value), `target` afterwards. CIFAR-10: 0.15007 throughout; CIFAR-100:
  0.2000006 for 15k rounds, then 0.01."""
  if ramp_rounds <= 1:
    return constant(target)
  ramp_value = client_target + (target - initial) / ramp_rounds

  def schedule(t):
    t = jnp.asarray(t, jnp.int32)
    value = lambda v: jnp.asarray(v, tree.float_dtype())
    return jnp.where(t == 0, value(initial),
                     jnp.where(t <= ramp_rounds, value(ramp_value), value(target)))
  return schedule
