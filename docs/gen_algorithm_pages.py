"""Writes docs/algorithms/<name>.md for every registered algorithm (classification and minimax)
and docs/algorithms/index.md, from the registry, docs/update_rules.py (the update rules), the
modules' docstrings (the rules' symbols and tested reductions), the factories' signatures
(defaults, ranges, docs), the communication of each algorithm and docs/algorithm_notes.py
(sources, paper vs code). Run after adding an algorithm:

    python docs/gen_algorithm_pages.py          # (re)writes the pages
    python docs/gen_algorithm_pages.py --check  # exit 1 if a page is missing or stale (tests)
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from update_rules import RULES  # pylint: disable=g-import-not-at-top,wrong-import-position
from algorithm_notes import NOTES  # pylint: disable=g-import-not-at-top,wrong-import-position
OUT = os.path.join(ROOT, "docs", "algorithms")

def _algorithms():
  sys.path.insert(0, ROOT)
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax import algorithms as minimax
  return ALGORITHMS, minimax


def _communication(name, registration):
  from fedjax_sharp.training.config import base_config
  c = base_config()
  c.algorithm.name = name
  alg = registration.build(c, lambda params, x: x)
  return alg.communication.down, alg.communication.up


# `{{name}}` in an update rule: the code's value, so that a page cannot state another. `name` is a
# field of the algorithm's block (its factory's default) or a constant of the package
# (`core.tree.NORM_EPS`, `algorithms.fed_swa.FEDSWA_PRESETS.paper.rho`: attributes, dict
# keys and tuple indices); `{{$name}}` renders for inside TeX math, `{{name}}` for running text.
PLACEHOLDER = re.compile(r"\{\{(\$?)([\w.]+)\}\}")


def tex_number(value, math: bool = False) -> str:
  """A value as the pages write it: integers and 0.01 <= |v| < 10^4 plainly (0.05, 10),
  smaller or larger numbers as powers of ten ($10^{-12}$, $4 \\cdot 10^{-4}$)."""
  if value is None or isinstance(value, (bool, str)):
    return str(value)
  v = float(value)
  if v == int(v) and abs(v) < 1e4:
    return str(int(v))
  if 0.01 <= abs(v) < 1e4:
    return f"{v:g}"
  mantissa, exponent = f"{v:.6e}".split("e")
  mantissa = mantissa.rstrip("0").rstrip(".")
  tex = (f"10^{{{int(exponent)}}}" if mantissa == "1"
         else f"{mantissa} \\cdot 10^{{{int(exponent)}}}")
  return tex if math else f"${tex}$"


def resolve(path: str, defaults: dict):
  """The value `{{path}}` stands for (see PLACEHOLDER)."""
  if path in defaults:
    return defaults[path]
  parts = path.split(".")
  for i in range(len(parts) - 1, 0, -1):
    try:
      value = importlib.import_module("fedjax_sharp." + ".".join(parts[:i]))
    except ImportError:
      continue
    try:
      for key in parts[i:]:
        value = (value[key] if isinstance(value, dict) else value[int(key)]
                 if isinstance(value, (tuple, list)) else getattr(value, key))
    except (AttributeError, KeyError, IndexError, ValueError):
      break
    return value
  raise SystemExit(f"docs/update_rules.py: {{{{{path}}}}} is neither a field of the algorithm "
                   f"({sorted(defaults)}) nor a constant of fedjax_sharp")


def render_rule(text: str, defaults: dict) -> str:
  """An update rule with every placeholder replaced by the code's value."""
  return PLACEHOLDER.sub(lambda m: tex_number(resolve(m.group(2), defaults), bool(m.group(1))),
                         text)


def _own_optimiser(declared) -> str:
  """The index's client-momentum cell: the block's own fields, or `local.momentum`."""
  own = [k for k in ("momentum", "weight_decay") if k in declared]
  if not own:
    return "`local.momentum`"
  return "its own: " + ", ".join(f"`{k}` {json.dumps(declared[k].default)}" for k in own)


