"""Checkpoints through orbax: server state, client table, the next round, the bytes counter and
the resolved config, under `<workdir>/checkpoints/<round>/`, the last `checkpoint_keep` kept.

Orbax writes each checkpoint to a temporary directory and renames it when complete, so a kill
during a save leaves the previous checkpoint intact. Cohorts, data order and device keys depend
only on (seed, round), so a resumed run equals an uninterrupted one (tested with real kills).

On resume the saved config is compared with the current one: any difference in a field that
changes the computation (`config.SETTING_FIELDS`, `algorithm.name` and its block) is refused
with the list of fields; `rounds` may grow (extending a finished run).

A table held off the device (`core.client_table`) stores its touched rows only: a 'host' table
their ids and rows in the state item; a 'disk' table their ids and slots there and the rows'
files, hard-linked into the checkpoint's own `client_rows` item inside orbax's temporary
directory, so they are committed (or lost to a kill) with the rest. Either kind resumes from
the other's checkpoint ('auto' may choose differently on the resumed run's machine).

Multi-process runs (`core.distributed`): every process calls `save` and `restore` together on
the same directory (a filesystem all hosts share). A global `jax.Array` split across the
processes (the client table on the mesh) is written by its owners, each process its own row
blocks; everything else (host data, arrays every process holds whole) once. Restore reads a
leaf whose template is a global array into that array's sharding (each process its own shards);
any other leaf (the engine's `init` state is one process's arrays) as a host array, which the
round then places on the mesh as it places a fresh state (a committed one-device array cannot
be moved across processes). Every process resumes from the step process 0 sees, and a
checkpoint of another process count is refused (`process_count` in the meta: the row blocks and
the mesh belong to that count).
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging as std_logging
import os
import sys
import warnings

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from fedjax_sharp.core.client_table import HELD_TABLES, HostClientTable
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.errors import WorkdirError
from fedjax_sharp.fileio import disk_full
from fedjax_sharp.training.workdir import CHECKPOINT_DIRECTORY as DIRECTORY
from fedjax_sharp.training.workdir import mismatch_message, setting_differences


class _Orbax:
  """`orbax.checkpoint`, imported on first use: a run that never writes or reads a checkpoint
  does not import it (orbax and tensorstore add to every command's start: docs/performance.md)."""

  def __getattr__(self, name):
    import orbax.checkpoint  # pylint: disable=g-import-not-at-top
    return getattr(orbax.checkpoint, name)


ocp = _Orbax()


def fingerprint(config) -> str:
  """A short hash of the setting fields (what changes the numbers). `config` holds every declared
  section and algorithm block (`config.base_config`)."""
  full = json.loads(config_lib.resolved_setting(config).to_json_best_effort())
  for path in config_lib.PERFORMANCE_FIELDS:   # how fast, not what: not part of the setting
    section, field = path.split(".")
    del full[section][field]
  name = full["algorithm"]["name"]
  setting = {k: full[k] for k in config_lib.SETTING_FIELDS if k != "rounds" and "." not in k}
  default = json.loads(config_lib.base_config().to_json_best_effort())
  for path in (k for k in config_lib.SETTING_FIELDS if "." in k):
    # One field of a section (`engine.sampling`): counted only when not its default, so that
    # checkpoints written before the field existed keep their fingerprint.
    section, field = path.split(".")
    if full[section][field] != default[section][field]:
      setting[path] = full[section][field]
  setting["algorithm"] = {"name": name, name: full["algorithm"][name]}
  return hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]


def _manager(workdir: str, keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=max(int(keep), 1), create=True,
                                         enable_async_checkpointing=False)
  return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, DIRECTORY)),
                               options=options)


def latest_round(workdir: str) -> int | None:
  """The next round of the newest complete checkpoint, or None."""
  path = os.path.join(workdir, DIRECTORY)
  if not os.path.isdir(path):
    return None
  steps = [int(d) for d in os.listdir(path) if d.isdigit()
           and os.path.exists(os.path.join(path, d, "commit_success.txt"))]
  return max(steps) if steps else None


