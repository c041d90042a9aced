"""The jobs done after each round of a run, one small object each, in the spirit of the periodic
actions of flax's examples (`clu.periodic_actions`). `default_hooks` builds them from the config
(the one place), with the caller's own (`loop.run(..., hooks=)`), and `recorder.RunRecorder`
calls them in order after every round (docs/adding_a_hook.md).

Every hook has the same two methods and owns its cadence (`Hook.due`: every `every` rounds and
at the last one):

    hook.on_round(rnd)    # after round rnd.t; rnd.record: the round's metrics record so far
    hook.close(status)    # the run ends: 'completed', 'interrupted', 'diverged' or 'failed'

The order: `Evaluator` (test metrics), `RoundAnalysis` (geometry during training),
`PrivacyAccountant` (epsilon so far, with differential privacy), `ServerStats` (the
algorithm's own per-round quantities, where it has them), the caller's own hooks, `Clock`
(round and wall time), `MetricsWriter` (metrics.jsonl), `TensorBoard`, `DivergenceGuard`,
`Checkpointer`, `Averager`, `Artifacts`, `FinalModel`, then the progress line
(`progress.Progress`). Hooks that add fields to the record run before the ones that write it;
the guard runs after the writers (a diverged round is on record) and before anything is saved
from a diverged model.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any, Callable, Sequence

from absl import logging
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.analysis import round_metrics
from fedjax_sharp.core import tree
from fedjax_sharp.errors import DivergedError
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.training.progress import Progress

FINAL_PARAMS = "final_params.msgpack"      # the global model after the last round
AVERAGE_PARAMS = "average_params.msgpack"  # the mean of the last `eval.average_last` models


def save_params(path: str, params) -> None:
  metrics_lib.atomic_write_bytes(path, flax.serialization.to_bytes(jax.device_get(params)))


def load_params(path: str, template):
  with open(path, "rb") as f:
    return jax.tree.map(jnp.asarray, flax.serialization.from_bytes(template, f.read()))


@dataclasses.dataclass
class Round:
  """What one round hands its hooks."""
  t: int                    # the round's index (0-based)
  record: dict              # its metrics record: hooks add fields until MetricsWriter writes it
  params: Any               # the global model after the round (the algorithm's eval_params)
  server_state: Any
  client_table: Any         # or a zero-argument function returning it (called only to save it)
  cohort: Any
  finite: bool              # training loss and global model finite
  t_round: float = 0.0      # time.time() when the round started
  round_time: float | None = None   # the round's own duration (a sweep's); None: since t_round


class Hook:
  """One job after each round. `rounds`: the run's rounds; `every` > 0: due every `every`
  rounds and at the last one; 0: at the last one only."""

  def __init__(self, rounds: int = 0, every: int = 0):
    self.rounds, self.every = int(rounds), int(every)

  def due(self, t: int) -> bool:
    return bool(self.every and (t + 1) % self.every == 0) or t + 1 == self.rounds

  def on_round(self, rnd: Round) -> None:
    raise NotImplementedError

  def close(self, status: str) -> None:
    """The run ended with `status`; nothing to do by default."""


class Evaluator(Hook):
  """Test metrics of the global model (`exp.evaluate`) every `every` rounds and in the last
  `last_n`; None in the other rounds and after a non-finite one."""

  def __init__(self, exp, rounds: int, every: int, last_n: int):
    super().__init__(rounds, every)
    self.exp, self.last_n = exp, int(last_n)

  def due(self, t: int) -> bool:
    return (t + 1) % self.every == 0 or t >= self.rounds - self.last_n

  def on_round(self, rnd: Round) -> None:
    if rnd.finite and self.due(rnd.t):
      rnd.record.update(self.exp.evaluate(rnd.params))
    else:
      metric = self.exp.metric
      rnd.record.update({"test_loss": None, "test_accuracy": None}
                        if metric == "test_accuracy" else {metric: None})


class RoundAnalysis(Hook):
  """Geometry and per-client metrics of the global model during training: `config.analysis`
  (its metrics every `analysis.every` rounds and at the last one).

  lambda_max during training has one spelling: `analysis.metrics=('lambda_max',)` with
  `analysis.every`, `analysis.examples` and `analysis.iters`. The older `eval.hessian_every`
  (with `eval.hessian_examples`, `eval.hessian_iters`) still works for one release, through the
  same code path, and logs a deprecation warning naming the new fields."""

  def __init__(self, config, exp, schedules: list[dict]):
    from fedjax_sharp.analysis import hessian  # pylint: disable=g-import-not-at-top
    from fedjax_sharp.analysis import sharpness  # pylint: disable=g-import-not-at-top
    super().__init__(config.rounds)
    self.exp, self.schedules = exp, schedules
    self.batches = {}  # test batches per example count
    for sched in schedules:
      n = int(sched["examples"])
      if n not in self.batches:
        self.batches[n] = hessian.cross_entropy_batches(
            exp.dataset.x_test, exp.dataset.y_test, int(config.eval.batch_size),
            exp.eval_preprocess, n)
    self.loss_fn = sharpness.cross_entropy_loss(exp.apply_fn)
    self.trained = np.zeros(len(exp.client_indices), bool)

  @classmethod
  def from_config(cls, config, exp, start_round: int = 0):
    """None (nothing built, traced or run) unless an analysis is configured. The clients
    sampled before `start_round` (a resumed run) count as trained."""
    if exp.dataset is None or exp.apply_fn is None:
      return None
    schedules = []
    cfg = config.analysis
    if int(cfg.every) and tuple(cfg.metrics):
      schedules.append({"every": int(cfg.every), "metrics": tuple(cfg.metrics),
                        "examples": int(cfg.examples), "iters": int(cfg.iters),
                        "rho": float(cfg.rho), "trace_probes": int(cfg.trace_probes)})
    every = int(config.eval.hessian_every)
    if every:
      logging.warning(
          "eval.hessian_every is deprecated and will be removed in the next release: use "
          "--config.analysis.metrics=\"('lambda_max',)\" --config.analysis.every=%d "
          "--config.analysis.examples=%d --config.analysis.iters=%d", every,
          int(config.eval.hessian_examples), int(config.eval.hessian_iters))
      schedules.append({"every": every, "metrics": ("lambda_max",),
                        "examples": int(config.eval.hessian_examples),
                        "iters": int(config.eval.hessian_iters)})
    if not schedules:
      return None
    analysis = cls(config, exp, schedules)
    analysis.trained |= exp.sampler.sampled_mask(start_round)
    return analysis

  def on_round(self, rnd: Round) -> None:
    if rnd.finite:
      ids = np.asarray(rnd.cohort.client_ids)
      self.trained[ids[ids < len(self.trained)]] = True
      rnd.record.update(self.measure(rnd.params, rnd.t))

  def measure(self, params, t: int) -> dict:
    """The metrics of every schedule due after round index `t` ({} if none is), from the
    table `analysis.round_metrics.ROUND_METRICS`."""
    out = {}
    for sched in self.schedules:
      if (t + 1) % sched["every"] and t + 1 != self.rounds:
        continue
      inputs = round_metrics.MetricInputs(params, self.batches[sched["examples"]], self.loss_fn,
                                          self.exp, self.trained, sched)
      for name in sched["metrics"]:
        out.update(round_metrics.ROUND_METRICS[name](inputs))
    return out


class PrivacyAccountant(Hook):
  """`dp_epsilon`: epsilon(delta) of the run's DP mechanism after the round (`setting`, a
  `core.accounting.AccountingSetting`: dp-accounting's RDP or PLD accountant over the rounds so
  far; a function of the round index only, so a resumed run reports the same values). None in
  the record (JSON null) when there is no noise (epsilon = inf)."""

  def __init__(self, setting):
    super().__init__()
    self.setting = setting

  def on_round(self, rnd: Round) -> None:
    rnd.record["dp_epsilon"] = self.setting.epsilon(rnd.t + 1)


class ServerStats(Hook):
  """The algorithm's own per-round quantities (`FederatedAlgorithm.round_stats` of the server
  state, e.g. FedGF's `gf_c` and `gf_divergence`) as fields of the round's record."""

  def __init__(self, round_stats: Callable[[Any], dict]):
    super().__init__()
    self.round_stats = round_stats

  def on_round(self, rnd: Round) -> None:
    stats = jax.device_get(self.round_stats(rnd.server_state))
    rnd.record.update({k: float(v) for k, v in stats.items()})


class Clock(Hook):
  """`round_time_s` (the round's own duration when it has one, else the time since it started,
  evaluation included) and `wall_time_s` (since the run started; `offset`: the wall time the
  kept records of a resumed run already cover). `clock` is injectable for tests."""

  def __init__(self, offset: float = 0.0, clock: Callable[[], float] = time.time):
    super().__init__()
    self.clock = clock
    self.t0 = clock() - offset

  def on_round(self, rnd: Round) -> None:
    now = self.clock()
    rnd.record["round_time_s"] = now - rnd.t_round if rnd.round_time is None else rnd.round_time
    rnd.record["wall_time_s"] = now - self.t0


class MetricsWriter(Hook):
  """Keeps every record in `records` (the summary's input) and appends it to `path`
  (metrics.jsonl; None: in memory only) as one JSON line, on disk before the next hook runs:
  a run never loses the rounds it has recorded. `truncate=False` appends to the kept lines of a
  resumed run."""

  def __init__(self, records: list[dict], path: str | None = None, truncate: bool = True):
    super().__init__()
    self.records = records
    self.writer = metrics_lib.JsonlWriter(path, truncate=truncate) if path else None

  def on_round(self, rnd: Round) -> None:
    self.records.append(rnd.record)
    if self.writer:
      self.writer.write(rnd.record)

  def close(self, status: str) -> None:
    if self.writer:
      self.writer.close()


class TensorBoard(Hook):
  """`config.log.tensorboard`: each record's numeric fields as scalars under `logdir`. The event
  stream restarts with the run: rounds past the checkpoint (or every round, when the run starts
  over) must not appear twice, so it is rewritten from the kept `records` (metrics.jsonl is the
  source of truth) and continues from there."""

  def __init__(self, logdir: str, records: list[dict]):
    super().__init__()
    if os.path.isdir(logdir):
      shutil.rmtree(logdir)
    self.writer = metrics_lib.TensorBoardWriter(logdir)
    for record in records:
      self.writer.write(record, flush=False)
    self.writer.flush()

  def on_round(self, rnd: Round) -> None:
    self.writer.write(rnd.record)

  def close(self, status: str) -> None:
    self.writer.close()


class DivergenceGuard(Hook):
  """A non-finite round (training loss or global model) raises DivergedError
  (`training.on_nonfinite='stop'`) or logs a warning ('warn'); both name the last good
  checkpoint of `workdir`."""

  def __init__(self, on_nonfinite: str, workdir: str | None = None):
    super().__init__()
    self.on_nonfinite, self.workdir = str(on_nonfinite), workdir

  def on_round(self, rnd: Round) -> None:
    if rnd.finite:
      return
    last = checkpoints.latest_round(self.workdir) if self.workdir else None
    message = (f"round {rnd.t}: non-finite training loss or global model "
               f"(train loss {rnd.record.get('train_loss', 'withheld under DP')}); last good "
               f"checkpoint: "
               f"{f'round {last}' if last is not None else 'none'}")
    if self.on_nonfinite == "stop":
      raise DivergedError(message + " (stopped: training.on_nonfinite='stop')")
    logging.warning("%s (continuing: training.on_nonfinite='warn')", message)


class Checkpointer(Hook):
  """The server state, client table and bytes counter every `every` rounds and at the last one,
  under `workdir` (orbax, `training.checkpoints`; the processes of a multi-process run all
  save together), keeping the newest `keep`."""

  def __init__(self, config, workdir: str, every: int, keep: int):
    super().__init__(config.rounds, every)
    self.config, self.workdir, self.keep = config, workdir, int(keep)

  def on_round(self, rnd: Round) -> None:
    if not self.due(rnd.t):
      return
    table = rnd.client_table() if callable(rnd.client_table) else rnd.client_table
    checkpoints.save(self.workdir, self.config, rnd.t + 1, rnd.server_state, table,
                     rnd.record["bytes_total"], self.keep)


class Averager(Hook):
  """The mean of the global models of the last `last` rounds (`eval.average_last`), saved to
  `path` after the last round. `count`: the models it holds (fewer than `last` when the run
  resumed inside that window)."""

  def __init__(self, rounds: int, last: int, path: str | None = None):
    super().__init__(rounds)
    self.last, self.path = int(last), path
    self.sum, self.count = None, 0

  def on_round(self, rnd: Round) -> None:
    if rnd.t < self.rounds - self.last:
      return
    # A copy, not the server state's own arrays: the next round donates those.
    self.sum = (jax.tree.map(jnp.copy, rnd.params) if self.sum is None
                else tree.add(self.sum, rnd.params))
    self.count += 1
    if rnd.t + 1 == self.rounds and self.path:
      save_params(self.path, self.average())

  def average(self):
    return tree.scale(1.0 / self.count, self.sum)


class Artifacts(Hook):
  """The task's own files (`exp.artifacts(params, workdir, tag)`, e.g. a GAN's sample grids)
  every `every` rounds ('round00010', ...) and after the last one ('final')."""

  def __init__(self, artifacts: Callable, workdir: str, rounds: int, every: int):
    super().__init__(rounds, every)
    self.artifacts, self.workdir = artifacts, workdir

  def on_round(self, rnd: Round) -> None:
    if self.due(rnd.t):
      self.artifacts(rnd.params, self.workdir,
                     "final" if rnd.t + 1 == self.rounds else f"round{rnd.t + 1:05d}")


class FinalModel(Hook):
  """The global model after the last round, at `path` (final_params.msgpack: the model that the
  analysis tools read, experiments/hessian.py)."""

  def __init__(self, rounds: int, path: str):
    super().__init__(rounds)
    self.path = path

  def on_round(self, rnd: Round) -> None:
    if rnd.t + 1 == self.rounds:
      save_params(self.path, rnd.params)


def default_hooks(config, exp, *, workdir: str | None, checkpoint_workdir: str | None,
                  records: list, start_round: int = 0, progress: bool | str = True,
                  truncate: bool = True, extra: Sequence[Hook] = ()) -> list[Hook]:
  """The hooks a run's config asks for, in the order they run after each round:

  1. `Evaluator`, `RoundAnalysis` (`config.analysis`), `PrivacyAccountant` (DP), `ServerStats`
     (the algorithm's `round_stats`): they fill the round's record;
  2. `extra`, the caller's own hooks (`loop.run(..., hooks=)`): they see that record and may
     add fields to it, which are then written;
  3. `Clock`, `MetricsWriter` (metrics.jsonl), `TensorBoard`, `DivergenceGuard`,
     `Checkpointer`, `Averager`, `Artifacts`, `FinalModel`, `Progress`: time, write, stop,
     save and show.

  `records`: the records kept from before a resume (the writer appends to them); `truncate`:
  start metrics.jsonl afresh; `progress`: a string labels the line (a comparison's 'fedgmt
  seed 0')."""
  rounds = config.rounds
  path = lambda name: os.path.join(workdir, name) if workdir else None
  hooks = [Evaluator(exp, rounds, config.eval.every, config.eval.last_n)]
  analysis = RoundAnalysis.from_config(config, exp, start_round)
  if analysis is not None:    # else nothing is built, traced or run
    hooks.append(analysis)
  if exp.accounting is not None:
    hooks.append(PrivacyAccountant(exp.accounting))
  if exp.algorithm.round_stats is not None:
    hooks.append(ServerStats(exp.algorithm.round_stats))
  hooks.extend(extra)
  hooks.append(Clock(records[-1]["wall_time_s"] if records else 0.0))
  hooks.append(MetricsWriter(records, path(workdir_lib.METRICS), truncate))
  if workdir and config.log.tensorboard:
    hooks.append(TensorBoard(path("tensorboard"), records))
  hooks.append(DivergenceGuard(config.training.on_nonfinite, workdir))
  if checkpoint_workdir and config.checkpoint_every:
    hooks.append(Checkpointer(config, checkpoint_workdir, config.checkpoint_every,
                              config.checkpoint_keep))
  if config.eval.average_last:
    hooks.append(Averager(rounds, config.eval.average_last, path(AVERAGE_PARAMS)))
  if workdir and exp.artifacts:
    hooks.append(Artifacts(exp.artifacts, workdir, rounds, config.eval.artifact_every))
  if workdir:
    hooks.append(FinalModel(rounds, path(FINAL_PARAMS)))
  if progress:
    hooks.append(Progress(rounds, int(config.log_every) or None, start=start_round,
                          metric=exp.metric,
                          label=progress if isinstance(progress, str) else None))
  return hooks
