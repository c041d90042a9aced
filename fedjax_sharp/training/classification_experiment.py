"""Builds a classification experiment from a config (`task.name` = 'classification'): the
dataset and its partition, the model (`models.registry`), the preprocessing and evaluator, the
algorithm with `config.dp`'s mechanism, the engine, the cohort sampler and the feeder. Minimax
tasks: `minimax_experiment`; what both builders make and share: `experiment`.

    exp = build_classification_experiment(config_lib.prepare(config))   # validated, resolved
"""
from __future__ import annotations

import jax

from fedjax_sharp import data as data_lib
from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core import client_table as client_table_lib
from fedjax_sharp.core import feeding, sharding, tree
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import RoundEngine
from fedjax_sharp.core.execution import ExecutionConfig, Footprint
from fedjax_sharp.models import registry as model_registry
from fedjax_sharp.training import privacy_rules
from fedjax_sharp.training.experiment import (STREAM_INIT, Experiment, apply_privacy,
                                              make_evaluator, make_preprocess)


def model_fields(config, dataset) -> dict:
  """The selected model's block `config.model.<name>`; FastText's vocabulary size comes from
  the dataset's vocabulary when it has one."""
  fields = dict(config.model[config.model.name]) if config.model.name in config.model else {}
  vocabulary = getattr(dataset, "vocabulary", None)
  if config.model.name == "fasttext" and vocabulary is not None:
    fields["vocab_size"] = len(vocabulary)
  return fields


def build_classification_experiment(config, dataset=None) -> Experiment:
  """Everything a classification run needs, from a prepared config (`config.prepare`: validated,
  'auto' resolved). `dataset`: an already loaded dataset of `config.data` (sweeps load it once
  for all their experiments)."""
  if dataset is None:
    dataset = data_lib.load_dataset(config.data)
  client_indices = data_lib.partition_dataset(dataset, config.data, seed=config.seed)
  root = jax.random.key(config.seed)
  # 'auto' was resolved for the default backend by `config.prepare` (core/backends.py: bfloat16
  # on GPU/TPU, float32 on CPU; 'matmul' convolutions only where measured faster).
  fields = model_fields(config, dataset)
  compute_dtype, conv_impl = str(config.model.compute_dtype), str(config.model.conv_impl)
  model = model_registry.get_model(config.model.name, dataset.num_classes, conv_impl=conv_impl,
                                   **fields)
  apply_fn = model_registry.with_compute_dtype(
      lambda params, x: model.apply({"params": params}, x), compute_dtype)
  params = model_registry.init_params(model, jax.random.fold_in(root, STREAM_INIT),
                                      dataset.input_shape)
  # Training calls the model in pieces of engine.micro_batch examples (same function; cheaper
  # convolution gradients on XLA CPU); evaluation and analysis keep whole batches.
  train_apply = model_registry.in_pieces(apply_fn, int(config.engine.micro_batch))
  preprocess = make_preprocess(dataset, config.data.augment, config.data.augment_per_example,
                               pad=int(config.data.augment_pad))
  eval_preprocess = make_preprocess(dataset, "none", True)
  evaluate = make_evaluator(apply_fn, dataset.x_test, dataset.y_test, eval_preprocess,
                            config.eval.batch_size)
  algorithm, accounting = apply_privacy(config, build_algorithm(config, train_apply), params,
                                        len(client_indices))
  # Under differential privacy the weights are 1 / clients_per_round for every real client
  # (the fixed denominator q M: under 'poisson' the cohort size varies, `core.cohort`).
  sampler = CohortSampler(client_indices, config.clients_per_round, config.local.batch_size,
                          local_epochs=config.local.epochs, local_steps=config.local.steps,
                          seed=config.seed, weighting=str(config.aggregation),
                          sampling=str(config.engine.sampling),
                          fixed_denominator=privacy_rules.private(config))
  execution = ExecutionConfig.from_config(config.engine)
  footprint = Footprint.estimate(params, jax.eval_shape(algorithm.client_state_init, params),
                                 sampler.shape[0])
  client_table = client_table_lib.resolve(str(config.engine.client_table), algorithm, params,
                                          len(client_indices),
                                          float(config.engine.client_table_budget_mb),
                                          rounds=int(config.rounds),
                                          clients_per_round=int(config.clients_per_round))
  mesh = sharding.mesh_for(int(config.engine.devices), int(config.engine.experiment_devices))
  engine = RoundEngine(algorithm, len(client_indices), execution, preprocess=preprocess,
                       client_table=client_table, mesh=mesh, footprint=footprint)
  feeder = feeding.make_feeder(dataset.x_train, dataset.y_train, sampler.build,
                               mode=str(config.data.feed),
                               device_budget_bytes=int(config.data.device_budget_mb) * 2 ** 20)
  train_data = feeder.data if feeder.kind == "device" else None
  return Experiment(config=config, dataset=dataset, client_indices=client_indices, model=model,
                    apply_fn=apply_fn, algorithm=algorithm, engine=engine, sampler=sampler,
                    train_data=train_data, init_params=params, evaluate=evaluate,
                    model_bytes=tree.num_bytes(params), eval_preprocess=eval_preprocess,
                    feeder=feeder, accounting=accounting)