def _global_or_host(x):
  """A multi-process leaf as orbax writes it: a global array split across processes stays one
  (each process writes its shards); anything this process holds whole becomes host data."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return x
  return jax.device_get(x)


# The checkpoint item of a disk table's rows: their files, hard-linked (`DiskRows.snapshot`).
ROWS_ITEM = "client_rows"
_ROWS_ARGS = []


def _rows_args():
  """(save, restore) orbax arguments of ROWS_ITEM, registered on first use: a handler that
  snapshots a disk table's rows into the checkpoint's temporary directory, which orbax then
  commits with the rest (a kill before the commit leaves the previous checkpoint the newest),
  and on restore gives the table the item's directory to link its rows back from."""
  if not _ROWS_ARGS:
    import dataclasses  # pylint: disable=g-import-not-at-top
    from typing import Any  # pylint: disable=g-import-not-at-top

    class ClientRowsHandler(ocp.CheckpointHandler):
      def save(self, directory, args):
        args.table.snapshot(str(directory))

      def restore(self, directory, args=None):
        del args
        return str(directory)

    @ocp.args.register_with_handler(ClientRowsHandler, for_save=True)
    @dataclasses.dataclass
    class ClientRowsSave(ocp.args.CheckpointArgs):
      table: Any

    @ocp.args.register_with_handler(ClientRowsHandler, for_restore=True)
    @dataclasses.dataclass
    class ClientRowsRestore(ocp.args.CheckpointArgs):
      pass

    _ROWS_ARGS.extend((ClientRowsSave, ClientRowsRestore))
  return _ROWS_ARGS


def table_kind(client_table) -> str:
  """'device', 'host' or 'disk': where `client_table` holds its rows."""
  return client_table.kind if isinstance(client_table, HostClientTable) else "device"


_WHERE = {"device": "in device memory", "host": "in host memory", "disk": "in files on disk"}


def save(workdir: str, config, next_round: int, server_state, client_table, bytes_total: int,
         keep: int = 2) -> None:
  """Writes the checkpoint of round `next_round`. Multi-process: every process calls it with
  the same `workdir`."""
  kind = table_kind(client_table)   # a held table is refused by multi-process runs
  clients = (client_table.to_checkpoint() if kind in HELD_TABLES
             else jax.tree.map(_global_or_host, client_table))
  state = {"server": jax.tree.map(_global_or_host, server_state), "clients": clients}
  meta = {"next_round": int(next_round), "bytes_total": int(bytes_total),
          "process_count": jax.process_count(),
          "fingerprint": fingerprint(config),
          "config": json.loads(config_lib.resolved_setting(config).to_json_best_effort()),
          # A held table stores its touched rows only: their count shapes the restore.
          "client_table": kind,
          "client_rows": int(len(clients["ids"])) if kind in HELD_TABLES else None}
  items = {"state": ocp.args.PyTreeSave(state), "meta": ocp.args.JsonSave(meta)}
  if kind == "disk":
    items[ROWS_ITEM] = _rows_args()[0](client_table)
  held = _HeldLogs()
  ignore_abandoned_async_work()   # before the save: the noise may come as soon as it fails
  try:
    with _manager(workdir, keep) as manager, _orbax_logs_held(held):
      manager.save(int(next_round), args=ocp.args.Composite(**items), force=True)
  except Exception as e:  # pylint: disable=broad-except
    gc.collect()
    why = disk_full(e)
    if why is None:
      held.release()   # orbax's own account of an unexpected failure, then its exception
      raise
    # A full disk: orbax's tracebacks of it (two, ~50 lines each) are dropped for one line.
    last = latest_round(workdir)
    kept = f"the checkpoint of round {last}" if last is not None else "the results so far"
    raise WorkdirError(
        f"--workdir={workdir}: the disk is full ({why} while writing the checkpoint of round "
        f"{next_round}); the metrics and {kept} are intact: free space or move the workdir, "
        f"then rerun the same command to resume") from None


class _HeldLogs:
  """Orbax's warning and error records held back while a checkpoint is written (`save`):
  released (logged as they were) after a success or an unexpected failure, dropped for a full
  disk, which `save` reports in one line."""

  def __init__(self):
    self.records = []

  def filter(self, record) -> bool:
    if "/orbax/" in record.pathname and record.levelno >= std_logging.WARNING:
      self.records.append(record)
      return False
    return True

  def release(self) -> None:
    records, self.records = self.records, []
    for record in records:
      std_logging.getLogger(record.name).handle(record)


@contextlib.contextmanager
def _orbax_logs_held(held: _HeldLogs):
  """Holds orbax's warning and error records in `held` while the block runs: released at its
  normal end; on an exception the caller decides (`held.release()`, or drop them)."""
  logger = std_logging.getLogger("absl")   # orbax logs through absl
  logger.addFilter(held)
  try:
    yield
  finally:
    logger.removeFilter(held)
  held.release()


