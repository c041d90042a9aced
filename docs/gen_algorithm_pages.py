"""Writes docs/algorithms/<name>.md for every registered algorithm (classification and minimax)
and docs/algorithms/index.md, from the registry, the modules' docstrings (the update rules), the
factories' signatures (defaults, ranges, docs) and the communication of each algorithm. Run after adding an algorithm:

    python docs/gen_algorithm_pages.py          # (re)writes the pages
    python docs/gen_algorithm_pages.py --check  # exit 1 if a page is missing or stale (tests)
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from update_rules import RULES  # pylint: disable=g-import-not-at-top,wrong-import-position
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


def _rows(declared) -> dict:
  """field -> (default, range or choices, doc), from the factory's signature."""
  return {k: (h.default, h.field.range or (" / ".join(map(str, h.field.choices))
                                           if h.field.choices else ""), h.field.doc)
          for k, h in declared.items()}


def page(name: str, title: str, paper: str, module, rows: dict, comm) -> str:
  doc = inspect.getdoc(module) or ""
  lines = [f"# {title} (`{name}`)", "", f"**Paper:** {paper}.", ""]
  if comm is not None:
    lines += [f"**Communication per sampled client and round:** {comm[0]:g} model-sized "
              f"vector(s) down, {comm[1]:g} up.", ""]
  lines += ["## Update rule", "", RULES[name].strip(), ""]
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
  config = "configs/demo.py" if comm is not None else "configs/minimax_toy.py:bilinear"
  lines += ["", f"Run it: `.venv/bin/python experiments/run.py --config={config} "
            f"--config.algorithm.name={name}`"
            + (" (the bilinear test game; the other minimax tasks: `configs/minimax_*.py`)"
               if comm is None else "") + ".", ""]
  return "\n".join(lines)


def build_pages() -> dict[str, str]:
  classification, minimax = _algorithms()
  missing = sorted(set(classification) | set(minimax.MINIMAX_ALGORITHMS))
  missing = [n for n in missing if n not in RULES]
  if missing:
    raise SystemExit(f"docs/update_rules.py has no update rule for {missing}")
  pages = {}
  rows = ["# Algorithms", "",
          "Every registered algorithm, with its update rule, defaults and communication. "
          "Classification algorithms run on `config.task.name='classification'`; the minimax "
          "ones on the minimax tasks (`configs/minimax_*.py`).", "",
          "| name | algorithm | down / up | paper |", "|---|---|---|---|"]
  from fedjax_sharp.algorithms.hyperparameters import fields
  for name in sorted(classification):
    r = classification[name]
    module = importlib.import_module(r.factory.__module__)
    comm = _communication(name, r)
    pages[f"{name}.md"] = page(name, r.title, r.paper, module, _rows(r.fields()), comm)
    rows.append(f"| [`{name}`]({name}.md) | {r.title} | {comm[0]:g} / {comm[1]:g} | "
                f"{r.paper} |")
  for name in minimax.MINIMAX_ALGORITHMS:
    title, paper = minimax.TITLES[name]
    pages[f"{name}.md"] = page(name, title, paper, minimax,
                               _rows(fields(minimax.FACTORIES[name])), None)
    rows.append(f"| [`{name}`]({name}.md) | {title} | 1 / 1 (x, y) | {paper} |")
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
