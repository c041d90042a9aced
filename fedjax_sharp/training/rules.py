"""What one field's declaration cannot say (`training.fields`): names that must be registered,
fields that depend on others, the blocks the registries declare. Each rule takes the config and
raises a ConfigError naming the field; `fields.validate` runs them (then the dp block's,
`training.privacy_rules`).
"""
from __future__ import annotations

from typing import Any, Callable

from fedjax_sharp.analysis import round_metrics
from fedjax_sharp.core import execution
from fedjax_sharp.data import sources
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.hyperparameters import check
from fedjax_sharp.hyperparameters import require as _check
from fedjax_sharp.minimax import algorithms as minimax_algorithms
from fedjax_sharp.minimax import tasks
from fedjax_sharp.minimax.tasks import is_minimax
from fedjax_sharp.models import registry as models


def _one_of(value, allowed, field: str) -> None:
  if value not in allowed:
    raise ConfigError(f"{field}={value!r} is not one of {sorted(allowed)}")


# What one declaration cannot say: (config) -> None, raising ConfigError naming the field.
RULES: list[Callable[[Any], None]] = []
rule = RULES.append


@rule
def _registered_names(config) -> None:
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.data import partition as partition_lib
  minimax = minimax_algorithms.MINIMAX_ALGORITHMS
  _one_of(config.algorithm.name, minimax if is_minimax(config) else ALGORITHMS, "algorithm.name")
  _one_of(config.model.name, models.MODELS, "model.name")
  _one_of(config.data.source, sources.LOADERS, "data.source")
  _one_of(config.data.partition, partition_lib.PARTITIONS, "data.partition")
  external = config.data.partition in partition_lib.EXTERNAL_PARTITIONS
  _check(config.data.num_clients >= (0 if external else 1), "data.num_clients",
         f"must be >= {0 if external else 1}"
         f"{' (0 = every client of the ' + config.data.partition + ')' if external else ''}, "
         f"got {config.data.num_clients}")


@rule
def _clients(config) -> None:
  if config.data.partition == "file":
    _check(bool(config.data.partition_path), "data.partition_path",
           "must name a .json or .npz partition file for data.partition='file'")
  task = config.task.name
  if task in tasks.TOY_PROBLEMS:
    m = config.task[task].num_clients
    _check(config.clients_per_round <= m, "clients_per_round",
           f"({config.clients_per_round}) must be <= task.{task}.num_clients ({m})")
  elif config.data.num_clients:  # 0 with a 'file' / 'natural' partition: checked when loaded
    _check(config.clients_per_round <= config.data.num_clients, "clients_per_round",
           f"({config.clients_per_round}) must be <= data.num_clients "
           f"({config.data.num_clients})")
  _check(config.local.steps > 0 or config.local.epochs >= 1, "local.epochs",
         f"must be >= 1 when local.steps == 0, got {config.local.epochs}")
  _check(isinstance(config.seed, int), "seed", f"must be an integer, got {config.seed!r}")


@rule
def _classification_only(config) -> None:
  conv_impl_models = models.conv_impl_models
  task, conv_impl = config.task.name, config.model.conv_impl
  if conv_impl not in ("xla", "auto"):
    _check(not is_minimax(config), "model.conv_impl", f"applies to classification only; "
           f"task.name={task!r} builds its own model: set it to 'xla'")
    _check(config.model.name in conv_impl_models(), "model.conv_impl",
           f"{conv_impl!r} applies to the convolutional models {conv_impl_models()}, not "
           f"model.name={config.model.name!r}: set it to 'xla'")
  _check(config.engine.micro_batch == 0 or not is_minimax(config), "engine.micro_batch",
         f"applies to classification only; task.name={task!r} builds its own players: set "
         f"it to 0")
  if not is_minimax(config) or task == "fair_classification":
    _check(config.eval.target_accuracy <= 1, "eval.target_accuracy",
           f"must be in [0, 1] (0 = off), got {config.eval.target_accuracy}")


@rule
def _analysis(config) -> None:
  metrics = round_metrics.ROUND_METRICS
  unknown = sorted(set(config.analysis.metrics) - set(metrics))
  _check(not unknown, "analysis.metrics", f"{unknown} not in {list(metrics)}")
  _check(not (config.eval.hessian_every and config.analysis.every
              and "lambda_max" in config.analysis.metrics),
         "eval.hessian_every", "logs lambda_max, which analysis.metrics already has: set one of "
         "the two (eval.hessian_every=0, or drop 'lambda_max' from analysis.metrics)")


@rule
def _algorithm_blocks(config) -> None:
  """Every algorithm block: its fields declared by the factory, in their ranges; the selected
  algorithm's `config.server` settings used (algorithms/registration.py)."""
  from fedjax_sharp.algorithms import registry
  for registration in registry.REGISTRY.values():
    registration.values(config)
  if not is_minimax(config) and config.algorithm.name in registry.ALGORITHMS:
    registry.ALGORITHMS[config.algorithm.name].check_server(config)


@rule
def _component_blocks(config) -> None:
  """The blocks of the data sources and models (of one registered after the import too), in
  their ranges; the engine's strategy one of the table's (a user's own included)."""
  for section, blocks in (("data", sources.blocks()), ("model", models.blocks())):
    for name, declared in blocks.items():
      given = config[section][name] if name in config[section] else {}
      check(f"{section}.{name}", dict(given), declared)
  execution.ExecutionConfig.from_config(config.engine).validate()