def _rendered(texts: dict[str, str]) -> dict[str, str]:
  classification, minimax = _algorithms()
  out = {}
  for name, text in texts.items():
    declared = (classification[name].fields() if name in classification
                else minimax.MINIMAX_ALGORITHMS[name].fields())
    out[name] = render_rule(text, {k: h.default for k, h in declared.items()})
  return out


def rendered_rules() -> dict[str, str]:
  """Every algorithm's update rule with its placeholders filled (what the pages show)."""
  return _rendered(RULES)


def rendered_notes() -> dict[str, str]:
  """Every algorithm's sources and notes with their placeholders filled (what the pages show)."""
  return _rendered(NOTES)


def _rows(declared) -> dict:
  """field -> (default, range or choices, doc), from the factory's signature."""
  return {k: (h.default, h.field.range or (" / ".join(map(str, h.field.choices))
                                           if h.field.choices else ""), h.field.doc)
          for k, h in declared.items()}


def page(name: str, title: str, paper: str, module, rows: dict, comm, weighting=None) -> str:
  doc = inspect.getdoc(module) or ""
  lines = [f"# {title} (`{name}`)", "", f"**Paper:** {paper}.", ""]
  if comm is not None:
    lines += [f"**Communication per sampled client and round:** {comm[0]:g} model-sized "
              f"vector(s) down, {comm[1]:g} up.", ""]
  defaults = {k: v for k, (v, _, _) in rows.items()}
  lines += ["## Update rule", "", render_rule(RULES[name], defaults).strip(), ""]
  lines += ["## Notes", "", f"The module docstring of `{module.__name__}` (what `help()` shows in a notebook):",
            "", "```text", doc, "```", ""]
  lines += ["## Defaults", ""]
  if rows:
    lines += [f"`config.algorithm.{name}` (override with `--config.algorithm.{name}.FIELD=...`), "
              "from the keyword arguments of the factory:",
              "", "| field | default | range | meaning |", "|---|---|---|---|"]
    lines += [f"| `{k}` | `{json.dumps(v)}` | {r} | {d.replace('|', chr(92) + '|')} |"
              for k, (v, r, d) in sorted(rows.items())]
  else:
    lines += ["No hyperparameters of its own."]
  if weighting is not None:
    lines += ["", f"Client weighting with `aggregation='auto'` (the default): '{weighting[0]}', "
              f"{weighting[1]}; 'uniform' under differential privacy."]
  config = "configs/demo.py" if comm is not None else "configs/minimax_toy.py:bilinear"
  lines += ["", f"Run it: `.venv/bin/python experiments/run.py --config={config} "
            f"--config.algorithm.name={name}`"
            + (" (the bilinear test game; the other minimax tasks: `configs/minimax_*.py`)"
               if comm is None else "") + ".", ""]
  if name in NOTES:
    lines += ["## Sources and notes", "", render_rule(NOTES[name], defaults).strip(), ""]
  return "\n".join(lines)


