"""The federated round engine: one jitted function per experiment runs a whole round.

Inside the jitted round: gather the sampled clients' persistent state from the dense
`[M, ...]` table, run every sampled client's local training (vmap / sequential map / chunked
vmap / unrolled over clients; rolled / partially unrolled / fully unrolled scan over local
steps), with step and example masks for ragged clients, aggregate with the given weights,
scatter the client state back and apply the server update.

Shapes are fixed per experiment (`C` clients, `S` steps, `B` examples), so the round is traced
once; round index, learning rate and the algorithm's hyperparameters (`RoundInfo.hparams`,
`core.hparams`) are traced scalars.

Why several strategies: on accelerators `vmap` over clients + rolled `scan` over steps is the
natural choice; on XLA's CPU backend convolutions inside any while loop (scan, `lax.map`) run
far slower and vmapped per-client convolutions become slow grouped convolutions. Unrolling
clients and steps in one function runs fast but compiles for minutes. So the CPU default is 'host': the same pure pieces jitted
separately (prepare; per client: start, chunks of `host_chunk` unrolled local steps, finalise;
aggregate + server update), dispatched from a short host loop. Compile cost is one chunk, and
chunks that hold only padding steps are skipped. It computes exactly the same round (tested).
docs/performance.md has the measurements.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Callable

from absl import logging
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
import numpy as np

from fedjax_sharp.core import backends, donation, host_round, sharding, strategies, tree
from fedjax_sharp.core.hparams import as_arrays
from fedjax_sharp.core.client_table import HELD_TABLES, HostClientTable
from fedjax_sharp.core.execution import ExecutionConfig, Footprint
from fedjax_sharp.core.algorithm import ClientInfo, FederatedAlgorithm, RoundInfo

@flax.struct.dataclass
class Cohort:
  """The sampled clients of one round and their data plan (built on the host).

  Padding clients have `client_ids == M` (out of range: gathered as zeros, never scattered),
  weight 0 and all-False masks. A cohort whose weights are all 0 (an empty Poisson draw) leaves
  the server state unchanged; under differential privacy an empty draw keeps one padding slot
  at a real client's weight to carry the round's noise (`core.cohort`).
  """
  client_ids: jax.Array      # int32 [C]
  weights: jax.Array         # float [C] (the run's float dtype), normalised aggregation weights
  num_examples: jax.Array    # float [C]
  batch_idx: jax.Array       # int32 [C, S, B] indices into the training arrays
  example_mask: jax.Array    # bool [C, S, B]
  step_mask: jax.Array       # bool [C, S]
  # Rows of the client-state table the round gathers and scatters (None: `client_ids`; a
  # host-held table passes the cohort's own [C, ...] rows, addressed by position).
  rows: jax.Array | None = None

  @property
  def table_rows(self) -> jax.Array:
    return self.client_ids if self.rows is None else self.rows

  @property
  def shape(self) -> tuple[int, int, int]:
    return tuple(self.batch_idx.shape)  # (C, S, B)


@flax.struct.dataclass
class TrainData:
  """Training arrays on device: every client's examples, indexed by `Cohort.batch_idx`."""
  x: jax.Array  # [N, ...] (uint8 images are normalised by the engine's `preprocess`)
  y: jax.Array  # int32 [N]


@dataclasses.dataclass(frozen=True)
class CompiledPieces:
  """A round's pieces, each jitted on its own (`RoundEngine.compiled`): `prepare` (broadcast,
  the cohort's client states and infos, the round key), `client_start` (a client's local state,
  zero metrics, its key), `steps` (a chunk of local steps), `client_end` (the algorithm's
  `client_finalize`) and `finish` (aggregation, server update, scatter; donating)."""
  prepare: Callable
  client_start: Callable
  steps: Callable
  client_end: Callable
  finish: Callable


def single_program(client_strategy: str) -> bool:
  """Whether a (resolved) strategy runs the round as one jitted program (`core.strategies`):
  what sweeps, `repeat_rounds` and a device mesh need."""
  return strategies.get(client_strategy).single_program


def _gather_rows(table, ids):
  return jax.tree.map(lambda t: t.at[ids].get(mode="fill", fill_value=0), table)


def _scatter_rows(table, ids, rows):
  return jax.tree.map(lambda t, r: t.at[ids].set(r.astype(t.dtype), mode="drop"), table, rows)


