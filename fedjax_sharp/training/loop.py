"""The host-side training loop: build an experiment from a config, run rounds, evaluate, log.

    exp = build_experiment(config)          # data, partition, model, algorithm, engine
    summary = run(config, workdir)           # the whole experiment, metrics written as it goes
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from typing import Any, Callable

from absl import logging
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import FederatedAlgorithm, RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core import client_table as client_table_lib
from fedjax_sharp.core import distributed, feeding, hparams, sharding
from fedjax_sharp.core.engine import ExecutionConfig, Footprint, RoundEngine, TrainData
from fedjax_sharp.models import registry as model_registry
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.errors import DivergedError, RunInterrupted
from fedjax_sharp.training.workdir import WorkdirLock

# PRNG streams: one root key from the seed, one stream per purpose.
STREAM_INIT, STREAM_TRAIN = 0, 1


def is_token_dataset(dataset) -> bool:
  """Integer sequences [N, L] (AG News token ids) rather than images [N, H, W, C]."""
  x = dataset.x_train
  return np.ndim(x) == 2 and np.issubdtype(np.asarray(x[:1]).dtype, np.integer)


def make_preprocess(dataset, augment: str, per_example: bool, pad: int = 4) -> Callable:
  """The dataset's own preprocessing, inside jit: images (uint8 [B, H, W, C]) are normalised
  and, if configured, randomly cropped (zero pad `pad`) and flipped; token ids pass through
  unchanged (int32: a float cast would corrupt embedding lookups)."""
  if is_token_dataset(dataset):
    if augment != "none":
      raise ValueError(f"data.augment={augment!r} applies to images; {dataset.name!r} is a "
                       f"token dataset: use data.augment='none'")
    return lambda x, key: x
  mean, std = dataset.mean, dataset.std

  def preprocess(x, key):
    x = data_lib.augment.normalize(x, mean, std)
    if augment == "crop_flip":
      x = data_lib.augment.random_crop_flip(key, x, pad=pad, per_example=per_example)
    return x
  return preprocess


@dataclasses.dataclass
class Experiment:
  config: Any
  dataset: Any
  client_indices: list
  model: Any
  apply_fn: Callable
  algorithm: FederatedAlgorithm
  engine: RoundEngine
  sampler: CohortSampler
  train_data: TrainData
  init_params: Any
  evaluate: Callable[[Any], dict]
  model_bytes: int
  eval_preprocess: Callable = None
  metric: str = "test_accuracy"          # what summaries, tables and progress lines report
  higher_is_better: bool = True
  artifacts: Callable | None = None      # (params, workdir, tag) -> None, e.g. GAN sample grids
  feeder: Any = None                     # core.feeding: for_round(t) -> (TrainData, Cohort)

  def __post_init__(self):
    if self.feeder is None and self.train_data is not None:
      self.feeder = feeding.DeviceFeeder(self.train_data.x, self.train_data.y, self.sampler.build)

  def top_eigenvalues(self, params, k: int = 1, iters: int = 20, method: str = "power",
                      max_examples: int = 0):
    """Top-k Hessian eigenvalues of the test cross-entropy at `params` (fedjax_sharp.analysis)."""
    from fedjax_sharp.analysis import hessian
    return hessian.model_top_eigenvalues(
        self.apply_fn, params, self.dataset.x_test, self.dataset.y_test, k=k, method=method,
        iters=iters, batch_size=self.config.eval.batch_size, preprocess=self.eval_preprocess,
        max_examples=max_examples)

  def learning_rate(self, round_idx: int) -> float:
    return self.config.local.lr * self.config.local.lr_decay ** round_idx

  def round_info(self, round_idx: int) -> RoundInfo:
    return RoundInfo(round=jnp.int32(round_idx),
                     learning_rate=jnp.float32(self.learning_rate(round_idx)),
                     num_clients=len(self.client_indices))


def make_evaluator(apply_fn, x_test, y_test, preprocess, batch_size: int):
  """Returns params -> {'test_loss', 'test_accuracy'}: fixed-size padded batches, one jit."""
  n = len(y_test)
  batch_size = min(batch_size, n)
  num_batches = math.ceil(n / batch_size)
  pad = num_batches * batch_size - n
  xs = np.concatenate([x_test, np.zeros((pad, *x_test.shape[1:]), x_test.dtype)])
  ys = np.concatenate([y_test, np.zeros((pad,), y_test.dtype)])
  ms = np.arange(len(ys)) < n
  xs = jnp.asarray(xs.reshape(num_batches, batch_size, *x_test.shape[1:]))
  ys = jnp.asarray(ys.reshape(num_batches, batch_size))
  ms = jnp.asarray(ms.reshape(num_batches, batch_size))
  key = jax.random.key(0)  # unused: no augmentation at test time

  @jax.jit
  def batch_stats(params, x, y, m):
    logits = apply_fn(params, preprocess(x, key))
    ce = jax.nn.log_softmax(logits) [jnp.arange(y.shape[0]), y]
    mf = m.astype(jnp.float32)
    return -jnp.sum(ce * mf), jnp.sum((jnp.argmax(logits, -1) == y) * mf)

  def evaluate(params) -> dict:
    loss, correct = 0.0, 0.0
    for b in range(num_batches):  # host loop: convolutions inside XLA CPU loops are slow
      l, c = batch_stats(params, xs[b], ys[b], ms[b])
      loss, correct = loss + l, correct + c
    return {"test_loss": float(loss) / n, "test_accuracy": float(correct) / n}
  return evaluate


def model_fields(config, dataset) -> dict:
  """The selected model's block `config.model.<name>`; FastText's vocabulary size comes from
  the dataset's vocabulary when it has one."""
  fields = dict(config.model.get(config.model.name) or {})
  vocabulary = getattr(dataset, "vocabulary", None)
  if config.model.name == "fasttext" and vocabulary is not None:
    fields["vocab_size"] = len(vocabulary)
  return fields


