"""Every Python block shown in README.md and docs/**/*.md is executed here, in-process, or is
listed in NOT_RUN with the reason (the shell commands: tests/test_docs_commands.py). The blocks
of one page run in order in one namespace, after the page's PRELUDE: the names a fragment
takes from its surroundings (a model, a partition), here a tiny softmax regression. A block
added to the docs is run from then on; one that cannot run fails until it is listed."""
from __future__ import annotations

import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_FENCES = ("python", "py", "pycon")

# What a page's fragments assume is defined (the text around them says what these are).
_TINY = """
from conftest import TinyProblem
_tiny = TinyProblem(sizes=(6,) * 12)
apply_fn, params, x, y = _tiny.apply, _tiny.params, _tiny.x, _tiny.y
client_indices, rounds = _tiny.client_indices, 2
"""
PRELUDE = {
    "docs/library.md": _TINY,
    "docs/adding_an_algorithm.md": "",
    "docs/adding_a_data_source.md": "",
    "docs/privacy.md": "",
    "docs/adding_a_hook.md": "",
    "docs/adding_a_strategy.md": _TINY,
}

# Blocks not run, by (file, the block's first line), with the reason.
NOT_RUN: dict[tuple[str, str], str] = {}


def docs_python_blocks() -> list[tuple[str, int, str]]:
  """(file, line, code) of every Python code block, fences indented in lists included."""
  out = []
  paths = [os.path.join(ROOT, "README.md")] + sorted(
      glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
  for path in paths:
    fence, block, indent, start = None, [], 0, 0
    for i, line in enumerate(open(path), 1):
      stripped = line.strip()
      if stripped.startswith("```"):
        if fence is None:
          fence, block, start = stripped[3:].strip(), [], i
          indent = len(line) - len(line.lstrip())
        else:
          if fence in PYTHON_FENCES:
            out.append((os.path.relpath(path, ROOT), start, "".join(
                l[indent:] if l[:indent].strip() == "" else l for l in block)))
          fence = None
      elif fence is not None:
        block.append(line)
  return out


def _first_line(code: str) -> str:
  return next((l.strip() for l in code.splitlines() if l.strip()), "")


def test_every_docs_python_block_is_run_or_listed():
  blocks = docs_python_blocks()
  assert len(blocks) >= 3, blocks            # the parser finds the docs' blocks
  for f, line, code in blocks:
    if (f, _first_line(code)) not in NOT_RUN:
      assert f in PRELUDE, (f"{f}:{line}: a Python block on a page with no PRELUDE in "
                            "tests/test_docs_python.py: add one (may be '') or list it in NOT_RUN")


PAGES = sorted({f for f, _, _ in docs_python_blocks()})


@pytest.mark.parametrize("page", PAGES)
def test_docs_python_blocks_run(page):
  from fedjax_sharp.algorithms import registration  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.data import sources              # pylint: disable=g-import-not-at-top
  registered, loaders = set(registration.ALGORITHMS), dict(sources.LOADERS)
  namespace = {"__name__": f"docs_{os.path.basename(page)[:-3]}"}
  try:
    exec(compile(PRELUDE.get(page, ""), f"{page}:prelude", "exec"), namespace)
    for f, line, code in docs_python_blocks():
      if f == page and (f, _first_line(code)) not in NOT_RUN:
        exec(compile("\n" * (line) + code, page, "exec"), namespace)   # tracebacks: page lines
    if page == "docs/adding_an_algorithm.md":
      # The example registers and builds: its body runs (a missing import fails here).
      from fedjax_sharp.core.optimizers import local_sgd  # pylint: disable=g-import-not-at-top
      assert "my_fedprox" in registration.ALGORITHMS
      from conftest import TinyProblem                    # pylint: disable=g-import-not-at-top
      algorithm = namespace["my_fedprox"](TinyProblem().apply, local_sgd(), mu=0.1)
      assert algorithm.name == "my_fedprox" and callable(algorithm.local_step)
    if page == "docs/adding_a_data_source.md":
      # The user's source has its block, declared by its loader alone.
      from fedjax_sharp.training.config import base_config  # pylint: disable=g-import-not-at-top
      assert base_config().data.npz_clients.to_dict() == {"min_examples": 0}
    if page == "docs/library.md":
      assert namespace["metrics"] is not None and namespace["fedsam"].name
  finally:   # the example's registration must not leak into the other tests
    for name in set(registration.ALGORITHMS) - registered:
      del registration.ALGORITHMS[name]
    sources.LOADERS.clear()
    sources.LOADERS.update(loaders)
