"""Every base config field is declared once (`training.fields`): the command line overrides it,
`validate` checks it against its declared range or choices, `--print_config` shows it with its
doc, and `base_config` holds nothing else (the algorithm blocks aside)."""
import pytest
from absl import flags
from ml_collections import config_flags

from fedjax_sharp.algorithms.hyperparameters import INF
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import cli
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training.fields import DECLARED


def _flat(config, prefix=""):
  out = {}
  for k, v in config.items():
    if hasattr(v, "items"):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _set(config, path, value):
  *parents, leaf = path.split(".")
  for part in parents:
    config = config[part]
  setattr(config, leaf, value)


def _inside(h):
  """A value of the declared type, allowed by the declaration, other than the default."""
  if h.field.choices is not None:
    return next(c for c in h.field.choices if c != h.default)
  if h.type is str:
    return h.default + "x"
  if h.type is tuple:
    return ("lambda_max",)
  low, high, _, _ = h.field.bounds()
  start = h.default if h.default is not None else low
  value = start + 1 if start + 1 < high else (start + low) / 2
  return h.type(value)


def _outside(h):
  """A value of the declared type that the declaration refuses (None: none can be set)."""
  if h.field.choices is not None:
    return None if h.type is bool else "no_such_choice"
  bounds = h.field.bounds()
  if bounds is None:
    return None
  low, high, low_in, _ = bounds
  value = low - 1 if low_in else low
  if low == -INF or (h.type is int and value != int(value)):
    value = high + 1
  return h.type(value)


def test_base_config_is_the_declarations_and_the_algorithm_blocks():
  flat = _flat(config_lib.base_config())
  base = {k for k in flat if not (k.startswith("algorithm.") and k != "algorithm.name")}
  assert base == set(DECLARED)
  for path, h in DECLARED.items():
    assert flat[path] == h.default, path
    assert h.field.doc, f"{path} has no doc"
  assert set(config_lib.FIELD_DOCS) == set(DECLARED)


def test_every_field_from_the_command_line_through_validation_to_print_config():
  values = {path: _inside(h) for path, h in DECLARED.items()}
  argv = ["run.py"] + [f"--config.{path}={value!r}" if isinstance(value, tuple) else
                        f"--config.{path}={value}" for path, value in values.items()]
  flag_values = flags.FlagValues()   # what experiments/*.py define, parsed in process
  config_flags.DEFINE_config_dict("config", config_lib.base_config(), flag_values=flag_values,
                                  lock_config=True, sys_argv=argv)
  flag_values(argv)
  overridden = _flat(flag_values.config)
  for path, value in values.items():
    assert overridden[path] == value and type(overridden[path]) is type(value), path

  printed = cli.format_config(flag_values.config).splitlines()
  for path, value in values.items():
    assert f"{path} = {value!r}    # {config_lib.FIELD_DOCS[path]}" in printed, path

  refused, config = 0, config_lib.base_config()
  for path, h in DECLARED.items():
    _set(config, path, values[path])
    declared = h.field.choices is not None or h.field.range is not None
    if declared and path != "task.name":   # another task needs one of its own algorithms
      config_lib.validate(config)
    bad = _outside(h)
    if bad is not None:
      _set(config, path, bad)
      with pytest.raises(ConfigError) as error:
        config_lib.validate(config)
      line = str(error.value)
      assert "\n" not in line and line.startswith((f"{path} ", f"{path}=")), line
      assert (h.field.range or "") in config_lib.FIELD_DOCS[path]
      refused += 1
    _set(config, path, h.default)
  assert refused > 90


def test_an_undeclared_field_is_refused_with_the_closest_name():
  config = config_lib.base_config()
  config.engine.chunk_sise = 8
  with pytest.raises(ConfigError, match=r"'engine\.chunk_sise' does not exist; did you mean "
                                        r"'engine\.chunk_size'"):
    config_lib.validate(config)
