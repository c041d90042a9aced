"""Builds a minimax experiment from a config (`task.name` != 'classification'), for the same
host loop, metric files and comparison tables as the classification experiments:

    python experiments/run.py --config=configs/minimax_toy.py:quadratic --workdir=runs/quad

Test problems: `task.<name>` holds their parameters and every client is one coefficient row
(batch size 1, `local.steps` = K). Fair classification and the GAN use `config.data` (dataset,
partition) and `config.local` (batch size, K); fair classification also `config.model`.
The players' local rates and optimisers are `config.minimax`; the algorithm's block is
`config.algorithm.<name>` (fess_gda, local_sgda, local_sgda_plus, fed_norm_sgda(_plus)).
"""
from __future__ import annotations

import os

import jax

from fedjax_sharp import data as data_lib
from fedjax_sharp.core import tree
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.minimax import tasks as tasks_lib
from fedjax_sharp.minimax.algorithms import build_minimax_algorithm
from fedjax_sharp.training.experiment import STREAM_INIT, Experiment, make_preprocess


def build_task(config):
  """(task, dataset or None) for `config.task.name`."""
  name = config.task.name
  if name in tasks_lib.TOY_PROBLEMS:
    kwargs = dict(config.task[name])
    return tasks_lib.toy_problem(name, seed=config.seed, **kwargs), None
  dataset = data_lib.load_dataset(config.data)
  parts = data_lib.partition_dataset(dataset, config.data, seed=config.seed)
  if name == "fair_classification":
    from fedjax_sharp.minimax import fair
    from fedjax_sharp.models import registry as model_registry
    model = model_registry.get_model(config.model.name, dataset.num_classes)
    params = model_registry.init_params(model, jax.random.fold_in(jax.random.key(config.seed),
                                                                  STREAM_INIT),
                                        dataset.input_shape)
    preprocess = make_preprocess(dataset, "none", True)
    task = fair.fair_classification(
        dataset, parts, lambda p, x: model.apply({"params": p}, x), params,
        lam=float(config.task.fair_classification.lam), preprocess=preprocess,
        eval_batch_size=config.eval.batch_size)
    return task, dataset
  if name == "gan":
    from fedjax_sharp.minimax import gan
    g = config.task.gan
    cache = str(g.classifier_cache) or os.path.join(
        os.path.expanduser("~"), ".cache", "fedjax_sharp", f"fd_classifier_{config.data.name}.msgpack")
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    task = gan.gan_task(dataset, parts, cache_path=cache, fd_samples=int(g.fd_samples),
                        classifier_epochs=int(g.classifier_epochs), seed=0)
    return task, dataset
  raise ValueError(f"task.name={name!r} is not a minimax task")


def build_experiment(config) -> Experiment:
  """A minimax run's experiment, from a prepared config (`config.prepare`)."""
  task, dataset = build_task(config)
  algorithm = build_minimax_algorithm(config, task)
  execution = ExecutionConfig.from_config(config.engine)
  num_clients = len(task.client_indices)
  toy = config.task.name in tasks_lib.TOY_PROBLEMS
  engine = RoundEngine(algorithm, num_clients, execution, preprocess=task.preprocess)
  sampler = CohortSampler(task.client_indices, config.clients_per_round,
                          1 if toy else config.local.batch_size,
                          local_epochs=config.local.epochs,
                          local_steps=max(config.local.steps, 1) if toy else config.local.steps,
                          seed=config.seed, weighting=str(config.aggregation))
  params = task.init_params(jax.random.fold_in(jax.random.key(config.seed), STREAM_INIT))
  return Experiment(
      config=config, dataset=dataset, client_indices=task.client_indices, model=None,
      apply_fn=None, algorithm=algorithm, engine=engine, sampler=sampler,
      train_data=task.train_data, init_params=params, evaluate=task.evaluate,
      model_bytes=tree.num_bytes(params), eval_preprocess=task.preprocess,
      metric=task.primary_metric, higher_is_better=task.higher_is_better,
      artifacts=task.artifacts)
