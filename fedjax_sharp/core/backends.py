"""What 'auto' means on each backend: the measured table behind the performance defaults.

Four config fields default to 'auto' and are resolved here, per backend, from measurements
(docs/performance.md has the tables and the commands that produced them):

  engine.client_strategy, engine.local_loop   how a round runs its clients and local steps
  model.compute_dtype                         float32 | bfloat16 (float32 master weights)
  model.conv_impl                             'xla' (lax convolutions) | 'matmul' (patches x
                                              kernel as batched GEMMs, models/conv.py)

Every choice computes the same round (strategies and conv_impl to float rounding, tested);
compute_dtype changes the arithmetic, which is why a resume refuses a different resolved dtype
(training/workdir.py, `setting_differences`). An explicit value is always used as given.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re

from absl import logging
import jax
from jax._src import core as _jax_core

# Names jax.default_backend() / a device's platform may report for the same kind of chip.
_ALIASES = {"cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "tpu": "tpu", "cpu": "cpu"}


def kind(backend: str | None = None) -> str:
  """'cpu' | 'gpu' | 'tpu' for a backend or platform name (None: jax.default_backend()); an
  unknown accelerator counts as 'gpu'."""
  name = str(backend or jax.default_backend()).lower()
  return _ALIASES.get(name, "gpu")


@dataclasses.dataclass(frozen=True)
class BackendDefaults:
  """The 'auto' choices on one kind of backend, with the measurement that made them."""
  client_strategy: str
  local_loop: str
  compute_dtype: str
  why: str
  # (compute_dtype, clients vmapped?) pairs where 'matmul' convolutions were measured faster
  # than 'xla' on this backend; everywhere else 'auto' is 'xla'.
  matmul_wins: frozenset = frozenset()
  # Cohorts of more clients than this run vmapped ('vmap', or 'chunked_vmap' where memory
  # says so) instead of `client_strategy` (None: always `client_strategy`).
  vmap_above: int | None = None
  vmap_why: str = ""

  def strategy_for(self, clients: int | None) -> str:
    """The client strategy for a cohort of `clients` (None: unknown, the small-cohort one)."""
    if self.vmap_above is not None and clients is not None and clients > self.vmap_above:
      return "vmap"
    return self.client_strategy


DEFAULTS = {
    "cpu": BackendDefaults(
        client_strategy="host", local_loop="unrolled", compute_dtype="float32",
        why=("XLA's CPU backend runs convolutions inside loops (scan, lax.map) 30-50x slower "
             "and vmapped per-client convolutions as slow grouped convolutions, so clients and "
             "single local steps are dispatched from the host; bfloat16 is no faster there")),
    "gpu": BackendDefaults(
        client_strategy="map", local_loop="rolled", compute_dtype="bfloat16",
        why=("on an H100, cohorts of up to 16 clients run fastest one client after another "
             "(lax.map) in bfloat16: CIFAR-10 CNN round of 10 clients 0.097 s against 0.115 s "
             "vmapped (vmapped per-client weights make grouped convolutions), ResNet-18 GN "
             "1.04 s against 1.47 s"),
        matmul_wins=frozenset({("float32", True)}),
        vmap_above=16,
        vmap_why=("on an H100, cohorts of more than 16 clients run fastest vmapped in bfloat16: "
                  "100-client CNN round 0.83 s against 1.05 s one client after another")),
    "tpu": BackendDefaults(
        client_strategy="vmap", local_loop="rolled", compute_dtype="bfloat16",
        why=("not measured on a TPU: one program with vmapped clients and a rolled step loop, "
             "bfloat16 on the MXUs")),
}


def defaults(backend: str | None = None) -> BackendDefaults:
  return DEFAULTS[kind(backend)]


def vmapped(client_strategy: str) -> bool:
  """Whether a (resolved) client strategy runs clients side by side in one vmapped program."""
  return client_strategy in ("vmap", "chunked_vmap")


def client_strategy(clients: int | None = None, backend: str | None = None) -> str:
  """'auto''s client strategy on `backend` for a cohort of `clients` (None: unknown)."""
  return defaults(backend).strategy_for(clients)


def conv_impl(compute_dtype: str, client_strategy: str, backend: str | None = None) -> str:
  """'auto''s conv_impl for a resolved compute dtype and client strategy on `backend`."""
  wins = (compute_dtype, vmapped(client_strategy)) in defaults(backend).matmul_wins
  return "matmul" if wins else "xla"


# The CPU devices `use_cpu_devices` gives a process by default (one per core, at most this many):
# measured with two on two cores (docs/performance.md); more cores are not measured.
MAX_CPU_DEVICES = 4


