"""The base experiment config, derived from the field declarations (`training.fields`: one line
per field with its default, range or choices and doc, and `validate`), and the config a run
executes (`prepare`: validated, every 'auto' that decides the numbers resolved).

Every file under `configs/` starts from `base_config()` and overrides what its setting needs;
any field can be overridden on the command line: `--config.rounds=50 --config.algorithm.name=fedgmt`.
"""
from __future__ import annotations

import ml_collections

from fedjax_sharp.models import registry
from fedjax_sharp import hyperparameters
from fedjax_sharp.data import sources
from fedjax_sharp.training import fields, privacy_rules
from fedjax_sharp.training.fields import DECLARED, SECTIONS, is_minimax, validate
from fedjax_sharp.training.fields import aggregation as resolved_aggregation
from fedjax_sharp.training.fields import aggregation_choice  # noqa: F401 (re-exported)

# The docs of the base fields (`--print_config`, `--list_fields`), from their declarations
# (`training.fields`); the algorithm blocks' fields are documented by their factories.
FIELD_DOCS = {path: h.field.line() for path, h in DECLARED.items()}


def base_config() -> ml_collections.ConfigDict:
  """Every declared field at its default (`training.fields`), and the algorithm blocks derived
  from the factories' keyword arguments (algorithms/registration.py)."""
  c = ml_collections.ConfigDict()
  for section, declared in SECTIONS.items():
    node = c
    for part in filter(None, section.split(".")):
      if part not in node:
        setattr(node, part, ml_collections.ConfigDict())
      node = node[part]
    hyperparameters.fill(node, declared)
  from fedjax_sharp.algorithms.registry import config_blocks
  for name, algorithm_block in config_blocks().items():
    c.algorithm[name] = algorithm_block
  # The blocks of a data source or model registered after `training.fields` was imported.
  for section, blocks in (("data", sources.blocks()), ("model", registry.blocks())):
    for name, declared in blocks.items():
      if f"{section}.{name}" not in SECTIONS:
        c[section][name] = hyperparameters.fill(ml_collections.ConfigDict(), declared)
  return c


def recorded(config) -> dict:
  """What a run's config.json holds: the (resolved) config without the per-choice blocks its
  choices do not use (`fields.unused_blocks`: the other algorithms' hyperparameters, the other
  models' and tasks' blocks), so that it says what the run used and nothing else."""
  out = config.to_dict()
  for block in fields.unused_blocks(config):
    section, key = block.split(".")
    del out[section][key]
  return out


def upgraded(saved: dict) -> dict:
  """A config.json of an older version in today's layout: a data source's own fields, once flat
  in `data` (`data.train_csv`), move into the source's block (`data.landmarks_csv.train_csv`)
  for the run's source, and are dropped for the others (they held their defaults)."""
  data = saved.get("data")
  if not isinstance(data, dict):
    return saved
  saved = {**saved, "data": dict(data)}
  for source, declared in sources.blocks().items():
    for name in declared:
      if name in saved["data"] and name not in sources.FIELDS:
        value = saved["data"].pop(name)
        if source == data.get("source"):
          saved["data"].setdefault(source, {})[name] = value
  return saved


def from_recorded(saved: dict) -> ml_collections.ConfigDict:
  """The config of a run's config.json: `saved` over `base_config()` (a config.json holds only
  the blocks the run used, `recorded`; an older one holds them all). Blocks of algorithms
  registered by the run's own code and unknown here are kept as they were saved."""
  merged = base_config().to_dict()

  def merge(into, new):
    for k, v in new.items():
      if isinstance(v, dict) and isinstance(into.get(k), dict):
        merge(into[k], v)
      else:
        into[k] = v
  merge(merged, upgraded(saved))
  return ml_collections.ConfigDict(merged)


def load_config_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config([arg])` of a config file, as `--config=path[:arg]` would (for notebooks, tests)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("fedjax_sharp_config_file", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg is not None else module.get_config()


# Fields that define a run's numbers (everything but logging, evaluation cadence, engine and
# checkpointing; of the engine only the sampler, `engine.sampling`); `algorithm` counts as its
# name and the selected algorithm's block only. A dotted entry is one field of a section.
SETTING_FIELDS = ("seed", "rounds", "clients_per_round", "aggregation", "data", "model", "local",
                  "server", "task", "minimax", "dp", "engine.sampling")


# Fields that change how fast a round runs, not its numbers (the same function to float
# rounding, tested): a resume or a finished run's reuse may differ in them. The engine block is
# not a setting field at all; `model.compute_dtype` is one (bfloat16 changes the arithmetic), and
# is compared by the dtype it resolves to (`resolved_setting`).
PERFORMANCE_FIELDS = ("model.conv_impl",)


def resolved_model_options(config) -> tuple[str, str]:
  """(compute dtype, conv_impl) that the config's `model.compute_dtype` and `model.conv_impl`
  run with on the default backend ('auto' resolved: models.registry, core/backends.py; the
  strategy 'auto' is the one for a cohort of `clients_per_round`)."""
  dtype = registry.resolve_compute_dtype(str(config.model.compute_dtype))
  return dtype, registry.resolve_conv_impl(str(config.model.conv_impl), dtype,
                                           str(config.engine.client_strategy),
                                           clients=int(config.clients_per_round))


def prepare(config) -> ml_collections.ConfigDict:
  """The config a run executes: `validate`d (a bad value is one line naming its field), then
  a copy with every 'auto' that decides the numbers resolved for this backend
  (`resolved_setting`: `aggregation`, `model.compute_dtype`, `model.conv_impl`). The experiment
  builders read those fields as they stand and config.json records them, so 'auto' is resolved
  in this one place. Idempotent."""
  validate(config)
  return resolved_setting(config)


def _resolve_dp(config) -> None:
  """The dp block of the run as it applies: `dp.accountant='auto'` resolved for the engine's
  sampler; `dp.noise_multiplier` unset -> 1 unless `dp.target_epsilon` solves it (in the
  experiment); an algorithm with its own DP (DP-FedSAM) has its mechanism copied into the dp
  block with `dp.enabled` True, so that config.json records what was applied."""
  if "dp" not in config:
    return
  config.dp.accountant = privacy_rules.dp_accountant(config)
  if config.dp.noise_multiplier is None and config.dp.target_epsilon is None:
    config.dp.noise_multiplier = 1.0
  if privacy_rules.own_privacy(config):
    from fedjax_sharp.algorithms.registry import ALGORITHMS  # pylint: disable=g-import-not-at-top
    block = ALGORITHMS[config.algorithm.name].values(config)
    config.dp.enabled = True
    for k in privacy_rules.MECHANISM_FIELDS:
      config.dp[k] = block[k]


def resolved_setting(config) -> ml_collections.ConfigDict:
  """A copy of `config` with `model.compute_dtype` and `model.conv_impl` resolved for the
  default backend (`resolved_model_options`): what config.json records, so that a run started
  in bfloat16 on a GPU is not resumed in float32 on a CPU. A minimax task builds its own
  players, so only its dtype is resolved. `aggregation='auto'` is resolved too
  (`fields.aggregation`)."""
  aggregation = resolved_aggregation(config)
  config = ml_collections.ConfigDict(config.to_dict())
  config.aggregation = aggregation
  _resolve_dp(config)
  if "model" in config:
    dtype, conv_impl = resolved_model_options(config)
    if not is_minimax(config):
      config.model.conv_impl = conv_impl
    config.model.compute_dtype = dtype
  return config
