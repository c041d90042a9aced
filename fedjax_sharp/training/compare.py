"""Run several algorithms (and seeds) on one config and tabulate them like the papers do.

    results = compare.run_grid(config, ["fedavg", "fedgmt[gamma=0]"], seeds=[0, 1], workdir=w)
    compare.write_reports(results, w, last_n=20, target=0.8)

This module runs the grid: algorithm variants (`name[key=value,...]`), one run directory per
(variant, seed), finished runs read back instead of trained again, sweeps grouped into one
compiled program. The tables and plots live in `training.report`; their public names are
re-exported here, the comparison's one import for scripts and notebooks.
"""
from __future__ import annotations

import ast
import copy
import json
import os
import re
import tempfile
from typing import Sequence

from absl import logging

from fedjax_sharp.training import fields
from fedjax_sharp.training import loop
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import workdir as workdir_lib
from fedjax_sharp.training.report import (COLUMNS, GEOMETRY, GEOMETRY_LEGEND,
                                          LOG_SCALE_METRICS, geometry_csv, geometry_markdown,
                                          geometry_rows, normalise_run, plot_accuracy,
                                          plot_landscapes, plot_series, plot_vs_bytes,
                                          table_rows, to_csv, to_latex, to_markdown,
                                          write_reports)

__all__ = ["COLUMNS", "GEOMETRY", "GEOMETRY_LEGEND", "LOG_SCALE_METRICS", "check_algorithms",
           "configure_variant", "geometry_csv", "geometry_markdown", "geometry_rows",
           "normalise_run", "parse_algorithms", "parse_variant", "plot_accuracy",
           "plot_landscapes", "plot_series", "plot_vs_bytes", "reuse_note", "run_grid",
           "table_rows", "to_csv", "to_latex", "to_markdown", "variant_dir", "variant_dir_name",
           "write_reports"]


def parse_algorithms(spec: str) -> list[str]:
  """Splits 'fedavg,fedgmt[admm=False,gamma=0]' at the commas outside brackets."""
  items, depth, current = [], 0, ""
  for ch in spec:
    depth += ch == "["
    depth -= ch == "]"
    if ch == "," and depth == 0:
      items.append(current.strip())
      current = ""
    else:
      current += ch
  if current.strip():
    items.append(current.strip())
  return items


def check_algorithms(variants: list[str], allowed) -> None:
  """Refuses, in one line naming `--algorithms` with the closest registered names, a variant
  whose algorithm is not in `allowed`."""
  from fedjax_sharp.hyperparameters import did_you_mean  # pylint: disable=g-import-not-at-top
  for variant in variants:
    name, _ = parse_variant(variant)
    if name not in allowed:
      raise ValueError(f"--algorithms: {name!r} is not a registered algorithm"
                       f"{did_you_mean(name, allowed, otherwise='')} (one of: "
                       f"{', '.join(sorted(allowed))})")


def parse_variant(variant: str) -> tuple[str, dict]:
  """'fedgmt[admm=False,gamma=0]' -> ('fedgmt', {'admm': False, 'gamma': 0.0}).

  A bare key overrides the algorithm's block `config.algorithm.<name>.<key>`; a dotted key
  overrides that config path (`scaffold[local.lr=0.1]`). Values are parsed as Python literals
  (True/False, numbers, quoted or bare strings).
  """
  if "[" not in variant:
    return variant, {}
  if not variant.endswith("]"):
    raise ValueError(f"--algorithms: {variant!r} should look like name[key=value,...]")
  name, body = variant[:-1].split("[", 1)
  overrides = {}
  for item in filter(None, (p.strip() for p in body.split(","))):
    if "=" not in item:
      raise ValueError(f"--algorithms: {item!r} in {variant!r} is not key=value")
    key, value = (t.strip() for t in item.split("=", 1))
    try:
      overrides[key] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      overrides[key] = value
  return name, overrides


def _set(node, key: str, value, where: str):
  if key not in node:
    raise ValueError(f"{where}.{key} does not exist; fields: {sorted(node.keys())}")
  old = node[key]
  node[key] = type(old)(value) if isinstance(old, float) and not isinstance(value, bool) else value


