"""How a round is executed: the client strategy and local loop (`ExecutionConfig`), and how
'auto' chooses them for the backend and the cohort's memory (`Footprint`). Every strategy
computes the same round (`core.engine`, tested); docs/performance.md has the measurements behind
the choices.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from fedjax_sharp.core import backends, strategies
from fedjax_sharp.core.client_table import CLIENT_TABLES, device_memory
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.hyperparameters import ON_OFF, check, declare

# The package's strategies (`core.strategies.STRATEGIES`, where a user's own are registered too)
# and 'auto': what `engine.client_strategy` may name.
CLIENT_STRATEGIES = ("auto", *strategies.STRATEGIES)
LOCAL_LOOPS = ("auto", "rolled", "partial", "unrolled")

# The config block `engine`: how rounds run, never what they compute (except `sampling`).
# `ExecutionConfig` takes its fields' defaults from here; the others are read by the
# experiment builders (client table, mesh, sampler).
FIELDS = declare(
    client_strategy=("auto", None, "how the cohort's clients run: 'auto' or a strategy of "
                     f"core.strategies.STRATEGIES ({', '.join(strategies.STRATEGIES)})"),
    chunk_size=(4, ">= 1", "clients per vmapped chunk ('chunked_vmap')"),
    host_chunk=(1, ">= 1", "local steps per jitted call ('host'; 1 is fastest on CPU)"),
    host_devices=(0, ">= 0", "'host' runs clients side by side on this many devices (0 = "
                  "every CPU device of the process on a CPU, one on an accelerator)"),
    local_loop=("auto", tuple(sorted(LOCAL_LOOPS)), "how the local steps run"),
    unroll=(4, ">= 1", "'partial': local steps unrolled per scan iteration"),
    skip_padding=(True, ON_OFF, "rolled loops run only each client's real steps"),
    sort_clients=(False, ON_OFF, "order the cohort by step count (chunked_vmap buckets)"),
    micro_batch=(0, ">= 0", "model called on pieces of this many examples in training (0 = "
                 "whole batches)"),
    client_table=("auto", tuple(sorted(CLIENT_TABLES)),
                  "per-client state table: 'device' | 'host' (touched rows in memory) | 'disk' "
                  "(touched rows in files under the workdir) | 'auto' (host above the budget, "
                  "disk when the rows the run can touch pass half the host's memory)"),
    client_table_budget_mb=(0.0, ">= 0", "'auto''s budget for the dense table: 0 = a quarter "
                            "of the device's memory; > 0: MiB"),
    devices=(1, ">= 0", "devices of the client mesh (1 = one device, 0 = all)"),
    experiment_devices=(1, ">= 1", "devices a sweep splits its experiments over"),
    sampling=("fixed", ("fixed", "poisson"),
              "'fixed' (clients_per_round clients, uniformly without replacement) | 'poisson' "
              "(each client joins with q = clients_per_round / num_clients; padded cohorts, "
              "docs/privacy.md)"))


def _default(name: str):
  return FIELDS[name].default


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
  """How a round is executed. All strategies compute the same function (to float tolerance).

  client_strategy: 'vmap' | 'map' (sequential lax.map) | 'chunked_vmap' (lax.map over vmapped
    chunks of `chunk_size` clients) | 'unrolled' (Python loop inside jit) | 'host' (one jitted
    function per piece, clients and chunks of `host_chunk` local steps dispatched from the host;
    all-padding chunks are skipped, so ragged clients cost their own steps only) | 'debug' (no
    jit: clients and steps one by one from Python, an error names its client and stage,
    `core.debugging`; slow, never chosen by 'auto') | 'auto'.
  local_loop: 'rolled' (lax.scan) | 'partial' (scan with `unroll`) | 'unrolled' (Python loop)
    | 'auto'.
  skip_padding: with local_loop='rolled', each client's loop runs only its real steps (a
    `fori_loop` with the client's own trip count, K_m) instead of scanning over all `S` steps of
    the plan, and no step keeps a masked step's carry with a select on every carried leaf (the
    other loops do). Under vmap the batched loop runs until the longest client of the vmapped
    group is done: the cohort's largest K_m instead of the population's. Exact (padding steps
    are no-ops either way).
  host_devices: 'host' spreads the cohort's clients over this many devices, longest clients
    first, each to the least loaded device, computing side by side (`core.host_round`; the same
    numbers): 0 = every device of the process on a CPU (one unless the process was given more:
    the CLI's `--cpu_devices`, `backends.use_cpu_devices`), one device on an accelerator.
  sort_clients: order the cohort by local step count (largest first) inside the round, so the
    vmapped chunks of 'chunked_vmap' hold clients of similar length (buckets) and, with
    skip_padding, each chunk runs for its own longest client. Only the summation order of
    the aggregation changes (float rounding).
  """
  client_strategy: str = _default("client_strategy")
  chunk_size: int = _default("chunk_size")
  local_loop: str = _default("local_loop")
  unroll: int = _default("unroll")
  host_chunk: int = _default("host_chunk")   # docs/performance.md, benchmarks/vs_torch.py
  skip_padding: bool = _default("skip_padding")
  host_devices: int = _default("host_devices")
  sort_clients: bool = _default("sort_clients")

  @classmethod
  def from_config(cls, engine_cfg) -> "ExecutionConfig":
    """From a config's `engine` block (fields missing there keep their defaults)."""
    fields = {f.name: engine_cfg[f.name] for f in dataclasses.fields(cls) if f.name in engine_cfg}
    return cls(**fields)

  def resolved(self, backend: str | None = None,
               footprint: "Footprint | None" = None) -> "ExecutionConfig":
    """Replaces 'auto' by the measured best choice for the backend (`core.backends`: on a GPU
    it depends on the cohort size, `footprint.clients`) and, on accelerators, the model's size:
    when the cohort's vmapped parameter-sized buffers (`footprint`) would take more than
    VMAP_MEMORY_FRACTION of the device's memory, 'chunked_vmap' with the largest chunk that fits
    instead of 'vmap'."""
    auto = backends.defaults(backend)
    strategy, chunk = self.client_strategy, self.chunk_size
    if strategy == "auto":
      strategy = auto.strategy_for(None if footprint is None else footprint.clients)
      fit = (None if footprint is None or not backends.vmapped(strategy)
             else footprint.clients_that_fit())
      if fit is not None and fit < footprint.clients:
        strategy, chunk = "chunked_vmap", max(fit, 1)
    return dataclasses.replace(
        self, client_strategy=strategy, chunk_size=chunk,
        local_loop=auto.local_loop if self.local_loop == "auto" else self.local_loop)

  def reason(self, backend: str | None = None, footprint: "Footprint | None" = None) -> str:
    """Why 'auto' resolves as it does on `backend` (logged when a run starts)."""
    backend = backends.kind(backend)
    got = self.resolved(backend, footprint)
    if got.client_strategy == "chunked_vmap" and self.client_strategy == "auto":
      why = (f"{footprint.clients} vmapped clients x {footprint.per_client_bytes / 2**20:.0f} MB "
             f"of parameter-sized buffers exceed {VMAP_MEMORY_FRACTION:.0%} of the device's "
             f"{footprint.device_bytes / 2**30:.1f} GB, so chunks of {got.chunk_size} clients")
    else:
      auto = backends.defaults(backend)
      vmapped = (footprint is not None and auto.strategy_for(footprint.clients)
                 != auto.client_strategy)
      why = auto.vmap_why if vmapped else auto.why
    return f"{got.client_strategy}/{got.local_loop} on {backend}: {why}"

  def validate(self, prefix: str = "engine") -> None:
    """Each field in its declared range or choices (`FIELDS`), the strategy one of the table's
    (a user's own included: `strategies.register_strategy`); ConfigError naming the field."""
    check(prefix, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, FIELDS)
    if self.client_strategy != "auto" and self.client_strategy not in strategies.STRATEGIES:
      raise ConfigError(f"{prefix}.client_strategy={self.client_strategy!r} is not one of "
                        f"{['auto', *strategies.STRATEGIES]}")


# The share of an accelerator's memory that `auto` lets the vmapped cohort's parameter-sized
# buffers take (the rest: activations, the training set, XLA's workspace).
VMAP_MEMORY_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class Footprint:
  """What `auto` weighs on accelerators: `clients` vmapped per round, each holding about
  `per_client_bytes` of parameter-sized buffers, on a device of `device_bytes` (None: unknown,
  e.g. CPU; then the model's size plays no part)."""
  clients: int
  per_client_bytes: int
  device_bytes: int | None

  def clients_that_fit(self) -> int | None:
    if not self.device_bytes or self.per_client_bytes <= 0:
      return None
    return int(VMAP_MEMORY_FRACTION * self.device_bytes // self.per_client_bytes)

  @staticmethod
  def estimate(params, client_row, clients: int, device=None) -> "Footprint":
    """Per client: the parameters, their gradient, the optimiser's momentum and the broadcast
    model (4 parameter-sized buffers; SAM's perturbed copy and activations are not counted)
    plus the client's state row; `device` (default: the first local device) reports its memory
    where the backend exposes it (GPU / TPU `memory_stats()['bytes_limit']`)."""
    nbytes = lambda t: int(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize
                               for x in jax.tree.leaves(t)))
    device = device or jax.local_devices()[0]
    memory = device_memory(device)[0] if device.platform != "cpu" else None
    return Footprint(int(clients), 4 * nbytes(params) + nbytes(client_row), memory)
