"""The federated algorithm interface.

An algorithm is a frozen bundle of pure functions (in the spirit of optax's init/update pair).
Algorithms never call `jit` or `vmap`: the round engine (`fedjax_sharp.core.engine`) does.

One round, as the engine runs it (`C` sampled clients, `S` local steps, batch `B`):

    bcast = broadcast(server_state, round_info)                   # what goes down
    for each sampled client c (vmap / map / unrolled):
      local = client_init(bcast, client_state[c], client_info[c], round_info)
      for s in range(S):                                          # scan / unrolled
        local' = local_step(local, batch[c, s], key[c, s], round_info)
        local = local' if step_mask[c, s] else local              # ragged clients
      upload[c], client_state'[c] = client_finalize(local, bcast, client_state[c],
                                                    client_info[c], round_info)
    server_state = server_update(server_state, upload_C, weights_C, mask_C, round_info)

Hyperparameters a sweep may vary (`FederatedAlgorithm.hparams`: FedProx's mu, FedDyn's alpha,
the SAM radius, ...) are round data, not closure constants: the engine passes them in
`round_info.hparams` (traced, so changing them never recompiles, and a sweep stacks one value
per experiment like any other state); the functions read them with `core.hparams.of`.

An algorithm with `exchanges = E > 1` (NaiveFedGloSS) is run E times per round with the same
cohort, `round_info.phase` = 0 .. E-1 (a traced scalar, so one compiled program serves all).

`upload_C` and every client-side pytree carry a leading client axis inside `server_update`;
`weights_C` are the aggregation weights (example counts or uniform, normalised to sum to 1 over
the real clients, 0 for padding clients) and `mask_C` is 1 for real clients, 0 for padding.
Persistent client state lives in a dense `[M, ...]` table gathered and scattered by the engine;
an algorithm without per-client state returns `()` from `client_state_init`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.core import tree

Params = Any
PyTree = Any


def _zero_phase():
  return jnp.zeros((), jnp.int32)


def _no_hparams():
  return {}


@flax.struct.dataclass
class RoundInfo:
  """Per-round scalars shared by all clients (traced: changing them never recompiles)."""
  round: jax.Array          # int32, 0-based round index t
  learning_rate: jax.Array  # client learning rate eta_t of this round (the run's float dtype)
  num_clients: int = flax.struct.field(pytree_node=False, default=1)  # M, all clients
  # int32 exchange index within the round (0 .. exchanges - 1; set by the engine).
  phase: jax.Array = flax.struct.field(default_factory=_zero_phase)
  # {name: scalar}: the algorithm's hyperparameters this round, in the run's float dtype (set by
  # the engine from `FederatedAlgorithm.hparams`, or one sweep lane's values; empty: the
  # algorithm's own).
  hparams: dict = flax.struct.field(default_factory=_no_hparams)
  # The round's PRNG key `fold_in(train_key, round)` (set by the engine after its prepare step;
  # None outside the engine). What the differential-privacy wrapper (`core.privacy`) derives its
  # own noise stream from, so that a resumed run draws the same noise.
  key: jax.Array | None = None

  @classmethod
  def at(cls, round_idx, learning_rate, num_clients: int = 1, **fields) -> "RoundInfo":
    """Round `round_idx` at client learning rate `learning_rate`, both as round data: an int32
    round and a weakly typed learning rate in the run's float dtype (`tree.as_float`: float64
    under jax_enable_x64)."""
    return cls(round=jnp.int32(round_idx), learning_rate=tree.as_float(learning_rate),
               num_clients=int(num_clients), **fields)


@flax.struct.dataclass
class ClientInfo:
  """Per-client scalars of the round."""
  client_id: jax.Array      # int32 index into the [M, ...] client-state table
  num_examples: jax.Array   # n_m (the run's float dtype)
  num_steps: jax.Array      # int32 K_m, the number of real (unmasked) local steps
  weight: jax.Array         # aggregation weight (0 for a padding client; the run's float dtype)


@dataclasses.dataclass(frozen=True)
class Communication:
  """Model-sized vectors exchanged per sampled client per round."""
  down: float = 1.0
  up: float = 1.0


@dataclasses.dataclass(frozen=True)
class FederatedAlgorithm:
  """A federated algorithm as pure functions; see the module docstring for the round."""
  name: str
  server_init: Callable[[Params], PyTree]
  client_state_init: Callable[[Params], PyTree]
  broadcast: Callable[[PyTree, RoundInfo], PyTree]
  client_init: Callable[[PyTree, PyTree, ClientInfo, RoundInfo], PyTree]
  local_step: Callable[[PyTree, dict, jax.Array, RoundInfo], tuple[PyTree, dict]]
  client_finalize: Callable[[PyTree, PyTree, PyTree, ClientInfo, RoundInfo], tuple[PyTree, PyTree]]
  server_update: Callable[[PyTree, PyTree, jax.Array, jax.Array, RoundInfo], PyTree]
  eval_params: Callable[[PyTree], Params]
  communication: Communication = Communication()
  # Exchanges with the same cohort per round (NaiveFedGloSS: 2). The engine runs the whole
  # exchange `exchanges` times with `round_info.phase` = 0, 1, ...; `communication` counts all.
  exchanges: int = 1
  # {name: value} of the hyperparameters the functions read from `round_info.hparams`
  # (`core.hparams.of`) instead of closing over them: what the engine passes by default, and
  # what a sweep stacks per experiment.
  hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
  # Why client-level DP (`core.privacy.with_dp`) cannot protect this algorithm's upload (e.g. the
  # server weighs each upload by a data-dependent count); "" = it can: the whole upload is
  # clipped as one vector (or tensor by tensor) and noised.
  dp_unsupported: str = ""
  # Why the server update reads the realised number of clients (a sum over `mask_C` divided by
  # `sum(mask_C)`); "" = it does not. Under Poisson sampling that number varies and, with
  # differential privacy, is not covered by the fixed-denominator mean: such a run is refused.
  reads_cohort_size: str = ""
  # The DP mechanism (`core.privacy.Mechanism`) applied to the uploads, None without DP: what
  # the accountant reads.
  privacy: Any = None
  # server_state -> {name: scalar}: quantities of the server state worth a column of every
  # round's record in metrics.jsonl (FedGF's weight c and the divergence that set it). Read on
  # the host after the round, outside the compiled program; None: nothing.
  round_stats: Callable[[PyTree], Mapping[str, Any]] | None = None
