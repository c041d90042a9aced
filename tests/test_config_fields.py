"""Every base config field is declared once (`training.fields`): the command line overrides it,
`validate` checks it against its declared range or choices, `--print_config` shows it with its
doc, and `base_config` holds nothing else (the algorithm blocks aside)."""
import ast
import functools
import math
import re

import pytest
from absl import flags
from ml_collections import config_flags

from fedjax_sharp.hyperparameters import INF
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


def _get(config, path):
  for part in path.split("."):
    config = config[part]
  return config


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


def _stated(doc):
  """What a field's doc line (`--print_config`, `--list_fields`) says the field allows, read
  here without the library's own parser: ('range', low, high, low_included, high_included)
  for '(range >= 0)', '(range (0, 1])', ...; ('choices', [...]) for '(one of [...])'; None
  when the doc states nothing."""
  m = re.search(r" \((range|one of) (.+)\)$", doc)
  if m is None:
    return None
  kind, text = m.groups()
  if kind == "one of":
    return "choices", ast.literal_eval(text)
  half = re.fullmatch(r"(>=|>) (\S+)", text)
  if half:
    return "range", float(half[2]), math.inf, half[1] == ">=", False
  low_bracket, low, high, high_bracket = re.fullmatch(r"([\[(])(\S+), (\S+)([\])])", text).groups()
  return "range", float(low), float(high), low_bracket == "[", high_bracket == "]"


# What other fields must be for a value to be valid: data.num_clients = 0 means "all the given
# clients" of a 'file' / 'natural' partition, local.epochs = 0 needs a fixed local.steps, a
# minimax task one of its own algorithms and no more clients per round than it has.
CONTEXT = {"data.num_clients": lambda value: {"data.partition": "natural", "clients_per_round": 1},
           "local.epochs": lambda value: {"local.steps": 1},
           "dp.target_epsilon": lambda value: {"dp.enabled": True},
           "dp.noise_cohort_size": lambda value: {"dp.enabled": True, "clients_per_round": 1},
           "task.name": lambda value: {} if value == "classification" else
                                      {"algorithm.name": "local_sgda", "clients_per_round": 2}}


def _accepted(config, path, value):
  """Whether `validate` takes `value` for `path` in `config`, the base config (with CONTEXT;
  put back as it was); a refusal is one line that names the field."""
  settings = {**CONTEXT.get(path, lambda value: {})(value), path: value}
  before = {other: _get(config, other) for other in settings}
  for other, setting in settings.items():
    _set(config, other, setting)
  try:
    config_lib.validate(config)
  except ConfigError as error:
    line = str(error)
    assert "\n" not in line and line.startswith((f"{path} ", f"{path}=")), line
    return False
  finally:
    for other, setting in before.items():
      _set(config, other, setting)
  return True


def _next(h, value, direction):
  """The next value of the field's type after `value` towards +inf (direction 1) or -inf."""
  if h.type is int:
    return int(value) + direction
  return math.nextafter(value, direction * math.inf)


def test_every_field_takes_exactly_what_its_doc_states():
  """Each doc line is read as a user reads it (`_stated`) and `validate` must agree: at each
  finite bound the bound itself is accepted when the doc includes it and refused when it
  excludes it, the next value outside is refused and the next inside accepted; an infinite
  included bound is accepted; every listed choice is accepted and another string refused. A
  field whose doc states nothing declares nothing to refuse.

  Deliberate bugs it catches: an inclusive bound treated as exclusive, or an exclusive one as
  inclusive (at either end: `in_range` ignoring low_in or high_in); a doc line that drops
  its range or choices, or states other bounds than the ones checked."""
  bounds_tried, config = 0, config_lib.base_config()
  accepted = functools.partial(_accepted, config)
  for path, h in DECLARED.items():
    stated = _stated(config_lib.FIELD_DOCS[path])
    if stated is None:
      assert h.field.range is None and h.field.choices is None, path
      continue
    if stated[0] == "choices":
      for choice in stated[1]:
        assert accepted(path, choice), (path, choice)
      assert h.type is bool or not accepted(path, "no_such_choice"), path
      continue
    _, low, high, low_in, high_in = stated
    for bound, inward, included in ((low, 1, low_in), (high, -1, high_in)):
      if math.isinf(bound):
        assert not included or accepted(path, h.type(bound)), (path, bound)
        continue
      assert accepted(path, h.type(bound)) == included, (path, bound)
      assert not accepted(path, _next(h, bound, -inward)), (path, bound)
      assert accepted(path, _next(h, bound, inward)), (path, bound)
      bounds_tried += 1
  assert bounds_tried > 80


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
    context = CONTEXT.get(path, lambda value: {})(values[path])
    for other, setting in context.items():
      _set(config, other, setting)
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
      assert _stated(config_lib.FIELD_DOCS[path]) is not None, path   # the doc says what is allowed
      refused += 1
    _set(config, path, h.default)
    for other in context:
      _set(config, other, _get(config_lib.base_config(), other))
  assert refused > 90


def test_an_undeclared_field_is_refused_with_the_closest_name():
  config = config_lib.base_config()
  config.engine.chunk_sise = 8
  with pytest.raises(ConfigError, match=r"'engine\.chunk_sise' does not exist; did you mean "
                                        r"'engine\.chunk_size'"):
    config_lib.validate(config)
