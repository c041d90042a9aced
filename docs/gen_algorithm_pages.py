"""Writes docs/algorithms/<name>.md for every registered algorithm (classification and minimax)
and docs/algorithms/index.md, from the registry, the modules' docstrings (the update rules), the
config defaults and the communication of each algorithm. Run after adding an algorithm:

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
OUT = os.path.join(ROOT, "docs", "algorithms")

# name -> (title, paper)
PAPERS = {
    "fedavg": ("FedAvg / FedOpt", "McMahan et al., AISTATS 2017; Reddi et al., ICLR 2021 (FedOpt)"),
    "fedsam": ("FedSAM", "Qu et al., ICML 2022; Caldarola et al., ECCV 2022"),
    "fedasam": ("FedASAM", "Caldarola et al., ECCV 2022 (ASAM: Kwon et al., ICML 2021)"),
    "fedprox": ("FedProx", "Li et al., MLSys 2020"),
    "scaffold": ("SCAFFOLD", "Karimireddy et al., ICML 2020 (option II)"),
    "fedgamma": ("FedGamma", "Dai et al., IEEE TNNLS 2023"),
    "fedcm": ("FedCM", "Xu et al., 2021 (client-level momentum)"),
    "mofedsam": ("MoFedSAM", "Qu et al., ICML 2022 (seed 001)"),
    "mimelite": ("MimeLite", "Karimireddy et al., 2021"),
    "fedntd": ("FedNTD", "Lee et al., NeurIPS 2022"),
    "feddyn": ("FedDyn", "Acar et al., ICLR 2021"),
    "feddyn_sam": ("FedDyn + SAM", "FedDyn (Acar et al.) with a SAM client optimiser"),
    "fedspeed": ("FedSpeed", "Sun et al., ICLR 2023"),
    "fedsmoo": ("FedSMOO", "Sun et al., ICML 2023"),
    "fedlesam": ("FedLESAM", "Fan et al., ICML 2024"),
    "fedlesam_d": ("FedLESAM-D", "Fan et al., ICML 2024"),
    "fedgloss": ("FedGloSS", "Caldarola et al., 2024 (seed 003), Appendix A Algorithm 1"),
    "naive_fedgloss": ("NaiveFedGloSS", "Caldarola et al., 2024 (seed 003), Table 6"),
    "fedgmt": ("FedGMT", "Li et al., ICML 2025 (seed 002), Algorithm 1"),
    "fedgmt_v2": ("FedGMT-v2", "Li et al., ICML 2025 (seed 002), Section 3.3"),
    "fess_gda": ("FESS-GDA", "Shen et al., AISTATS 2024 (seed 004)"),
    "local_sgda": ("Local SGDA", "Deng and Mahdavi, AISTATS 2021; Sharma et al., ICML 2022"),
    "local_sgda_plus": ("Local SGDA+", "Sharma et al., ICML 2022"),
    "fed_norm_sgda": ("Fed-Norm-SGDA", "Sharma et al., TMLR 2023"),
    "fed_norm_sgda_plus": ("Fed-Norm-SGDA+", "Sharma et al., TMLR 2023"),
}

# Update rules for the algorithms whose module docstring does not spell them out.
EXTRA = {
    "fedavg": """Client m starts from the broadcast `w^t` with a fresh local optimiser (SGD with
momentum and weight decay by default) and takes `K_m` steps on its data; the server forms the
pseudo-gradient `D = w^t - sum_m p_m w_m` (`p_m` example-count or uniform weights) and applies
`config.server` (`sgd` with lr 1 is FedAvg; `adam`, `yogi`, `adagrad` are FedOpt):

    w_{m,k+1} = w_{m,k} - eta_t * opt(grad f_m(w_{m,k}; xi))
    w^{t+1}   = w^t - server_opt(D)""",
    "fedsam": """FedAvg with the SAM client optimiser (`fedjax_sharp/core/sam.py`): on each batch

    e = rho * g / ||g||          (g = grad f_m(w; xi), one global L2 norm over the pytree)
    w <- w - eta_t * opt(grad f_m(w + e; xi))   (same batch, same augmentation draw)""",
    "fedasam": """FedAvg with the ASAM client optimiser: the ascent is scaled elementwise by
`T = |w| + eta`:

    e = rho * T^2 g / ||T g||
    w <- w - eta_t * opt(grad f_m(w + e; xi))""",
}


def _algorithms():
  sys.path.insert(0, ROOT)
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  return ALGORITHMS, MINIMAX_ALGORITHMS


def _communication(name, builder):
  from fedjax_sharp.training.config import base_config
  c = base_config()
  c.algorithm.name = name
  alg = builder(c, lambda params, x: x)
  return alg.communication.down, alg.communication.up


def page(name: str, module, defaults: dict, comm) -> str:
  title, paper = PAPERS[name]
  doc = inspect.getdoc(module) or ""
  lines = [f"# {title} (`{name}`)", "", f"**Paper:** {paper}.", ""]
  if comm is not None:
    lines += [f"**Communication per sampled client and round:** {comm[0]:g} model-sized "
              f"vector(s) down, {comm[1]:g} up.", ""]
  lines += ["## Update rule", ""]
  if name in EXTRA:
    lines += [EXTRA[name], ""]
  lines += [f"From `{module.__name__}`:", "", "```text", doc, "```", ""]
  lines += ["## Defaults", ""]
  if defaults:
    lines += [f"`config.algorithm.{name}` (override with `--config.algorithm.{name}.FIELD=...`):",
              "", "| field | default |", "|---|---|"]
    lines += [f"| `{k}` | `{json.dumps(v)}` |" for k, v in sorted(defaults.items())]
  else:
    lines += ["No hyperparameters of its own."]
  lines += ["", "Run it: `python experiments/run.py --config=configs/demo.py "
            f"--config.algorithm.name={name}`"
            + (" (a minimax task: `--config=configs/minimax_toy.py:bilinear`)"
               if comm is None else "") + ".", ""]
  return "\n".join(lines)


def build_pages() -> dict[str, str]:
  from fedjax_sharp.training.config import base_config
  classification, minimax = _algorithms()
  algorithm_cfg = base_config().algorithm
  pages = {}
  rows = ["# Algorithms", "",
          "Every registered algorithm, with its update rule, defaults and communication. "
          "Classification algorithms run on `config.task.name='classification'`; the minimax "
          "ones on the minimax tasks (`configs/minimax_*.py`).", "",
          "| name | algorithm | down / up | paper |", "|---|---|---|---|"]
  for name in sorted(classification):
    builder = classification[name]
    module = importlib.import_module(builder.__module__)
    defaults = dict(algorithm_cfg.get(name) or {})
    comm = _communication(name, builder)
    pages[f"{name}.md"] = page(name, module, defaults, comm)
    rows.append(f"| [`{name}`]({name}.md) | {PAPERS[name][0]} | {comm[0]:g} / {comm[1]:g} | "
                f"{PAPERS[name][1]} |")
  module = importlib.import_module("fedjax_sharp.minimax.algorithms")
  for name in minimax:
    defaults = dict(algorithm_cfg.get(name) or {})
    pages[f"{name}.md"] = page(name, module, defaults, None)
    rows.append(f"| [`{name}`]({name}.md) | {PAPERS[name][0]} | 1 / 1 (x, y) | "
                f"{PAPERS[name][1]} |")
  pages["index.md"] = "\n".join(rows) + "\n"
  return pages


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