def build_experiment(config, dataset=None) -> Experiment:
  """Everything a run needs, from the config. `dataset`: an already loaded dataset of
  `config.data` (sweeps load it once for all their experiments; classification only)."""
  config_lib.validate(config)
  if config_lib.is_minimax(config):
    from fedjax_sharp.minimax import experiment as minimax_experiment
    return minimax_experiment.build_experiment(config)
  if dataset is None:
    dataset = data_lib.load_dataset(config.data)
  client_indices = data_lib.partition_dataset(dataset, config.data, seed=config.seed)
  root = jax.random.key(config.seed)
  model = model_registry.get_model(config.model.name, dataset.num_classes,
                                   **model_fields(config, dataset))
  apply_fn = model_registry.with_compute_dtype(
      lambda params, x: model.apply({"params": params}, x),
      str(config.model.get("compute_dtype", "float32")))
  params = model_registry.init_params(model, jax.random.fold_in(root, STREAM_INIT),
                                      dataset.input_shape)
  # Training calls the model in pieces of engine.micro_batch examples (same function; cheaper
  # convolution gradients on XLA CPU); evaluation and analysis keep whole batches.
  train_apply = model_registry.in_pieces(apply_fn, int(config.engine.get("micro_batch", 0)))
  algorithm = build_algorithm(config, train_apply)
  preprocess = make_preprocess(dataset, config.data.augment, config.data.augment_per_example,
                               pad=int(config.data.get("augment_pad", 4)))
  execution = ExecutionConfig.from_config(config.engine)
  engine = RoundEngine(algorithm, len(client_indices), execution, preprocess=preprocess,
                       client_table=client_table_lib.resolve(
                           # A multi-process mesh holds the table on its devices.
                           "device" if (distributed.is_multiprocess() and
                                        config.engine.get("client_table", "auto") == "auto")
                           else str(config.engine.get("client_table", "auto")), algorithm, params,
                           len(client_indices),
                           float(config.engine.get("client_table_budget_mb", 0.0))),
                       mesh=sharding.mesh_from_config(config.engine),
                       algorithm_factory=lambda values: build_algorithm(
                           hparams.with_values(config, values), train_apply),
                       footprint=Footprint.estimate(
                           params, jax.eval_shape(algorithm.client_state_init, params),
                           config.clients_per_round))
  sampler = CohortSampler(client_indices, config.clients_per_round, config.local.batch_size,
                          local_epochs=config.local.epochs, local_steps=config.local.steps,
                          seed=config.seed, weighting=config.aggregation)
  feeder = feeding.make_feeder(dataset.x_train, dataset.y_train, sampler.build,
                               mode=str(config.data.get("feed", "auto")),
                               device_budget_bytes=int(config.data.get("device_budget_mb", 2048))
                               * 2 ** 20)
  train_data = feeder.data if feeder.kind == "device" else None
  eval_preprocess = make_preprocess(dataset, "none", True)
  evaluate = make_evaluator(apply_fn, dataset.x_test, dataset.y_test, eval_preprocess,
                            config.eval.batch_size)
  return Experiment(config=config, dataset=dataset, client_indices=client_indices, model=model,
                    apply_fn=apply_fn, algorithm=algorithm, engine=engine, sampler=sampler,
                    train_data=train_data, init_params=params, evaluate=evaluate,
                    model_bytes=tree.num_bytes(params), eval_preprocess=eval_preprocess,
                    feeder=feeder)


