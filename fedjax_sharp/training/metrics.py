"""Metric writers that never lose what a run has produced.

Per-round metrics are appended to `metrics.jsonl`, one JSON object per line, flushed and
fsync'ed after each line (a crash loses at most the round in flight). Whole-file artefacts
(config, summary) are written to a temporary file and atomically renamed.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Iterable

import numpy as np


def _jsonable(value: Any):
  if isinstance(value, (np.floating, np.integer)):
    value = value.item()
  if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
    value = value.tolist()
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def atomic_write_bytes(path: str, data: bytes) -> None:
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_", suffix=os.path.basename(path))
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_write_text(path: str, text: str) -> None:
  atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str, obj: Any) -> None:
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


class JsonlWriter:
  """Appends one JSON line per record; each line is durable once `write` returns."""

  def __init__(self, path: str, truncate: bool = True):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self.path = path
    self._f = open(path, "w" if truncate else "a")

  def write(self, record: dict) -> None:
    self._f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
    self._f.flush()
    os.fsync(self._f.fileno())

  def close(self) -> None:
    self._f.close()


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def summarize(records: Iterable[dict], last_n: int, target_accuracy: float = 0.0) -> dict:
  """The papers' numbers: mean/std test accuracy over the last N evaluated rounds, etc."""
  records = list(records)
  evaluated = [r for r in records if r.get("test_accuracy") is not None]
  accs = np.array([r["test_accuracy"] for r in evaluated], np.float64)
  tail = accs[-last_n:]
  summary = {
      "rounds": len(records),
      "final_test_accuracy": float(accs[-1]) if len(accs) else None,
      "best_test_accuracy": float(accs.max()) if len(accs) else None,
      f"mean_test_accuracy_last_{last_n}": float(tail.mean()) if len(tail) else None,
      f"std_test_accuracy_last_{last_n}": float(tail.std()) if len(tail) else None,
      "last_n": last_n,
      "bytes_total": records[-1]["bytes_total"] if records else 0,
      "wall_time_s": records[-1]["wall_time_s"] if records else 0.0,
  }
  if target_accuracy > 0:
    hit = [r["round"] + 1 for r in evaluated if r["test_accuracy"] >= target_accuracy]
    summary["target_accuracy"] = target_accuracy
    summary["rounds_to_target"] = hit[0] if hit else None
  return summary
