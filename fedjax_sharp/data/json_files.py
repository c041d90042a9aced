"""The JSON files the data layer reads, each format declared once as a `Schema` of its keys.

A reader parses its file with `read_json` and checks the top-level object with `check_object`
at the boundary: every declared key, in declared order, must hold one of its JSON types
(`int` never accepts `true` / `false`) and, where the schema lists them, one of its allowed
values; a required key must be present, an absent optional key takes its default. The reader
then indexes the checked object directly (`obj["tokens"]`) and checks only what a schema
cannot say (lengths, cross-references, the examples themselves). Keys a schema does not declare
are kept as they are: files may carry more than a reader uses. Every problem is one
`DataError` line naming the file and the key.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from fedjax_sharp.errors import DataError

NONE = type(None)
REQUIRED = object()   # `Key.default` of a key the object must hold


@dataclasses.dataclass(frozen=True)
class Key:
  """One key of a JSON object: its name, the Python types of its JSON values, what it holds in
  words (the message of a bad value), its default (`REQUIRED`: none, it must be present), the
  values it may take (empty: any of its types) and the type of a list's items (None: any)."""
  name: str
  types: type | tuple[type, ...]
  expected: str
  default: Any = REQUIRED
  values: tuple = ()
  items: type | None = None


@dataclasses.dataclass(frozen=True)
class Schema:
  """A JSON object format: `what` it is ('a partition file', for "not a partition file"),
  its `shape` in words (the message of a file that is not one) and its `keys`."""
  what: str
  shape: str
  keys: tuple[Key, ...]


def read_json(path: str) -> Any:
  """The parsed content of the UTF-8 JSON file `path`; a problem is one `DataError`."""
  try:
    with open(path, "rb") as f:
      return json.loads(f.read().decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise DataError(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
  except OSError as e:
    raise DataError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


def _has_type(value, types) -> bool:
  types = types if isinstance(types, tuple) else (types,)
  if isinstance(value, bool) and bool not in types:
    return False
  return isinstance(value, types)


def _shown(value) -> str:
  """A bad value in a message: scalars as written, containers by their type."""
  if isinstance(value, (str, int, float, NONE)):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
  return type(value).__name__


def check_object(obj, schema: Schema, where: str) -> dict:
  """`obj` checked against `schema` (module docstring), absent optional keys filled with
  (copies of) their defaults; a new dict, `obj` is left as it is. `where` starts every
  message: the file path, and the place inside the file if it is not the top level."""
  if not isinstance(obj, dict):
    raise DataError(f"{where}: not {schema.what} (expected {schema.shape}; found "
                    f"{type(obj).__name__})")
  out = dict(obj)
  for key in schema.keys:
    if key.name not in obj:
      if key.default is REQUIRED:
        raise DataError(f"{where}: not {schema.what}: no {key.name!r} (expected "
                        f"{schema.shape}; found keys {sorted(map(str, obj))[:6]})")
      out[key.name] = copy.deepcopy(key.default)
      continue
    value = obj[key.name]
    bad = None
    if not _has_type(value, key.types) or (key.values and value not in key.values):
      bad = _shown(value)
    elif key.items is not None and isinstance(value, list):
      i = next((i for i, v in enumerate(value) if not _has_type(v, key.items)), None)
      if i is not None:
        bad = f"{_shown(value[i])} at index {i}"
    if bad is not None:
      raise DataError(f"{where}: {key.name!r} must be {key.expected}, got {bad}")
  return out


def read_object(path: str, schema: Schema) -> dict:
  """`check_object(read_json(path), schema, path)`: a JSON file whose top level is one
  object of `schema`."""
  return check_object(read_json(path), schema, path)
