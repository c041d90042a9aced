"""Dotted paths into a config: read one (`get`)."""
from __future__ import annotations


def get(config, path: str):
  """The value at a dotted `path` of a ConfigDict (KeyError naming the path if absent)."""
  node = config
  for part in path.split("."):
    if part not in node:
      raise KeyError(path)
    node = node[part]
  return node