def tile_client_state(state, num_clients: int):
  """Builds the dense [M, ...] client-state table from one client's initial state."""
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_clients, *jnp.shape(x))).copy(), state)


class RoundEngine:
  """Builds and runs the jitted round for one algorithm and one execution strategy.

  Args:
    algorithm: the FederatedAlgorithm.
    num_clients: M, the size of the client-state table.
    execution: ExecutionConfig ('auto' fields are resolved for the current backend).
    preprocess: `(x_batch, key) -> model input` applied to every gathered batch inside jit
      (normalisation, augmentation). Default: uint8 images cast to float32, other inputs (e.g.
      int32 token ids) unchanged.
    donate: donate the server state and client table buffers to the round (default, on every
      backend: the CPU runs the program an accelerator runs; JAX's CPU backend donates too).
      `donate=False` keeps the inputs alive (e.g. to run two engines from one state).
    client_table: 'device' (a dense [M, ...] pytree updated inside jit) | 'host' (a
      `HostClientTable` of the touched rows in host memory: the cohort's rows only reach the
      device; for large M) | 'disk' (the same with the rows in files, for touched rows larger
      than the host's memory).
    mesh: a `jax.sharding.Mesh` with axes 'clients' (and 'experiments' for sweeps) from
      `core.sharding.make_mesh`: the cohort and the client table are split by client across
      it, the rest replicated (see `core.sharding`). None: one device.
    footprint: the cohort's memory (`Footprint.estimate`), which `auto` weighs on accelerators.
  """

  def __init__(self, algorithm: FederatedAlgorithm, num_clients: int,
               execution: ExecutionConfig = ExecutionConfig(),
               preprocess: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
               donate: bool = True, client_table: str = "device",
               mesh: "jax.sharding.Mesh | None" = None,
               footprint: Footprint | None = None):
    execution.validate()
    if "auto" in (execution.client_strategy, execution.local_loop):
      logging.debug("engine 'auto' -> %s", execution.reason(footprint=footprint))
    if client_table not in ("device", *HELD_TABLES):
      raise ValueError(f"engine.client_table={client_table!r} is not one of "
                       f"{['device', *HELD_TABLES]}")
    self.client_table = client_table
    self.mesh = mesh
    self.execution = execution.resolved(footprint=footprint)
    if mesh is not None and not single_program(self.execution.client_strategy):
      raise ValueError(f"a device mesh needs a single-jit engine.client_strategy (vmap), not "
                       f"{self.execution.client_strategy!r}")
    self.algorithm = algorithm
    self.num_clients = int(num_clients)
    # Default: uint8 images become float32; anything else (token ids, float features) passes
    # through unchanged.
    self.preprocess = preprocess or (
        lambda x, key: x.astype(jnp.float32) if x.dtype == jnp.uint8 else x)
    self.trace_counts = collections.Counter()
    self.donate = bool(donate)
    donated = (0, 1) if self.donate else ()
    # The local step as its own jitted function: the metrics' structure (`client_start`) and
    # the loop reuse one trace of it (JAX caches a jitted function's trace by its arguments'
    # shapes); inside the round's jit it is inlined, so the compiled program is the same.
    self._local_step = jax.jit(self.algorithm.local_step)
    # keep_unused: a donated leaf the round never reads (a statistic it only writes, FedGF's
    # D_t) stays an argument, so it is consumed and its buffer reused like every other leaf
    # (jit would otherwise drop it and keep the old buffer alive beside the new one).
    jit = backends.jit   # on a CPU, YNNPACK for dot products only (backends.compiler_options)
    self._jit_round = jit(self._counted("round", self._round), donate_argnums=donated,
                          keep_unused=self.donate)
    # The round's pieces, compiled one by one: what a strategy dispatched from Python runs
    # ('host'; `core.strategies`).
    self.compiled = CompiledPieces(
        prepare=jit(self._counted("prepare", self.prepare)),
        client_start=jit(self._counted("client_start", self.client_start)),
        steps=jit(self._counted("steps", self.run_steps)),
        client_end=jit(self._counted("client_end", self.algorithm.client_finalize)),
        finish=jit(self._counted("finish", self.finish), donate_argnums=donated,
                   keep_unused=self.donate))
    self._jit_sweep = jit(self._sweep)
    self._jit_repeat = jit(self._repeat, static_argnums=(5,))
    # The devices the 'host' strategy spreads clients over (the first holds the state).
    self.host_devices = (backends.host_devices(self.execution.host_devices)
                         if self.execution.client_strategy == "host" else jax.local_devices()[:1])
    self.replicas = host_round.Replicas()

  def _counted(self, name, fn):
    """Wraps `fn` so that each trace (not each execution) increments trace_counts[name]."""
    @functools.wraps(fn)
    def wrapper(*args):
      self.trace_counts[name] += 1
      return fn(*args)
    return wrapper

  @property
  def trace_count(self) -> int:
    """Largest number of traces of any jitted piece: 1 means nothing was ever recompiled."""
    return max(self.trace_counts.values(), default=0)

  def init(self, params, table_directory: str | None = None):
    """Returns (server_state, client_table) for initial global parameters. The table is a
    dense device pytree, or a `HostClientTable` with `client_table='host'` or 'disk' (its rows'
    files under `table_directory`, replaced; None: a temporary directory). No two leaves of
    the result share a buffer, nor does any leaf share one with `params` (`unalias`), so the
    round can donate them and `params` survives the first round."""
    server_state = self.algorithm.server_init(params)
    row = self.algorithm.client_state_init(params)
    if self.client_table in HELD_TABLES:
      table = HostClientTable(row, self.num_clients, self.client_table, table_directory)
    else:
      table = tile_client_state(row, self.num_clients)
      if self.mesh is not None:   # whole row blocks per device (unused rows appended)
        table = sharding.pad_table(table, sharding.axis_size(self.mesh, sharding.CLIENTS))
    return self.unalias(server_state, table, reserved=params)

  def unalias(self, server_state, client_table, reserved=()):
    """(server_state, client_table) with every leaf that shares a device buffer with another,
    or with `reserved`, replaced by a copy: what the donating round needs (`core.donation`).
    Called by `init`; call it on a state built or restored by other means (the training loop
    does after a checkpoint restore). A host-held table's rows are NumPy: never donated."""
    host = isinstance(client_table, HostClientTable)
    state = donation.unalias({"server_state": server_state,
                              "client_table": None if host else client_table},
                             f"algorithm {self.algorithm.name!r}", reserved)
    return state["server_state"], client_table if host else state["client_table"]

  def _shard(self, server_state, client_table, data, cohort, experiments: bool = False):
    """Places a round's inputs on the mesh (no-op without one); see `core.sharding`."""
    if self.mesh is None:
      return server_state, client_table, data, cohort
    n = sharding.axis_size(self.mesh, sharding.CLIENTS)
    cohort = sharding.pad_cohort(cohort, self.num_clients,
                                 sharding.padded(cohort.client_ids.shape[-1], n))
    lead = (sharding.EXPERIMENTS,) if experiments else ()
    by_client = P(*lead, sharding.CLIENTS)
    return (sharding.place(self.mesh, server_state, P(*lead)),
            sharding.place(self.mesh, client_table, by_client),
            sharding.place(self.mesh, data, P()),
            sharding.place(self.mesh, cohort, by_client))

  def round(self, server_state, client_table, data: TrainData, cohort: Cohort,
            round_info: RoundInfo, key):
    """Runs one round; returns (server_state, client_table, metric sums over real clients).

    An algorithm with `exchanges > 1` runs that many exchanges with this cohort (phase 0, 1,
    ...; exchange e > 0 uses `fold_in(key, e)`); the metrics are the last exchange's.
    `round_info.hparams` (if given) overrides the algorithm's hyperparameters for this round.
    """
    round_info = self._with_hparams(round_info)
    strategy = strategies.get(self.execution.client_strategy)
    run = (self._jit_round if strategy.single_program
           else functools.partial(strategy.run_round, self))
    if isinstance(client_table, HostClientTable):
      # Only the cohort's rows go to the device; written back in place after the round.
      rows, positions = client_table.gather(cohort.client_ids)
      if self.mesh is not None:
        rows = sharding.pad_table(rows, sharding.axis_size(self.mesh, sharding.CLIENTS))
      server_state, rows, data, cohort = self._shard(server_state, rows, data,
                                                     cohort.replace(rows=positions))
      server_state, rows, metrics = self._exchanges(run, server_state, rows, data, cohort,
                                                    round_info, key)
      client_table.scatter(cohort.client_ids, rows)
      return server_state, client_table, metrics
    server_state, client_table, data, cohort = self._shard(server_state, client_table, data,
                                                           cohort)
    return self._exchanges(run, server_state, client_table, data, cohort, round_info, key)

  def _with_hparams(self, round_info: RoundInfo) -> RoundInfo:
    """`round_info` carrying the algorithm's hyperparameters (`FederatedAlgorithm.hparams`) as
    traced scalars in the run's float dtype (`core.hparams.as_arrays`), the caller's own values
    first."""
    return round_info.replace(hparams=as_arrays({**self.algorithm.hparams,
                                                 **round_info.hparams}))

  def _exchanges(self, run, server_state, client_table, data, cohort, round_info, key):
    """`run` once per exchange of the round (phase e uses `fold_in(key, e)` for e > 0)."""
    metrics = None
    for phase in range(self.algorithm.exchanges):
      info = round_info.replace(phase=jnp.int32(phase)) if self.algorithm.exchanges > 1 \
          else round_info
      phase_key = jax.random.fold_in(key, phase) if phase else key
      server_state, client_table, metrics = run(server_state, client_table, data, cohort, info,
                                                phase_key)
    return server_state, client_table, metrics

  def sweep_round(self, server_states, client_tables, data: TrainData, cohorts: Cohort,
                  round_idx: int, learning_rates, keys, hparams: dict | None = None):
    """One round of E independent experiments as one compiled program (vmap over a leading
    experiment axis): `server_states`, `client_tables`, `cohorts` (each its own clients and
    data plan), `learning_rates` [E] and `keys` [E] are stacked along axis 0; `data` is shared.
    `hparams`: {name: [E] values} of the algorithm's hyperparameters
    (`FederatedAlgorithm.hparams`, `core.hparams`) stacked the same way; a name left out takes
    the algorithm's value in every lane. Experiment e computes exactly what `round` computes
    with its slices and `RoundInfo.hparams` = its values. Needs a single-jit strategy (the
    'host' strategy dispatches per client from Python); with 'map' (clients one after another) the experiments
    also run one after another (`lax.map`) in the one program, else they are vmapped."""
    if not single_program(self.execution.client_strategy):
      raise ValueError(f"a sweep needs a single-jit engine.client_strategy (vmap | map | "
                       f"chunked_vmap | unrolled), not {self.execution.client_strategy!r}")
    if self.client_table != "device":
      raise ValueError("a sweep needs engine.client_table='device'")
    learning_rates = tree.as_float(learning_rates)
    unknown = sorted(set(hparams or {}) - set(self.algorithm.hparams))
    if unknown:
      raise ValueError(f"sweep: algorithm {self.algorithm.name!r} has no hyperparameters "
                       f"{unknown} (its hparams: {sorted(self.algorithm.hparams)})")
    lanes = learning_rates.shape[0]
    hparams = as_arrays({**{k: jnp.full((lanes,), v) for k, v in self.algorithm.hparams.items()},
                         **(hparams or {})})
    if self.mesh is not None:
      server_states, client_tables, data, cohorts = self._shard(
          server_states, client_tables, data, cohorts, experiments=True)
      learning_rates, keys, hparams = sharding.place(self.mesh, (learning_rates, keys, hparams),
                                                     P(sharding.EXPERIMENTS))
    return self._jit_sweep(server_states, client_tables, data, cohorts, jnp.int32(round_idx),
                           learning_rates, keys, hparams)

  def _sweep(self, server_states, client_tables, data, cohorts, round_idx, learning_rates, keys,
             hparams):
    self.trace_counts["sweep"] += 1

    def one(server_state, client_table, cohort, learning_rate, key, values):
      info = RoundInfo(round=round_idx, learning_rate=learning_rate,
                       num_clients=self.num_clients, hparams=values)
      return self._exchanges(self._round, server_state, client_table, data, cohort, info, key)
    lanes = (server_states, client_tables, cohorts, learning_rates, keys, hparams)
    if self.execution.client_strategy == "map" and self.mesh is None:
      # Clients one after another: the experiments too (vmapping a sequential client loop over
      # experiments turns every convolution into a grouped one: a 3-seed sweep cost 5.6 single
      # rounds on an H100, against 3 back to back).
      return jax.lax.map(lambda lane: one(*lane), lanes)
    return jax.vmap(one)(*lanes)

  def repeat_rounds(self, server_state, client_table, data: TrainData, cohort: Cohort,
                    first_round: int, num_rounds: int, learning_rate: float, key):
    """`num_rounds` rounds with the same cohort, compiled as one `lax.scan` over rounds (the
    round index is traced; the learning rate is constant). For full-participation problems with
    a fixed data plan (the minimax test problems) and quick sweeps: thousands of rounds without
    a host dispatch each. Needs a single-jit strategy (not 'host'); returns the last round's
    metrics. Computes exactly what `num_rounds` calls of `round` compute."""
    if not single_program(self.execution.client_strategy):
      raise ValueError(f"repeat_rounds needs a single-jit engine.client_strategy, not "
                       f"{self.execution.client_strategy!r}")
    if isinstance(client_table, HostClientTable):
      raise ValueError("repeat_rounds needs the device client table (engine.client_table)")
    return self._jit_repeat(server_state, client_table, data, cohort, jnp.int32(first_round),
                            int(num_rounds), tree.as_float(learning_rate), key,
                            as_arrays(self.algorithm.hparams))

  def _repeat(self, server_state, client_table, data, cohort, first_round, num_rounds,
              learning_rate, key, hparams):
    self.trace_counts["repeat"] += 1

    def one(carry, t):
      server_state, client_table, _ = carry
      info = RoundInfo(round=t, learning_rate=learning_rate, num_clients=self.num_clients,
                       hparams=hparams)
      return self._exchanges(self._round, server_state, client_table, data, cohort, info,
                             key), None

    info0 = RoundInfo(round=first_round, learning_rate=learning_rate,
                      num_clients=self.num_clients, hparams=hparams)
    _, _, metrics0 = jax.eval_shape(self._round, server_state, client_table, data, cohort,
                                    info0, key)
    zeros = jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metrics0)
    (server_state, client_table, metrics), _ = jax.lax.scan(
        one, (server_state, client_table, zeros),
        first_round + jnp.arange(num_rounds, dtype=jnp.int32))
    return server_state, client_table, metrics

  # ---------------------------------------------------------------- pieces (pure functions)
  def prepare(self, server_state, client_table, cohort: Cohort, round_info: RoundInfo, key):
    """Broadcast, gather of the cohort's client state, per-client infos, the round's key (the
    callers put it in `round_info.key` for the rest of the round: `core.privacy`'s stream)."""
    bcast = self.algorithm.broadcast(server_state, round_info)
    client_states = _gather_rows(client_table, cohort.table_rows)
    infos = ClientInfo(client_id=cohort.client_ids, num_examples=cohort.num_examples,
                       num_steps=jnp.sum(cohort.step_mask, axis=1).astype(jnp.int32),
                       weight=cohort.weights)
    return bcast, client_states, infos, jax.random.fold_in(key, round_info.round)

  def client_start(self, bcast, client_state, info: ClientInfo, round_info: RoundInfo,
                    data: TrainData, idx_B, mask_B, round_key):
    """client_init, zero metric sums (structure from an abstract step), the client's key."""
    client_key = jax.random.fold_in(round_key, info.client_id)
    local = self.algorithm.client_init(bcast, client_state, info, round_info)
    batch = {"x": jax.eval_shape(self.preprocess, data.x[idx_B], client_key),
             "y": data.y[idx_B], "mask": mask_B}
    _, metrics = jax.eval_shape(self._local_step, local, batch, client_key, round_info)
    return local, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metrics), client_key

  def batch(self, data: TrainData, s, idx_B, mask_B, client_key):
    """Step `s`'s batch (preprocessed with the step's augmentation key) and the step's key."""
    aug_key, step_key = jax.random.split(jax.random.fold_in(client_key, s))
    return ({"x": self.preprocess(data.x[idx_B], aug_key), "y": data.y[idx_B], "mask": mask_B},
            step_key)

  def _step(self, local, metrics_sum, round_info: RoundInfo, data: TrainData, s, idx_B, mask_B,
            active, client_key):
    """Local step `s` (a masked step, `active` False, leaves every carried value unchanged;
    `active` None: a step known to be real, computed without the select on every carried leaf)."""
    batch, step_key = self.batch(data, s, idx_B, mask_B, client_key)
    new_local, metrics = self._local_step(local, batch, step_key, round_info)
    if active is None:
      return new_local, tree.add(metrics_sum, metrics)
    local = tree.where(active, new_local, local)
    metrics = jax.tree.map(lambda m: jnp.where(active, m, jnp.zeros_like(m)), metrics)
    return local, tree.add(metrics_sum, metrics)

  def run_steps(self, local, metrics_sum, round_info: RoundInfo, data: TrainData, step_ids,
                 idx_SxB, mask_SxB, step_mask_S, client_key):
    """Local steps `step_ids` (masked steps leave every carried value unchanged)."""
    def step(carry, inputs):
      return self._step(*carry, round_info, data, *inputs, client_key), None

    xs = (step_ids, idx_SxB, mask_SxB, step_mask_S)
    carry = (local, metrics_sum)
    num_steps = step_mask_S.shape[0]
    if self.execution.local_loop == "rolled" and self.execution.skip_padding:
      # Only the client's real steps run, in their order (a stable sort moves them to the front;
      # the sampler's plans already have them there), so every executed step is real and none
      # needs the select that keeps a masked step's carry: without it the loop's body neither
      # selects nor copies the carried parameters and optimiser state at every step.
      is_real = step_mask_S.astype(bool)
      real = tree.index(xs[:3], jnp.argsort(~is_real, stable=True))

      def real_step(i, c):
        return self._step(*c, round_info, data, *tree.index(real, i), None, client_key)
      return jax.lax.fori_loop(0, jnp.sum(is_real, dtype=jnp.int32), real_step, carry)
    if self.execution.local_loop == "unrolled":
      for s in range(num_steps):
        carry, _ = step(carry, tree.index(xs, s))
    else:
      unroll = 1 if self.execution.local_loop == "rolled" else min(self.execution.unroll,
                                                                   max(num_steps, 1))
      carry, _ = jax.lax.scan(step, carry, xs, unroll=unroll)
    return carry

  def _client(self, bcast, client_state, info, idx_SxB, mask_SxB, step_mask_S, round_info, data,
              round_key):
    """One client's whole local training: (upload, new client state, metric sums)."""
    local, metrics, client_key = self.client_start(bcast, client_state, info, round_info, data,
                                                    idx_SxB[0], mask_SxB[0], round_key)
    local, metrics = self.run_steps(local, metrics, round_info, data,
                                     jnp.arange(step_mask_S.shape[0]), idx_SxB, mask_SxB,
                                     step_mask_S, client_key)
    upload, new_state = self.algorithm.client_finalize(local, bcast, client_state, info,
                                                       round_info)
    return upload, new_state, metrics

  def finish(self, server_state, client_table, client_outputs, cohort: Cohort,
              round_info: RoundInfo):
    """Aggregation + server update, scatter of client state, metric sums over real clients."""
    uploads, new_states, metrics_C = client_outputs
    client_mask = (cohort.weights > 0).astype(cohort.weights.dtype)
    new_server_state = self.algorithm.server_update(server_state, uploads, cohort.weights,
                                                    client_mask, round_info)
    # A cohort of padding only (an empty Poisson draw without DP) leaves the server state as it
    # was: no update, no server-optimiser step (the round did not happen on the server).
    new_server_state = tree.where(jnp.any(cohort.weights > 0), new_server_state, server_state)
    new_table = _scatter_rows(client_table, cohort.table_rows, new_states)
    return new_server_state, new_table, tree.weighted_sum(metrics_C, client_mask)

  # ---------------------------------------------------------------- strategies
  def over_clients(self, fn, per_client):
    """Applies `fn` to every client slice of `per_client` (leading axis C), inside jit, as the
    strategy says (`core.strategies`)."""
    return strategies.get(self.execution.client_strategy).over_clients(self, fn, per_client)

  def _round(self, server_state, client_table, data: TrainData, cohort: Cohort,
             round_info: RoundInfo, key):
    """The whole round in one jitted function (every strategy but 'host')."""
    if self.execution.sort_clients:
      # Longest clients first: the vmapped chunks become buckets of similar step counts.
      order = jnp.argsort(-jnp.sum(cohort.step_mask, axis=1), stable=True)
      cohort = jax.tree.map(lambda a: a[order], cohort)
    bcast, client_states, infos, round_key = self.prepare(server_state, client_table, cohort,
                                                           round_info, key)
    round_info = round_info.replace(key=round_key)

    def one_client(args):
      cstate, info, idx, emask, smask = args
      return self._client(bcast, cstate, info, idx, emask, smask, round_info, data, round_key)

    outputs = self.over_clients(
        one_client,
        (client_states, infos, cohort.batch_idx, cohort.example_mask, cohort.step_mask))
    return self.finish(server_state, client_table, outputs, cohort, round_info)
