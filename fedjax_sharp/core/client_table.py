"""A per-client state table held in host memory, for large client populations.

The engine's default table is a dense `[M, ...]` pytree on the device, gathered and scattered
inside the jitted round. With M = 100,000 clients and a model-sized state per client (FedDyn's
duals, FedLESAM's last-seen model) that is tens of GB, and an update of it inside jit copies
the whole table every round where buffers cannot be donated (CPU). `HostClientTable` keeps the
rows in NumPy arrays on the host instead; each round the engine gathers only the cohort's `C`
rows, runs the unchanged jitted round on that `[C, ...]` table (rows addressed by position,
`Cohort.rows`), and writes the `C` updated rows back in place. Same computation as the device
table (tested).

Rows that no client has written yet are the initial row: the arrays are allocated with
`np.zeros` (pages the OS maps only when written) and a `touched` mask says which rows hold
state, so host memory grows with the clients that have trained, not with M. Checkpoints store
the touched rows only (`to_checkpoint` / `load_checkpoint`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

CLIENT_TABLES = ("device", "host", "auto")


class HostClientTable:
  """Host-memory client-state table of `num_clients` rows initialised to `init_row`."""

  def __init__(self, init_row, num_clients: int):
    self.num_clients = int(num_clients)
    self.init_row = jax.tree.map(np.asarray, jax.device_get(init_row))
    self.rows = jax.tree.map(lambda r: np.zeros((self.num_clients, *r.shape), r.dtype),
                             self.init_row)
    self.touched = np.zeros(self.num_clients, bool)

  @property
  def nbytes_dense(self) -> int:
    """What the whole table would take if every row were materialised."""
    return int(sum(a.nbytes for a in jax.tree.leaves(self.rows)))

  @property
  def nbytes_touched(self) -> int:
    per_row = sum(r.nbytes for r in jax.tree.leaves(self.init_row))
    return int(self.touched.sum()) * int(per_row)

  def gather(self, client_ids) -> tuple:
    """Device `[C, ...]` rows of `client_ids` (padding ids >= M give the initial row) and the
    positions the jitted round should address them by (padding: C, out of range)."""
    ids = np.asarray(client_ids)
    real = ids < self.num_clients
    safe = np.where(real, ids, 0)
    fresh = ~self.touched[safe] | ~real

    def take(table, init):
      rows = table[safe]
      rows[fresh] = init
      return jnp.asarray(rows)
    rows = jax.tree.map(take, self.rows, self.init_row)
    positions = np.where(real, np.arange(len(ids)), len(ids)).astype(np.int32)
    return rows, positions

  def scatter(self, client_ids, rows) -> None:
    """Writes the real clients' updated rows back (in place)."""
    ids = np.asarray(client_ids)
    real = ids < self.num_clients
    host_rows = jax.device_get(rows)
    for table, new in zip(jax.tree.leaves(self.rows), jax.tree.leaves(host_rows)):
      table[ids[real]] = np.asarray(new)[real]
    self.touched[ids[real]] = True

  def to_checkpoint(self) -> dict:
    ids = np.flatnonzero(self.touched).astype(np.int32)
    return {"ids": ids, "rows": jax.tree.map(lambda t: t[ids], self.rows)}

  def checkpoint_template(self, num_rows: int) -> dict:
    return {"ids": np.zeros((num_rows,), np.int32),
            "rows": jax.tree.map(lambda r: np.zeros((num_rows, *r.shape), r.dtype),
                                 self.init_row)}

  def load_checkpoint(self, saved: dict) -> "HostClientTable":
    ids = np.asarray(saved["ids"], np.int64)
    self.touched[:] = False
    for table, rows in zip(jax.tree.leaves(self.rows), jax.tree.leaves(saved["rows"])):
      table[ids] = np.asarray(rows)
    self.touched[ids] = True
    return self

  def dense(self):
    """The whole table as the device engine would hold it (tests, small M only)."""
    def fill(table, init):
      out = table.copy()
      out[~self.touched] = init
      return out
    return jax.tree.map(fill, self.rows, self.init_row)


def resolve(mode: str, algorithm, params, num_clients: int, budget_mb: float = 1024) -> str:
  """'device' or 'host' for `engine.client_table` ('auto': host when the dense table of
  `num_clients` rows of the algorithm's client state would exceed `budget_mb`)."""
  if mode not in CLIENT_TABLES:
    raise ValueError(f"engine.client_table={mode!r} is not one of {list(CLIENT_TABLES)}")
  row = jax.eval_shape(algorithm.client_state_init, params)
  if not jax.tree.leaves(row):
    return "device"   # no per-client state: nothing to hold anywhere
  if mode != "auto":
    return mode
  per_row = sum(int(np.prod(r.shape)) * np.dtype(r.dtype).itemsize for r in jax.tree.leaves(row))
  return "host" if per_row * num_clients > budget_mb * 2 ** 20 else "device"
