"""No import circle among fedjax_sharp's modules, lazy (function-level) imports included.

The graph is read from the source (ast), so an import inside a function counts as much as one
at the top: a circle hidden by a lazy import is still a circle. `from pkg.mod import name` is an
edge to `pkg.mod`; `from pkg import mod` to `pkg.mod` when `mod` is a module, else to `pkg`'s
`__init__`. The implicit import of a parent package is not an edge (a package's `__init__`
re-exporting its submodules is not a circle).
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "fedjax_sharp"


def _modules() -> dict[str, str]:
  out = {}
  for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
    for f in files:
      if f.endswith(".py"):
        rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].replace(os.sep, ".")
        out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(
            folder, f)
  return out


def import_graph() -> dict[str, set[str]]:
  modules = _modules()
  graph = {}
  for name, path in modules.items():
    is_package = path.endswith("__init__.py")
    edges = set()
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:   # relative import
          parts = name.split(".") if is_package else name.split(".")[:-1]
          parts = parts[:len(parts) - node.level + 1]
          base = ".".join(parts + ([base] if base else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                   for a in node.names]
      else:
        continue
      for target in targets:
        while target and target not in modules:   # `import a.b.c` of a name: its module
          target = target.rpartition(".")[0]
        if target.startswith(PACKAGE) and target != name:
          edges.add(target)
    graph[name] = edges
  return graph


def circles(graph) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_the_walker_finds_a_circle_hidden_by_a_lazy_import():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
  assert circles(graph) == [["a", "b", "c"]]
  # And it reads imports inside functions: the analysis hook imports the analysis lazily (only
  # runs that analyse during training pay for it).
  real = import_graph()
  assert "fedjax_sharp.analysis.hessian" in real["fedjax_sharp.training.hooks"]
  assert "fedjax_sharp.training.minimax_experiment" in real["fedjax_sharp.training.loop"]


def test_no_import_circle_among_fedjax_sharp_modules():
  found = circles(import_graph())
  assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
