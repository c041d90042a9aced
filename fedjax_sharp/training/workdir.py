"""One run per workdir, and never a silent mix of two settings' results.

`WorkdirLock`: an advisory `fcntl.flock` on `<workdir>/.lock`, holding the owner's pid. The kernel
releases it when the process exits in any way (kill -9 included), so a lock left by a killed run
is simply taken over; a second live run into the same workdir fails at once naming the pid.

`check_setting`: before a run writes anything, the resolved config is compared with the
workdir's `config.json` (and its checkpoint's, see `checkpoints.py`) by `setting_differences`:
a difference in any field that changes the computation is refused with the list of fields and
what to do, and so is a checkpoint in the format written before orbax checkpoints
(`checkpoint.msgpack`), which would otherwise be passed over and the run restarted at round 0
over its metrics.

`keep_replaced_metrics`: a run that resumes but finds no checkpoint starts at round 0; the
rounds recorded before are moved to `metrics.replaced.jsonl`, never overwritten unseen.
"""
from __future__ import annotations

import fcntl
import json
import os

from fedjax_sharp.errors import WorkdirError
from fedjax_sharp.models import registry
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import fields as fields_lib
from fedjax_sharp.training import privacy_rules

LOCK = ".lock"
CHECKPOINT_DIRECTORY = "checkpoints"      # orbax checkpoints (checkpoints.py)
CLIENT_ROWS_DIRECTORY = "client_rows"     # a disk client table's live rows (core/client_table.py)
LEGACY_CHECKPOINT = "checkpoint.msgpack"  # the format before orbax; not readable any more
METRICS = "metrics.jsonl"
REPLACED_METRICS = "metrics.replaced.jsonl"


class WorkdirLock:
  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK)
    self._f = None
    self._created = False

  def __enter__(self):
    workdir = os.path.dirname(self.path)
    if os.path.exists(workdir) and not os.path.isdir(workdir):
      raise WorkdirError(f"--workdir={workdir} is an existing file, not a directory: give a "
                         f"directory (it is created if missing)")
    try:
      self._created = not os.path.isdir(workdir)
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
        self._remove_if_alone()
        fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)
        self._f.close()
        self._f = None
    return False

  def _remove_if_alone(self) -> None:
    """A run refused before it wrote anything (a config error found while building) leaves no
    trace: the lock goes, and the workdir too if the lock created it."""
    workdir = os.path.dirname(self.path)
    try:
      if os.listdir(workdir) == [LOCK]:
        os.unlink(self.path)
        if self._created:
          os.rmdir(workdir)
    except OSError:
      pass


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


def _flatten(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def setting_differences(saved: dict, config, allow: tuple[str, ...] = ()) -> list[str]:
  """'field: saved X, now Y' for every setting field (`config.SETTING_FIELDS`, `algorithm.name`
  and the algorithm's own block) where a saved config.json differs from `config`, except
  `allow`. `config` as given: its 'auto' fields are resolved as a run resolves them
  (`config.resolved_setting`). A field the saved config lacks (written by an older version)
  counts as equal only if `config` holds the library default for it."""
  return resolved_differences(saved, config_lib.resolved_setting(config), allow)


# The dp fields a resolved config copies from an own-DP algorithm's block (DP-FedSAM's), which a
# config.json of an older version left at their defaults.
OWN_DP_MIRRORS = ("dp.enabled",) + tuple(f"dp.{k}" for k in privacy_rules.MECHANISM_FIELDS)


def resolved_differences(saved: dict, config, allow: tuple[str, ...] = ()) -> list[str]:
  """`setting_differences` of a config whose 'auto' fields are resolved already (the config a
  run executes and records), compared as it stands."""
  new = json.loads(config.to_json_best_effort())
  saved = config_lib.upgraded(saved)
  if "compute_dtype" in saved.get("model", {}):   # 'auto' in a config.json of an older version
    saved = json.loads(json.dumps(saved))
    saved["model"]["compute_dtype"] = registry.resolve_compute_dtype(
        saved["model"]["compute_dtype"])
  default = _flatten(json.loads(config_lib.base_config().to_json_best_effort()))
  fields = list(config_lib.SETTING_FIELDS) + ["algorithm"]
  in_setting = lambda key: any(key == f or key.startswith(f + ".") for f in fields)
  new_flat = {k: v for k, v in _flatten(new).items() if in_setting(k)}
  old_flat = {k: v for k, v in _flatten(saved).items() if in_setting(k)}
  if "model" in saved:   # written before the field existed: computed in float32
    old_flat.setdefault("model.compute_dtype", "float32")
  own_dp = privacy_rules.own_privacy(config)
  unused = fields_lib.unused_blocks(config)   # not in a config.json: nothing to compare
  keep = lambda key: ".".join(key.split(".")[:2]) not in unused
  diffs = []
  for key, value in new_flat.items():
    if not keep(key) or key in allow or key in config_lib.PERFORMANCE_FIELDS:
      continue
    if key == "dp.noise_multiplier" and new_flat["dp.target_epsilon"] is not None:
      continue   # solved from dp.target_epsilon and the other fields
    if own_dp and key in OWN_DP_MIRRORS:
      continue   # copied from the algorithm's own block, which is compared itself
    old = old_flat.get(key, default.get(key, value))
    if old != value:
      diffs.append(f"{key}: saved {old!r}, now {value!r}")
  return diffs


def check_setting(workdir: str, config) -> None:
  """Refuses to write into a workdir whose results come from another setting (resume=True).
  `config` as given: its 'auto' fields are resolved as a run resolves them."""
  if config.resume:
    check_resolved_setting(workdir, config_lib.resolved_setting(config))


def check_resolved_setting(workdir: str, config) -> None:
  """`check_setting` of a config whose 'auto' fields are resolved already
  (`config.resolved_setting`): `loop.run` resolves once, after taking the lock."""
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
  diffs = resolved_differences(saved, config, allow=("rounds",))
  if diffs:
    raise WorkdirError(mismatch_message(workdir, diffs, "results"))
