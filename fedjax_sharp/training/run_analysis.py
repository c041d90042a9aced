"""Analysis of finished run directories (what `experiments/hessian.py`, `landscape.py`,
`analyse.py` and `compare.py --hessian` call): rebuild the experiment from its config.json, load
the saved global model, compute the top Hessian eigenvalues, sharpness, landscapes... on the
test set, write hessian.json / analysis.json atomically. The long parts show the training's
progress line with an ETA (`training.progress`; `progress=False` hides it)."""
from __future__ import annotations

import contextlib
import json
import os
import time

import ml_collections

from fedjax_sharp.training import experiment as experiment_lib
from fedjax_sharp.training import hooks
from fedjax_sharp.training import loop
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import progress as progress_lib

HESSIAN_FILE = "hessian.json"
MODELS = {"final": hooks.FINAL_PARAMS, "average": hooks.AVERAGE_PARAMS}


def load_run_config(run_dir: str) -> ml_collections.ConfigDict:
  with open(os.path.join(run_dir, "config.json")) as f:
    config = json.load(f)
  dp = config.get("dp", {})
  if dp.get("target_epsilon") is not None:   # older versions recorded the solved sigma here
    dp["noise_multiplier"] = None
  return config_lib.from_recorded(config)


def run_hessian(run_dir: str, *, model: str = "final", k: int = 5, iters: int = 20,
                method: str = "power", max_examples: int = 0, experiment=None,
                progress: bool = True) -> dict:
  """Top-k Hessian eigenvalues of a run's saved model on its test set; writes hessian.json
  (one entry per model kind, so 'final' and 'average' can both be stored)."""
  exp, params = _load(run_dir, model, experiment)
  t0 = time.time()
  with _progress(exp, "lambda_max" if k == 1 else f"top {k}", "iteration", progress) as bar:
    values = exp.top_eigenvalues(params, k=k, iters=iters, method=method,
                                 max_examples=max_examples, progress=bar)
  result = {"eigenvalues": [float(v) for v in values], "lambda_max": float(values[0]),
            "k": k, "iters": iters, "method": method,
            "examples": _examples(exp, max_examples),
            "seconds": time.time() - t0}
  _store(run_dir, model, result, HESSIAN_FILE)
  return result


ANALYSIS_FILE = "analysis.json"


def _examples(exp, examples: int) -> int:
  """How many test examples an analysis of the first `examples` (0 = all) really used."""
  n = int(len(exp.dataset.y_test))
  return min(int(examples), n) if examples else n


@contextlib.contextmanager
def _progress(exp, what: str, unit: str, show: bool):
  """The progress line of one analysis of a run ('lambda_max fedgmt seed 0 | iteration 3/20 |
  ... | eta 40 s'): yields its `advance` for the analysis's `progress` callback, or None."""
  if not show:
    yield None
    return
  config = exp.config
  bar = progress_lib.steps(f"{what} {config.algorithm.name} seed {config.seed}", unit)
  try:
    yield bar.advance
  finally:
    bar.close()


def _load(run_dir: str, model: str, experiment=None):
  if model not in MODELS:
    raise ValueError(f"--model={model!r} is not one of {sorted(MODELS)}")
  path = os.path.join(run_dir, MODELS[model])
  if not os.path.exists(path):
    hint = (" (set eval.average_last > 0 in the run's config)" if model == "average" else
            " (runs save it when they finish)")
    raise FileNotFoundError(f"{path} does not exist{hint}")
  exp = experiment or loop.build_experiment(load_run_config(run_dir))
  return exp, hooks.load_params(path, exp.init_params)


def _batches(exp, examples: int, batch_size: int = 500):
  from fedjax_sharp.analysis.hessian import cross_entropy_batches
  return cross_entropy_batches(exp.dataset.x_test, exp.dataset.y_test, batch_size,
                               exp.eval_preprocess, examples)