# The metadata keys that checkpoints of older versions lack, with what their absence meant:
# `process_count` came with multi-process runs (before them every run had one process),
# `client_table` and `client_rows` with host-held client tables (before them the table was
# always in device memory, restored whole). Every version wrote `next_round`, `bytes_total`,
# `fingerprint` and `config`.
META_DEFAULTS = {"process_count": 1, "client_table": "device", "client_rows": None}


def _read_meta(manager: ocp.CheckpointManager, step: int) -> dict:
  """The metadata of checkpoint `step`, completed by META_DEFAULTS."""
  meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  return {**META_DEFAULTS, **meta}


def _restore_args(template):
  """Orbax restore arguments for `template`: its own shardings in a single-process run; in a
  multi-process one, global arrays keep theirs and every other leaf comes back to the host."""
  if jax.process_count() == 1:
    return jax.tree.map(lambda x, a: ocp.RestoreArgs(restore_type=np.ndarray)
                        if _uncommitted(x) else a,
                        template, ocp.checkpoint_utils.construct_restore_args(template))

  def arg(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return ocp.ArrayRestoreArgs(sharding=x.sharding, global_shape=x.shape, dtype=x.dtype)
    return ocp.RestoreArgs(restore_type=np.ndarray)
  return jax.tree.map(arg, template)


def _uncommitted(x) -> bool:
  """An array of the running state that no device was named for (what the engine's init and
  rounds make on one device). It comes back from a checkpoint the same way, through host
  memory: orbax would place it on its device, committed, and jit keys its programs on
  commitment, so the first round after a restore would compile the round program again in a
  process that had run rounds before (a resumed process's first round would ask for another
  program than a fresh run's)."""
  return (isinstance(x, jax.Array) and not getattr(x, "committed", True)
          and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key))


def _agreed_step(step: int | None) -> int | None:
  """Process 0's newest step on every process (a shared filesystem may show the processes
  different listings for a while; they must all restore the same round)."""
  if jax.process_count() == 1:
    return step
  agreed = int(multihost_utils.broadcast_one_to_all(np.int32(-1 if step is None else step)))
  return None if agreed < 0 else agreed


UNREADABLE = "checkpoints.unreadable"   # where an unreadable checkpoint is moved, kept


class _Unreadable(Exception):
  """A checkpoint orbax cannot read (garbled, truncated): its path and the reason, one line."""


def restore(workdir: str, config, server_state, client_table):
  """Returns (next_round, server_state, client_table, bytes_total, meta) of the newest readable
  checkpoint (meta completed by META_DEFAULTS), or None when there is none. A checkpoint that
  cannot be read (garbled or truncated files) is moved aside to `<workdir>/checkpoints.unreadable/`
  (never deleted), said in one warning line, and the next older one is tried: a run resumes
  from the newest readable round by itself, or starts at round 0 when none is left. Raises
  WorkdirError naming the differing fields when a checkpoint comes from another setting or
  another process count. Multi-process: every process calls it with the same `workdir`; there
  an unreadable checkpoint is an error (the processes would have to agree on the fallback)."""
  step = _agreed_step(latest_round(workdir))
  while step is not None:
    try:
      return _restore_step(workdir, step, config, server_state, client_table)
    except _Unreadable as e:
      path = os.path.join(workdir, DIRECTORY, str(step))
      if jax.process_count() > 1:
        raise WorkdirError(f"checkpoint {path} cannot be read ({e}); move it out of "
                           f"{os.path.join(workdir, DIRECTORY)} to resume from an older one, "
                           f"or use --config.resume=False to start over") from None
      moved = _set_aside(workdir, step)
      older = latest_round(workdir)
      logging.warning(
          "checkpoint %s cannot be read (%s); moved it to %s and %s", path, e, moved,
          f"resuming from the checkpoint of round {older}" if older is not None else
          "no older checkpoint is left: the run starts at round 0")
      step = older
  return None


def _set_aside(workdir: str, step: int) -> str:
  """Moves checkpoint `step` out of orbax's directory to `<workdir>/checkpoints.unreadable/`
  (a fresh name if one is there already); returns where it went."""
  aside = os.path.join(workdir, UNREADABLE)
  os.makedirs(aside, exist_ok=True)
  target, n = os.path.join(aside, str(step)), 1
  while os.path.exists(target):
    target, n = os.path.join(aside, f"{step}.{n}"), n + 1
  os.replace(os.path.join(workdir, DIRECTORY, str(step)), target)
  return target


