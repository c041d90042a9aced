"""The base config's fields: the run-level ones declared here, every block declared by its
owner, in one table (`SECTIONS`) from which `config.base_config`, `--print_config` and the checks
of `validate` derive.

A field is a `hyperparameters.Hyperparameter` (default, range or choices, doc), the record an
algorithm factory's keyword arguments give (`config.algorithm.<name>`). The owners: the data
sources (`data.sources.FIELDS`; a registered source's `data.<source>` from its loader's keyword
arguments), the models (`models.registry.FIELDS`, `model.<name>` from each model's
`config_fields`), the optimisers (`algorithms.from_config`), the engine (`core.execution`), the
DP mechanism (`core.privacy`), the minimax tasks and players (`minimax.tasks`,
`minimax.algorithms`) and the analysis (`analysis.round_metrics`). What one field cannot say
alone is a rule (`training.rules`; the dp block's: `training.privacy_rules`).
"""
from __future__ import annotations

from typing import Any, Callable

from fedjax_sharp.algorithms import from_config
from fedjax_sharp.analysis import round_metrics
from fedjax_sharp.core import cohort, execution, privacy
from fedjax_sharp.data import sources
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.hyperparameters import ON_OFF, check, declare
from fedjax_sharp.minimax import algorithms as minimax_algorithms
from fedjax_sharp.minimax import tasks
from fedjax_sharp.minimax.tasks import is_minimax
from fedjax_sharp.models import registry as models
from fedjax_sharp.training import privacy_rules, rules

# The run-level fields (the top level of the config) and the training loop's own blocks.
RUN_FIELDS = declare(
    name=("experiment", None, "the run's name (tables, plots)"),
    seed=(0, "[0, 4294967296)", "root of every random stream (init, sampling, data order)"),
    rounds=(50, ">= 1", "communication rounds"),
    clients_per_round=(10, ">= 1", "clients sampled each round"),
    aggregation=("auto", ("auto", *cohort.WEIGHTINGS),
                 "client weights: 'examples' (n_m / sum n) | 'uniform' | 'auto' ('uniform' with "
                 "differential privacy, else the algorithm's own: docs/algorithms/index.md)"),
    log_every=(0, ">= 0", "when not on a terminal (a pipe, a file): a progress line after the "
               "first round, every k rounds and after the last; 0 = about ten in all (k = "
               "rounds / 10); a terminal's line is redrawn every round"),
    checkpoint_every=(0, ">= 0", "> 0: save server + client state every k rounds (workdir)"),
    checkpoint_keep=(2, ">= 1", "checkpoints kept under <workdir>/checkpoints (orbax)"),
    resume=(True, ON_OFF, "continue from the newest checkpoint of the same setting; False: "
            "discard the workdir's results and start over"))
EVAL_FIELDS = declare(
    every=(1, ">= 1", "evaluate every k rounds (always in the last `last_n`)"),
    target_accuracy=(0.0, ">= 0", "report the first round reaching it (0 = off; at most 1 for "
                     "accuracies)"),
    last_n=(20, ">= 1", "report mean/std of test accuracy over the last N rounds"),
    batch_size=(1000, ">= 1", "examples per evaluation batch"),
    average_last=(0, ">= 0", "> 0: also save the average of the last N global models"),
    hessian_every=(0, ">= 0", "> 0: log lambda_max every k rounds (run by the analysis)"),
    hessian_examples=(1000, ">= 0", "test examples for the logged lambda_max (0 = all)"),
    hessian_iters=(20, ">= 1", "power iterations (FedGloSS Appendix D: 20)"),
    artifact_every=(0, ">= 0", "> 0: task artifacts (GAN sample grids) every k rounds"))

SECTIONS: dict[str, dict[str, Any]] = {
    "": RUN_FIELDS,
    "data": sources.FIELDS,
    **{f"data.{name}": block for name, block in sources.blocks().items()},
    "model": models.FIELDS,
    **{f"model.{name}": block for name, block in models.blocks().items()},
    "local": from_config.LOCAL_FIELDS,
    "server": from_config.SERVER_FIELDS,
    "algorithm": declare(name=("fedavg", None, "the algorithm (docs/algorithms/index.md); its "
                               "hyperparameters: config.algorithm.<name>")),
    "task": tasks.FIELDS,
    **{f"task.{name}": block for name, block in tasks.BLOCKS.items()},
    "minimax": minimax_algorithms.FIELDS,
    "engine": execution.FIELDS,
    "eval": EVAL_FIELDS,
    "log": declare(tensorboard=(False, ON_OFF, "write TensorBoard event files under "
                                "<workdir>/tensorboard (metrics.jsonl stays the record)")),
    "analysis": round_metrics.FIELDS,
    "dp": privacy.FIELDS,
    "training": declare(on_nonfinite=("stop", ("stop", "warn"), "'stop' (status 'diverged', "
                                      "exit 3) | 'warn' (log, go on)")),
}

