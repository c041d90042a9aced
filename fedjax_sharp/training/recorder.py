"""One run's bookkeeping around its rounds: resume from a checkpoint, metrics written round by
round, evaluation, analysis during training, divergence checks, checkpoints, final models,
progress display, provenance and the summary (`RunRecorder`, used by `training.loop.run` and the
sweeps of `training.sweep`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Callable

from absl import logging
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.core import tree
from fedjax_sharp.errors import DivergedError
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.training import experiment as experiment_lib
from fedjax_sharp.training.experiment import STREAM_TRAIN, Experiment

VOCABULARY_FILE = "vocabulary.json"     # text datasets: pass as data.vocabulary_path to reuse
FINAL_PARAMS = "final_params.msgpack"      # the global model after the last round
AVERAGE_PARAMS = "average_params.msgpack"  # the mean of the last `eval.average_last` models


def save_params(path: str, params) -> None:
  metrics_lib.atomic_write_bytes(path, flax.serialization.to_bytes(jax.device_get(params)))


def load_params(path: str, template):
  with open(path, "rb") as f:
    return jax.tree.map(jnp.asarray, flax.serialization.from_bytes(template, f.read()))


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
  tests.
  """

  BAR = 10   # characters of the bar, always the same

  def __init__(self, total: int, every: int = 1, stream=None, start: int = 0,
               clock: Callable[[], float] = time.monotonic, width: int | None = None):
    self.total, self.every, self.start_round = total, max(1, every), start
    self.stream = stream or sys.stderr
    self.width = width if width is not None else self._terminal_width(self.stream)
    self.live = self.width > 0     # else log lines
    self.clock = clock
    self.start = clock()
    self.first_round_s = None    # compile + the first round of this process
    self.first_done_at = None
    self.metric = "test_accuracy"
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
    value = record.get(self.metric)
    label = "acc" if self.metric == "test_accuracy" else self.metric
    return [
        (5, f"{label} {value:.4g}" if value is not None else f"{label} -"),
        (2, f"train loss {record['train_loss']:.4f}"),
        (3, f"{record['round_time_s']:.2f} s/round"),
        (1, f"first round {_duration(self.first_round_s)} (compile)"),
        (4, f"elapsed {_duration(now - self.start)}"),
        (9, f"eta {_duration(eta)}" if eta is not None else "eta after the next round"),
    ]

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

  def close(self) -> None:
    """Ends the live line (at the last round, or when a run stops early)."""
    if self._open:
      self.stream.write("\n")
      self.stream.flush()
      self._open = False


STATUSES = ("completed", "interrupted", "diverged", "failed")


def _all_finite(tree_) -> bool:
  return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree_)
             if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact))


