"""One run per workdir, and never a silent mix of two settings' results.

`WorkdirLock`: an advisory `fcntl.flock` on `<workdir>/.lock`, holding the owner's pid. The kernel
releases it when the process exits in any way (kill -9 included), so a lock left by a killed run
is simply taken over; a second live run into the same workdir fails at once naming the pid.

`check_setting`: before a run writes anything, the resolved config is compared with the
workdir's `config.json` (and its checkpoint's, see `checkpoints.py`): a difference in any field
that changes the computation is refused with the list of fields and what to do, and so is a
checkpoint in the format written before orbax checkpoints (`checkpoint.msgpack`), which would
otherwise be passed over and the run restarted at round 0 over its metrics.

`keep_replaced_metrics`: a run that resumes but finds no checkpoint starts at round 0; the
rounds recorded before are moved to `metrics.replaced.jsonl`, never overwritten unseen.
"""
from __future__ import annotations

import fcntl
import json
import os

from fedjax_sharp.training import config as config_lib
from fedjax_sharp.errors import WorkdirError

LOCK = ".lock"
CHECKPOINT_DIRECTORY = "checkpoints"      # orbax checkpoints (checkpoints.py)
LEGACY_CHECKPOINT = "checkpoint.msgpack"  # the format before orbax; not readable any more
METRICS = "metrics.jsonl"
REPLACED_METRICS = "metrics.replaced.jsonl"


class WorkdirLock:
  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK)
    self._f = None

  def __enter__(self):
    workdir = os.path.dirname(self.path)
    if os.path.exists(workdir) and not os.path.isdir(workdir):
      raise WorkdirError(f"--workdir={workdir} is an existing file, not a directory: give a "
                         f"directory (it is created if missing)")
    try:
      os.makedirs(workdir, exist_ok=True)
    except OSError as e:
      raise WorkdirError(f"--workdir={workdir} cannot be created ({e.strerror or e})") from None
    f = open(self.path, "a+")
    try:
      fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip() or "unknown"
      f.close()
      raise WorkdirError(
          f"{os.path.dirname(self.path)} is in use by another run (pid {holder}); wait for it to "
          f"finish or use another --workdir") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    self._f = f
    return self

  def __exit__(self, *exc):
    if self._f is not None:
      try:
        self._f.seek(0)
        self._f.truncate()
      finally:
        fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)
        self._f.close()
        self._f = None
    return False


def saved_config(workdir: str) -> dict | None:
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise WorkdirError(f"{path} is unreadable ({e}); use another --workdir, or "
                       f"--config.resume=False to start over in this one") from None


def has_results(workdir: str) -> bool:
  path = os.path.join(workdir, METRICS)
  return os.path.exists(path) and os.path.getsize(path) > 0


def recorded_rounds(workdir: str) -> int:
  with open(os.path.join(workdir, METRICS)) as f:
    return sum(1 for line in f if line.strip())


def keep_replaced_metrics(workdir: str) -> str:
  """Moves the workdir's metrics.jsonl aside (replacing an older copy) and returns its path."""
  kept = os.path.join(workdir, REPLACED_METRICS)
  os.replace(os.path.join(workdir, METRICS), kept)
  return kept


def mismatch_message(workdir: str, diffs: list[str], what: str) -> str:
  return (f"{workdir} holds {what} of another setting ({'; '.join(diffs)}); use another "
          f"--workdir, or --config.resume=False to discard them and start over here")


def check_setting(workdir: str, config) -> None:
  """Refuses to write into a workdir whose results come from another setting (resume=True)."""
  if not config.resume:
    return
  legacy = os.path.join(workdir, LEGACY_CHECKPOINT)
  if (os.path.exists(legacy) and has_results(workdir)
      and not os.path.isdir(os.path.join(workdir, CHECKPOINT_DIRECTORY))):
    raise WorkdirError(
        f"{legacy} is a checkpoint in the format of versions before orbax checkpoints, which "
        f"this version cannot read: resuming would start at round 0 over the "
        f"{recorded_rounds(workdir)} rounds in {METRICS}; use another --workdir, or "
        f"--config.resume=False to discard them and start over here")
  saved = saved_config(workdir)
  if saved is None or not has_results(workdir):
    return
  diffs = config_lib.setting_differences(saved, config, allow=("rounds",))
  if diffs:
    raise WorkdirError(mismatch_message(workdir, diffs, "results"))
