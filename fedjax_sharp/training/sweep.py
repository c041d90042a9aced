"""Sweeps: several experiments of one algorithm (seeds x learning rates x hyperparameters) as one
compiled program.

    summaries = sweep.run_sweep([cfg_seed0_lr1, cfg_seed1_lr1, ...], [workdir_0, workdir_1, ...])

The experiments differ only in `seed`, `local.lr`, `local.lr_decay` (and `name`) and in the
algorithm hyperparameters its registry entry lists as sweepable (`algorithms.registry.SWEEPABLE`:
FedSAM's rho, FedDyn's alpha, FedGMT's gamma / alpha / beta, FedProx's mu, ...: round data,
`FederatedAlgorithm.hparams`, stacked per experiment like the states, `core.hparams`);
everything else that shapes the computation must be equal (checked: the error lists the
differing fields).
Each experiment keeps its own partition, initial model, cohorts, data order and PRNG streams,
exactly as if it ran alone: the round engine vmaps its jitted round over a leading experiment
axis (`RoundEngine.sweep_round`), with the training set shared and each experiment's data plan
padded to the longest plan with masked (no-op) steps. Each experiment writes its own run
directory (config.json, metrics.jsonl round by round, checkpoints, summary.json: the same files
as `loop.run`), through the same `recorder.RunRecorder`, so tables and resumption work unchanged;
`round_time_s` there is the whole sweep's round (`sweep_size` in the summary says how many
shared it). A diverged experiment is closed with status 'diverged' and the others go on.
Experiments resumed from checkpoints of different rounds wait for the sweep to reach theirs.

Hyperparameters outside SWEEPABLE (structural switches, schedules) compile one program per value
(`compare.py` groups the runs accordingly).
"""
from __future__ import annotations

import contextlib
import time
from typing import Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.algorithms.registry import SWEEPABLE
from fedjax_sharp.core import feeding, sharding, tree
from fedjax_sharp.core.engine import Cohort, single_program
from fedjax_sharp.errors import DivergedError, RunInterrupted
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import config_paths
from fedjax_sharp.training import experiment as experiment_lib
from fedjax_sharp.training import loop
from fedjax_sharp.training import recorder as recorder_lib
from fedjax_sharp.training import workdir as workdir_lib

# Fields the experiments of one sweep may differ in, for every algorithm (everything else must
# be equal, except the algorithm's SWEEPABLE hyperparameters).
SWEEP_FIELDS = ("seed", "local.lr", "local.lr_decay")


def sweep_fields(config) -> tuple[str, ...]:
  """SWEEP_FIELDS plus the sweepable hyperparameters of `config`'s algorithm."""
  return SWEEP_FIELDS + sweepable(config)


def sweepable(config) -> tuple[str, ...]:
  """The config paths of `config`'s algorithm's sweepable hyperparameters (`SWEEPABLE`)."""
  return SWEEPABLE.get(str(config.algorithm.name), ())


def check_compatible(configs: Sequence) -> None:
  """Raises ValueError naming the fields where a config differs from the first one beyond
  `sweep_fields` (such experiments cannot share one compiled round)."""
  if not configs:
    raise ValueError("a sweep needs at least one config")
  import json  # pylint: disable=g-import-not-at-top
  first = json.loads(config_lib.resolved_setting(configs[0]).to_json_best_effort())
  allowed = sweep_fields(configs[0])
  for e, c in enumerate(configs[1:], 1):
    diffs = workdir_lib.setting_differences(first, c, allow=allowed)
    if c.rounds != configs[0].rounds:
      diffs.append(f"rounds: {configs[0].rounds!r} vs {c.rounds!r}")
    if diffs:
      raise ValueError(f"sweep: experiment {e} differs from experiment 0 beyond "
                       f"{list(allowed)}: " + "; ".join(d.replace("saved", "first")
                                                       .replace(", now", ", this")
                                                       for d in diffs)
                       + ". Run such settings as separate sweeps (or compare.py).")
  swept_hyperparameters(configs)


