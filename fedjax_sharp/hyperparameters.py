"""One home for every config field: an algorithm's hyperparameters are the keyword arguments of
its factory, and a component that is not a factory declares its block with `declare` (the engine,
the DP mechanism, the models, the data sources: `training.fields` gathers them).

A factory declares each hyperparameter once, with its default, its range or choices and a
one-line doc, as an annotated keyword argument:

    def fed_prox(apply_fn, client_optimizer, *,
                 mu: Annotated[float, Field(">= 0", "proximal weight", sweepable=True)] = 0.01,
                 server_optimizer=None, name="fedprox"):

Everything else is derived from that signature (`fields`): the config block
`config.algorithm.<name>` (`config_block`), the range checks of `config.validate` and of the
builders (`check`), the docs' defaults table, `registry.SWEEPABLE` and the `--print_config`
docs. `checked` wraps a factory so that a direct call is checked the same way.

Ranges are written as text: '>= 0', '> 0', '>= 1', '[0, 1]', '(0, 1]', '[0, 1)', '(0, 1)'.
`None` defaults are placeholders ("the variant's / algorithm's default"); a None value is not
range-checked.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import re
import types
import typing
from typing import Any, Callable, Mapping

from fedjax_sharp.errors import ConfigError

INF = float("inf")


@dataclasses.dataclass(frozen=True)
class Field:
  """Metadata of one hyperparameter (the default is the keyword argument's default).

  Attributes:
    range: '>= 0', '> 0', '[0, 1]', '(0, 1]', ... for numbers (None: any value).
    doc: one line, shown by `--print_config` and in the docs.
    choices: the allowed values of a string field.
    sweepable: the factory lists it in `FederatedAlgorithm.hparams` and its functions read it
      from the round (`core.hparams`), so the experiments of one sweep may differ in it
      (`registry.SWEEPABLE`).
  """
  range: str | None = None
  doc: str = ""
  choices: tuple | None = None
  sweepable: bool = False

  def bounds(self):
    return parse_range(self.range) if self.range else None

  def line(self) -> str:
    """The doc with the allowed values: what `--print_config` and `--list_fields` show."""
    extra = (f" (range {self.range})" if self.range else
             f" (one of {list(self.choices)})" if self.choices else "")
    return (self.doc + extra).strip()


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
  """A declared hyperparameter: its name, default, value type and `Field`."""
  name: str
  default: Any
  type: type
  field: Field


_HALF = re.compile(r"^\s*(>=|>)\s*([-+0-9.eE]+)\s*$")
_INTERVAL = re.compile(r"^\s*([\[(])\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eEinf]+)\s*([\])])\s*$")


@functools.lru_cache(maxsize=None)
def parse_range(text: str):
  """'>= 0' -> (0, inf, True, False); '(0, 1]' -> (0, 1, False, True)."""
  m = _HALF.match(text)
  if m:
    return (float(m.group(2)), INF, m.group(1) == ">=", False)
  m = _INTERVAL.match(text)
  if m:
    return (float(m.group(2)), float(m.group(3)), m.group(1) == "[", m.group(4) == "]")
  raise ValueError(f"bad range {text!r}: write '>= 0', '> 0' or an interval like '(0, 1]'")


def in_range(value, spec) -> bool:
  low, high, low_in, high_in = spec
  return ((value > low or (low_in and value == low)) and
          (value < high or (high_in and value == high)))


def _bound(x: float) -> str:
  """A range's bound as written: '0.5', '1e-05', and a large power of two as '2**32'."""
  if x == int(x) and abs(x) >= 2**16:
    exponent = int(abs(x)).bit_length() - 1
    if abs(x) == 2**exponent:
      return f"{'-' if x < 0 else ''}2**{exponent}"
    return str(int(x))
  return f"{x:g}"


def range_text(spec) -> str:
  low, high, low_in, high_in = spec
  if high == INF:
    return f"must be {'>=' if low_in else '>'} {_bound(low)}"
  return (f"must be in {'[' if low_in else '('}{_bound(low)}, {_bound(high)}"
          f"{']' if high_in else ')'}")


def _value_type(annotation) -> type:
  """float for `float`, `float | None`, `Optional[float]`; object when unknown."""
  if typing.get_origin(annotation) is typing.Annotated:
    annotation = typing.get_args(annotation)[0]
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    annotation = args[0] if len(args) == 1 else object
  return annotation if isinstance(annotation, type) else object


@functools.lru_cache(maxsize=None)
def _fields_cached(fn) -> tuple[Hyperparameter, ...]:
  params = inspect.signature(fn).parameters
  out = []
  # Annotations come in definition order (the signature's), the return type last.
  for name, hint in typing.get_type_hints(fn, include_extras=True).items():
    if name not in params or typing.get_origin(hint) is not typing.Annotated:
      continue
    p = params[name]
    meta = [m for m in typing.get_args(hint)[1:] if isinstance(m, Field)]
    if not meta:
      continue
    default = None if p.default is inspect.Parameter.empty else p.default
    out.append(Hyperparameter(p.name, default, _value_type(hint), meta[0]))
  return tuple(out)


def fields(fn: Callable) -> dict[str, Hyperparameter]:
  """The hyperparameters a function declares (its keyword arguments annotated with a `Field`),
  in signature order."""
  return {h.name: h for h in _fields_cached(inspect.unwrap(fn))}


def defaults(fn: Callable) -> dict[str, Any]:
  return {name: h.default for name, h in fields(fn).items()}


def did_you_mean(field: str, known, otherwise: str | None = None) -> str:
  """The hint for an unknown config field, shared with the CLI's flag errors
  (`training.cli.describe_flag_error`): the closest known names (`closest_fields`), else
  `otherwise` (default: the list of known names)."""
  close = closest_fields(field, known)
  if close:
    return f"; did you mean {' or '.join(repr(c) for c in close)}?"
  return f"; the fields are {sorted(known)}" if otherwise is None else otherwise


def closest_fields(field: str, known, n: int = 3) -> list[str]:
  """Up to `n` known dotted names close to `field`, nearest section first: a field of the same
  section whose last part is close to the typed one ('local.momentun' -> 'local.momentum', not a
  name of another section that shares more letters); else the same last part in another section
  ('server.lr_decay' -> 'local.lr_decay'); and only when the section itself is unknown, the
  closest whole names (a typo in the section, 'lcoal.lr' -> 'local.lr'). Case is ignored."""
  known = list(known)
  section, _, leaf = field.rpartition(".")
  same = {k.rpartition(".")[2].lower(): k for k in known if k.rpartition(".")[0] == section}
  close = difflib.get_close_matches(leaf.lower(), list(same), n=n, cutoff=0.6)
  if close:
    return [same[c] for c in close]
  elsewhere = [k for k in known if k.rpartition(".")[2] == leaf and "." in k]
  if elsewhere or same:   # the section exists: its own fields or the same name elsewhere only
    return elsewhere[:n]
  return difflib.get_close_matches(field, known, n=n, cutoff=0.6)


def check_value(prefix: str, h: Hyperparameter, value) -> None:
  """Raises ConfigError naming `prefix.field` when `value` is out of the declared range/choices."""
  if value is None:
    return
  path = f"{prefix}.{h.name}" if prefix else h.name   # prefix '': a top-level config field
  if h.field.choices is not None:
    if value not in h.field.choices:
      raise ConfigError(f"{path}={value!r} is not one of {list(h.field.choices)}")
    return
  spec = h.field.bounds()
  if spec is None or isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
    return
  if not in_range(float(value), spec):
    raise ConfigError(f"{path} {range_text(spec)}, got {value}")


def check(prefix: str, values: Mapping[str, Any], declared: Mapping[str, Hyperparameter]) -> None:
  """Every field of `values` is declared (else the closest declared name) and in range."""
  for field, value in values.items():
    if field not in declared:
      raise ConfigError(f"config field '{prefix}.{field}' does not exist"
                        f"{did_you_mean(f'{prefix}.{field}', [f'{prefix}.{k}' for k in declared])}")
    check_value(prefix, declared[field], value)


def block_values(prefix: str, given: Mapping[str, Any],
                 declared: Mapping[str, Hyperparameter]) -> dict[str, Any]:
  """A config block's values (`given`, checked: `check`) over the declared defaults; an int
  given for a float field is taken as a float."""
  check(prefix, given, declared)
  values = {k: h.default for k, h in declared.items()}
  for k, v in given.items():
    if declared[k].type is float and isinstance(v, int) and not isinstance(v, bool):
      v = float(v)
    values[k] = v
  return values


# The choices of an on/off field.
ON_OFF = (True, False)


def declare(**specs: tuple) -> dict[str, Hyperparameter]:
  """A config block declared by the component that reads it (the engine, the DP mechanism, the
  models, the data sources, the optimisers): `name=(default, allowed, doc)`, `allowed` a range
  ('>= 0', '(0, 1]'), a tuple of choices or None (any value of the default's type); a None
  default takes a fourth element, the value's type. The same records as a factory's keyword
  arguments (`fields`), so the config, `--print_config` and the checks derive from them."""
  out = {}
  for name, (default, allowed, doc, *value_type) in specs.items():
    choices = tuple(allowed) if isinstance(allowed, tuple) else None
    field = Field(range=allowed if isinstance(allowed, str) else None, doc=doc, choices=choices)
    out[name] = Hyperparameter(name, default, value_type[0] if value_type else type(default),
                               field)
  return out


def fill(block, declared: Mapping[str, Hyperparameter]):
  """Sets every declared field of the ConfigDict `block` to its default (a None default: a
  placeholder of the field's type, so that a value set later is type-checked); returns it."""
  from ml_collections import config_dict  # pylint: disable=g-import-not-at-top
  for name, h in declared.items():
    setattr(block, name, config_dict.placeholder(h.type) if h.default is None else h.default)
  return block


def require(condition: bool, field: str, message: str) -> None:
  """Raises ConfigError "<field> <message>" unless `condition` (a rule between fields)."""
  if not condition:
    raise ConfigError(f"{field} {message}")


def checked(fn: Callable) -> Callable:
  """Checks the declared hyperparameters of every call of `fn` (the prefix is
  `algorithm.<name>`, `name` being the call's `name` argument)."""
  sig = inspect.signature(fn)

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    label = bound.arguments["name"] if "name" in sig.parameters else fn.__name__
    prefix = f"algorithm.{label}"
    for name, h in fields(fn).items():
      check_value(prefix, h, bound.arguments[name])
    return fn(*args, **kwargs)
  return wrapper