def configure_variant(config, variant: str, seed: int):
  """A copy of `config` running `variant` (an algorithm name, optionally with overrides)."""
  name, overrides = parse_variant(variant)
  cfg = copy.deepcopy(config)
  with cfg.unlocked():
    cfg.algorithm.name = name
    cfg.seed = int(seed)
    for key, value in overrides.items():
      if "." in key:
        *path, leaf = key.split(".")
        node = cfg
        for part in path:
          if part not in node:
            raise ValueError(f"--algorithms: config has no field {key!r} (in {variant!r})")
          node = node[part]
        _set(node, leaf, value, "config." + ".".join(path))
      else:
        if name not in cfg.algorithm:
          raise ValueError(f"--algorithms: {name!r} has no hyperparameter block "
                           f"config.algorithm.{name} to override")
        _set(cfg.algorithm[name], key, value, f"config.algorithm.{name}")
  fields.refuse_unused([k for k in overrides if "." in k], [cfg],
                       lambda chooser, choice: f"add {chooser}={choice} to {variant!r}")
  return cfg


def _reusable(run_dir: str, cfg) -> bool:
  """True if `run_dir` holds a finished run of exactly this setting; raises if it holds a
  finished run of another setting (results of different settings are never mixed)."""
  summary_path = os.path.join(run_dir, "summary.json")
  if not os.path.exists(summary_path):
    return False
  summary = metrics_lib.read_summary(summary_path)
  if summary["rounds"] != cfg.rounds or summary["status"] != "completed":
    return False  # unfinished: loop.run resumes it from its checkpoint, if any
  with open(os.path.join(run_dir, "config.json")) as f:
    diffs = workdir_lib.setting_differences(json.load(f), cfg)
  if diffs:
    raise ValueError(f"{run_dir} holds a finished run of another setting ({'; '.join(diffs)}): "
                     f"use another --workdir or remove it")
  return True


def variant_dir_name(variant: str) -> str:
  """The folder of a variant: 'fedprox' -> 'fedprox', "my_fedprox[decay_mu=0.1,mode='a']" ->
  'my_fedprox-decay_mu=0.1-mode=a' (each override after a '-', no trailing separator)."""
  name, _, body = variant.partition("[")
  parts = [name] + [p for p in parse_algorithms(body[:-1] if body.endswith("]") else body)]
  cleaned = [re.sub(r"[^A-Za-z0-9_.=-]+", "_", re.sub(r"['\"\s]", "", p)).strip("_")
             for p in parts]
  return "-".join(p for p in cleaned if p)


def variant_dir(workdir: str, variant: str) -> str:
  """`workdir/<variant_dir_name>`, or the folder an older release named (every run of
  characters outside [A-Za-z0-9_.=-] one '_', so 'fedprox_mu=0.1_') when only that exists."""
  new = os.path.join(workdir, variant_dir_name(variant))
  legacy = os.path.join(workdir, re.sub(r"[^A-Za-z0-9_.=-]+", "_", variant))
  return legacy if not os.path.isdir(new) and os.path.isdir(legacy) else new


