"""The algorithm pages cannot state a number the code does not use.

`docs/update_rules.py` and `docs/algorithm_notes.py` write every default and every constant as
a placeholder (`{{rho}}`, `{{$core.tree.NORM_EPS}}`) that `docs/gen_algorithm_pages.py` fills
from the code; the defaults table comes from the factory's signature; `test_docs.py` checks the
pages are current. Here: no rule writes a number by hand, no note writes a default or a constant
by hand, every number a page (rule, docstring or notes) gives for a field is the code's default,
each page's weighting is the registry's, and the module docstrings the pages show stay short.

Deliberate bugs each catches (checked once): a rule stating `rho` (0.1) by hand where the code's
default is 0.01 (the FedWMSAM page before); a clip formula written with `10^{-6}` by hand; a
module docstring naming `alpha`, 0.2 against a default of 0.1; a placeholder of a constant that
does not exist; the index table not showing the registry's weighting; a note writing "rho 0.05"
or "weight decay 1e-3" (defaults) or "+ 1e-12" (`core.tree.NORM_EPS`) by hand; a note stating
`T_D` (0.3) against a default of 0.2; FedWMSAM's module docstring back at its 87 lines of
sources.
"""
from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import sys

import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.hyperparameters import fields
from fedjax_sharp.minimax import algorithms as minimax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs"))
import gen_algorithm_pages as gen  # noqa: E402  pylint: disable=wrong-import-position
from update_rules import RULES  # noqa: E402  pylint: disable=wrong-import-position
from algorithm_notes import NOTES  # noqa: E402  pylint: disable=wrong-import-position

# A number that is not a plain integer: a decimal, a power of ten, e-notation.
NON_INTEGER = re.compile(r"(?<![\w{^_.])(?:[0-9]+\.[0-9]+|10\^\{-?[0-9]+\}|[0-9.]+e-?[0-9]+)")
# A field followed by its value: "`rho` (0.05", "`alpha`, 0.1", "`weight_decay` ($10^{-3}$".
FIELD_VALUE = re.compile(r"`(\w+)`\s*(?:\(|,)\s*(\$[0-9][^$]*\$|[0-9][0-9.e-]*|None)")


def declared(name) -> dict:
  return {k: h.default for k, h in (ALGORITHMS[name].fields() if name in ALGORITHMS
                                     else minimax.MINIMAX_ALGORITHMS[name].fields()).items()}


def parse_number(text: str):
  text = text.strip("$").rstrip(".")
  if text == "None":
    return None
  m = re.fullmatch(r"(?:([0-9.]+)\s*\\cdot\s*)?10\^\{(-?[0-9]+)\}", text)
  if m:
    return float(m.group(1) or 1) * 10.0 ** int(m.group(2))
  return float(text)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rules_write_numbers_only_as_placeholders(name):
  text = gen.PLACEHOLDER.sub("", RULES[name])
  assert not NON_INTEGER.findall(text), (
      f"docs/update_rules.py, {name}: write {NON_INTEGER.findall(text)} as placeholders "
      f"({{{{field}}}} or {{{{$module.CONSTANT}}}}) so the page shows the code's value")
  by_hand = [m.group(0) for m in FIELD_VALUE.finditer(text) if m.group(1) in declared(name)]
  assert not by_hand, f"{name}: defaults written by hand: {by_hand}"


# A number as the notes write it: a decimal, e-notation or a power of ten in TeX.
NUMBER = r"-?[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?(?![0-9])|10\^\{-?[0-9]+\}"
SMALL = re.compile(r"(?<![\w.])(?:[0-9.]+e-[0-9]+|10\^\{-[0-9]+\})")


def _small_constants() -> dict[str, float]:
  """The constants the rules and notes name by placeholder that print as powers of ten (the
  norm guards: `core.tree.NORM_EPS`, ...): a note writing one of these values by hand would not
  follow the code."""
  paths = {m.group(2) for text in [*RULES.values(), *NOTES.values()]
           for m in gen.PLACEHOLDER.finditer(text) if "." in m.group(2)}
  values = {p: gen.resolve(p, {}) for p in paths}
  return {p: float(v) for p, v in values.items()
          if isinstance(v, float) and 0 < abs(v) < 0.01}