VOCABULARY_FILE = "vocabulary.json"     # text datasets: pass as data.vocabulary_path to reuse
FINAL_PARAMS = "final_params.msgpack"      # the global model after the last round
AVERAGE_PARAMS = "average_params.msgpack"  # the mean of the last `eval.average_last` models


def save_params(path: str, params) -> None:
  metrics_lib.atomic_write_bytes(path, flax.serialization.to_bytes(jax.device_get(params)))


def load_params(path: str, template):
  with open(path, "rb") as f:
    return jax.tree.map(jnp.asarray, flax.serialization.from_bytes(template, f.read()))


class Progress:
  """One status line per `every` rounds: a bar with ETA on a terminal, log lines otherwise."""

  def __init__(self, total: int, every: int = 1, stream=None, start: int = 0):
    self.total, self.every, self.start_round = total, max(1, every), start
    self.stream = stream or sys.stderr
    self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
    self.start = time.time()

  def update(self, done: int, record: dict) -> None:
    if done % self.every and done != self.total:
      return
    elapsed = time.time() - self.start
    eta = elapsed / max(done - self.start_round, 1) * (self.total - done)
    metric = getattr(self, "metric", "test_accuracy")
    value = record.get(metric)
    label = "acc" if metric == "test_accuracy" else metric
    acc_s = f"{label} {value:.4g}" if value is not None else f"{label}   -   "
    text = (f"round {done:>{len(str(self.total))}}/{self.total} | {acc_s} | "
            f"train loss {record['train_loss']:.4f} | {record['round_time_s']:.2f} s/round | "
            f"elapsed {elapsed:,.0f} s | eta {eta:,.0f} s")
    if self.tty:
      width = 20
      filled = int(width * done / self.total)
      self.stream.write("\r[" + "#" * filled + "." * (width - filled) + "] " + text)
      if done == self.total:
        self.stream.write("\n")
      self.stream.flush()
    else:
      logging.info(text)


STATUSES = ("completed", "interrupted", "diverged", "failed")


def _all_finite(tree_) -> bool:
  return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree_)
             if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact))


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


def check_multiprocess(config) -> None:
  """Refuses, naming the field, what multi-process runs (`core.distributed`) do not support."""
  if str(config.engine.get("client_table", "device")) == "host":
    raise ValueError("engine.client_table='host': multi-process runs keep the client table on "
                     "the devices of the mesh; use 'device' (or 'auto')")