class RoundAnalysis:
  """Geometry and per-client metrics of the global model during training: `config.analysis`
  (its metrics every `analysis.every` rounds and at the last one).

  lambda_max during training has one spelling: `analysis.metrics=('lambda_max',)` with
  `analysis.every`, `analysis.examples` and `analysis.iters`. The older `eval.hessian_every`
  (with `eval.hessian_examples`, `eval.hessian_iters`) still works for one release, through the
  same code path, and logs a deprecation warning naming the new fields."""

  def __init__(self, config, exp: Experiment, schedules: list[dict]):
    from fedjax_sharp.analysis import hessian  # pylint: disable=g-import-not-at-top
    from fedjax_sharp.analysis import sharpness  # pylint: disable=g-import-not-at-top
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
  def from_config(cls, config, exp: Experiment):
    """None (nothing built, traced or run) unless an analysis is configured."""
    if exp.dataset is None or exp.apply_fn is None:
      return None
    schedules = []
    cfg = config.get("analysis")
    if cfg is not None and int(cfg.every) and tuple(cfg.metrics):
      schedules.append({"every": int(cfg.every), "metrics": tuple(cfg.metrics),
                        "examples": int(cfg.examples), "iters": int(cfg.iters),
                        "rho": float(cfg.rho), "trace_probes": int(cfg.trace_probes)})
    every = int(config.eval.get("hessian_every", 0))
    if every:
      logging.warning(
          "eval.hessian_every is deprecated and will be removed in the next release: use "
          "--config.analysis.metrics=\"('lambda_max',)\" --config.analysis.every=%d "
          "--config.analysis.examples=%d --config.analysis.iters=%d", every,
          int(config.eval.hessian_examples), int(config.eval.hessian_iters))
      schedules.append({"every": every, "metrics": ("lambda_max",),
                        "examples": int(config.eval.hessian_examples),
                        "iters": int(config.eval.hessian_iters)})
    return cls(config, exp, schedules) if schedules else None

  def observe(self, cohort) -> None:
    ids = np.asarray(cohort.client_ids)
    self.trained[ids[ids < len(self.trained)]] = True

  def __call__(self, params, t: int, rounds: int) -> dict:
    """The metrics of every schedule due after round index `t` ({} if none is)."""
    from fedjax_sharp.analysis import clients, hessian, sharpness  # pylint: disable=g-import-not-at-top
    out = {}
    for sched in self.schedules:
      if (t + 1) % sched["every"] and t + 1 != rounds:
        continue
      metrics, batches = sched["metrics"], self.batches[sched["examples"]]
      if "lambda_max" in metrics:
        out["lambda_max"] = float(hessian.top_eigenvalues(self.loss_fn, params, batches, k=1,
                                                          iters=sched["iters"])[0])
      if "hessian_trace" in metrics:
        out["hessian_trace"] = sharpness.hutchinson_trace(
            self.loss_fn, params, batches, num_probes=sched["trace_probes"])["trace"]
      if "sam_sharpness" in metrics:
        out["sam_sharpness"] = sharpness.sam_sharpness(self.loss_fn, params, batches,
                                                       rho=sched["rho"])["sam_sharpness"]
      if "client_percentiles" in metrics:
        out.update(clients.model_client_percentiles(
            self.exp.apply_fn, params, self.exp.dataset, self.exp.client_indices,
            trained=self.trained, preprocess=self.exp.eval_preprocess))
    return out


