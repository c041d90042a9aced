"""The federated round engine: one jitted function per experiment runs a whole round.

Inside the jitted round: gather the sampled clients' persistent state from the dense
`[M, ...]` table, run every sampled client's local training (vmap / sequential map / chunked
vmap / unrolled over clients; rolled / partially unrolled / fully unrolled scan over local
steps), with step and example masks for ragged clients, aggregate with the given weights,
scatter the client state back and apply the server update.

Shapes are fixed per experiment (`C` clients, `S` steps, `B` examples), so the round is traced
once; round index and learning rate are traced scalars.

Why several strategies: on accelerators `vmap` over clients + rolled `scan` over steps is the
natural choice; on XLA's CPU backend convolutions inside any while loop (scan, `lax.map`) run
~35x slower and vmapped per-client convolutions become grouped convolutions (~5x slower), so
the fastest CPU strategy unrolls both loops (longer compile). See BUILD_NOTES.md.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import ClientInfo, FederatedAlgorithm, RoundInfo

CLIENT_STRATEGIES = ("auto", "vmap", "map", "chunked_vmap", "unrolled")
LOCAL_LOOPS = ("auto", "rolled", "partial", "unrolled")


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
  """How a round is executed. All strategies compute the same function (to float tolerance)."""
  client_strategy: str = "auto"   # one of CLIENT_STRATEGIES
  chunk_size: int = 4             # clients per vmapped chunk for 'chunked_vmap'
  local_loop: str = "auto"        # one of LOCAL_LOOPS
  unroll: int = 4                 # scan unroll factor for 'partial'

  def resolved(self, backend: str | None = None) -> "ExecutionConfig":
    """Replaces 'auto' by the measured best choice for the backend."""
    backend = backend or jax.default_backend()
    cpu = backend == "cpu"
    return dataclasses.replace(
        self,
        client_strategy=(("unrolled" if cpu else "vmap")
                         if self.client_strategy == "auto" else self.client_strategy),
        local_loop=(("unrolled" if cpu else "rolled")
                    if self.local_loop == "auto" else self.local_loop))

  def validate(self, prefix: str = "engine") -> None:
    if self.client_strategy not in CLIENT_STRATEGIES:
      raise ValueError(f"{prefix}.client_strategy={self.client_strategy!r} is not one of "
                       f"{list(CLIENT_STRATEGIES)}")
    if self.local_loop not in LOCAL_LOOPS:
      raise ValueError(f"{prefix}.local_loop={self.local_loop!r} is not one of {list(LOCAL_LOOPS)}")
    if self.chunk_size < 1:
      raise ValueError(f"{prefix}.chunk_size must be >= 1, got {self.chunk_size}")
    if self.unroll < 1:
      raise ValueError(f"{prefix}.unroll must be >= 1, got {self.unroll}")


@flax.struct.dataclass
class Cohort:
  """The sampled clients of one round and their data plan (built on the host).

  Padding clients have `client_ids == M` (out of range: gathered as zeros, never scattered),
  weight 0 and all-False masks.
  """
  client_ids: jax.Array      # int32 [C]
  weights: jax.Array         # float32 [C], normalised aggregation weights
  num_examples: jax.Array    # float32 [C]
  batch_idx: jax.Array       # int32 [C, S, B] indices into the training arrays
  example_mask: jax.Array    # bool [C, S, B]
  step_mask: jax.Array       # bool [C, S]

  @property
  def shape(self) -> tuple[int, int, int]:
    return tuple(self.batch_idx.shape)  # (C, S, B)


@flax.struct.dataclass
class TrainData:
  """Training arrays on device: every client's examples, indexed by `Cohort.batch_idx`."""
  x: jax.Array  # [N, ...] (uint8 images are normalised by the engine's `preprocess`)
  y: jax.Array  # int32 [N]


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
    preprocess: `(x_batch, key, train: bool) -> x_float` applied to every gathered batch
      inside jit (normalisation, augmentation). Identity by default.
    donate: donate server state and client table buffers (ignored on CPU).
  """

  def __init__(self, algorithm: FederatedAlgorithm, num_clients: int,
               execution: ExecutionConfig = ExecutionConfig(),
               preprocess: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
               donate: bool = True):
    execution.validate()
    self.algorithm = algorithm
    self.num_clients = int(num_clients)
    self.execution = execution.resolved()
    self.preprocess = preprocess or (lambda x, key: x.astype(jnp.float32))
    self.trace_count = 0
    donate_argnums = (0, 1) if (donate and jax.default_backend() != "cpu") else ()
    self.round = jax.jit(self._round, donate_argnums=donate_argnums)

  # ----------------------------------------------------------------------------------------
  def init(self, params):
    """Returns (server_state, client_table) for initial global parameters."""
    server_state = self.algorithm.server_init(params)
    client_table = tile_client_state(self.algorithm.client_state_init(params), self.num_clients)
    return server_state, client_table

  # ----------------------------------------------------------------------------------------
  def _local_training(self, bcast, client_state, client_info, round_info, data: TrainData,
                      idx_SxB, mask_SxB, step_mask_S, client_key):
    alg = self.algorithm
    local = alg.client_init(bcast, client_state, client_info, round_info)
    num_steps = step_mask_S.shape[0]

    def step(carry, inputs):
      local, metrics_sum = carry
      s, idx_B, mask_B, active = inputs
      key = jax.random.fold_in(client_key, s)
      aug_key, step_key = jax.random.split(key)
      batch = {"x": self.preprocess(data.x[idx_B], aug_key), "y": data.y[idx_B], "mask": mask_B}
      new_local, metrics = alg.local_step(local, batch, step_key, round_info)
      local = tree.where(active, new_local, local)
      metrics = jax.tree.map(lambda m: jnp.where(active, m, jnp.zeros_like(m)), metrics)
      return (local, tree.add(metrics_sum, metrics)), None

    # Metric structure, from an abstract evaluation of one step.
    dummy_batch = {"x": jax.eval_shape(self.preprocess, data.x[idx_SxB[0]], client_key),
                   "y": data.y[idx_SxB[0]], "mask": mask_SxB[0]}
    _, metrics_shape = jax.eval_shape(alg.local_step, local, dummy_batch, client_key, round_info)
    metrics0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics_shape)

    xs = (jnp.arange(num_steps), idx_SxB, mask_SxB, step_mask_S)
    carry = (local, metrics0)
    loop = self.execution.local_loop
    if loop == "unrolled":
      for s in range(num_steps):
        carry, _ = step(carry, tree.index(xs, s))
    else:
      unroll = 1 if loop == "rolled" else min(self.execution.unroll, max(num_steps, 1))
      carry, _ = jax.lax.scan(step, carry, xs, unroll=unroll)
    local, metrics_sum = carry
    upload, new_client_state = alg.client_finalize(local, bcast, client_state, client_info,
                                                   round_info)
    return upload, new_client_state, metrics_sum

  def _over_clients(self, fn, per_client):
    """Applies `fn` to every client slice of `per_client` (leading axis C)."""
    strategy = self.execution.client_strategy
    if strategy == "vmap":
      return jax.vmap(fn)(per_client)
    if strategy == "map":
      return jax.lax.map(fn, per_client)
    if strategy == "chunked_vmap":
      return jax.lax.map(fn, per_client, batch_size=self.execution.chunk_size)
    if strategy == "unrolled":
      num = jax.tree.leaves(per_client)[0].shape[0]
      return tree.stack([fn(tree.index(per_client, c)) for c in range(num)])
    raise ValueError(f"engine.client_strategy={strategy!r} is not one of {list(CLIENT_STRATEGIES)}")

  def _round(self, server_state, client_table, data: TrainData, cohort: Cohort,
             round_info: RoundInfo, key):
    self.trace_count += 1  # Python side effect: counts traces, not executions.
    alg = self.algorithm
    bcast = alg.broadcast(server_state, round_info)
    client_states = _gather_rows(client_table, cohort.client_ids)
    num_steps = jnp.sum(cohort.step_mask, axis=1).astype(jnp.int32)
    infos = ClientInfo(client_id=cohort.client_ids, num_examples=cohort.num_examples,
                       num_steps=num_steps, weight=cohort.weights)
    round_key = jax.random.fold_in(key, round_info.round)

    def one_client(args):
      cstate, info, idx, emask, smask = args
      client_key = jax.random.fold_in(round_key, info.client_id)
      return self._local_training(bcast, cstate, info, round_info, data, idx, emask, smask,
                                  client_key)

    uploads, new_states, metrics_C = self._over_clients(
        one_client,
        (client_states, infos, cohort.batch_idx, cohort.example_mask, cohort.step_mask))
    client_mask = (cohort.weights > 0).astype(jnp.float32)
    new_server_state = alg.server_update(server_state, uploads, cohort.weights, client_mask,
                                         round_info)
    new_table = _scatter_rows(client_table, cohort.client_ids, new_states)
    metrics = tree.weighted_sum(metrics_C, client_mask)  # sums over real clients
    return new_server_state, new_table, metrics
