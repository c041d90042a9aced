"""The 'debug' client strategy: a round's pieces run eagerly, without jit, client by client and
local step by local step from Python (as fedjax's `for_each_client` does in its debug mode).

Any error is re-raised as a `RoundStageError` that names the round, the client (its position in
the cohort and its id) and the stage: 'prepare' (broadcast and gather), 'client_init', 'local
step s', 'finalize' or 'server update'; the original error is chained (`__cause__`), its
traceback points into the algorithm's own code. Every operation is dispatched on its own, so
this is for finding a bug on a small problem, not for training; it computes the round the
other strategies compute (tested). Nothing is traced either (except when no client of the
cohort has a real step: the metrics' structure): the algorithm's functions see concrete arrays,
so `print`, `float(...)` and breakpoints work inside them. Masked (padding) steps are skipped: they change
nothing.

Each stage's result is checked as it is produced (chex): the local state keeps the shapes and
dtypes it started with (what a compiled loop needs) and stays finite, and so do the upload, the
client's new state and the server state; the first value that breaks this is a RoundStageError
naming the stage, not a NaN found rounds later.
"""
from __future__ import annotations

import contextlib

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core import tree


class RoundStageError(RuntimeError):
  """An error inside a 'debug' round; the message names the client and the stage."""

  def __init__(self, message: str, stage: str, position: int | None = None,
               client_id: int | None = None):
    super().__init__(message)
    self.stage, self.position, self.client_id = stage, position, client_id


@contextlib.contextmanager
def stage(where: str, name: str, position: int | None = None, client_id: int | None = None):
  """Runs the block; an exception leaves it as a RoundStageError naming `where` and `name`."""
  try:
    yield
  except RoundStageError:
    raise
  except Exception as err:  # pylint: disable=broad-except
    who = "" if position is None else f", client {position} of the cohort (id {client_id})"
    raise RoundStageError(f"{where}{who}, stage '{name}': {type(err).__name__}: {err}", name,
                          position, client_id) from err


def debug_round(engine, server_state, client_table, data, cohort, round_info, key):
  """`engine`'s round (`RoundEngine._round`'s result) run eagerly piece by piece."""
  where = f"round {int(round_info.round)}"
  if engine.algorithm.exchanges > 1:
    where += f", exchange {int(round_info.phase)}"
  with stage(where, "prepare"):
    bcast, client_states, infos, round_key = engine.prepare(
        server_state, client_table, cohort, round_info, key)
  round_info = round_info.replace(key=round_key)
  client_ids = np.asarray(cohort.client_ids)
  step_mask = np.asarray(cohort.step_mask)
  outputs = []
  for c, cid in enumerate(client_ids.tolist()):
    client = lambda name, c=c, cid=cid: stage(where, name, c, cid)
    cstate, info = tree.index(client_states, c), tree.index(infos, c)
    with client("client_init"):
      client_key = jax.random.fold_in(round_key, info.client_id)
      local = engine.algorithm.client_init(bcast, cstate, info, round_info)
    metrics = None
    for s in np.flatnonzero(step_mask[c]).tolist():
      with client(f"local step {s}"):
        batch, step_key = engine.batch(
            data, s, cohort.batch_idx[c, s], cohort.example_mask[c, s], client_key)
        before = local
        local, step_metrics = engine.algorithm.local_step(local, batch, step_key, round_info)
        _check(local, "the local state", like=before)
        metrics = step_metrics if metrics is None else tree.add(metrics, step_metrics)
    with client("finalize"):
      upload, new_state = engine.algorithm.client_finalize(local, bcast, cstate, info,
                                                           round_info)
      _check(upload, "the upload")
      _check(new_state, "the client's new state", like=cstate)
    outputs.append([upload, new_state, metrics])
  # Clients without a real step (padding clients) sum to zeros of the metrics' structure.
  some = next((m for _, _, m in outputs if m is not None), None)
  for c, out in enumerate(outputs):
    if out[2] is None:
      with stage(where, "client_init", c, int(client_ids[c])):
        out[2] = (jax.tree.map(jnp.zeros_like, some) if some is not None else
                  engine.client_start(
                      bcast, tree.index(client_states, c), tree.index(infos, c), round_info,
                      data, cohort.batch_idx[c, 0], cohort.example_mask[c, 0], round_key)[1])
  with stage(where, "server update"):
    result = engine.finish(server_state, client_table,
                            tree.stack([tuple(o) for o in outputs]), cohort, round_info)
    _check(result[0], "the server state", like=server_state)
    return result


def _check(value, what: str, like=None) -> None:
  """`value` finite, and with `like`'s shapes and dtypes (chex); AssertionError naming `what`."""
  value = jax.tree.map(np.asarray, value)   # Python numbers too (the debug round is eager)
  try:
    if like is not None:
      chex.assert_trees_all_equal_shapes_and_dtypes(value, jax.tree.map(np.asarray, like))
    chex.assert_tree_all_finite(value)
  except AssertionError as err:
    raise AssertionError(f"{what}: {err}") from None
