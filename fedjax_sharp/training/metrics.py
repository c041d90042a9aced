"""Metric writers that never lose what a run has produced.

Per-round metrics are appended to `metrics.jsonl`, one JSON object per line, flushed and
fsync'ed after each line (a crash loses at most the round in flight). Whole-file artefacts
(config, summary) are written to a temporary file and atomically renamed.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable

import numpy as np

from fedjax_sharp.fileio import atomic_write_bytes


def _jsonable(value: Any):
  if isinstance(value, (np.floating, np.integer)):
    value = value.item()
  if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
    value = value.tolist()
  if isinstance(value, float) and not math.isfinite(value):
    return None  # JSON has no NaN: null (the record is flagged "nonfinite", the run "diverged")
  return value


def atomic_write_text(path: str, text: str) -> None:
  atomic_write_bytes(path, text.encode())


def _clean(obj):
  """Recursively JSON-safe: NumPy scalars to Python, non-finite floats to None."""
  if isinstance(obj, dict):
    return {k: _clean(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_clean(v) for v in obj]
  return _jsonable(obj)


def atomic_write_json(path: str, obj: Any) -> None:
  atomic_write_text(path, json.dumps(_clean(obj), indent=2, sort_keys=True,
                                     default=_jsonable, allow_nan=False) + "\n")


class JsonlWriter:
  """Appends one JSON line per record; each line is durable once `write` returns."""

  def __init__(self, path: str, truncate: bool = True):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self.path = path
    self._f = open(path, "w" if truncate else "a")

  def write(self, record: dict) -> None:
    self._f.write(json.dumps(_clean(record), allow_nan=False) + "\n")
    self._f.flush()
    os.fsync(self._f.fileno())

  def close(self) -> None:
    self._f.close()


def read_jsonl(path: str) -> list[dict]:
  """The records of a metrics file. A torn last line (a kill during a write) is dropped; a bad
  line anywhere else is an error naming the file and line."""
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  records = []
  for i, line in enumerate(lines):
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError as e:
      if i == len(lines) - 1:
        break
      raise ValueError(f"{path}: line {i + 1} is not JSON ({e})") from None
  return records


def measured(record: dict, key: str):
  """`key`'s value in a metrics record; None where its round did not measure it. The rounds
  between evaluations (and a non-finite one) write the evaluation metrics as an explicit None;
  a metric measured on a schedule of its own (`lambda_max`, `hessian_trace`, ... of
  `config.analysis`) is absent from the other rounds' records. Readers of metrics.jsonl take
  both through here."""
  return record.get(key)


def evaluated(records: Iterable[dict], key: str) -> list[dict]:
  """The records of the rounds that measured `key` (`measured`), in order."""
  return [r for r in records if measured(r, key) is not None]


def summarize(records: Iterable[dict], last_n: int, target: float = 0.0,
              metric: str = "test_accuracy", higher_is_better: bool = True) -> dict:
  """The papers' numbers for `metric` (test accuracy by default; a minimax task's own metric
  otherwise): final, best, mean/std over the last N evaluated rounds, rounds to a target."""
  records = list(records)
  scored = evaluated(records, metric)
  values = np.array([r[metric] for r in scored], np.float64)
  tail = values[-last_n:]
  last_n = len(tail)  # what was actually averaged (fewer when fewer rounds were evaluated)
  best = (values.max() if higher_is_better else values.min()) if len(values) else None
  summary = {
      "metric": metric, "higher_is_better": higher_is_better,
      "rounds": len(records),
      f"final_{metric}": float(values[-1]) if len(values) else None,
      f"best_{metric}": float(best) if best is not None else None,
      f"mean_{metric}_last_{last_n}": float(tail.mean()) if len(tail) else None,
      f"std_{metric}_last_{last_n}": float(tail.std()) if len(tail) else None,
      "last_n": last_n,
      "bytes_total": records[-1]["bytes_total"] if records else 0,
      "wall_time_s": records[-1]["wall_time_s"] if records else 0.0,
  }
  if target > 0:
    reached = (lambda v: v >= target) if higher_is_better else (lambda v: v <= target)
    hit = [r["round"] + 1 for r in scored if reached(r[metric])]
    summary["target"] = target
    summary["rounds_to_target"] = hit[0] if hit else None
    if metric == "test_accuracy":
      summary["target_accuracy"] = target
  return summary


# The keys of a run's summary that older versions did not write, with what their absence
# means: `metric` and `higher_is_better` came with the minimax tasks (before them every run
# was scored by its test accuracy); `status` came with the interrupted and diverged statuses (a
# summary without it counts as completed: an unfinished run of those versions shows by its
# `rounds`). `seed` is written by every version; hand-made summaries may leave it out.
# `dp_epsilon` has no default: it is present exactly when the run had differential privacy
# (None there: no noise, epsilon infinite).
SUMMARY_DEFAULTS = {"metric": "test_accuracy", "higher_is_better": True,
                    "status": "completed", "seed": None}


def summary_with_defaults(summary: dict) -> dict:
  """A copy of `summary` with every key of SUMMARY_DEFAULTS, so that readers index it."""
  return {**SUMMARY_DEFAULTS, **summary}


def read_summary(path: str) -> dict:
  """A run's summary.json, completed by `summary_with_defaults` (older versions lack keys)."""
  with open(path) as f:
    return summary_with_defaults(json.load(f))


class TensorBoardWriter:
  """Each round's numeric metrics as TensorBoard scalars (tensorboardX; no TensorFlow).

  The step is the round number (1-based, as the progress line); lists (per-class accuracy, the
  minimax weights y) and non-numeric fields are skipped. Optional: `pip install
  '.[tensorboard]'`; a clear error names the extra when it is missing.
  """

  SKIP = ("round", "wall_time_s")

  def __init__(self, logdir: str):
    try:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError("config.log.tensorboard=True needs tensorboardX: pip install "
                        "'.[tensorboard]'") from e
    self._writer = SummaryWriter(logdir)

  def write(self, record: dict, flush: bool = True) -> None:
    step = int(record["round"]) + 1
    for key, value in record.items():
      if key in self.SKIP or isinstance(value, bool) or not isinstance(value, (int, float)):
        continue
      self._writer.add_scalar(key, float(value), step)
    if flush:
      self._writer.flush()

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()