def load_stored(run_dir: str, filename: str = ANALYSIS_FILE) -> dict:
  """A run's JSON analysis file (analysis.json, hessian.json) as a dict; {} if there is none."""
  path = os.path.join(run_dir, filename)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _store(run_dir: str, key: str, value: dict, filename: str = ANALYSIS_FILE) -> None:
  """Read-modify-write of one entry of a run's JSON analysis file (atomic write)."""
  results = load_stored(run_dir, filename)
  results[key] = value
  metrics_lib.atomic_write_json(os.path.join(run_dir, filename), results)


def run_sharpness(run_dir: str, *, model: str = "final", rho: float = 0.05,
                  trace_probes: int = 100, examples: int = 2000, experiment=None,
                  progress: bool = True) -> dict:
  """SAM sharpness and the Hutchinson Hessian trace of a run's saved model on the first
  `examples` test examples (0 = all); stored in RUN/analysis.json under '<model>_sharpness'."""
  import jax  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.analysis import sharpness  # pylint: disable=g-import-not-at-top
  exp, params = _load(run_dir, model, experiment)
  batches = _batches(exp, examples)
  loss_fn = sharpness.cross_entropy_loss(exp.apply_fn)
  t0 = time.time()
  out = sharpness.sam_sharpness(loss_fn, params, batches, rho=rho)
  t1 = time.time()
  with _progress(exp, "trace", "probe", progress) as bar:
    trace = sharpness.hutchinson_trace(loss_fn, params, batches, num_probes=trace_probes,
                                       key=jax.random.key(0), progress=bar)
  out.update({"rho": rho, "hessian_trace": trace["trace"],
              "hessian_trace_stderr": trace["stderr"], "trace_probes": trace_probes,
              "examples": _examples(exp, examples),
              "sam_seconds": t1 - t0, "trace_seconds": time.time() - t1})
  _store(run_dir, f"{model}_sharpness", out)
  return out


def run_clients(run_dir: str, *, model: str = "final", experiment=None) -> dict:
  """Per-client accuracy percentiles, worst client and participation gap of a run's saved
  model (`analysis.clients`: test accuracy reweighted to each client's label distribution;
  'trained' = sampled in any of the run's rounds, rebuilt from its cohort sampler); stored in
  RUN/analysis.json under '<model>_clients'."""
  from fedjax_sharp.analysis import clients  # pylint: disable=g-import-not-at-top
  exp, params = _load(run_dir, model, experiment)
  out = clients.model_client_percentiles(exp.apply_fn, params, exp.dataset, exp.client_indices,
                                         trained=exp.sampler.sampled_mask(int(exp.config.rounds)),
                                         preprocess=exp.eval_preprocess)
  _store(run_dir, f"{model}_clients", out)
  return out


