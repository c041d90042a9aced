"""A per-client state table held in host memory, for large client populations.

The engine's default table is a dense `[M, ...]` pytree on the device, gathered and scattered
inside the jitted round. With M = 100,000 clients and a model-sized state per client (FedDyn's
duals, FedLESAM's last-seen model) that is tens of GB, and an update of it inside jit copies
the whole table every round where buffers are not donated. `HostClientTable` keeps the
rows in NumPy arrays on the host instead; each round the engine gathers only the cohort's `C`
rows, runs the unchanged jitted round on that `[C, ...]` table (rows addressed by position,
`Cohort.rows`), and writes the `C` updated rows back in place. Same computation as the device
table (tested).

Rows that no client has written yet are the initial row: the arrays are allocated with
`np.zeros` (pages the OS maps only when written) and a `touched` mask says which rows hold
state, so host memory grows with the clients that have trained, not with M. Checkpoints store
the touched rows only (`to_checkpoint` / `load_checkpoint`).

Per round the host table costs one gather of the cohort's rows (an asynchronous transfer to the
device) and one write-back: `scatter` starts the device-to-host copy of the updated rows at once
and writes them into the host arrays only when they are next needed (`flush`), so the copy runs
while the device computes. No whole-table copy is ever made.

`resolve('auto', ...)` chooses between the two from the device's own memory
(`device_memory`: the accelerator's `bytes_limit`, or on a CPU the host's available memory):
the dense table stays on the device while it takes at most TABLE_MEMORY_FRACTION of it.
"""
from __future__ import annotations

import os

from absl import logging
import jax
import numpy as np

CLIENT_TABLES = ("device", "host", "auto")


class HostClientTable:
  """Host-memory client-state table of `num_clients` rows initialised to `init_row`."""

  def __init__(self, init_row, num_clients: int):
    self.num_clients = int(num_clients)
    self.init_row = jax.tree.map(np.asarray, jax.device_get(init_row))
    self.rows = jax.tree.map(lambda r: np.zeros((self.num_clients, *r.shape), r.dtype),
                             self.init_row)
    self._touched = np.zeros(self.num_clients, bool)
    self._pending = None   # (client ids, device rows) queued by `scatter`, written by `flush`

  @property
  def touched(self) -> np.ndarray:
    """bool [M]: which rows hold state (the initial row elsewhere)."""
    self.flush()
    return self._touched

  @property
  def nbytes_dense(self) -> int:
    """What the whole table would take if every row were materialised."""
    return int(sum(a.nbytes for a in jax.tree.leaves(self.rows)))

  @property
  def nbytes_touched(self) -> int:
    self.flush()
    per_row = sum(r.nbytes for r in jax.tree.leaves(self.init_row))
    return int(self._touched.sum()) * int(per_row)

  def gather(self, client_ids) -> tuple:
    """Device `[C, ...]` rows of `client_ids` (padding ids >= M give the initial row) and the
    positions the jitted round should address them by (padding: C, out of range). One host
    gather of the cohort's rows and one transfer per leaf; the rest of the table stays put."""
    self.flush()
    ids = np.asarray(client_ids)
    real = ids < self.num_clients
    safe = np.where(real, ids, 0)
    fresh = ~self._touched[safe] | ~real

    def take(table, init):
      rows = table[safe]          # fancy indexing: a copy of the cohort's rows only
      rows[fresh] = init
      return jax.device_put(rows)  # asynchronous host-to-device transfer
    rows = jax.tree.map(take, self.rows, self.init_row)
    positions = np.where(real, np.arange(len(ids)), len(ids)).astype(np.int32)
    return rows, positions

  def scatter(self, client_ids, rows) -> None:
    """Queues the real clients' updated rows for write-back. The device-to-host copy starts at
    once and runs while the device computes (`copy_to_host_async`); the rows are written into
    the host arrays at the next `gather`, checkpoint or read (`flush`), by which time the copy
    has usually finished, so the round's dispatch does not wait for it."""
    self.flush()
    for leaf in jax.tree.leaves(rows):
      if hasattr(leaf, "copy_to_host_async"):
        leaf.copy_to_host_async()
    self._pending = (np.asarray(client_ids), rows)

  def flush(self) -> None:
    """Writes queued rows (`scatter`) into the host arrays, in place."""
    pending, self._pending = self._pending, None
    if pending is None:
      return
    ids, rows = pending
    real = ids < self.num_clients
    for table, new in zip(jax.tree.leaves(self.rows), jax.tree.leaves(rows)):
      table[ids[real]] = np.asarray(new)[real]
    self._touched[ids[real]] = True

  def to_checkpoint(self) -> dict:
    self.flush()
    ids = np.flatnonzero(self._touched).astype(np.int32)
    return {"ids": ids, "rows": jax.tree.map(lambda t: t[ids], self.rows)}

  def checkpoint_template(self, num_rows: int) -> dict:
    return {"ids": np.zeros((num_rows,), np.int32),
            "rows": jax.tree.map(lambda r: np.zeros((num_rows, *r.shape), r.dtype),
                                 self.init_row)}

  def load_checkpoint(self, saved: dict) -> "HostClientTable":
    ids = np.asarray(saved["ids"], np.int64)
    self._pending = None
    self._touched[:] = False
    for table, rows in zip(jax.tree.leaves(self.rows), jax.tree.leaves(saved["rows"])):
      table[ids] = np.asarray(rows)
    self._touched[ids] = True
    return self

  def dense(self):
    """The whole table as the device engine would hold it (tests, small M only)."""
    self.flush()
    def fill(table, init):
      out = table.copy()
      out[~self._touched] = init
      return out
    return jax.tree.map(fill, self.rows, self.init_row)


