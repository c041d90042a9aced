"""The host-side training loop: build an experiment from a config, run its rounds.

    exp = build_experiment(config)          # data, partition, model, algorithm, engine
    summary = run(config, workdir)           # the whole experiment, metrics written as it goes

The pieces live in short modules: `training.experiment` (what an experiment is, the
preprocessing, the evaluator), `training.classification_experiment` and
`training.minimax_experiment` (building one), `training.recorder` (resume, each
round's record, summaries) and `training.hooks` (what runs after each round, in order:
evaluation, metrics.jsonl, the divergence guard, checkpoints, final models, progress). Their
public names are re-exported here, the training path's one import for notebooks and scripts.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from typing import Sequence

from fedjax_sharp.core import distributed
from fedjax_sharp.errors import DivergedError, RunInterrupted
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import fields
from fedjax_sharp.training import minimax_experiment
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.training.classification_experiment import (build_classification_experiment,
                                                             model_fields)
from fedjax_sharp.training.experiment import (STREAM_INIT, STREAM_TRAIN, Experiment,
                                              is_token_dataset, make_evaluator, make_preprocess)
from fedjax_sharp.training.hooks import (AVERAGE_PARAMS, FINAL_PARAMS, Hook, RoundAnalysis,
                                         load_params, save_params)
from fedjax_sharp.training.progress import Progress
from fedjax_sharp.training.recorder import STATUSES, VOCABULARY_FILE, RunRecorder, provenance
from fedjax_sharp.training.workdir import WorkdirLock

__all__ = ["AVERAGE_PARAMS", "Experiment", "FINAL_PARAMS", "Progress", "RoundAnalysis",
           "RunRecorder", "STATUSES", "STREAM_INIT", "STREAM_TRAIN", "VOCABULARY_FILE",
           "build_experiment", "is_token_dataset", "load_params",
           "make_evaluator", "make_preprocess", "model_fields", "provenance", "run",
           "save_params", "signals_as_interrupt"]


def build_experiment(config, dataset=None) -> Experiment:
  """Everything a run needs, from the config (validated and its 'auto' fields resolved here:
  `config.prepare`; `Experiment.config` is that prepared copy). `dataset`: an already loaded
  dataset of `config.data` (sweeps load it once for all their experiments; classification
  only)."""
  config = config_lib.prepare(config)
  if config_lib.is_minimax(config):
    return minimax_experiment.build_experiment(config)
  return build_classification_experiment(config, dataset)


@contextlib.contextmanager
def signals_as_interrupt():
  """SIGTERM (what schedulers send) raises RunInterrupted and SIGINT KeyboardInterrupt, so a
  terminated run still writes its summary. Yields `check()`, which the training loop calls at
  every round boundary: a signal whose exception Python swallowed (one that lands inside a
  `__del__` or a callback is only printed as "Exception ignored") still stops the run there.
  Only in the main thread (signal handlers); elsewhere `check` does nothing."""
  if threading.current_thread() is not threading.main_thread():
    yield lambda: None
    return
  received = []

  def on_term(signum, frame):
    received.append(signum)
    raise RunInterrupted("SIGTERM")

  def on_int(signum, frame):
    received.append(signum)
    raise KeyboardInterrupt

  def check():
    if received:
      if received[0] == signal.SIGTERM:
        raise RunInterrupted("SIGTERM")
      raise KeyboardInterrupt

  old_term = signal.signal(signal.SIGTERM, on_term)
  old_int = signal.signal(signal.SIGINT, on_int)
  try:
    yield check
  finally:
    signal.signal(signal.SIGTERM, old_term)
    signal.signal(signal.SIGINT, old_int)


@contextlib.contextmanager
def _naming_last_checkpoint(checkpoint_workdir: str | None):
  """An interrupt (SIGINT, or SIGTERM's RunInterrupted) leaves as `e.last_checkpoint` the round
  a rerun resumes from (None without checkpoints)."""
  try:
    yield
  except KeyboardInterrupt as e:
    e.last_checkpoint = (checkpoints.latest_round(checkpoint_workdir) if checkpoint_workdir
                         else None)
    raise


def run(config, workdir: str | None = None, progress: bool | str = True,
        experiment: Experiment | None = None, hooks: Sequence[Hook] = ()) -> dict:
  """Runs the experiment; writes config.json, metrics.jsonl and summary.json under `workdir`.
  `hooks`: the caller's own `training.hooks.Hook`s, run after each round once the built-in
  ones have filled the round's record and before it is written (`hooks.default_hooks`).
  `progress`: show the progress line (`training.progress`); a string also names the run on it.

  Reliability (docs/reliability.md has the table of fault cases): one run per workdir (a lock), a
  workdir with another setting's results or checkpoint is refused before anything is written,
  checkpoints through orbax resume exactly, a non-finite loss or model stops the run
  (`training.on_nonfinite='stop'`) with status 'diverged', and every exit path writes a summary
  whose "status" says what it is ('completed', 'interrupted', 'diverged', 'failed').

  In a multi-process run (`core.distributed`) every process calls `run` with the same config;
  only process 0 writes `workdir` (the others run without one), and all of them save and
  restore its checkpoints together (`training.checkpoints`).
  """
  # A bad value is reported as itself, before the workdir (created by the lock, compared with
  # the config) is touched; a multi-process run also refuses what it does not support.
  fields.validate(config, multiprocess=distributed.is_multiprocess())
  checkpoint_workdir = workdir
  if workdir and not distributed.writes_files():
    workdir = None         # process 0 writes the run directory; all write the checkpoints
  lock = WorkdirLock(workdir) if workdir else contextlib.nullcontext()
  with _naming_last_checkpoint(checkpoint_workdir), lock:
    # 'auto' resolved once (`config.prepare`), after the lock: resolving starts the backend,
    # and a second run into the same workdir must meet the lock first.
    config = config_lib.resolved_setting(config)
    if workdir:
      workdir_lib.check_resolved_setting(workdir, config)
    started_from = provenance()   # the code at the start: a checkout moved later changes nothing
    t_build = time.time()
    exp = experiment or (minimax_experiment.build_experiment(config)
                         if config_lib.is_minimax(config)
                         else build_classification_experiment(config))
    r = RunRecorder(config, workdir, exp, time.time() - t_build, progress,
                    checkpoint_workdir=checkpoint_workdir, run_provenance=started_from,
                    hooks=hooks)
    status = "failed"
    try:
      with signals_as_interrupt() as check_signals:
        for t in range(r.start_round, config.rounds):
          t_round = time.time()
          data, cohort = exp.feeder.for_round(t)
          server_state, client_table, m = exp.engine.round(
              r.server_state, r.client_table, data, cohort, exp.round_info(t), r.train_key)
          r.record_round(t, server_state, client_table, m, cohort, t_round)
          check_signals()
      status = "completed"
    except (RunInterrupted, KeyboardInterrupt):
      status = "interrupted"
      raise
    except DivergedError:
      status = "diverged"
      raise
    finally:
      summary = r.close(status)
      stopped = sys.exc_info()[1]
      if stopped is not None:   # the caller may still report what the run recorded
        stopped.summary = summary
  return summary