def run(config, workdir: str | None = None, progress: bool = True,
        experiment: Experiment | None = None) -> dict:
  """Runs the experiment; writes config.json, metrics.jsonl and summary.json under `workdir`.

  Reliability (BUILD_NOTES.md has the table of fault cases): one run per workdir (a lock), a
  workdir with another setting's results or checkpoint is refused before anything is written,
  checkpoints through orbax resume exactly, a non-finite loss or model stops the run
  (`training.on_nonfinite='stop'`) with status 'diverged', and every exit path writes a summary
  whose "status" says what it is ('completed', 'interrupted', 'diverged', 'failed').

  In a multi-process run (`core.distributed`) every process calls `run` with the same config;
  only process 0 writes `workdir` (the others run without one), and all of them save and
  restore its checkpoints together (`training.checkpoints`).
  """
  checkpoint_workdir = workdir
  if distributed.is_multiprocess():
    check_multiprocess(config)
    if workdir and not distributed.writes_files():
      workdir = None       # process 0 writes the run directory; all write the checkpoints
  lock = WorkdirLock(workdir) if workdir else contextlib.nullcontext()
  with lock:
    if workdir:
      workdir_lib.check_setting(workdir, config)
    t_build = time.time()
    exp = experiment or build_experiment(config)
    r = RunRecorder(config, workdir, exp, time.time() - t_build, progress,
                    checkpoint_workdir=checkpoint_workdir)
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
  return summary


class RoundAnalysis:
  """Geometry and per-client metrics of the global model during training: `config.analysis`
  (its metrics every `analysis.every` rounds and at the last one) and `eval.hessian_every`, a
  shorthand for lambda_max alone every k rounds on `eval.hessian_examples` test examples with
  `eval.hessian_iters` power iterations. One code path for both."""

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
  """

  def __init__(self, config, workdir: str | None, exp: Experiment, build_time: float,
               progress: bool = True, checkpoint_workdir: str | None = None):
    self.config, self.workdir, self.exp, self.build_time = config, workdir, exp, build_time
    # The code that runs is the code at the start: a checkout moved during the run must not
    # change what the summary says produced it.
    self.provenance = provenance()
    self.server_state, self.client_table = exp.engine.init(exp.init_params)
    self.start_round, self.bytes_total, self.records, self.writer = 0, 0, [], None
    self.train_key = jax.random.fold_in(jax.random.key(config.seed), STREAM_TRAIN)
    self.checkpoint_workdir = workdir or checkpoint_workdir
    if workdir:
      self._open_workdir()
    elif self.checkpoint_workdir:   # a multi-process run's other processes: checkpoints only
      self._restore()
    logging.info("%s: %s on %s, %d clients, %d per round, cohort shape (C, S, B) = %s, "
                 "%d parameters, engine %s, %s", config.name, exp.algorithm.name,
                 (f"{config.data.source}/{config.data.name} ({config.data.partition})"
                  if exp.dataset is not None else f"task {config.task.name}"),
                 len(exp.client_indices), config.clients_per_round, exp.sampler.shape,
                 tree.num_elements(exp.init_params), exp.engine.execution,
                 "one device" if exp.engine.mesh is None else
                 (f"mesh {dict(exp.engine.mesh.shape)} over {exp.engine.mesh.size} devices, "
                  f"{jax.process_count()} process(es)"))
    self.bar = (Progress(config.rounds, config.log_every, start=self.start_round)
                if progress else None)
    if self.bar:
      self.bar.metric = exp.metric
    self.on_nonfinite = str(config.get("training", {}).get("on_nonfinite", "stop"))
    self.param_sum, self.param_count = None, 0
    self.tensorboard = (metrics_lib.TensorBoardWriter(os.path.join(workdir, "tensorboard"))
                        if workdir and config.get("log", {}).get("tensorboard", False)
                        else None)
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
    metrics_lib.atomic_write_text(os.path.join(workdir, "config.json"),
                                  config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
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
      record["train_accuracy"] = float(m["correct"] / max(m["examples"], 1.0))
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