# The share of the memory (the accelerator's, or on a CPU the host's available memory) that
# 'auto' lets the dense [M, ...] table take. The rest holds the model, the vmapped cohort (up to
# half of an accelerator, `execution.VMAP_MEMORY_FRACTION`), the training set and XLA's workspace.
TABLE_MEMORY_FRACTION = 0.25


def _host_available_bytes() -> int | None:
  """The host's available memory (Linux MemAvailable; else free pages), or None."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return None


def device_memory(device=None) -> tuple[int | None, str]:
  """(bytes, where the number comes from) of the memory a dense client table would live in:
  `memory_stats()['bytes_limit']` where the backend reports it (GPU, TPU); on a CPU, where host
  and device memory are one, the host's available memory; (None, why) when neither is known."""
  device = device or jax.local_devices()[0]
  try:
    stats = device.memory_stats() or {}
  except Exception:  # pylint: disable=broad-except  # backends without memory stats
    stats = {}
  if stats.get("bytes_limit"):
    return int(stats["bytes_limit"]), f"{device.device_kind} memory_stats bytes_limit"
  if device.platform == "cpu":
    available = _host_available_bytes()
    if available:
      return available, "the host's available memory (CPU: host and device memory are one)"
  return None, f"{device.platform} reports no memory size"


def resolve(mode: str, algorithm, params, num_clients: int, budget_mb: float = 0.0,
            memory_bytes: int | None = None) -> str:
  """'device' or 'host' for `engine.client_table`.

  'auto' keeps the dense table of `num_clients` rows of the algorithm's client state on the
  device when it fits the budget: `budget_mb` when > 0 (`engine.client_table_budget_mb`), else
  TABLE_MEMORY_FRACTION of `memory_bytes` (default: `device_memory()`, the device's own size).
  With the memory unknown, the table stays on the device. The choice and its reason are logged.
  """
  if mode not in CLIENT_TABLES:
    raise ValueError(f"engine.client_table={mode!r} is not one of {list(CLIENT_TABLES)}")
  if budget_mb < 0:
    raise ValueError(f"engine.client_table_budget_mb must be >= 0 (0 = "
                     f"{TABLE_MEMORY_FRACTION:.0%} of the device's memory), got {budget_mb}")
  row = jax.eval_shape(algorithm.client_state_init, params)
  if not jax.tree.leaves(row):
    return "device"   # no per-client state: nothing to hold anywhere
  if mode != "auto":
    return mode
  if jax.process_count() > 1:
    logging.debug("engine.client_table 'auto' -> device: a multi-process mesh holds the table on "
                 "its devices (a host table cannot span processes)")
    return "device"
  per_row = sum(int(np.prod(r.shape)) * np.dtype(r.dtype).itemsize for r in jax.tree.leaves(row))
  dense = per_row * num_clients
  if budget_mb > 0:
    budget, source = budget_mb * 2 ** 20, "engine.client_table_budget_mb"
  else:
    if memory_bytes is None:
      memory_bytes, source = device_memory()
    else:
      source = "the given memory size"
    if memory_bytes is None:
      logging.debug("engine.client_table 'auto' -> device: %s", source)
      return "device"
    budget = TABLE_MEMORY_FRACTION * memory_bytes
    source = f"{TABLE_MEMORY_FRACTION:.0%} of {memory_bytes / 2 ** 30:.1f} GiB, {source}"
  choice = "host" if dense > budget else "device"
  logging.debug("engine.client_table 'auto' -> %s: the dense table of %d clients takes %.1f "
                "MiB, the budget is %.1f MiB (%s)", choice, num_clients, dense / 2 ** 20,
                budget / 2 ** 20, source)
  return choice