@pytest.mark.parametrize("name", sorted(NOTES))
def test_notes_write_defaults_and_constants_only_as_placeholders(name):
  """A note may quote a paper's or the authors' numbers, but a field written next to a number
  that is the code's default ("rho 0.05", "`W` (30", "weight decay 1e-3", "beta = 10") is a
  default written by hand, and so is a power of ten equal to a package constant ("+ 1e-12"):
  both must be placeholders, so the page changes with the code."""
  text = gen.PLACEHOLDER.sub("", NOTES[name])
  by_hand = []
  for field, default in declared(name).items():
    if isinstance(default, bool) or not isinstance(default, (int, float)):
      continue
    spelled = re.escape(field).replace("_", "[_ ]")      # `weight_decay`, "Weight decay"
    spelled = f"[{spelled[0].upper()}{spelled[0].lower()}]{spelled[1:]}"
    for m in re.finditer(rf"(?<![\w.]){spelled}`?\s*[=:(,]?\s*({NUMBER})", text):
      if math.isclose(parse_number(m.group(1)), float(default), rel_tol=1e-12):
        by_hand.append(m.group(0))
  constants = _small_constants()
  assert "core.tree.NORM_EPS" in constants
  by_hand += [m.group(0) for m in SMALL.finditer(text)
              if any(math.isclose(parse_number(m.group(0)), v, rel_tol=1e-12)
                     for v in constants.values())]
  assert not by_hand, (f"docs/algorithm_notes.py, {name}: {by_hand} written by hand: write the "
                       "default as {{field}}, the constant as {{module.CONSTANT}}")


def test_every_number_a_page_states_for_a_field_is_the_codes_default():
  """The rendered rules, the module docstrings and the rendered notes."""
  checked = 0
  notes = gen.rendered_notes()
  for name in sorted(RULES):
    defaults = declared(name)
    module = (importlib.import_module(ALGORITHMS[name].factory.__module__) if name in ALGORITHMS
              else minimax)
    text = (gen.rendered_rules()[name] + "\n"
            + (inspect.getdoc(module) if name in ALGORITHMS else "") + "\n"
            + notes.get(name, ""))
    for m in FIELD_VALUE.finditer(text):
      field, stated = m.group(1), m.group(2)
      if field not in defaults or defaults[field] is None:
        continue   # a preset's value: its placeholder names the constant
      assert parse_number(stated) == pytest.approx(float(defaults[field]), rel=1e-12), (
          f"{name}: the page says `{field}` {stated}, the code's default is {defaults[field]}")
      checked += 1
  assert checked > 60


def test_placeholders_render_the_codes_values():
  from fedjax_sharp.core import optimizers, tree  # pylint: disable=g-import-not-at-top
  assert gen.tex_number(1e-12, math=True) == "10^{-12}"
  assert gen.tex_number(4e-4) == "$4 \\cdot 10^{-4}$"
  assert gen.tex_number(0.05) == "0.05" and gen.tex_number(10.0) == "10"
  assert gen.render_rule("{{$core.tree.NORM_EPS}} {{rho}}", {"rho": 0.01}) == "10^{-12} 0.01"
  assert tree.NORM_EPS == 1e-12 and optimizers.CLIP_EPS == 1e-6
  assert gen.render_rule("{{algorithms.fed_wmsam.ALPHA_HAT_BOUNDS.1}}", {}) == "0.9"
  with pytest.raises(SystemExit, match="nor a constant"):
    gen.render_rule("{{core.tree.NO_SUCH}}", {})
  pages = gen.build_pages()
  # The clip formulas carry the code's guard (they left it out before).
  for name in ("fednsam", "fedwmsam", "fedswa"):
    assert "+ 10^{-6})" in pages[f"{name}.md"], name


def test_the_index_and_each_page_give_the_registrys_weighting():
  pages = gen.build_pages()
  for name, r in ALGORITHMS.items():
    row = next(line for line in pages["index.md"].splitlines() if f"[`{name}`]" in line)
    assert f"| {r.weighting}: " in row, row
    assert f"(the default): '{r.weighting}'" in pages[f"{name}.md"], name
  assert {n: r.weighting for n, r in ALGORITHMS.items()
          if n in ("fedswa", "fedmoswa", "fednsam", "fedwmsam", "fedgf")} == {
              "fedswa": "uniform", "fedmoswa": "uniform", "fednsam": "uniform",
              "fedwmsam": "uniform", "fedgf": "examples"}


def test_algorithm_module_docstrings_are_at_most_25_lines():
  """Every registered algorithm's module (classification and minimax) says in its docstring the
  update rule's symbols as the code names them and the reductions its tests prove, in at most
  25 lines (what `help()` and the page's "Notes" show); where the rule was read and how the paper
  and the authors' code differ go to `docs/algorithm_notes.py`."""
  from fedjax_sharp.algorithms.registration import REGISTRY  # pylint: disable=g-import-not-at-top
  modules = sorted({r.factory.__module__ for r in REGISTRY.values()})
  assert minimax.__name__ in modules and len(modules) >= 15, modules
  lines = {m: len((inspect.getdoc(importlib.import_module(m)) or "").splitlines())
           for m in modules}
  assert all(lines.values()), {m: n for m, n in lines.items() if not n}
  assert not {m: n for m, n in lines.items() if n > 25}, (
      {m: n for m, n in lines.items() if n > 25})