def run_grid(config, algorithms: Sequence[str], seeds: Sequence[int], workdir: str | None,
             progress: bool = True, reuse: bool = True,
             hessian: dict | None = None,
             report_only: bool = False, sweep: bool = False,
             overwrite: bool = False) -> dict[str, list[dict]]:
  """Runs every (algorithm, seed); returns {algorithm: [per-seed result dicts]} (summary,
  records, hessian, analysis, run_dir, and `reused`: read back instead of run).

  Each run writes its own directory under `workdir` (a temporary one if None): the per-round
  records are read back from its metrics.jsonl. A directory that already holds the finished
  run of the same setting is read instead of run again (`reuse`, the default: a grid
  interrupted half way continues where it stopped; unfinished runs resume from their
  checkpoints); `overwrite` retrains every run from round 0 (the directory's earlier results
  are discarded; `reuse=False` is the older spelling).
  `hessian` (keyword arguments of `run_analysis.run_hessian`, e.g. {'k': 5, 'iters': 20}):
  compute the final model's top Hessian eigenvalues of every run that has none yet.
  `report_only`: start nothing; tabulate the finished runs of the same setting only (a grid
  still running elsewhere, or a partial one), logging which (algorithm, seed) are missing.
  `sweep`: the runs that differ only in seed, learning rate and sweepable hyperparameters (the
  seeds of one variant, and variants like `fedavg[local.lr=0.05]` or `fedgmt[alpha=0.5]`;
  `algorithms.registry.SWEEPABLE`) run together as one compiled program
  (`training.sweep`; needs a single-jit engine.client_strategy); same files, same results.
  """
  from fedjax_sharp.training import run_analysis
  workdir = workdir or tempfile.mkdtemp(prefix="fedjax_sharp_compare_")
  plan, pending, reused, labels = [], [], set(), {}
  for name in algorithms:
    for seed in seeds:
      cfg = configure_variant(config, name, seed)
      run_dir = os.path.join(variant_dir(workdir, name), f"seed_{seed}")
      if overwrite and report_only:
        raise ValueError("--overwrite retrains and --report_only starts nothing: pick one")
      reuse_it = (reuse and not overwrite) or report_only
      finished = reuse_it and _reusable(run_dir, cfg)
      if not reuse_it:
        cfg.resume = False     # retrain from round 0: the directory's results are replaced
      if report_only and not finished:
        logging.warning("report_only: no finished run of %s seed %d in %s (left out)", name,
                        seed, run_dir)
        continue
      if finished:
        logging.info("reusing the finished run in %s", run_dir)
        reused.add(run_dir)
      else:
        pending.append((cfg, run_dir))
        labels[run_dir] = f"{name} seed {seed}"   # on its progress line
      plan.append((name, run_dir))
  summaries = {}
  if sweep:
    from fedjax_sharp.training import sweep as sweep_lib  # pylint: disable=g-import-not-at-top
    for group in _sweep_groups(pending, sweep_lib):
      logging.info("sweep of %d experiments: %s", len(group), [d for _, d in group])
      for (_, run_dir), summary in zip(group, sweep_lib.run_sweep(
          [c for c, _ in group], [d for _, d in group], progress=progress)):
        summaries[run_dir] = summary
  else:
    for cfg, run_dir in pending:
      summaries[run_dir] = loop.run(cfg, run_dir, progress=progress and labels[run_dir])
  results: dict[str, list[dict]] = {}
  for name, run_dir in plan:
    # A run trained now returned its summary; a reused one is read back (with the defaults of
    # the keys its version may not have written).
    summary = (metrics_lib.read_summary(os.path.join(run_dir, "summary.json"))
               if run_dir in reused else summaries[run_dir])
    records = metrics_lib.read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    stored = run_analysis.load_stored(run_dir, run_analysis.HESSIAN_FILE)
    if hessian is not None and "final" not in stored and not report_only:
      stored["final"] = run_analysis.run_hessian(run_dir, **hessian)
    results.setdefault(name, []).append({"summary": summary, "records": records,
                                         "hessian": stored.get("final"),
                                         "analysis": run_analysis.load_stored(run_dir),
                                         "run_dir": run_dir, "reused": run_dir in reused})
  if not results:
    raise ValueError(f"no finished run of {list(algorithms)} x seeds {list(seeds)} under "
                     f"{workdir}")
  return results


def reuse_note(results: dict[str, list[dict]], workdir: str,
               retrain: str = "--overwrite retrains them") -> str | None:
  """One line when finished runs were read back instead of trained (a second `make demo`)."""
  runs = [normalise_run(r) for per_seed in results.values() for r in per_seed]
  n = sum(bool(r["reused"]) for r in runs)
  if not n:
    return None
  which = "all" if n == len(runs) else f"{n} of"
  return (f"Reused {which} {len(runs)} finished run(s) in {workdir} instead of training "
          f"again ({retrain})\n")


def _sweep_groups(pending, sweep_lib) -> list[list]:
  """Greedy grouping of (config, run_dir) into sets that can share one compiled round."""
  groups: list[list] = []
  for item in pending:
    for group in groups:
      try:
        sweep_lib.check_compatible([group[0][0], item[0]])
      except ValueError:
        continue
      group.append(item)
      break
    else:
      groups.append([item])
  return groups