class RunRecorder:
  """One experiment's bookkeeping around its rounds, shared by `run` and the sweeps
  (`fedjax_sharp.training.sweep`): resume from the checkpoint, config.json, metrics.jsonl
  written round by round, evaluation, divergence check, checkpoints, artifacts, final models,
  progress display and the summary. The caller holds the workdir lock and computes the rounds.

  After construction, `server_state`, `client_table` and `start_round` are where training
  starts (restored from the checkpoint when there is one); `record_round` takes each round's
  result (and raises DivergedError on a non-finite round when `training.on_nonfinite='stop'`);
  `close(status)` writes the summary and returns it.

  `checkpoint_workdir` (default `workdir`): the run directory whose checkpoints this recorder
  saves and restores. A multi-process run's processes other than 0 write no `workdir` but
  pass process 0's here: orbax saves and restores with every process (`training.checkpoints`).
  `run_provenance`: what produced the run (`provenance()`), stamped by the caller when its run
  started; by default, now.
  """

  def __init__(self, config, workdir: str | None, exp: Experiment, build_time: float,
               progress: bool = True, checkpoint_workdir: str | None = None,
               run_provenance: dict | None = None):
    self.config, self.workdir, self.exp, self.build_time = config, workdir, exp, build_time
    # The code that runs is the code at the start: a checkout moved during the run must not
    # change what the summary says produced it.
    self.provenance = provenance() if run_provenance is None else run_provenance
    self.server_state, self.client_table = exp.engine.init(exp.init_params)
    self.start_round, self.bytes_total, self.records, self.writer = 0, 0, [], None
    self.train_key = jax.random.fold_in(jax.random.key(config.seed), STREAM_TRAIN)
    self.checkpoint_workdir = workdir or checkpoint_workdir
    if workdir:
      self._open_workdir()
    elif self.checkpoint_workdir:   # a multi-process run's other processes: checkpoints only
      self._restore()
    where = (f"{config.data.source}/{config.data.name} ({config.data.partition})"
             if exp.dataset is not None else f"task {config.task.name}")
    execution = exp.engine.execution
    # One short INFO line per run; the whole set-up (cohort shape, every engine field, the
    # device layout) with --verbose.
    dtype = (f", {experiment_lib.resolved_model_options(config)[0]}"
             if exp.dataset is not None else "")
    logging.info("%s: %s on %s, %d clients, %d/round, engine %s/%s%s", config.name,
                 exp.algorithm.name, where, len(exp.client_indices), config.clients_per_round,
                 execution.client_strategy, execution.local_loop, dtype)
    logging.debug("%s: cohort shape (C, S, B) = %s, %d parameters, engine %s, %s",
                  config.name, exp.sampler.shape, tree.num_elements(exp.init_params), execution,
                  "one device" if exp.engine.mesh is None else
                  (f"mesh {dict(exp.engine.mesh.shape)} over {exp.engine.mesh.size} devices, "
                   f"{jax.process_count()} process(es)"))
    self.bar = (Progress(config.rounds, config.log_every, start=self.start_round)
                if progress else None)
    if self.bar:
      self.bar.metric = exp.metric
    self.on_nonfinite = str(config.get("training", {}).get("on_nonfinite", "stop"))
    self.param_sum, self.param_count = None, 0
    self.tensorboard = None
    if workdir and config.get("log", {}).get("tensorboard", False):
      # The event stream restarts with the run: rounds past the checkpoint (or every round, when
      # the run starts over) must not appear twice, so the stream is rewritten from the kept
      # records (metrics.jsonl is the source of truth) and continues from there.
      logdir = os.path.join(workdir, "tensorboard")
      if os.path.isdir(logdir):
        shutil.rmtree(logdir)
      self.tensorboard = metrics_lib.TensorBoardWriter(logdir)
      for record in self.records:
        self.tensorboard.write(record, flush=False)
      self.tensorboard.flush()
    # Analysis during training: None (nothing built, traced or run) unless configured.
    self.analysis = RoundAnalysis.from_config(config, exp)
    if self.analysis is not None:   # clients sampled before a resume count as trained
      self.analysis.trained |= exp.sampler.sampled_mask(self.start_round)
    self.t0 = time.time() - (self.records[-1]["wall_time_s"] if self.records else 0.0)

  def _restore(self) -> bool:
    """Restores the newest checkpoint of `checkpoint_workdir` (with `resume`): the state, the
    next round and the bytes counter. Returns whether there was one."""
    if not self.config.resume:
      return False
    restored = checkpoints.restore(self.checkpoint_workdir, self.config, self.server_state,
                                   self.client_table)
    if not restored:
      return False
    self.start_round, self.server_state, self.client_table, self.bytes_total, _ = restored
    # Restored leaves must not share buffers either: the next round donates them.
    self.server_state, self.client_table = self.exp.engine.unalias(self.server_state,
                                                                   self.client_table)
    return True

  def _open_workdir(self):
    config, workdir, exp = self.config, self.workdir, self.exp
    restored = self._restore()
    if not config.resume and os.path.isdir(os.path.join(workdir, checkpoints.DIRECTORY)):
      shutil.rmtree(os.path.join(workdir, checkpoints.DIRECTORY))   # explicit start over
    # 'auto' model options as they resolved on this backend (what ran; resume compares it).
    metrics_lib.atomic_write_text(
        os.path.join(workdir, "config.json"),
        config_lib.resolved_setting(config).to_json_best_effort(indent=2, sort_keys=True) + "\n")
    vocabulary = getattr(exp.dataset, "vocabulary", None)
    if vocabulary is not None:  # text: the run's token ids are reproducible from this file
      data_lib.save_vocabulary(os.path.join(workdir, VOCABULARY_FILE), vocabulary)
    metrics_path = os.path.join(workdir, workdir_lib.METRICS)
    if not restored and config.resume and workdir_lib.has_results(workdir):
      rounds = workdir_lib.recorded_rounds(workdir)
      kept = workdir_lib.keep_replaced_metrics(workdir)
      logging.warning("%s has no checkpoint to resume from: the run starts at round 0; the %d "
                      "rounds recorded before are kept in %s", workdir, rounds, kept)
    if restored:
      # Keep the metrics of the checkpointed rounds only, then append.
      if os.path.exists(metrics_path):
        self.records = [r for r in metrics_lib.read_jsonl(metrics_path)
                        if r["round"] < self.start_round]
      else:
        logging.warning("%s is missing: rounds before %d have no records (the summary covers "
                        "the rounds from %d on)", metrics_path, self.start_round,
                        self.start_round)
      metrics_lib.atomic_write_text(metrics_path,
                                    "".join(json.dumps(r) + "\n" for r in self.records))
      logging.info("resuming %s from round %d (%s)", config.name, self.start_round, workdir)
    self.writer = metrics_lib.JsonlWriter(metrics_path, truncate=not restored)

  def record_round(self, t: int, server_state, client_table, m, cohort, t_round: float,
                   round_time: float | None = None) -> dict:
    """Takes round `t`'s result: metrics record (evaluated on the eval rounds), written at once;
    checkpoint, artifacts and final models when due. `round_time` defaults to now - t_round;
    `client_table` may be a zero-argument function returning it (called only to save it)."""
    config, exp, workdir = self.config, self.exp, self.workdir
    self.server_state, self.client_table = server_state, client_table
    comm = exp.algorithm.communication
    m = jax.device_get(m)
    num_real = int(np.sum(np.asarray(cohort.weights) > 0))
    bytes_down = int(num_real * comm.down * exp.model_bytes)
    bytes_up = int(num_real * comm.up * exp.model_bytes)
    self.bytes_total += bytes_down + bytes_up
    # The players of a minimax task have their own constant rates (config.minimax); the
    # decayed classification rate would be a number nothing uses.
    rates = ({"lr_x": float(config.minimax.lr_x), "lr_y": float(config.minimax.lr_y)}
             if config_lib.is_minimax(config) else {"lr": exp.learning_rate(t)})
    record = {
        "round": t, **rates,
        "train_loss": float(m["loss_sum"] / max(m["examples"], 1.0)),
        "local_steps": int(m["steps"]),
    }
    if "correct" in m:
      # Per-token labels: the accuracy's own denominator ('examples' counts the loss tokens).
      record["train_accuracy"] = float(m["correct"] / max(m.get("accuracy_tokens",
                                                                m["examples"]), 1.0))
    for k, v in m.items():  # algorithm-specific sums, e.g. the FedGMT KL term
      if k.endswith("_sum") and k != "loss_sum":
        record[k[:-4] + "_mean"] = float(v / max(m["examples"], 1.0))
    global_params = exp.algorithm.eval_params(server_state)
    finite = np.isfinite(record["train_loss"]) and _all_finite(global_params)
    if finite and ((t + 1) % config.eval.every == 0 or t >= config.rounds - config.eval.last_n):
      record.update(exp.evaluate(global_params))
    else:
      record.update({"test_loss": None, "test_accuracy": None} if exp.metric == "test_accuracy"
                    else {exp.metric: None})
    if self.analysis is not None and finite:
      self.analysis.observe(cohort)
      record.update(self.analysis(global_params, t, config.rounds))
    average_last = int(config.eval.get("average_last", 0))
    if average_last and t >= config.rounds - average_last:
      # A copy, not the server state's own arrays: the next round donates those.
      self.param_sum = (jax.tree.map(jnp.copy, global_params) if self.param_sum is None
                        else tree.add(self.param_sum, global_params))
      self.param_count += 1
    now = time.time()
    record.update({"round_time_s": now - t_round if round_time is None else round_time,
                   "wall_time_s": now - self.t0, "bytes_down": bytes_down,
                   "bytes_up": bytes_up, "bytes_total": self.bytes_total})
    if not finite:
      record["nonfinite"] = True
    self.records.append(record)
    if self.writer:
      self.writer.write(record)
    if self.tensorboard is not None:
      self.tensorboard.write(record)
    if not finite:
      last = checkpoints.latest_round(workdir) if workdir else None
      message = (f"round {t}: non-finite training loss or global model "
                 f"(train loss {record['train_loss']}); last good checkpoint: "
                 f"{f'round {last}' if last is not None else 'none'}")
      if self.on_nonfinite == "stop":
        raise DivergedError(message + " (stopped: training.on_nonfinite='stop')")
      logging.warning("%s (continuing: training.on_nonfinite='warn')", message)
    if self.checkpoint_workdir:   # every process of a multi-process run saves together
      if config.checkpoint_every and ((t + 1) % config.checkpoint_every == 0
                                      or t + 1 == config.rounds):
        if callable(client_table):  # a sweep slices its stacked table only when it is saved
          client_table = self.client_table = client_table()
        checkpoints.save(self.checkpoint_workdir, config, t + 1, server_state, client_table,
                         self.bytes_total, int(config.get("checkpoint_keep", 2)))
    if workdir:
      artifact_every = int(config.eval.get("artifact_every", 0))
      if exp.artifacts and ((artifact_every and (t + 1) % artifact_every == 0)
                            or t + 1 == config.rounds):
        exp.artifacts(global_params, workdir, "final" if t + 1 == config.rounds else
                      f"round{t + 1:05d}")
      if t + 1 == config.rounds:  # the models that analysis tools read (experiments/hessian.py)
        save_params(os.path.join(workdir, FINAL_PARAMS), global_params)
        if self.param_count:
          save_params(os.path.join(workdir, AVERAGE_PARAMS),
                      tree.scale(1.0 / self.param_count, self.param_sum))
    if self.bar:
      self.bar.update(t + 1, record)
    return record

  def close(self, status: str) -> dict:
    """Closes the metrics file and writes summary.json (errors are logged: the summary of an
    interrupted or failed run must not hide the original exception). Returns the summary."""
    if self.bar:
      self.bar.close()
    self.exp.averaged_models = self.param_count
    self.exp.feeder.close()
    if self.tensorboard is not None:
      self.tensorboard.close()
    if self.writer:
      try:
        self.writer.close()
      except OSError as e:
        logging.error("closing metrics.jsonl failed: %s", e)
    summary = _summarize_run(self.config, self.exp, self.records, self.build_time,
                             self.provenance, status)
    if self.workdir:
      try:
        metrics_lib.atomic_write_json(os.path.join(self.workdir, "summary.json"), summary)
      except OSError as e:
        logging.error("writing %s failed: %s", os.path.join(self.workdir, "summary.json"), e)
    return summary