DECLARED = {f"{section}.{name}".lstrip("."): h for section, fields in SECTIONS.items()
            for name, h in fields.items()}


def aggregation(config) -> str:
  """`aggregation` with 'auto' resolved (`aggregation_choice`)."""
  return aggregation_choice(config)[0]


def aggregation_choice(config) -> tuple[str, str]:
  """(weighting, why): `aggregation` as set, or 'auto' resolved: 'uniform' under differential
  privacy, else the selected algorithm's own default (`register(..., weighting=...)`: the source
  it follows), 'examples' for the minimax algorithms."""
  value = str(config.aggregation)
  if value != "auto":
    return value, "as set"
  if privacy_rules.private(config):
    return "uniform", "differential privacy (the sensitivity bound needs uniform weights)"
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  name = config.algorithm.name
  if not is_minimax(config) and name in ALGORITHMS:
    return ALGORITHMS[name].weighting, f"{name}'s default: {ALGORITHMS[name].weighting_source}"
  return "examples", "the default weighting"


def choice_blocks(config) -> dict[str, str]:
  """{block: the field that chooses it} for every per-choice block of the config: a section
  with a choosing field (`source` in `data`, else `name`) and sub-blocks keyed by the values it
  may take ('algorithm.fedgmt': 'algorithm.name', 'model.resnet8': 'model.name', 'task.pl':
  'task.name', a registered source's 'data.<source>': 'data.source'). Only the block the
  choice picks is used."""
  out = {}
  for section in config:
    node = config[section]
    chooser = next((f for f in ("source", "name") if hasattr(node, "items") and f in node), None)
    if chooser:
      out.update({f"{section}.{key}": f"{section}.{chooser}" for key in node
                  if hasattr(node[key], "items")})
  return out


def _choice(config, chooser: str) -> str:
  section, field = chooser.split(".")
  return str(config[section][field])


def unused_blocks(config) -> set[str]:
  """The per-choice blocks (`choice_blocks`) that `config`'s choices do not pick: what a run's
  config.json leaves out ('algorithm.fedavg' when algorithm.name is 'fedgmt')."""
  return {block for block, chooser in choice_blocks(config).items()
          if block.split(".")[1] != _choice(config, chooser)}


def refuse_unused(paths, configs, fix: Callable[[str, str], str] | None = None) -> None:
  """Refuses, in one line naming the fix, a field of `paths` (what a command line or a variant
  set) inside a per-choice block (`choice_blocks`) that none of `configs` (the runs it makes)
  uses: `--config.algorithm.my_fedprox.mu=0.1` with algorithm.name 'fedavg' would otherwise
  train FedAvg and say nothing. `fix(chooser, choice)`: the remedy (default `add
  --config.<chooser>=<choice>`). Values a config file writes into several blocks are not
  refused (a comparison's file holds every algorithm's hyperparameters), nor is anything in a
  finished run's config.json: only what was set for this command."""
  configs = list(configs)
  blocks = choice_blocks(configs[0])
  for path in paths:
    block = ".".join(path.split(".")[:2])
    if block not in blocks:
      continue
    chooser = blocks[block]
    section, choice = block.split(".")
    chosen = sorted({_choice(c, chooser) for c in configs})
    if choice not in chosen:
      now = repr(chosen[0]) if len(chosen) == 1 else f"one of {chosen}"
      remedy = fix(chooser, choice) if fix else f"add --config.{chooser}={choice}"
      raise ConfigError(f"{path} is set but {chooser} is {now}; {remedy}")


def validate(config, multiprocess: bool = False) -> None:
  """Every declared field in its range or choices, no undeclared field in a section, then the
  rules between fields and the algorithm blocks (`RULES`), and with `multiprocess` (a run of
  several processes, `core.distributed`) what such runs do not support; an error is one line
  naming the field and its allowed values."""
  for section, declared in SECTIONS.items():
    node = config
    for part in filter(None, section.split(".")):
      node = node[part]
    leaves = {k: node[k] for k in node if not hasattr(node[k], "items")}
    if not section:   # the top level's other fields are its sections
      leaves = {k: v for k, v in leaves.items() if k in declared}
    check(section, leaves, declared)
  for rule in (*rules.RULES, *privacy_rules.RULES):
    rule(config)
  if multiprocess and config.engine.client_table == "host":
    raise ConfigError("engine.client_table='host': multi-process runs keep the client table "
                      "on the devices of the mesh; use 'device' (or 'auto')")