def run_landscape(run_dir: str, *, other: str | None = None, model: str = "final",
                  num: int = 21, span: float = 1.0, examples: int = 2000, seed: int = 0,
                  experiment=None, progress: bool = True) -> dict:
  """The 2D loss surface of a run's saved model along two filter-normalised random directions
  (RUN/landscape.png, .npz) and, with `other` (another run of the same model), the 1D
  interpolation from this run's model to the other's (RUN/interpolation.png, .npz)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.analysis import landscape, sharpness  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.core import losses  # pylint: disable=g-import-not-at-top
  exp, params = _load(run_dir, model, experiment)
  batches = _batches(exp, examples)
  loss_fn = sharpness.cross_entropy_loss(exp.apply_fn)

  def acc_fn(p, batch):  # per example, or per token for next-token targets (core.losses)
    y, mask = batch["y"], batch["mask"]
    right = losses.correct_count(exp.apply_fn(p, batch["x"]), y, mask)
    return right / jnp.maximum(losses.accuracy_count(y, mask), 1.0)
  config = load_run_config(run_dir)
  label = f"{config.algorithm.name}, seed {config.seed}"
  t0 = time.time()
  with _progress(exp, "landscape", "point", progress) as bar:
    surf = landscape.surface(loss_fn, params, batches, jax.random.key(seed), num=num, span=span,
                             acc_fn=acc_fn, progress=bar)
  png, _ = landscape.save_surface(surf, os.path.join(run_dir, "landscape"),
                                  title=f"{config.name}: {label} ({model} model)")
  out = {"landscape_png": png, "grid": num, "span": span, "seconds": time.time() - t0,
         "examples": _examples(exp, examples),
         "centre_loss": float(surf["loss"][num // 2, num // 2])}
  if other:
    other_params = hooks.load_params(os.path.join(other, MODELS[model]), exp.init_params)
    with _progress(exp, "path", "point", progress) as bar:
      line = landscape.interpolate(loss_fn, params, other_params, batches, acc_fn=acc_fn,
                                   progress=bar)
    other_cfg = load_run_config(other)
    out["interpolation_png"] = landscape.save_line(
        line, os.path.join(run_dir, "interpolation"),
        labels=(label, f"{other_cfg.algorithm.name}, seed {other_cfg.seed}"),
        title=f"{config.name}: {label} -> {other}")
  _store(run_dir, f"{model}_landscape", out)
  return out


def run_global_local(run_dir: str, *, model: str = "final", clients: int = 10,
                     iters: int = 20, global_examples: int = 2000, local_on_global: bool = True,
                     experiment=None, progress: bool = True) -> dict:
  """Global vs local sharpness of a run's saved model (`analysis.global_local`): the first
  `clients` clients by index (each trained locally from the model by one FedAvg round with the
  run's client optimiser, local steps and last-round learning rate), the global loss on a
  class-stratified sample of `global_examples` training examples. Stored in analysis.json."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from fedjax_sharp import data as data_lib  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.algorithms import build_algorithm  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.analysis import global_local, hessian, sharpness  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.core import RoundEngine, RoundInfo  # pylint: disable=g-import-not-at-top
  exp, params = _load(run_dir, model, experiment)
  config = load_run_config(run_dir)
  ds = exp.dataset
  local_cfg = ml_collections.ConfigDict(config.to_dict())
  local_cfg.algorithm.name = "fedavg"
  local_cfg.server.optimizer, local_cfg.server.lr = "sgd", 1.0
  local_alg = build_algorithm(local_cfg, exp.apply_fn)
  engine = RoundEngine(local_alg, len(exp.client_indices), exp.engine.execution,
                       preprocess=exp.engine.preprocess)
  train_key = jax.random.fold_in(jax.random.key(config.seed), experiment_lib.STREAM_TRAIN)
  last = config.rounds - 1

  from fedjax_sharp.core import TrainData  # pylint: disable=g-import-not-at-top
  data = exp.train_data if exp.train_data is not None else TrainData(
      jnp.asarray(ds.x_train), jnp.asarray(ds.y_train))

  def local_train(p, m):
    server, table = engine.init(p)
    cohort = exp.sampler.build(last, client_ids=[m])
    info = RoundInfo.at(last, exp.learning_rate(last), len(exp.client_indices))
    server, _, _ = engine.round(server, table, data, cohort, info, train_key)
    return local_alg.eval_params(server)

  def batches_of(idx):
    return hessian.cross_entropy_batches(ds.x_train[idx], ds.y_train[idx],
                                         int(config.eval.batch_size), exp.eval_preprocess)
  sample = data_lib.stratified_subset(ds.y_train, min(global_examples, len(ds.y_train)), 0)
  t0 = time.time()
  with _progress(exp, "global vs local", "iteration", progress) as bar:
    out = global_local.global_vs_local(sharpness.cross_entropy_loss(exp.apply_fn), params,
                                       batches_of, exp.client_indices, local_train,
                                       list(range(min(clients, len(exp.client_indices)))),
                                       sample, iters=iters, local_on_global=local_on_global,
                                       progress=bar)
  out.update({"iters": iters, "global_examples": int(len(sample)),
              "seconds": time.time() - t0})
  _store(run_dir, f"{model}_global_local", out)
  return out
