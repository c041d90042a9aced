"""The progress display of a run: one status line per `log_every` rounds (`Progress`, a hook of
`training.recorder.RunRecorder`)."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable

from absl import logging

from fedjax_sharp.training import metrics as metrics_lib


def _duration(s: float) -> str:
  """'42 s', '12 min 05 s', '3 h 07 min'."""
  s = int(round(s))
  if s < 100:
    return f"{s} s"
  if s < 6000:
    return f"{s // 60} min {s % 60:02d} s"
  return f"{s // 3600:,} h {s % 3600 // 60:02d} min"


class Progress:
  """One status line per `every` rounds: a line redrawn in place on a terminal of known width,
  absl log lines otherwise (a pipe, a file, or a terminal whose size is unknown or 0x0, as
  under `script`).

  The first round a process runs includes XLA's compilation (seconds to minutes), so it is shown
  on its own ("first round ... (compile)") and the ETA comes from the steady-state rounds
  after it: none is shown until one such round has run. On a terminal the line fits its width:
  a fixed-width bar, the round and the ETA always; the other fields are dropped, least useful
  first (first round, train loss, time per round, elapsed, accuracy) until the rest fits.
  `clock` (default `time.monotonic`) and `width` (default: the terminal's) are injectable for
  tests. `metric`: the record's field shown as the accuracy.

  As a hook of the run (`training.hooks`): `on_round` takes each round, `close` ends the line.
  """

  BAR = 10   # characters of the bar, always the same

  def __init__(self, total: int, every: int = 1, stream=None, start: int = 0,
               clock: Callable[[], float] = time.monotonic, width: int | None = None,
               metric: str = "test_accuracy"):
    self.total, self.every, self.start_round = total, max(1, every), start
    self.stream = stream or sys.stderr
    self.width = width if width is not None else self._terminal_width(self.stream)
    self.live = self.width > 0     # else log lines
    self.clock = clock
    self.start = clock()
    self.first_round_s = None    # compile + the first round of this process
    self.first_done_at = None
    self.metric = metric
    self._open = False           # a live line is drawn and not ended yet

  @staticmethod
  def _terminal_width(stream) -> int:
    """Columns of the terminal `stream` writes to; 0 when it is not a terminal or its size is
    unknown (0x0)."""
    try:
      if not stream.isatty():
        return 0
      return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
      return 0

  def eta_s(self, done: int) -> float | None:
    """Seconds left, from the mean steady-state round (after the first); None before one."""
    steady = done - self.start_round - 1
    if self.first_done_at is None or steady < 1:
      return None
    return (self.clock() - self.first_done_at) / steady * (self.total - done)

  def fields(self, done: int, record: dict, now: float) -> list[tuple[int, str]]:
    """(priority, text) of every field after the round counter, in display order; the line
    drops the highest priority number first."""
    eta = self.eta_s(done)
    value = metrics_lib.measured(record, self.metric)   # None between evaluations
    label = "acc" if self.metric == "test_accuracy" else self.metric
    return [
        (5, f"{label} {value:.4g}" if value is not None else f"{label} -"),
    ] + ([(2, f"train loss {record['train_loss']:.4f}")] if "train_loss" in record else []) + [
        (3, f"{record['round_time_s']:.2f} s/round"),
        (1, f"first round {_duration(self.first_round_s)} (compile)"),
        (4, f"elapsed {_duration(now - self.start)}"),
        (9, f"eta {_duration(eta)}" if eta is not None else "eta after the next round"),
    ] + ([(6, f"eps {record['dp_epsilon']:.3g}" if record["dp_epsilon"] is not None
           else "eps inf")] if "dp_epsilon" in record else [])

  def fit(self, head: str, fields: list[tuple[int, str]], width: int) -> str:
    """`head | field | ...` within `width` characters, dropping the least useful fields."""
    kept = list(fields)
    while True:
      line = " | ".join([head] + [text for _, text in kept])
      if len(line) <= width or len(kept) <= 1:
        return line[:width]
      kept.remove(min(kept, key=lambda f: f[0]))

  def update(self, done: int, record: dict) -> str:
    """Takes round `done`'s record (every round); shows a line when due. Returns the line."""
    now = self.clock()
    if self.first_round_s is None:
      self.first_round_s, self.first_done_at = now - self.start, now
    if done % self.every and done != self.total:
      return ""
    counter = f"round {done:>{len(str(self.total))}}/{self.total}"
    fields = self.fields(done, record, now)
    if not self.live:
      text = " | ".join([counter] + [t for _, t in fields])
      logging.info(text)
      return text
    filled = self.BAR * done // max(1, self.total)
    bar = "[" + "#" * filled + " " * (self.BAR - filled) + "]"
    width = self.width - 1            # the last column would wrap on some terminals
    text = self.fit(f"{bar} {counter}" if width >= 60 else counter, fields, width)
    self.stream.write("\r" + text.ljust(width))
    self._open = True
    if done == self.total:
      self.close()
    else:
      self.stream.flush()
    return text

  def on_round(self, rnd) -> None:
    self.update(rnd.t + 1, rnd.record)

  def close(self, status: str | None = None) -> None:
    """Ends the live line (at the last round, or when a run stops early)."""
    if self._open:
      self.stream.write("\n")
      self.stream.flush()
      self._open = False
