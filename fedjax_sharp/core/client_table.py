"""Per-client state tables held off the device, for large client populations.

The engine's default table is a dense `[M, ...]` pytree on the device, gathered and scattered
inside the jitted round. With M = 100,000 clients and a model-sized state per client (FedDyn's
duals, FedLESAM's last-seen model) that is tens of GB; with M = 10^7, or a 16 MB state (the
Stack Overflow word LSTM) and 342,477 clients, it cannot be allocated at all.
`HostClientTable` holds the rows of the clients that have trained only: each round the engine
gathers the cohort's `C` rows, runs the unchanged jitted round on that `[C, ...]` table (rows
addressed by position, `Cohort.rows`), and writes the `C` updated rows back. Same computation as
the device table (tested).

Storage grows with the clients that trained, never with M: a sorted index of the touched client
ids and the row ("slot") each one holds, and a row store addressed by slot. A client without a
row is served the initial row, written into the gathered cohort array, never copied per client.
Nothing of size M is allocated (a table of 10^9 clients starts and runs, tested). Two stores:

- `MemoryRows` (`engine.client_table='host'`): NumPy blocks of BLOCK_BYTES, allocated as rows
  arrive (their pages are mapped only when written).
- `DiskRows` (`'disk'`): tensorstore zarr3 arrays on disk, one chunk (file) per row and dtype,
  for touched rows larger than the machine's memory. Tensorstore replaces a chunk by writing a
  new file and renaming it over the old one, so a checkpoint snapshots the rows by hard-linking
  their files (`snapshot`): no copy, and the live store's later writes leave it intact.

NumPy blocks read and write a cohort's rows faster than tensorstore's memory store, and
tensorstore's files are the slowest but need no memory (measured by `benchmarks/population.py
--stores`: docs/performance.md, "Large populations"). Hence NumPy for rows that fit in memory,
tensorstore files (not a file format of our own) for those that do not.

Per round the table costs one gather of the cohort's rows (an asynchronous transfer to the
device) and one write-back: `scatter` starts the device-to-host copy of the updated rows at once
and writes them into the store only when they are next needed (`flush`), so the copy runs while
the device computes. Checkpoints store the touched rows only (`training.checkpoints`).

`resolve('auto', ...)` chooses between the device table, 'host' and 'disk' from the device's
and the host's memory (`device_memory`, the host's MemAvailable) and the rows a run can touch
(rounds x clients per round).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref

from absl import logging
import jax
import numpy as np

from fedjax_sharp.errors import ConfigError, WorkdirError
from fedjax_sharp.fileio import disk_full

CLIENT_TABLES = ("device", "host", "disk", "auto")
# The tables that hold the touched rows only, off the device (a `HostClientTable`).
HELD_TABLES = ("host", "disk")
# The memory store's blocks: rows are allocated BLOCK_BYTES (at least one row, at most
# BLOCK_ROWS rows) at a time, their pages mapped by the OS only when written.
BLOCK_BYTES, BLOCK_ROWS = 64 * 2 ** 20, 4096
# The disk store reads and writes at most this many bytes of rows at a time (at least a row).
DISK_BATCH_BYTES = 128 * 2 ** 20


class MemoryRows:
  """Rows of the table's leaves in host memory, addressed by slot (0, 1, ... in order of the
  clients' first write): per leaf, NumPy blocks of `rows_per_block` rows."""

  kind = "host"

  def __init__(self, leaves: list[np.ndarray]):
    self.leaves = leaves
    row_bytes = max(sum(leaf.nbytes for leaf in leaves), 1)
    self.rows_per_block = max(1, min(BLOCK_ROWS, BLOCK_BYTES // row_bytes))
    self.blocks: list[list[np.ndarray]] = []   # [block][leaf] -> [rows_per_block, ...]

  def read(self, slots: np.ndarray, outs: list[np.ndarray], positions: np.ndarray) -> None:
    """outs[leaf][positions[i]] = row `slots[i]`."""
    per = self.rows_per_block
    for slot, pos in zip(slots.tolist(), positions.tolist()):
      block = self.blocks[slot // per]
      for out, rows in zip(outs, block):
        out[pos] = rows[slot % per]

  def write(self, slots: np.ndarray, rows: list[np.ndarray]) -> None:
    """Row `slots[i]` = rows[leaf][i], allocating blocks as slots pass the last one."""
    per = self.rows_per_block
    for i, slot in enumerate(slots.tolist()):
      while slot // per >= len(self.blocks):
        # np.empty: the OS maps a block's pages when they are first written.
        self.blocks.append([np.empty((per, *leaf.shape), leaf.dtype) for leaf in self.leaves])
      block = self.blocks[slot // per]
      for stored, new in zip(block, rows):
        stored[slot % per] = new[i]

  def disk_bytes(self) -> int:
    return 0

  def reset(self) -> None:
    """No rows."""
    self.blocks = []

  def close(self) -> None:
    self.blocks = []


def _tensorstore():
  """tensorstore, imported on first use (a run without a disk table does not import it)."""
  import tensorstore  # pylint: disable=g-import-not-at-top
  return tensorstore


def zarr_spec(path: str, dtype: str, num_rows: int, elements: int, create: bool) -> dict:
  """The tensorstore spec of a disk table's rows of one dtype: a zarr3 array [num_rows,
  elements] at `path`, one uncompressed chunk per row (`c/<row>/0`), not fsync'ed; `create`:
  a new array replacing any there, else the array there."""
  spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
          # A row of zeros is a file like any other (`snapshot` links every touched row).
          "store_data_equal_to_fill_value": True,
          "context": {"file_io_sync": False}}
  if not create:
    return {**spec, "open": True}
  return {**spec, "create": True, "delete_existing": True, "metadata": {
      "shape": [num_rows, elements], "data_type": dtype,
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, elements]}},
      "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}


class DiskRows:
  """Rows of the table's leaves on disk, addressed by slot: per dtype, one zarr3 array
  `<directory>/<dtype>` of shape [M, elements of that dtype in a row], one chunk per row
  (`c/<slot>/0`), uncompressed, written through tensorstore.

  A chunk is replaced by a new file renamed over the old one, so `snapshot` (hard links of the
  touched rows' files) is a checkpoint of the rows that later writes leave intact, and `link_from`
  brings a checkpoint back the same way. Live writes are not fsync'ed (the live store is rebuilt
  from the newest checkpoint on resume); `snapshot` fsyncs the files a checkpoint links.

  `directory=None`: a temporary directory, removed with the table. `create=False` opens the
  rows of an existing store (a snapshot) to read them, and leaves its files alone."""

  kind = "disk"

  def __init__(self, leaves: list[np.ndarray], num_rows: int, directory: str | None = None,
               create: bool = True):
    self.leaves = leaves
    self.num_rows = max(int(num_rows), 1)
    self.groups: dict[str, list[tuple[int, int, int]]] = {}   # dtype -> (leaf, offset, size)
    elements: dict[str, int] = {}
    for i, leaf in enumerate(leaves):
      name = np.dtype(leaf.dtype).name
      offset = elements.get(name, 0)
      self.groups.setdefault(name, []).append((i, offset, leaf.size))
      elements[name] = offset + leaf.size
    self.elements = {k: v for k, v in elements.items() if v}   # size-0 leaves: no chunk
    self.owned, self._finalizer = create, None
    if directory is None:
      directory = tempfile.mkdtemp(prefix="fedjax_sharp_client_rows_")
      self._finalizer = weakref.finalize(self, shutil.rmtree, directory, True)
    self.directory = os.path.abspath(directory)
    self.arrays = {}
    self._open(create)

  def _open(self, create: bool) -> None:
    ts = _tensorstore()
    if create:
      shutil.rmtree(self.directory, ignore_errors=True)   # a killed run's rows are stale
    os.makedirs(self.directory, exist_ok=True)
    self.arrays = {name: ts.open(zarr_spec(os.path.join(self.directory, name), name,
                                           self.num_rows, self.elements[name], create)).result()
                   for name in self.elements}

  def reset(self) -> None:
    """No rows (a new, empty store in the same directory)."""
    self._open(create=True)

  def _batches(self, n: int):
    """Slices of at most DISK_BATCH_BYTES of rows (at least one row): the flat copies a read or
    write makes stay that small (50 LSTM rows at once: 1.25 GB more RSS than 8 at a time)."""
    per = max(1, DISK_BATCH_BYTES // max(sum(leaf.nbytes for leaf in self.leaves), 1))
    return [slice(start, start + per) for start in range(0, n, per)]

  def read(self, slots: np.ndarray, outs: list[np.ndarray], positions: np.ndarray) -> None:
    for part in self._batches(len(slots)):
      pending = {name: array[slots[part]].read() for name, array in self.arrays.items()}
      for name, future in pending.items():
        flat = future.result()                     # [rows, elements]
        for i, offset, size in self.groups[name]:
          outs[i][positions[part]] = flat[:, offset:offset + size].reshape(
              len(flat), *self.leaves[i].shape)

  def write(self, slots: np.ndarray, rows: list[np.ndarray]) -> None:
    for part in self._batches(len(slots)):
      futures = []
      for name, array in self.arrays.items():
        flat = np.concatenate([rows[i][part].reshape(len(slots[part]), -1)
                               for i, _, _ in self.groups[name]], axis=1)
        futures.append(array[slots[part]].write(flat))
      for future in futures:
        future.result()

  def _chunk(self, root: str, name: str, slot: int) -> str:
    return os.path.join(root, name, "c", str(slot), "0")

  def snapshot(self, target: str, slots: np.ndarray) -> None:
    """Hard links (copies where the filesystem cannot link) of the rows `slots` and the arrays'
    metadata under `target`: a zarr3 store of its own, fsync'ed."""
    for name in self.arrays:
      os.makedirs(os.path.join(target, name), exist_ok=True)
      shutil.copyfile(os.path.join(self.directory, name, "zarr.json"),
                      os.path.join(target, name, "zarr.json"))
      for slot in slots.tolist():
        dest = self._chunk(target, name, slot)
        _link(self._chunk(self.directory, name, slot), dest)
        fd = os.open(dest, os.O_RDONLY)
        try:
          os.fsync(fd)
        finally:
          os.close(fd)

  def link_from(self, source: str, slots: np.ndarray) -> None:
    """Replaces the live rows by the rows `slots` of a `snapshot` at `source`."""
    shutil.rmtree(self.directory, ignore_errors=True)
    for name in self.elements:
      os.makedirs(os.path.join(self.directory, name), exist_ok=True)
      shutil.copyfile(os.path.join(source, name, "zarr.json"),
                      os.path.join(self.directory, name, "zarr.json"))
      for slot in slots.tolist():
        _link(self._chunk(source, name, slot), self._chunk(self.directory, name, slot))
    self._open(create=False)

  def disk_bytes(self) -> int:
    total = 0
    for base, _, files in os.walk(self.directory):
      total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total

  def close(self) -> None:
    self.arrays = {}
    if self._finalizer is not None:
      self._finalizer()
    elif self.owned:
      shutil.rmtree(self.directory, ignore_errors=True)


def _link(source: str, dest: str) -> None:
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  try:
    os.link(source, dest)
  except OSError:   # another filesystem, or one without hard links
    shutil.copyfile(source, dest)


def read_snapshot(source: str, leaves: list[np.ndarray], slots: np.ndarray,
                  batch: int = 64):
  """Yields (indices into `slots`, rows per leaf) of the rows `slots` of a `DiskRows.snapshot`
  at `source`, `batch` rows at a time (a memory table restored from a disk table's
  checkpoint)."""
  reader = DiskRows(leaves, 1, source, create=False)
  for start in range(0, len(slots), batch):
    part = slots[start:start + batch]
    outs = [np.empty((len(part), *leaf.shape), leaf.dtype) for leaf in leaves]
    reader.read(part, outs, np.arange(len(part)))
    yield np.arange(start, start + len(part)), outs


class HostClientTable:
  """Client-state table of `num_clients` rows initialised to `init_row`, holding the rows of
  the clients that have trained only: in host memory (`kind='host'`), or in tensorstore files
  under `directory` (`kind='disk'`; a temporary directory when None)."""

  def __init__(self, init_row, num_clients: int, kind: str = "host",
               directory: str | None = None):
    if kind not in HELD_TABLES:
      raise ValueError(f"engine.client_table={kind!r} is not one of {list(HELD_TABLES)}")
    self.num_clients = int(num_clients)
    self.init_row = jax.tree.map(np.asarray, jax.device_get(init_row))
    self._init_leaves, self._treedef = jax.tree.flatten(self.init_row)
    self.store = (MemoryRows(self._init_leaves) if kind == "host"
                  else DiskRows(self._init_leaves, self.num_clients, directory))
    self._ids = np.zeros(0, np.int64)     # sorted ids of the clients that hold a row
    self._slots = np.zeros(0, np.int64)   # the row (slot) each of them holds
    self._pending = None   # (client ids, device rows) queued by `scatter`, written by `flush`

  @property
  def kind(self) -> str:
    """'host' (rows in memory) or 'disk' (`engine.client_table`)."""
    return self.store.kind

  @property
  def row_bytes(self) -> int:
    return int(sum(leaf.nbytes for leaf in self._init_leaves))

  @property
  def touched_ids(self) -> np.ndarray:
    """Sorted ids of the clients that hold state (the initial row elsewhere)."""
    self.flush()
    return self._ids

  @property
  def nbytes_dense(self) -> int:
    """What the whole table would take if every row were materialised."""
    return self.num_clients * self.row_bytes

  @property
  def nbytes_touched(self) -> int:
    self.flush()
    return len(self._ids) * self.row_bytes

  def disk_bytes(self) -> int:
    """Bytes of the rows' files on disk (0 for a table in memory)."""
    self.flush()
    return self.store.disk_bytes()

  def _find(self, ids: np.ndarray) -> np.ndarray:
    """The slots of `ids` (int64), -1 where a client holds no row."""
    n = len(self._ids)
    if not n:
      return np.full(len(ids), -1, np.int64)
    pos = np.minimum(np.searchsorted(self._ids, ids), n - 1)
    return np.where(self._ids[pos] == ids, self._slots[pos], -1)

  def _add(self, ids: np.ndarray, slots: np.ndarray) -> None:
    """Records that the new clients `ids` hold the rows `slots`."""
    order = np.argsort(ids)
    ids, slots = ids[order], slots[order]
    at = np.searchsorted(self._ids, ids)
    self._ids = np.insert(self._ids, at, ids)
    self._slots = np.insert(self._slots, at, slots)

  def gather(self, client_ids) -> tuple:
    """Device `[C, ...]` rows of `client_ids` (padding ids >= M give the initial row) and the
    positions the jitted round should address them by (padding: C, out of range). One read of
    the held rows of the cohort and one transfer per leaf; the rest of the table stays put."""
    self.flush()
    ids = np.asarray(client_ids).astype(np.int64)
    real = ids < self.num_clients
    slots = np.where(real, self._find(ids), -1)
    held, fresh = np.flatnonzero(slots >= 0), np.flatnonzero(slots < 0)
    outs = []
    for init in self._init_leaves:
      rows = np.empty((len(ids), *init.shape), init.dtype)
      rows[fresh] = init             # the initial row, broadcast into the cohort's array
      outs.append(rows)
    self.store.read(slots[held], outs, held)
    # asynchronous host-to-device transfers
    rows = jax.tree.unflatten(self._treedef, [jax.device_put(out) for out in outs])
    positions = np.where(real, np.arange(len(ids)), len(ids)).astype(np.int32)
    return rows, positions

  def scatter(self, client_ids, rows) -> None:
    """Queues the real clients' updated rows for write-back. The device-to-host copy starts at
    once and runs while the device computes (`copy_to_host_async`); the rows are written into
    the store at the next `gather`, checkpoint or read (`flush`), by which time the copy has
    usually finished, so the round's dispatch does not wait for it."""
    self.flush()
    for leaf in jax.tree.leaves(rows):
      if hasattr(leaf, "copy_to_host_async"):
        leaf.copy_to_host_async()
    self._pending = (np.asarray(client_ids), rows)

  def flush(self) -> None:
    """Writes queued rows (`scatter`) into the store. A new client gets the next free slot;
    the index records it only once its row is written. A full disk is one line naming the
    directory (WorkdirError): the run stops, the rounds recorded so far and the checkpoints
    stay, and a rerun resumes from the newest checkpoint."""
    pending, self._pending = self._pending, None
    if pending is None:
      return
    ids, rows = pending
    real = ids < self.num_clients
    ids = ids[real].astype(np.int64)
    slots = self._find(ids)
    new = slots < 0
    slots[new] = len(self._ids) + np.arange(int(new.sum()))
    leaves = [np.asarray(leaf)[real] for leaf in jax.tree.leaves(rows)]
    try:
      self.store.write(slots, leaves)
    except Exception as e:  # pylint: disable=broad-except
      why = disk_full(e)
      if why is None:
        raise
      raise WorkdirError(
          f"engine.client_table='disk': the disk is full ({why} while writing client rows to "
          f"{self.store.directory}); the metrics and the last checkpoint are intact: free space "
          f"or move the workdir, then rerun the same command to resume") from None
    self._add(ids[new], slots[new])

  # ------------------------------------------------------------------------------ checkpoints
  def to_checkpoint(self) -> dict:
    """What a checkpoint stores: the touched ids (sorted) and, for a table in memory, their
    rows in that order; a disk table's rows go by `snapshot`, at their slots."""
    self.flush()
    ids = self._ids.astype(np.int32)
    if self.kind == "disk":
      return {"ids": ids, "slots": self._slots.copy()}
    outs = [np.empty((len(ids), *leaf.shape), leaf.dtype) for leaf in self._init_leaves]
    self.store.read(self._slots, outs, np.arange(len(ids)))
    return {"ids": ids, "rows": jax.tree.unflatten(self._treedef, outs)}

  def snapshot(self, target: str) -> None:
    """A disk table's touched rows as files under `target` (hard links, see `DiskRows`)."""
    self.flush()
    self.store.snapshot(target, self._slots)

  def checkpoint_template(self, num_rows: int, kind: str = "host") -> dict:
    """The structure `to_checkpoint` gave for `num_rows` touched rows in a table of `kind`."""
    if kind == "disk":
      return {"ids": np.zeros((num_rows,), np.int32), "slots": np.zeros((num_rows,), np.int64)}
    return {"ids": np.zeros((num_rows,), np.int32),
            "rows": jax.tree.map(lambda r: np.zeros((num_rows, *r.shape), r.dtype),
                                 self.init_row)}

  def load_checkpoint(self, saved: dict, rows_directory: str | None = None) -> "HostClientTable":
    """Replaces the table's rows by a checkpoint's (`to_checkpoint`; a disk table's rows from
    its `snapshot` at `rows_directory`). Either kind of table loads either kind of checkpoint."""
    ids = np.asarray(saved["ids"], np.int64)
    self._pending = None
    self._ids, self._slots = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if "slots" in saved:   # a disk table's checkpoint: rows in files, at their slots
      slots = np.asarray(saved["slots"], np.int64)
      if self.kind == "disk":
        self.store.link_from(rows_directory, slots)
      else:
        self.store.reset()
        for at, rows in read_snapshot(rows_directory, self._init_leaves, slots):
          self.store.write(slots[at], rows)
    else:
      slots = np.arange(len(ids), dtype=np.int64)
      self.store.reset()
      self.store.write(slots, [np.asarray(r) for r in jax.tree.leaves(saved["rows"])])
    self._ids, self._slots = ids, slots
    return self

  def dense(self):
    """The whole table as the device engine would hold it (tests, small M only)."""
    self.flush()
    outs = [np.broadcast_to(leaf, (self.num_clients, *leaf.shape)).copy()
            for leaf in self._init_leaves]
    self.store.read(self._slots, outs, self._ids)
    return jax.tree.unflatten(self._treedef, outs)

  def close(self) -> None:
    """Frees the rows (a disk table removes its directory). The table is unusable after."""
    self._pending = None
    self.store.close()


# The share of the memory (the accelerator's, or on a CPU the host's available memory) that
# 'auto' lets the dense [M, ...] table take. The rest holds the model, the vmapped cohort (up to
# half of an accelerator, `execution.VMAP_MEMORY_FRACTION`), the training set and XLA's workspace.
TABLE_MEMORY_FRACTION = 0.25
# The share of the host's available memory that 'auto' lets the touched rows of a 'host' table
# take; above it the rows go to disk.
HOST_MEMORY_FRACTION = 0.5


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


def _gib(n: float) -> str:
  return f"{n / 2 ** 30:.3g} GiB"


def resolve(mode: str, algorithm, params, num_clients: int, budget_mb: float = 0.0,
            memory_bytes: int | None = None, rounds: int | None = None,
            clients_per_round: int | None = None, host_bytes: int | None = None) -> str:
  """'device', 'host' or 'disk' for `engine.client_table`.

  'auto' keeps the dense table of `num_clients` rows of the algorithm's client state on the
  device when it fits the budget: `budget_mb` when > 0 (`engine.client_table_budget_mb`), else
  TABLE_MEMORY_FRACTION of `memory_bytes` (default: `device_memory()`, the device's own size).
  Above it, the rows the run can touch (`rounds` x `clients_per_round`, at most M; M when
  either is unknown) go to 'host' when they fit HOST_MEMORY_FRACTION of `host_bytes` (default:
  the host's available memory), else to 'disk'. With the memory unknown, the table stays on the
  device. The choice and its reason are logged in one line (DEBUG: `--verbose`).
  """
  if mode not in CLIENT_TABLES:
    raise ValueError(f"engine.client_table={mode!r} is not one of {list(CLIENT_TABLES)}")
  if budget_mb < 0:
    raise ValueError(f"engine.client_table_budget_mb must be >= 0 (0 = "
                     f"{TABLE_MEMORY_FRACTION:.0%} of the device's memory), got {budget_mb}")
  row = jax.eval_shape(algorithm.client_state_init, params)
  if not jax.tree.leaves(row):
    return "device"   # no per-client state: nothing to hold anywhere
  if mode in HELD_TABLES and jax.process_count() > 1:
    raise ConfigError(f"engine.client_table={mode!r}: multi-process runs keep the client "
                      f"table on the devices of the mesh; use 'device' (or 'auto')")
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
    source = f"{TABLE_MEMORY_FRACTION:.0%} of {_gib(memory_bytes)}, {source}"
  why = (f"the dense table of {num_clients:,} clients takes {_gib(dense)}, the budget is "
         f"{_gib(budget)} ({source})")
  if dense <= budget:
    logging.debug("engine.client_table 'auto' -> device: %s", why)
    return "device"
  touched = num_clients if not (rounds and clients_per_round) else \
      min(num_clients, int(rounds) * int(clients_per_round))
  if host_bytes is None:
    host_bytes = _host_available_bytes()
  held = touched * per_row
  if host_bytes is None or held <= HOST_MEMORY_FRACTION * host_bytes:
    choice = "host"
  else:
    choice = "disk"
  host = "unknown" if host_bytes is None else _gib(host_bytes)
  logging.debug("engine.client_table 'auto' -> %s: %s; the %s clients the run can touch "
                "(%s rounds x %s per round) take %s, %s %.0f%% of the host's available memory "
                "(%s)", choice, why, f"{touched:,}", rounds, clients_per_round, _gib(held),
                "over" if choice == "disk" else "within", HOST_MEMORY_FRACTION * 100, host)
  return choice