def build_pages() -> dict[str, str]:
  classification, minimax = _algorithms()
  missing = sorted(set(classification) | set(minimax.MINIMAX_ALGORITHMS))
  unknown = sorted(set(NOTES) - set(missing))
  missing = [n for n in missing if n not in RULES]
  if missing:
    raise SystemExit(f"docs/update_rules.py has no update rule for {missing}")
  if unknown:
    raise SystemExit(f"docs/algorithm_notes.py has notes for unregistered {unknown}")
  pages = {}
  rows = ["# Algorithms", "",
          "Every registered algorithm, with its update rule, defaults and communication. "
          "Classification algorithms run on `config.task.name='classification'`; the minimax "
          "ones on the minimax tasks (`configs/minimax_*.py`).", "",
          "**Client weighting.** `aggregation='auto'` (the default) weighs the cohort's uploads "
          "as each algorithm declares (`register(..., weighting=...)`): the newest methods as "
          "their paper does where it states a weighting, else as their authors' code does; the "
          "others by the specification's mean, which names the paper's own choice where it "
          "differs. 'examples' is $p_m = n_m / \\sum_{j \\in N_t} n_j$, "
          "'uniform' is $1 / |N_t|$. Under differential privacy 'auto' is 'uniform' for every "
          "algorithm (the sensitivity bound needs it). `--config.aggregation=examples` or "
          "`=uniform` overrides it; `--print_config` shows what 'auto' gives and why.", "",
          "**Client momentum.** `local.momentum` (None: 0.9), except where the algorithm's "
          "paper or code fixes its own: then its block's `momentum` (and `weight_decay`, where "
          "listed), and `local.momentum` is not used.", "",
          "| name | algorithm | down / up | weighting ('auto') | client momentum | paper |",
          "|---|---|---|---|---|---|"]
  for name in sorted(classification):
    r = classification[name]
    module = importlib.import_module(r.factory.__module__)
    comm = _communication(name, r)
    pages[f"{name}.md"] = page(name, r.title, r.paper, module, _rows(r.fields()), comm,
                               (r.weighting, r.weighting_source))
    rows.append(f"| [`{name}`]({name}.md) | {r.title} | {comm[0]:g} / {comm[1]:g} | "
                f"{r.weighting}: {r.weighting_source.replace('|', chr(92) + '|')} | "
                f"{_own_optimiser(r.fields())} | {r.paper} |")
  for name, r in minimax.MINIMAX_ALGORITHMS.items():
    title, paper = r.title, r.paper
    pages[f"{name}.md"] = page(name, title, paper, minimax, _rows(r.fields()), None)
    rows.append(f"| [`{name}`]({name}.md) | {title} | 1 / 1 (x, y) | examples | "
                f"its players' (`minimax.*`) | {paper} |")
  pages["index.md"] = "\n".join(rows) + "\n"
  return pages


NAV_BEGIN = "  # BEGIN algorithm pages (written by docs/gen_algorithm_pages.py)"
NAV_END = "  # END algorithm pages"


def nav_block(pages: dict[str, str]) -> str:
  """The 'Algorithms' section of mkdocs.yml's nav: the index, then every page by its title."""
  lines = [NAV_BEGIN, "  - Algorithms:", "    - Overview: algorithms/index.md"]
  for filename, text in pages.items():
    if filename != "index.md":
      title = text.splitlines()[0].lstrip("# ").split(" (`")[0]
      lines.append(f"    - {json.dumps(title)}: algorithms/{filename}")
  return "\n".join(lines + [NAV_END])


def with_nav(mkdocs_yml: str, pages: dict[str, str]) -> str:
  start, end = mkdocs_yml.index(NAV_BEGIN), mkdocs_yml.index(NAV_END) + len(NAV_END)
  return mkdocs_yml[:start] + nav_block(pages) + mkdocs_yml[end:]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true")
  args = parser.parse_args()
  pages = build_pages()
  stale = []
  for filename, text in pages.items():
    path = os.path.join(OUT, filename)
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
      stale.append(filename)
      if not args.check:
        os.makedirs(OUT, exist_ok=True)
        with open(path, "w") as f:
          f.write(text)
  extra = sorted(set(os.listdir(OUT)) - set(pages)) if os.path.isdir(OUT) else []
  mkdocs_path = os.path.join(ROOT, "mkdocs.yml")
  mkdocs_yml = open(mkdocs_path).read()
  if with_nav(mkdocs_yml, pages) != mkdocs_yml:
    stale.append("mkdocs.yml (nav)")
    if not args.check:
      with open(mkdocs_path, "w") as f:
        f.write(with_nav(mkdocs_yml, pages))
  if args.check:
    if stale or extra:
      print(f"stale or missing: {stale}; not generated: {extra}. "
            "Run: python docs/gen_algorithm_pages.py")
      sys.exit(1)
    print(f"{len(pages)} algorithm pages up to date")
  else:
    print(f"wrote {len(stale)} of {len(pages)} pages")


if __name__ == "__main__":
  main()
