"""One run's bookkeeping around its rounds (`RunRecorder`, used by `training.loop.run` and the
sweeps of `training.sweep`): resume from a checkpoint, config.json, each round's metrics record,
the hooks that act on it (`training.hooks`: evaluation, analysis, metrics.jsonl, TensorBoard,
the divergence guard, checkpoints, the averaged and final models, artifacts, progress),
provenance and the summary.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from typing import Sequence

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.core import tree
from fedjax_sharp.core.client_table import HostClientTable
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import hooks as hooks_lib
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.training.experiment import STREAM_TRAIN, Experiment

VOCABULARY_FILE = "vocabulary.json"     # text datasets: pass as data.vocabulary_path to reuse

STATUSES = ("completed", "interrupted", "diverged", "failed")
# A round record's aggregates of the clients' own data (with every `*_mean` of an algorithm's
# sums): unnoised, so under DP they are withheld unless `dp.record_client_metrics`. So is a
# Poisson round's realised cohort size `clients`, which the fixed denominator keeps out of the
# noised aggregate (add or remove one client and its distribution changes).
CLIENT_METRICS = ("train_loss", "train_accuracy", "local_steps", "clients")


def _all_finite(tree_) -> bool:
  """Whether every floating-point leaf is finite. Leaves in host memory (a CPU backend) are
  checked by NumPy: the compiled reduction costs a compile per parameter structure (5 s for a
  MobileNetV2 on a 2-core CPU) for a check NumPy does in milliseconds. Leaves on an
  accelerator, or not all held by this process, are reduced where they are, and only the flag
  comes back."""
  leaves = [x for x in jax.tree.leaves(tree_) if tree.is_float(x)]
  if all(_in_host_memory(x) for x in leaves):
    return all(bool(np.isfinite(np.asarray(x)).all()) for x in leaves)
  return bool(_floats_finite(tree_))


def _in_host_memory(x) -> bool:
  return not isinstance(x, jax.Array) or (
      x.is_fully_addressable and all(d.platform == "cpu" for d in x.devices()))


@jax.jit
def _floats_finite(tree_):
  """One compiled reduction over the floating-point leaves (a check per leaf compiled a program
  for every distinct leaf shape: ~7 s for a MobileNetV2 on a 2-core CPU)."""
  flags = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree_) if tree.is_float(x)]
  return jnp.all(jnp.stack(flags)) if flags else jnp.bool_(True)


class RunRecorder:
  """One experiment's bookkeeping around its rounds, shared by `run` and the sweeps
  (`fedjax_sharp.training.sweep`): resume from the checkpoint, config.json, each round's
  metrics record and the hooks that act on it (`make_hooks`), and the summary. The caller holds
  the workdir lock and computes the rounds.

  After construction, `server_state`, `client_table` and `start_round` are where training
  starts (restored from the checkpoint when there is one); `record_round` takes each round's
  result, builds its record and runs the hooks in order (the divergence guard raises
  DivergedError on a non-finite round when `training.on_nonfinite='stop'`); `close(status)`
  closes the hooks, writes the summary and returns it.

  `checkpoint_workdir` (default `workdir`): the run directory whose checkpoints this recorder
  saves and restores. A multi-process run's processes other than 0 write no `workdir` but
  pass process 0's here: orbax saves and restores with every process (`training.checkpoints`).
  `run_provenance`: what produced the run (`provenance()`), stamped by the caller when its run
  started; by default, now.
  """

  def __init__(self, config, workdir: str | None, exp: Experiment, build_time: float,
               progress: bool | str = True, checkpoint_workdir: str | None = None,
               run_provenance: dict | None = None, hooks: Sequence[hooks_lib.Hook] = ()):
    self.config, self.workdir, self.exp, self.build_time = config, workdir, exp, build_time
    self.extra_hooks = tuple(hooks)   # the caller's own (`loop.run(..., hooks=)`)
    # The code that runs is the code at the start: a checkout moved during the run must not
    # change what the summary says produced it.
    self.provenance = provenance() if run_provenance is None else run_provenance
    self.checkpoint_workdir = workdir or checkpoint_workdir
    # A disk table's live rows: under the workdir (its checkpoints hard-link them; replaced at
    # every start, a resume brings them back from the checkpoint), removed at `close`.
    rows = (os.path.join(self.checkpoint_workdir, workdir_lib.CLIENT_ROWS_DIRECTORY)
            if self.checkpoint_workdir else None)
    self.server_state, self.client_table = exp.engine.init(exp.init_params, rows)
    self.start_round, self.bytes_total, self.records = 0, 0, []
    self.withhold_client_metrics = (exp.accounting is not None
                                    and not config.dp.record_client_metrics)
    self.train_key = jax.random.fold_in(jax.random.key(config.seed), STREAM_TRAIN)
    restored = False
    if workdir:
      restored = self._open_workdir()
    elif self.checkpoint_workdir:   # a multi-process run's other processes: checkpoints only
      self._restore()
    where = (f"{config.data.source}/{config.data.name} ({config.data.partition})"
             if exp.dataset is not None else f"task {config.task.name}")
    execution = exp.engine.execution
    # One short INFO line per run; the whole set-up (cohort shape, every engine field, the
    # device layout) with --verbose.
    dtype = (f", {config.model.compute_dtype}"
             if exp.dataset is not None else "")
    devices = exp.engine.host_devices
    side_by_side = (f" on {len(devices)} {devices[0].platform.upper()} devices"
                    if len(devices) > 1 else "")
    on_disk = (", client rows on disk" if exp.engine.client_table == "disk" else "")
    logging.info("%s: %s on %s, %d clients, %d/round, engine %s/%s%s%s%s", config.name,
                 exp.algorithm.name, where, len(exp.client_indices), config.clients_per_round,
                 execution.client_strategy, execution.local_loop, side_by_side, dtype, on_disk)
    logging.debug("%s: cohort shape (C, S, B) = %s, %d parameters, engine %s, %s",
                  config.name, exp.sampler.shape, tree.num_elements(exp.init_params), execution,
                  "one device" if exp.engine.mesh is None else
                  (f"mesh {dict(exp.engine.mesh.shape)} over {exp.engine.mesh.size} devices, "
                   f"{jax.process_count()} process(es)"))
    self.hooks = self.make_hooks(progress, truncate=not restored)

  def make_hooks(self, progress: bool | str, truncate: bool = True) -> list[hooks_lib.Hook]:
    """The run's hooks (`hooks.default_hooks`, with the caller's own); `truncate`: start
    metrics.jsonl afresh (not a resumed run)."""
    hooks = hooks_lib.default_hooks(
        self.config, self.exp, workdir=self.workdir, checkpoint_workdir=self.checkpoint_workdir,
        records=self.records, start_round=self.start_round, progress=progress,
        truncate=truncate, extra=self.extra_hooks)
    # The summary counts the models the averager averaged.
    self.averager = next((h for h in hooks if isinstance(h, hooks_lib.Averager)), None)
    return hooks

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

  def _open_workdir(self) -> bool:
    """config.json, the vocabulary, and the records kept from before a resume. Returns whether
    a checkpoint was restored (then metrics.jsonl is appended to)."""
    config, workdir, exp = self.config, self.workdir, self.exp
    restored = self._restore()
    if not config.resume and os.path.isdir(os.path.join(workdir, checkpoints.DIRECTORY)):
      shutil.rmtree(os.path.join(workdir, checkpoints.DIRECTORY))   # explicit start over
    # The prepared config: 'auto' as it resolved on this backend (what ran; resume compares it).
    # The blocks the run uses (config_lib.recorded); summary.json has a solved sigma.
    resolved = ml_collections.ConfigDict(config_lib.recorded(config))
    metrics_lib.atomic_write_text(
        os.path.join(workdir, "config.json"),
        resolved.to_json_best_effort(indent=2, sort_keys=True) + "\n")
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
    return restored

  def training_record(self, t: int, m: dict, cohort) -> dict:
    """Round `t`'s record from its training metrics `m` (host sums and counts): learning rates,
    train loss and accuracy, the algorithm's own means, and the bytes communicated."""
    config, exp = self.config, self.exp
    # The players of a minimax task have their own constant rates (config.minimax); the
    # decayed classification rate would be a number nothing uses.
    rates = ({"lr_x": float(config.minimax.lr_x), "lr_y": float(config.minimax.lr_y)}
             if config_lib.is_minimax(config) else {"lr": exp.learning_rate(t)})
    # A round that trained no example (an empty Poisson draw) has no training means: None.
    examples = m["examples"]
    mean = lambda total, count: float(total / max(count, 1.0)) if count > 0 else None
    record = {"round": t, **rates, "train_loss": mean(m["loss_sum"], examples),
              "local_steps": int(m["steps"])}
    if "correct" in m:
      # Per-token labels: the accuracy's own denominator ('examples' counts the loss tokens).
      record["train_accuracy"] = mean(m["correct"], m.get("accuracy_tokens", examples))
    for k, v in m.items():  # algorithm-specific sums, e.g. the FedGMT KL term
      if k.endswith("_sum") and k != "loss_sum":
        record[k[:-4] + "_mean"] = mean(v, examples)
    # The real clients (padding, and the slot an empty DP round's noise rides on, have id M).
    num_real = int(np.sum(np.asarray(cohort.client_ids) < len(exp.client_indices)))
    if exp.sampler.sampling == "poisson":
      record["clients"] = num_real   # the realised cohort size
    if self.withhold_client_metrics:
      # Under DP these are unnoised aggregates of the clients' data, outside the guarantee.
      for k in [k for k in record if k in CLIENT_METRICS or k.endswith("_mean")]:
        del record[k]
    comm = exp.algorithm.communication
    if self.withhold_client_metrics and exp.sampler.sampling == "poisson":
      # The realised cohort size is not recorded under DP (amplification by sampling assumes
      # the draw stays hidden): the bytes count the expected cohort, clients_per_round.
      num_real = int(self.config.clients_per_round)
    bytes_down = int(num_real * comm.down * exp.model_bytes)
    bytes_up = int(num_real * comm.up * exp.model_bytes)
    self.bytes_total += bytes_down + bytes_up
    record.update({"bytes_down": bytes_down, "bytes_up": bytes_up,
                   "bytes_total": self.bytes_total})
    return record

  def record_round(self, t: int, server_state, client_table, m, cohort, t_round: float,
                   round_time: float | None = None) -> dict:
    """Takes round `t`'s result: builds its record and runs the hooks on it (evaluation on the
    eval rounds, metrics.jsonl at once, checkpoints, artifacts and final models when due).
    `round_time` defaults to now - t_round; `client_table` may be a zero-argument function
    returning it (called only to save it)."""
    self.server_state, self.client_table = server_state, client_table
    m = jax.device_get(m)
    record = self.training_record(t, m, cohort)
    params = self.exp.algorithm.eval_params(server_state)
    finite = bool(np.isfinite(m["loss_sum"])) and _all_finite(params)
    if not finite:
      record["nonfinite"] = True
    rnd = hooks_lib.Round(t=t, record=record, params=params, server_state=server_state,
                          client_table=client_table, cohort=cohort, finite=finite,
                          t_round=t_round, round_time=round_time)
    for hook in self.hooks:
      hook.on_round(rnd)
    return record

  def close(self, status: str) -> dict:
    """Closes the hooks (the last first) and writes summary.json. Errors are logged: the summary
    of an interrupted or failed run must not hide the original exception. Returns the summary."""
    for hook in reversed(self.hooks):
      try:
        hook.close(status)
      except OSError as e:
        logging.error("closing the %s hook failed: %s", type(hook).__name__, e)
    self.exp.feeder.close()
    if isinstance(self.client_table, HostClientTable):
      self.client_table.close()   # a disk table's live rows (the checkpoints keep theirs)
    summary = _summarize_run(self.config, self.exp, self.records, self.build_time,
                             self.provenance, status,
                             self.averager.count if self.averager else None)
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
                   run_provenance: dict, status: str = "completed",
                   averaged_models: int | None = None) -> dict:
  comm = exp.algorithm.communication
  summary = metrics_lib.summarize(records, config.eval.last_n, config.eval.target_accuracy,
                                  metric=exp.metric, higher_is_better=exp.higher_is_better)
  times = [r["round_time_s"] for r in records]
  summary.update({
      "status": status, "completed_rounds": len(records), "configured_rounds": config.rounds,
      "name": config.name, "algorithm": exp.algorithm.name, "seed": config.seed,
      # Which split the test_* / worst-class metrics were measured on.
      "eval_split": "validation" if config.data.validation_examples else "test",
      "build_time_s": build_time, "first_round_time_s": times[0] if times else None,
      "mean_round_time_s": float(np.mean(times[1:] or times)) if times else None,
      "traces": exp.engine.trace_count,
      "communication": {"down": comm.down, "up": comm.up, "model_bytes": exp.model_bytes},
      "provenance": run_provenance,
  })
  if exp.accounting is not None:
    # epsilon(delta) after the last recorded round, and how it was accounted.
    from fedjax_sharp.core import accounting  # pylint: disable=g-import-not-at-top
    summary["dp_epsilon"] = records[-1]["dp_epsilon"] if records else None
    summary["dp"] = accounting.describe(exp.accounting)
    # A server that sees each upload ('client' noise without secure aggregation) faces this.
    local = exp.accounting.local_epsilon(len(records))
    summary["dp"]["local_epsilon"] = None if math.isinf(local) else local
    summary["dp"]["client_metrics_recorded"] = bool(config.dp.record_client_metrics)
  if averaged_models is not None:
    # Fewer than eval.average_last when the run resumed inside that window.
    summary["averaged_models"] = averaged_models
  return summary
