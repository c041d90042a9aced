"""Dotted paths into a config: read one (`get`), or set several to possibly traced values
(`with_values`, how a sweep rebuilds an algorithm for each of its lanes; `core.hparams`).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping


def get(config, path: str):
  """The value at a dotted `path` of a ConfigDict (KeyError naming the path if absent)."""
  node = config
  for part in path.split("."):
    if part not in node:
      raise KeyError(path)
    node = node[part]
  return node


def with_values(config, values: Mapping[str, Any]):
  """A copy of `config` with each dotted path of `values` set to its (possibly traced) value,
  bypassing the ConfigDict's type checks (a tracer is not a float)."""
  config = copy.deepcopy(config)
  for path, value in values.items():
    *parents, leaf = path.split(".")
    node = config
    for part in parents:
      node = node[part]
    with node.ignore_type():
      setattr(node, leaf, value)
  return config