def swept_hyperparameters(configs: Sequence) -> dict[str, list[float]]:
  """{config path: one value per experiment} for the sweepable hyperparameters whose values
  differ between the experiments (empty when only seeds and learning rates vary). A field that
  is set in some configs and left to the builder's default in others is refused: its value in
  the latter is not in the config."""
  out = {}
  for path in sweepable(configs[0]):
    values = []
    for c in configs:
      try:
        values.append(config_paths.get(c, path))
      except KeyError:
        values.append(None)
    if len(set(values)) <= 1:
      continue
    if None in values:
      raise ValueError(f"sweep over {path}: set it explicitly in every experiment's config "
                       f"(some leave it to the algorithm's default)")
    out[path] = [float(v) for v in values]
  return out


def pad_steps(cohort: Cohort, num_steps: int) -> Cohort:
  """The same plan with `num_steps` steps: the extra steps are masked (change nothing)."""
  extra = num_steps - cohort.batch_idx.shape[1]
  if extra == 0:
    return cohort
  pad = lambda a: np.pad(np.asarray(a), [(0, 0), (0, extra)] + [(0, 0)] * (a.ndim - 2))
  return cohort.replace(batch_idx=pad(cohort.batch_idx), example_mask=pad(cohort.example_mask),
                        step_mask=pad(cohort.step_mask))


def build_experiments(configs: Sequence) -> list[experiment_lib.Experiment]:
  """The experiments of a sweep, sharing one loaded dataset and one device copy of it."""
  check_compatible(configs)
  minimax = config_lib.is_minimax(configs[0])
  dataset = None if minimax else data_lib.load_dataset(configs[0].data)
  exps = [loop.build_experiment(c, dataset=dataset) for c in configs]
  if any(e.feeder.kind != "device" for e in exps):
    raise ValueError("sweeps feed the training set from the device: data.feed='host' (or "
                     "'auto' above data.device_budget_mb) is not supported; run separately")
  shared = exps[0].feeder.data
  for e in exps[1:]:
    if (e.feeder.data.x.shape != shared.x.shape
        or not np.array_equal(np.asarray(e.feeder.data.y), np.asarray(shared.y))):
      raise ValueError("sweep: the experiments' training sets differ (data.* fields?)")
    e.feeder = feeding.DeviceFeeder(shared.x, shared.y, e.sampler.build)
  if any(x.engine.client_table != "device" for x in exps):
    raise ValueError("a sweep stacks the experiments' client tables on the device: set "
                     "--config.engine.client_table=device (the population is too large for "
                     "'auto' to keep it there: run the experiments separately)")
  mesh = exps[0].engine.mesh
  if mesh is not None and len(exps) % sharding.axis_size(mesh, sharding.EXPERIMENTS):
    raise ValueError(f"sweep: {len(exps)} experiments do not divide over "
                     f"engine.experiment_devices={sharding.axis_size(mesh, sharding.EXPERIMENTS)}")
  strategy = exps[0].engine.execution.client_strategy
  if not single_program(strategy):
    why = " (the CPU's 'auto')" if strategy == "host" else ""
    raise ValueError(f"a sweep needs a single-jit engine.client_strategy (vmap | map | "
                     f"chunked_vmap | unrolled), not {strategy!r}{why}: set "
                     f"--config.engine.client_strategy=vmap")
  return exps


