"""The table of a hyperparameter search: one row per trial, the best trial per algorithm.

Reads every `<root>/<trial>/<algorithm>/seed_<s>/` that compare.py wrote (or
`<root>/<trial>/<algorithm>/`, a copy of one seed's files) (config.json,
summary.json, metrics.jsonl), shows the hyperparameters that differ between the trials of an
algorithm, the run's status, the metric of its summary (mean of the last `eval.last_n`
evaluated rounds, on the split it was evaluated on) and the mean test/validation accuracy of the
same rounds, and marks each algorithm's best trial (a diverged or unfinished trial never wins).

    python experiments/tuning_table.py runs/minimax_tune --out=results/minimax_fair_tuning
    python experiments/tuning_table.py runs/minimax_tune --keys=minimax.lr_x,algorithm.fess_gda.p

--out writes table.md and table.csv there, and best.json ({algorithm: {field: value}}), from
which the final runs take their settings (the commands of the fair-classification study:
docs/reproducing.md, "FESS-GDA (Shen et al., AISTATS 2024)").
"""
from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import math
import os
import sys

from fedjax_sharp.training import metrics as metrics_lib

# Fields searched in the fair-classification comparison; others via --keys.
DEFAULT_KEYS = ("minimax.lr_x", "minimax.lr_y", "algorithm.fess_gda.p",
                "algorithm.fess_gda.beta", "algorithm.local_sgda_plus.snapshot_every",
                "algorithm.fed_norm_sgda_plus.snapshot_every")


def _get(config: dict, path: str):
  node = config
  for part in path.split("."):
    if not isinstance(node, dict) or part not in node:
      return None
    node = node[part]
  return node


def _relevant(path: str, algorithm: str) -> bool:
  """algorithm.X.* fields matter only to algorithm X."""
  parts = path.split(".")
  return parts[0] != "algorithm" or parts[1] == algorithm


def read_trials(root: str, keys) -> list[dict]:
  rows = []
  found = sorted(glob.glob(os.path.join(root, "*", "*", "seed_*", "summary.json")) +
                 glob.glob(os.path.join(root, "*", "*", "summary.json")))  # copied without seed_*
  for summary_path in found:
    run_dir = os.path.dirname(summary_path)
    trial = os.path.relpath(run_dir, root).split(os.sep)[0]
    summary = metrics_lib.read_summary(summary_path)
    with open(os.path.join(run_dir, "config.json")) as f:
      config = json.load(f)
    algorithm = summary["algorithm"]
    metric, last_n = summary["metric"], int(summary.get("last_n", 0) or 0)
    scored = []
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics_path):
      with open(metrics_path) as f:   # the rounds that evaluated the metric (not the ones between)
        scored = metrics_lib.evaluated(map(json.loads, filter(str.strip, f)), metric)
    tail = scored[-last_n:] if last_n else scored
    accuracy = [r["test_accuracy"] for r in metrics_lib.evaluated(tail, "test_accuracy")]
    value = summary.get(f"mean_{metric}_last_{last_n}")
    finished = summary["status"] == "completed"
    rows.append({
        "trial": trial, "algorithm": algorithm, "seed": summary["seed"],
        "status": summary["status"],
        "rounds": f"{summary.get('completed_rounds', '?')}/{summary.get('configured_rounds', '?')}",
        "split": summary.get("eval_split", "test"), "metric": metric, "last_n": last_n,
        "value": value if finished and value is not None else None,
        "std": summary.get(f"std_{metric}_last_{last_n}") if finished else None,
        "accuracy": sum(accuracy) / len(accuracy) if finished and accuracy else None,
        "hparams": {k: _get(config, k) for k in keys
                    if _get(config, k) is not None and _relevant(k, algorithm)},
    })
  return rows


def _pct(v) -> str:
  return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}"


def best_per_algorithm(rows) -> dict[str, dict]:
  best = {}
  for r in rows:
    if r["value"] is None:
      continue
    if r["algorithm"] not in best or r["value"] > best[r["algorithm"]]["value"]:
      best[r["algorithm"]] = r
  return best


def render(rows) -> tuple[str, str]:
  """(markdown, csv) of the trials, grouped by algorithm, best first within each."""
  best = best_per_algorithm(rows)
  rows = sorted(rows, key=lambda r: (r["algorithm"], -(r["value"] if r["value"] is not None
                                                      else -math.inf)))
  metric = rows[0]["metric"] if rows else "metric"
  last_n = rows[0]["last_n"] if rows else 0
  md = [f"| algorithm | trial | hyperparameters | status | rounds | split | {metric} last "
        f"{last_n} (%) (std over rounds) | accuracy last {last_n} (%) | best |",
        "|---|---|---|---|---|---|---|---|---|"]
  out = io.StringIO()
  writer = csv.writer(out)
  writer.writerow(["algorithm", "trial", "hyperparameters", "status", "rounds", "split",
                   f"{metric}_last_{last_n}", "std", f"accuracy_last_{last_n}", "best"])
  for r in rows:
    hp = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in r["hparams"].items())
    is_best = best.get(r["algorithm"]) is r
    std = f" ({_pct(r['std'])})" if r["std"] is not None else ""
    md.append(f"| {r['algorithm']} | {r['trial']} | {hp} | {r['status']} | {r['rounds']} | "
              f"{r['split']} | {_pct(r['value'])}{std} | {_pct(r['accuracy'])} | "
              f"{'**best**' if is_best else ''} |")
    writer.writerow([r["algorithm"], r["trial"], hp, r["status"], r["rounds"], r["split"],
                     r["value"], r["std"], r["accuracy"], int(is_best)])
  return "\n".join(md) + "\n", out.getvalue()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("roots", nargs="+", help="directories of trials (compare.py workdirs)")
  parser.add_argument("--keys", default=",".join(DEFAULT_KEYS),
                      help="config fields to show (those a trial has)")
  parser.add_argument("--out", default="", help="write table.md, table.csv, best.json here")
  args = parser.parse_args(argv)
  keys = [k.strip() for k in args.keys.split(",") if k.strip()]
  rows = [r for root in args.roots for r in read_trials(root, keys)]
  if not rows:
    sys.exit(f"no trials (<root>/<trial>/<algorithm>/seed_*/summary.json) under {args.roots}")
  md, table_csv = render(rows)
  print(md)
  if args.out:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
      f.write(md)
    with open(os.path.join(args.out, "table.csv"), "w") as f:
      f.write(table_csv)
    best = {a: {"trial": r["trial"], **r["hparams"]}
            for a, r in sorted(best_per_algorithm(rows).items())}
    with open(os.path.join(args.out, "best.json"), "w") as f:
      json.dump(best, f, indent=2)
      f.write("\n")


if __name__ == "__main__":
  main()