def _restore_step(workdir: str, step: int, config, server_state, client_table):
  """`restore` of checkpoint `step`; raises _Unreadable when orbax cannot read it."""
  path = os.path.join(workdir, DIRECTORY, str(step))
  kind = table_kind(client_table)
  ignore_abandoned_async_work()
  try:
    with _manager(workdir, 2) as manager, warnings.catch_warnings():
      warnings.simplefilter("ignore")
      meta = _read_meta(manager, step)
      diffs = setting_differences(meta["config"], config, allow=("rounds",))
      if diffs:
        raise WorkdirError(mismatch_message(workdir, diffs, "a checkpoint"))
      saved_processes = int(meta["process_count"])
      if saved_processes != jax.process_count():
        raise WorkdirError(
            f"{path} was written by {saved_processes} process(es) but this run has "
            f"{jax.process_count()}: resume with --num_processes={saved_processes}, or use "
            f"another --workdir")
      if meta["next_round"] > config.rounds:
        raise WorkdirError(f"{path} is at round {meta['next_round']}, beyond rounds="
                           f"{config.rounds}; raise --config.rounds or use another --workdir")
      saved_kind = meta["client_table"]
      # 'host' and 'disk' tables both store their touched rows, and each loads the other's.
      if (saved_kind in HELD_TABLES) != (kind in HELD_TABLES):
        raise WorkdirError(
            f"{path} holds a client table {_WHERE[saved_kind]} but this run keeps it "
            f"{_WHERE[kind]}: resume with --config.engine.client_table={saved_kind}")
      template = {"server": server_state,
                  "clients": (client_table.checkpoint_template(meta["client_rows"], saved_kind)
                              if kind in HELD_TABLES else client_table)}
      items = {"state": ocp.args.PyTreeRestore(item=template,
                                               restore_args=_restore_args(template))}
      if saved_kind == "disk":
        items[ROWS_ITEM] = _rows_args()[1]()
      state = manager.restore(step, args=ocp.args.Composite(**items))
      if kind in HELD_TABLES:   # the rows as they are (NumPy), or linked back from their files
        client_table.load_checkpoint(state["state"]["clients"],
                                     state[ROWS_ITEM] if saved_kind == "disk" else None)
  except WorkdirError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    gc.collect()   # orbax's abandoned reads report now, into the filters, not at exit
    raise _Unreadable(f"{type(e).__name__}: "
                      f"{str(e).splitlines()[0][:160] if str(e) else ''}") from None
  state = state["state"]
  if jax.process_count() == 1:   # the leaves `_restore_args` brought to the host: back uncommitted
    state = jax.tree.map(lambda x, y: jax.device_put(y) if _uncommitted(x) else y,
                         template, state)
  clients = client_table if kind in HELD_TABLES else state["clients"]
  return (int(meta["next_round"]), state["server"], clients, int(meta["bytes_total"]), meta)


_IGNORING_ABANDONED = []


def ignore_abandoned_async_work() -> None:
  """Silences what orbax's abandoned asynchronous reads and writes print once a restore or save
  has failed: orbax runs them on an event loop that it closes at the first error, so the
  tensorstore operations still in flight later call `call_soon_threadsafe` on the closed loop
  ("RuntimeError: Event loop is closed", a traceback through `sys.unraisablehook`, at any time
  up to the process's exit) and their tasks are collected with "Task exception was never
  retrieved" (asyncio's logger). The error itself is reported in one line; these copies of it
  are dropped (also when a native callback prints it through `sys.excepthook`). Everything else
  reaches the previous hooks and the logger as before. Installed once per process, before the
  first restore or save runs (the noise may come as soon as the loop closes)."""
  if _IGNORING_ABANDONED:
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    e = unraisable.exc_value
    if isinstance(e, RuntimeError) and str(e) == "Event loop is closed":
      return
    previous(unraisable)
  sys.unraisablehook = hook
  previous_excepthook = sys.excepthook

  def excepthook(kind, value, traceback):   # the same error printed by a native callback
    if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
      return
    previous_excepthook(kind, value, traceback)
  sys.excepthook = excepthook
  std_logging.getLogger("asyncio").addFilter(
      lambda record: "exception was never retrieved" not in record.getMessage())
  _IGNORING_ABANDONED.append(True)