def run_sweep(configs: Sequence, workdirs: Sequence[str | None] | None = None,
              progress: bool = True) -> list[dict]:
  """Runs the experiments together; returns their summaries (in order). See the module doc."""
  workdirs = list(workdirs) if workdirs is not None else [None] * len(configs)
  if len(workdirs) != len(configs):
    raise ValueError(f"{len(configs)} configs but {len(workdirs)} workdirs")
  real = [w for w in workdirs if w]
  if len(set(real)) != len(real):
    raise ValueError("sweep: two experiments share a workdir")
  with contextlib.ExitStack() as stack:
    for c, w in zip(configs, workdirs):
      if w:
        stack.enter_context(workdir_lib.WorkdirLock(w))
        workdir_lib.check_setting(w, c)
    t_build = time.time()
    exps = build_experiments(configs)
    build_time = time.time() - t_build
    line = progress and f"sweep of {len(exps)} runs"   # one progress line for all of them
    recorders = [recorder_lib.RunRecorder(x.config, w, x, build_time, line if e == 0 else False)
                 for e, (w, x) in enumerate(zip(workdirs, exps))]
    status = ["running"] * len(recorders)
    summaries: list[dict | None] = [None] * len(recorders)
    try:
      with loop.signals_as_interrupt() as check_signals:
        _train(configs[0].rounds, exps, recorders, status, summaries, check_signals)
    except (RunInterrupted, KeyboardInterrupt):
      _close_all(recorders, status, summaries, "interrupted")
      raise
    except BaseException:
      _close_all(recorders, status, summaries, "failed")
      raise
    _close_all(recorders, status, summaries, "completed")
  for s in summaries:
    s["sweep_size"] = len(configs)
  return summaries


def _close_all(recorders, status, summaries, final):
  for e, r in enumerate(recorders):
    if status[e] == "running":
      status[e] = final
      summaries[e] = r.close(final)


def _train(rounds, exps, recorders, status, summaries, check_signals=lambda: None):
  engine = exps[0].engine
  server_states = tree.stack([r.server_state for r in recorders])
  client_tables = tree.stack([r.client_table for r in recorders])
  keys = jnp.stack([r.train_key for r in recorders])
  swept = swept_hyperparameters([x.config for x in exps])
  if swept:
    logging.info("sweep: hyperparameters per experiment: %s", swept)
  # Each experiment's algorithm was built from its own config: its values, one lane each.
  hparams = tree.stack([x.engine.algorithm.hparams for x in exps])
  data = exps[0].feeder.data
  num_steps = max(x.sampler.shape[1] for x in exps)
  starts = np.array([r.start_round for r in recorders])
  for t in range(int(starts.min()), rounds):
    t_round = time.time()
    cohorts = [pad_steps(x.feeder.for_round(t)[1], num_steps) for x in exps]
    # Poisson cohorts: each experiment's own padded size (one may have grown past a larger
    # draw); the stack pads all to the largest.
    size = max(c.client_ids.shape[0] for c in cohorts)
    cohorts = [sharding.pad_cohort(c, len(x.client_indices), size)
               for c, x in zip(cohorts, exps)]
    rates = [x.learning_rate(t) for x in exps]
    new_states, new_tables, metrics = engine.sweep_round(
        server_states, client_tables, data, tree.stack(cohorts), t, rates, keys, hparams)
    if (starts > t).any():
      # Experiments resumed from a later checkpoint wait (state unchanged) until the sweep
      # reaches their round; the others catch up.
      keep = jnp.asarray(starts > t)
      select = lambda new, old: jnp.where(keep.reshape((-1,) + (1,) * (new.ndim - 1)), old, new)
      new_states = jax.tree.map(select, new_states, server_states)
      new_tables = jax.tree.map(select, new_tables, client_tables)
    server_states, client_tables = new_states, new_tables
    metrics = jax.device_get(metrics)
    round_time = time.time() - t_round
    for e, r in enumerate(recorders):
      if status[e] != "running" or t < starts[e]:
        continue   # a diverged experiment keeps computing in its lane; nothing is recorded
      try:
        r.record_round(t, tree.index(server_states, e), lambda e=e: tree.index(client_tables, e),
                       tree.index(metrics, e), cohorts[e], t_round, round_time=round_time)
      except DivergedError as err:
        logging.error("sweep experiment %d (%s, seed %d): %s", e, r.config.name, r.config.seed,
                      err)
        status[e] = "diverged"
        summaries[e] = r.close("diverged")
    check_signals()
    if all(s != "running" for s in status):
      break
