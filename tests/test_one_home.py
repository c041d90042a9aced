"""Each fact has one home: the names of the registries (algorithms, models, data sources,
strategies, minimax tasks) are written only where they are registered, and the defaults of a
component's config block are the component's own.

Deliberate bugs they catch (each checked once): a hand-written tuple
`("fedavg", "fedprox", "scaffold")` in training/loop.py; `engine.client_strategy`'s doc in
core/execution.py written as "'vmap' | 'map' | 'chunked_vmap' | 'host'"; `Mechanism.clip_lr`
set to 0.3 by hand. A registry's own package may list its names (the built-in sources'
registration, a module docstring's table).
"""
from __future__ import annotations

import ast
import dataclasses
import glob
import os

import pytest

from fedjax_sharp.algorithms import from_config
from fedjax_sharp.algorithms.registry import REGISTRY
from fedjax_sharp.core import execution, privacy, strategies
from fedjax_sharp.data import sources
from fedjax_sharp.minimax import tasks
from fedjax_sharp.models import registry as models
from fedjax_sharp.training import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# registry -> (its names, the files that register them, where they may be listed).
REGISTRIES = {
    "algorithms": (set(REGISTRY), ("fedjax_sharp/algorithms/", "fedjax_sharp/minimax/")),
    "models": (set(models.MODELS), ("fedjax_sharp/models/",)),
    "data sources": (set(sources.LOADERS), ("fedjax_sharp/data/",)),
    "strategies": (set(strategies.STRATEGIES), ("fedjax_sharp/core/strategies.py",)),
    "tasks": (set(tasks.TASKS), ("fedjax_sharp/minimax/tasks.py",)),
}
# How many names of one registry make a hand-written list.
LIST_LENGTH = 3
# Files whose lists are a study's choice of names, not a fact about them: a paper's table sets
# the hyperparameters of the algorithms it runs, the demo runs three.
SELECTIONS = {"fedjax_sharp/training/paper_configs.py": "the papers' tables",
              "experiments/demo.py": "the demo's algorithms (its --algorithms default)"}


def _files():
  for pattern in ("fedjax_sharp/**/*.py", "experiments/**/*.py"):   # configs/: studies
    for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
      yield os.path.relpath(path, ROOT)


def _literal_lists(tree):
  """(line, names) of every tuple, list or set of string constants, and of every string that
  joins names with ' | ' (a doc listing the allowed values)."""
  for node in ast.walk(tree):
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
      names = [e.value for e in node.elts if isinstance(e, ast.Constant)
               and isinstance(e.value, str)]
      if len(names) == len(node.elts):
        yield node.lineno, names
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " | " in node.value:
      yield node.lineno, [part.strip(" '") for part in node.value.split("|")]


def test_no_hand_written_list_of_a_registrys_names_outside_its_registry():
  hits = []
  for path in _files():
    with open(os.path.join(ROOT, path)) as f:
      tree = ast.parse(f.read())
    for line, names in _literal_lists(tree):
      for registry, (known, homes) in REGISTRIES.items():
        listed = [n for n in names if n in known]
        if len(listed) >= LIST_LENGTH and not path.startswith(homes) and path not in SELECTIONS:
          hits.append(f"{path}:{line}: {registry} {listed}")
  assert not hits, "name lists written by hand (derive them from the registry):\n" + "\n".join(
      hits)


@pytest.mark.parametrize("component, declared", [
    (execution.ExecutionConfig, execution.FIELDS),
    (privacy.Mechanism, privacy.FIELDS),
])
def test_a_components_defaults_are_its_blocks(component, declared):
  """The dataclass a block configures takes every shared field's default from the block (a
  block's None is resolved from other fields by the builder, e.g. `dp.clip_count_noise`)."""
  shared = [f for f in dataclasses.fields(component) if f.name in declared
            and f.default is not dataclasses.MISSING and declared[f.name].default is not None]
  assert shared
  for f in shared:
    assert f.default == declared[f.name].default, f.name


def test_the_base_config_takes_each_block_from_its_owner():
  """`base_config()`'s blocks are the owners' declarations: the server's defaults, each model's
  block (its module's own defaults), each data source's registered block."""
  base = config_lib.base_config()
  assert from_config.SERVER_DEFAULTS == {k: h.default
                                         for k, h in from_config.SERVER_FIELDS.items()}
  assert base.server.to_dict() == from_config.SERVER_DEFAULTS
  for name, block in models.blocks().items():
    module_defaults = {f.name: f.default for f in dataclasses.fields(models.MODELS[name])}
    assert base.model[name].to_dict() == {k: module_defaults[k] for k in block}, name
  assert base.engine.to_dict() == {k: h.default for k, h in execution.FIELDS.items()}
  assert base.dp.to_dict() == {k: h.default for k, h in privacy.FIELDS.items()}


def test_a_config_json_of_an_older_version_reads_its_flat_source_fields_into_the_blocks():
  """A data source's own fields were flat in `data` (`data.train_csv`); an older config.json
  still reads, with the run's source's fields in its block and the others' dropped, and resumes
  the same setting. Deliberate bug it catches: `upgraded` moving every flat field into the
  run's block (a landmarks run would then carry `data.landmarks_csv.merge_valid`)."""
  from fedjax_sharp.training import workdir   # pylint: disable=g-import-not-at-top
  config = config_lib.base_config()
  config.data.source = "landmarks_csv"
  config.data.landmarks_csv.train_csv = "users.csv"
  old = config_lib.recorded(config_lib.prepare(config))
  del old["data"]["landmarks_csv"]
  old["data"].update(train_csv="users.csv", test_csv="", image_dir="", merge_valid=False,
                     test_path="", word_counts_path="")
  assert config_lib.upgraded(old)["data"]["landmarks_csv"] == {
      "train_csv": "users.csv", "test_csv": "", "image_dir": ""}
  assert not {"merge_valid", "test_path", "imagefolder"} & set(config_lib.upgraded(old)["data"])
  assert config_lib.from_recorded(old).data.landmarks_csv.train_csv == "users.csv"
  assert workdir.setting_differences(old, config) == []
  config.data.landmarks_csv.train_csv = "other.csv"
  assert workdir.setting_differences(old, config) == [
      "data.landmarks_csv.train_csv: saved 'users.csv', now 'other.csv'"]


def test_a_model_registered_after_the_import_has_its_block():
  """A user's model with `config_fields` gets its block `model.<name>` in `base_config()`, and
  its values are checked, as the package's models' (whose blocks the table holds)."""
  import flax.linen as nn                           # pylint: disable=g-import-not-at-top
  from fedjax_sharp.errors import ConfigError       # pylint: disable=g-import-not-at-top
  from fedjax_sharp.hyperparameters import Field    # pylint: disable=g-import-not-at-top

  class Tiny(nn.Module):
    num_classes: int = 10
    width: int = 3
    config_fields = {"width": Field(">= 1", "hidden units")}

    @nn.compact
    def __call__(self, x):
      return nn.Dense(self.num_classes)(nn.Dense(self.width)(x.reshape(x.shape[0], -1)))

  models.MODELS["tiny_user_model"] = Tiny
  try:
    config = config_lib.base_config()
    assert config.model.tiny_user_model.to_dict() == {"width": 3}
    config.model.name = "tiny_user_model"
    config_lib.validate(config)
    config.model.tiny_user_model.width = 0
    with pytest.raises(ConfigError, match=r"model.tiny_user_model.width must be >= 1, got 0"):
      config_lib.validate(config)
  finally:
    del models.MODELS["tiny_user_model"]