def host_devices(requested: int = 0, backend: str | None = None) -> list:
  """The devices the 'host' client strategy spreads a cohort's clients over
  (`ExecutionConfig.host_devices`): the first `requested` local devices; 0 = every local device
  on a CPU (as many as the process was given, `use_cpu_devices`), one on an accelerator."""
  devices = jax.local_devices()
  if requested == 0:
    return devices if kind(backend) == "cpu" else devices[:1]
  if requested > len(devices):
    raise ValueError(f"engine.host_devices={requested}: this process has {len(devices)} "
                     f"{devices[0].platform} device(s) (on a CPU: `--cpu_devices`, or "
                     f"backends.use_cpu_devices before JAX starts)")
  return devices[:requested]


def use_cpu_devices(count: int | None = None) -> int:
  """Gives this process `count` CPU devices (None: one per core, at most MAX_CPU_DEVICES), so
  that the 'host' strategy runs that many clients side by side on a CPU. Only before JAX
  starts its backends (the CLI calls it for `--cpu_devices`; in a notebook, call it before any
  JAX computation); a device count already in XLA_FLAGS
  (`--xla_force_host_platform_device_count`) wins. Returns the count in effect; the CPU backend
  alone is affected."""
  forced = re.search(r"--xla_force_host_platform_device_count=(\d+)",
                     os.environ.get("XLA_FLAGS", ""))
  if forced:
    return int(forced.group(1))
  count = count or max(1, min(os.cpu_count() or 1, MAX_CPU_DEVICES))
  try:
    jax.config.update("jax_num_cpu_devices", int(count))
  except RuntimeError as e:   # the backends already started: the count they started with
    logging.debug("CPU devices left as they are (%s)", e)
  return count


# How the library's programs are compiled on a CPU (`compiler_options`): XLA's CPU backend (jax
# 0.10) hands convolutions, dot products and reductions to the YNNPACK kernel library. Its
# convolutions and its reductions over the client axis run slower there than XLA's own (a CNN's
# local step, FedAvg's aggregation, the CIFAR-10 round against a PyTorch loop:
# benchmarks/cpu_library_fusions.py, docs/performance.md). Dot products stay with YNNPACK.
CPU_LIBRARY_FUSION_OPTION = "xla_cpu_experimental_ynn_fusion_type"
CPU_LIBRARY_FUSIONS = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
CPU_COMPILER_OPTIONS = {CPU_LIBRARY_FUSION_OPTION: CPU_LIBRARY_FUSIONS}


def compiler_options(backend: str | None = None) -> dict[str, str] | None:
  """XLA options for the library's compute programs (the engine's rounds and sweeps, evaluation,
  the Hessian, sharpness and minimax programs): on a CPU, `CPU_COMPILER_OPTIONS`; None
  elsewhere.

  None as well where XLA_FLAGS already sets `xla_cpu_experimental_ynn_fusion_type` (the user's
  choice wins), or where this jaxlib does not know the option (probed once with a tiny program;
  the programs then compile with XLA's defaults). Resolving it starts JAX's backends, so call it
  when a program is built, not at import. A program of your own gets the same code with
  `jax.jit(f, compiler_options=backends.compiler_options())`."""
  if kind(backend) != "cpu":
    return None
  if CPU_LIBRARY_FUSION_OPTION in os.environ.get("XLA_FLAGS", ""):
    return None
  return dict(CPU_COMPILER_OPTIONS) if _cpu_accepts_options() else None


@functools.cache
def _cpu_accepts_options() -> bool:
  """Whether this jaxlib's XLA compiles a tiny program with `CPU_COMPILER_OPTIONS` (once)."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=CPU_COMPILER_OPTIONS).lower(
        jax.ShapeDtypeStruct((), "float32")).compile()
    return True
  except Exception as e:  # pylint: disable=broad-except  # an XLA without the option
    logging.info("XLA CPU compiled with its default library fusions: %s", e)
    return False


def jit(fun, **kwargs):
  """`jax.jit(fun, **kwargs)` compiled with `compiler_options()` when called outside any trace.

  JAX accepts compiler options on top-level calls only (a jitted function with options called
  inside another jit raises), so inside a trace (another jit, vmap, grad) the same function runs
  as plain `jax.jit(fun, **kwargs)` and the enclosing program's options apply. Attributes
  (`lower`, `trace`, `eval_shape`) are the option-carrying jit's."""
  options = compiler_options()
  if options and _trace_state_clean is not None:
    return _TopLevelJit(fun, options, kwargs)
  return jax.jit(fun, **kwargs)


# Whether no trace is active (JAX's own test before it refuses nested compiler options; no
# public equivalent). A JAX without it: `jit` compiles with XLA's defaults.
_trace_state_clean = getattr(_jax_core, "trace_state_clean", None)


class _TopLevelJit:
  """One function, two jits: with `options` at the top level, without them inside a trace."""

  def __init__(self, fun, options: dict[str, str], kwargs: dict):
    self._plain = jax.jit(fun, **kwargs)
    self._tuned = jax.jit(fun, compiler_options=options, **kwargs)
    functools.update_wrapper(self, fun)

  def __call__(self, *args, **kwargs):
    return (self._tuned if _trace_state_clean() else self._plain)(*args, **kwargs)

  def __getattr__(self, name):
    return getattr(self._tuned, name)
