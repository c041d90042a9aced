"""The progress display of long work: a run's rounds (`Progress`, a hook of
`training.recorder.RunRecorder`; a log line every `log_every` rounds when not on a terminal) and
the analysis commands' steps (`Progress.advance`, `steps`)."""
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
  """A status line with an ETA for any long loop: a run's rounds (`update`, a hook of the run)
  and the analysis commands' iterations, probes and grid points (`advance`). On a terminal of
  known width it is one line redrawn in place at every step; otherwise (a pipe, a file, or a
  terminal whose size is unknown or 0x0, as under `script`) an absl log line at the first step,
  every `every` steps and at the last, so a piped run of R rounds logs about R / every lines.

  The first step a process runs includes XLA's compilation (seconds to minutes), so it is shown
  on its own ("first round ... (compile)") and the ETA comes from the steady-state steps after
  it: none is shown until one such step has run. On a terminal the line fits its width: a
  fixed-width bar, the label, the step counter and the ETA always; the other fields are dropped,
  least useful first (first step, train loss, time per round, elapsed, accuracy) until the rest
  fits. Numbers are shown to 4 significant digits (a diverging loss reads 2.146e+35).
  `clock` (default `time.monotonic`) and `width` (default: the terminal's) are injectable for
  tests. `metric`: the record's field shown as the accuracy. `label`: what the line is about
  ('fedgmt seed 0' in a comparison, 'lambda_max' in an analysis), shown first. `unit`: what is
  counted ('round', 'iteration', 'probe', 'point'). `every=None`: about ten log lines in all
  (every ceil(total / 10) steps); `total` may be given later, by the first `advance`.

  As a hook of the run (`training.hooks`): `on_round` takes each round, `close` ends the line.
  """

  BAR = 10   # characters of the bar, always the same
  LABEL = 24   # a terminal's line shows this many characters of the label at most

  def __init__(self, total: int, every: int | None = 1, stream=None, start: int = 0,
               clock: Callable[[], float] = time.monotonic, width: int | None = None,
               metric: str = "test_accuracy", label: str | None = None, unit: str = "round"):
    self.total, self.start_round = total, start
    self._every = every
    self.stream = stream or sys.stderr
    self.width = width if width is not None else self._terminal_width(self.stream)
    self.live = self.width > 0     # else log lines
    self.clock = clock
    self.start = clock()
    self.first_round_s = None    # compile + the first step of this process
    self.first_done_at = None
    self.metric = metric
    self.label = label or ""
    self.unit = unit
    self._open = False           # a live line is drawn and not ended yet

  @property
  def every(self) -> int:
    """Steps between log lines (a terminal's line is redrawn at every step)."""
    if self._every is None:
      return max(1, -(-self.total // 10))
    return max(1, self._every)

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
    """Seconds left, from the mean steady-state step (after the first); None before one."""
    steady = done - self.start_round - 1
    if self.first_done_at is None or steady < 1:
      return None
    return (self.clock() - self.first_done_at) / steady * (self.total - done)

  def _timing(self, done: int, now: float) -> list[tuple[int, str]]:
    """The fields every line has: the first step (compile), elapsed, ETA."""
    eta = self.eta_s(done)
    return [
        (1, f"first {self.unit} {_duration(self.first_round_s)} (compile)"),
        (4, f"elapsed {_duration(now - self.start)}"),
        (9, f"eta {_duration(eta)}" if eta is not None else f"eta after the next {self.unit}"),
    ]

  def fields(self, done: int, record: dict, now: float) -> list[tuple[int, str]]:
    """(priority, text) of every field of a round's line after the round counter, in display
    order; the line drops the lowest priority number first."""
    value = metrics_lib.measured(record, self.metric)   # None between evaluations
    label = "acc" if self.metric == "test_accuracy" else self.metric
    first, elapsed, eta = self._timing(done, now)
    return [
        (5, f"{label} {value:.4g}" if value is not None else f"{label} -"),
    ] + ([(2, "train loss -" if record["train_loss"] is None   # an empty Poisson round
               else f"train loss {record['train_loss']:.4g}")] if "train_loss" in record
         else []) + [
        (3, f"{record['round_time_s']:.3g} s/round"),
        first, elapsed, eta,
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

  def _step(self, now: float) -> None:
    if self.first_round_s is None:
      self.first_round_s, self.first_done_at = now - self.start, now

  def update(self, done: int, record: dict) -> str:
    """Takes round `done`'s record (every round); shows a line when due. Returns the line."""
    now = self.clock()
    self._step(now)
    return self._show(done, lambda: self.fields(done, record, now))

  def advance(self, done: int, total: int | None = None,
              fields: list[tuple[int, str]] = ()) -> str:
    """Takes step `done` of `total` (given once, or at construction) of an analysis, with its
    own `(priority, text)` fields; shows a line when due. Returns the line."""
    if total is not None:
      self.total = total
    now = self.clock()
    self._step(now)
    return self._show(done, lambda: list(fields) + self._timing(done, now))

  def _show(self, done: int, fields: Callable[[], list[tuple[int, str]]]) -> str:
    last = done >= self.total
    first = done == self.start_round + 1    # the compile's time, said once it is known
    if not self.live and done % self.every and not (last or first):
      return ""
    counter = f"{self.unit} {done:>{len(str(self.total))}}/{self.total}"
    if not self.live:   # the compile's time once, on the first line
      text = " | ".join(([self.label] if self.label else []) + [counter]
                        + [t for p, t in fields() if first or p != 1])
      logging.info(text)
      return text
    filled = self.BAR * min(done, self.total) // max(1, self.total)
    bar = "[" + "#" * filled + " " * (self.BAR - filled) + "]"
    width = self.width - 1            # the last column would wrap on some terminals
    label = (self.label if len(self.label) <= self.LABEL else   # 'fedgloss[client~] seed 2'
             self.label[:self.LABEL - 9] + "~" + self.label[-8:])
    head = " ".join(([bar] if width >= 60 else []) + ([label] if label else []) + [counter])
    text = self.fit(head, fields(), width)
    self.stream.write("\r" + text.ljust(width))
    self._open = True
    if last:
      self.close()
    else:
      self.stream.flush()
    return text

  def on_round(self, rnd) -> None:
    self.update(rnd.t + 1, rnd.record)

  def close(self, status: str | None = None) -> None:
    """Ends the live line (at the last step, or when the work stops early)."""
    if self._open:
      self.stream.write("\n")
      self.stream.flush()
      self._open = False


def steps(label: str, unit: str, stream=None) -> Progress:
  """The progress of an analysis step count not known yet: `advance(done, total)` from the
  analysis function's `progress` callback (`fedjax_sharp.analysis`), about ten log lines when
  not on a terminal."""
  return Progress(0, every=None, stream=stream, label=label, unit=unit)