def provenance() -> dict:
  """What produced a run: the git commit of the code (and whether it had local changes), the
  JAX version and the device, so that every number traces back to code, config and seed."""
  import subprocess
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  def git(*args):
    try:
      return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                            timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
      return None
  status = git("status", "--porcelain", "--untracked-files=no")
  return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(status),
          "jax": jax.__version__, "backend": jax.default_backend(),
          "device": jax.devices()[0].device_kind}


def _summarize_run(config, exp: Experiment, records: list[dict], build_time: float,
                   run_provenance: dict, status: str = "completed") -> dict:
  comm = exp.algorithm.communication
  summary = metrics_lib.summarize(records, config.eval.last_n, config.eval.target_accuracy,
                                  metric=exp.metric, higher_is_better=exp.higher_is_better)
  times = [r["round_time_s"] for r in records]
  summary.update({
      "status": status, "completed_rounds": len(records), "configured_rounds": config.rounds,
      "name": config.name, "algorithm": exp.algorithm.name, "seed": config.seed,
      # Which split the test_* / worst-class metrics were measured on.
      "eval_split": ("validation" if int(config.data.get("validation_examples", 0) or 0)
                     else "test"),
      "build_time_s": build_time, "first_round_time_s": times[0] if times else None,
      "mean_round_time_s": float(np.mean(times[1:] or times)) if times else None,
      "traces": exp.engine.trace_count,
      "communication": {"down": comm.down, "up": comm.up, "model_bytes": exp.model_bytes},
      "provenance": run_provenance,
  })
  if int(config.eval.get("average_last", 0)):
    # Fewer than eval.average_last when the run resumed inside that window.
    summary["averaged_models"] = getattr(exp, "averaged_models", 0)
  return summary
