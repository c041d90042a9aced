"""The tables and plots of a grid of runs (`compare.run_grid`'s results: {algorithm: [per-seed
result dicts with 'records', 'summary', 'hessian', 'analysis', 'run_dir']}; hand-made ones may
leave out what RUN_DEFAULTS lists), like the papers':
per algorithm, the metric over the last N rounds (mean and std over seeds; with one seed, the std
over those N rounds, as in the FedGMT tables), the final value, rounds to a target, communication
per round and to the target, time per round; the geometry of the final models; the curves.
"""
from __future__ import annotations

import csv
import io
import os

import numpy as np

from fedjax_sharp import fileio
from fedjax_sharp.training import metrics as metrics_lib

COLUMNS = ("algorithm", "seeds", "metric", "acc_last_n_mean", "acc_last_n_std", "final_acc",
           "rounds_to_target", "vectors_per_round", "mb_to_target", "s_per_round",
           "relative_time", "lambda_max_mean", "lambda_max_std", "test_acc_last_n_mean",
           "test_acc_last_n_std", "last_n_used", "dp_epsilon", "dp_accounting")


LOG_SCALE_METRICS = ("distance_to_saddle", "phi_gap", "grad_phi_norm", "abs_x")


# The entries of a run that hand-made results may leave out, and what their absence means: no
# final-model Hessian (hessian.json), no analysis.json, no run directory (so no landscape.npz),
# not read back from an earlier run. `compare.run_grid` writes them all.
RUN_DEFAULTS = {"hessian": None, "analysis": None, "run_dir": None, "reused": False}


def normalise_run(run: dict) -> dict:
  """A copy of `run` with every entry of RUN_DEFAULTS and a summary with every key of
  `metrics.SUMMARY_DEFAULTS` (summaries of older versions lack some), so that the tables and
  plots index them directly."""
  return {**RUN_DEFAULTS, **run, "summary": metrics_lib.summary_with_defaults(run["summary"])}


def _normalised(results: dict[str, list[dict]]) -> dict[str, list[dict]]:
  """`normalise_run` of every run: where results enter the tables and plots."""
  return {name: [normalise_run(run) for run in runs] for name, runs in results.items()}


def _metric(runs) -> tuple[str, bool]:
  summary = runs[0]["summary"]
  return summary["metric"], summary["higher_is_better"]


def _rounds_to_target(records, target, metric="test_accuracy", higher_is_better=True):
  for r in metrics_lib.evaluated(records, metric):
    if r[metric] >= target if higher_is_better else r[metric] <= target:
      return r["round"] + 1, r["bytes_total"]
  return None, None


def _accounting_label(runs) -> str | None:
  """'delta 1e-05, pld_poisson, poisson sampling' for DP runs: what epsilon is relative to
  (None without DP; the first seed's, every seed of a setting shares it)."""
  dp = runs[0]["summary"].get("dp")
  if not dp:
    return None
  return (f"delta {dp['delta']:g}, {dp['accountant']}, {dp.get('sampling', 'fixed')} sampling"
          + (f", simulates {dp['simulates']}" if dp.get("simulates") else ""))


def table_rows(results: dict[str, list[dict]], last_n: int, target: float) -> list[dict]:
  rows = []
  base_time = None
  for name, runs in _normalised(results).items():
    metric, higher = _metric(runs)
    tails = [np.array([r[metric] for r in metrics_lib.evaluated(run["records"], metric)]
                      [-last_n:]) for run in runs]
    means = np.array([t.mean() for t in tails])
    std = float(means.std()) if len(runs) > 1 else float(tails[0].std())
    used = min(len(t) for t in tails)   # fewer than last_n when fewer rounds were evaluated
    hits = ([_rounds_to_target(run["records"], target, metric, higher) for run in runs]
            if target > 0 else [])
    reached = [h for h in hits if h[0] is not None]
    s_per_round = float(np.mean([np.median([r["round_time_s"] for r in run["records"][1:]]
                                           or [run["records"][0]["round_time_s"]])
                                 for run in runs]))
    base_time = base_time or s_per_round
    comm = runs[0]["summary"]["communication"]
    lams = [run["hessian"]["lambda_max"] for run in runs if run["hessian"]]
    lam_ok = lams and len(lams) == len(runs)
    # A task whose headline metric is not the test accuracy (fair classification's worst
    # class) still reports the mean test accuracy over the same rounds when it records one.
    secondary = None
    if metric != "test_accuracy" and all(metrics_lib.evaluated(run["records"], "test_accuracy")
                                         for run in runs):
      secondary = [np.mean([r["test_accuracy"] for r in
                            metrics_lib.evaluated(run["records"], "test_accuracy")][-last_n:])
                   for run in runs]
    # Differential privacy: epsilon(delta) spent (the seeds' mean; the same for every seed of
    # one setting). None without DP; inf when a seed's is unbounded (no noise: None in its
    # summary) or, in a mix, a seed had no DP at all.
    epsilons = [run["summary"]["dp_epsilon"] for run in runs if "dp_epsilon" in run["summary"]]
    bounded = len(epsilons) == len(runs) and None not in epsilons
    rows.append({
        "algorithm": name, "seeds": len(runs), "metric": metric,
        "dp_epsilon": (float(np.mean(epsilons)) if bounded else "inf" if epsilons else None),
        "dp_accounting": _accounting_label(runs),
        "test_acc_last_n_mean": float(np.mean(secondary)) if secondary else None,
        "test_acc_last_n_std": float(np.std(secondary)) if secondary else None,
        "acc_last_n_mean": float(means.mean()), "acc_last_n_std": std, "last_n_used": used,
        "final_acc": float(np.mean([run["summary"][f"final_{metric}"] for run in runs])),
        "rounds_to_target": (float(np.mean([h[0] for h in reached]))
                             if reached and len(reached) == len(hits) else None),
        "vectors_per_round": f"{comm['down']:g} down / {comm['up']:g} up",
        "mb_to_target": (float(np.mean([h[1] for h in reached])) / 1e6
                         if reached and len(reached) == len(hits) else None),
        "s_per_round": s_per_round,
        "relative_time": s_per_round / base_time,
        "lambda_max_mean": float(np.mean(lams)) if lam_ok else None,
        # A spread over seeds needs two of them: one seed shows its value alone.
        "lambda_max_std": float(np.std(lams)) if lam_ok and len(lams) > 1 else None,
    })
  return rows


# The final-model analyses of the geometry table, by where they are stored: the RUN/analysis.json
# entry (or 'hessian' for the final model's hessian.json), its keys, which name the columns, and
# whether they are accuracies in percent. Written by experiments/hessian.py and
# experiments/landscape.py --sharpness --clients --global_local.
_GEOMETRY_ENTRIES = (
    ("hessian", ("lambda_max",), False),
    ("final_sharpness", ("hessian_trace", "sam_sharpness"), False),
    ("final_global_local", ("global_on_global", "global_on_client_mean", "local_on_client_mean",
                            "local_on_global_mean"), False),
    ("final_clients", ("client_acc_p10", "client_acc_p50", "client_acc_p90", "client_acc_worst",
                       "participation_gap"), True),
)

# The geometry table's columns in order: (entry, key, percent?) of each.
GEOMETRY = tuple((entry, column, percent) for entry, columns, percent in _GEOMETRY_ENTRIES
                 for column in columns)


GEOMETRY_LEGEND = (
    "Mean (std over seeds) of each run's final-model analysis; the value alone where one seed "
    "has it; [n]: only n of the seeds have it; x: no run has it (participation_gap is empty "
    "when every client was sampled at least once); client accuracies in percent.")


def _geometry_values(run: dict) -> dict[str, float]:
  """{column: value} of the GEOMETRY analyses `run` has: its hessian.json 'final' entry and its
  analysis.json entries are each optional, and a value may be None (a participation gap with
  every client sampled)."""
  wanted = {(entry, column) for entry, column, _ in GEOMETRY}
  stored = {**(run["analysis"] or {}), "hessian": run["hessian"] or {}}
  return {column: float(value) for entry, values in stored.items() if isinstance(values, dict)
          for column, value in values.items()
          if (entry, column) in wanted and value is not None}


def geometry_rows(results: dict[str, list[dict]]) -> list[dict]:
  """Per algorithm, the mean and std over seeds of every final-model analysis (GEOMETRY) and
  how many seeds have it: {'algorithm', 'seeds', '<column>_mean', '<column>_std',
  '<column>_n'}. Algorithms none of whose runs was analysed are left out."""
  rows = []
  for name, runs in _normalised(results).items():
    row = {"algorithm": name, "seeds": len(runs)}
    per_run = [_geometry_values(run) for run in runs]
    for _, column, _ in GEOMETRY:
      values = [found[column] for found in per_run if column in found]
      row[f"{column}_mean"] = float(np.mean(values)) if values else None
      row[f"{column}_std"] = float(np.std(values)) if len(values) > 1 else None
      row[f"{column}_n"] = len(values)
    if any(row[f"{c}_n"] for _, c, _ in GEOMETRY):
      rows.append(row)
  return rows


def geometry_markdown(rows: list[dict]) -> str:
  """The geometry table: mean (std over seeds) per cell, the value alone where one seed has
  it, '[n]' where fewer seeds than the algorithm's runs have that analysis, 'x' where none has;
  accuracies in percent; GEOMETRY_LEGEND after the table says so."""
  head = "| algorithm | seeds | " + " | ".join(c for _, c, _ in GEOMETRY) + " |"
  lines = [head, "|" + "---|" * (2 + len(GEOMETRY))]
  for r in rows:
    cells = []
    for _, column, pct in GEOMETRY:
      if not r[f"{column}_n"]:
        cells.append("x")
        continue
      cell = _fmt(r[f"{column}_mean"], pct) + _spread(r[f"{column}_std"], pct)
      cells.append(cell + (f" [{r[f'{column}_n']}]" if r[f"{column}_n"] < r["seeds"] else ""))
    lines.append(f"| {r['algorithm']} | {r['seeds']} | " + " | ".join(cells) + " |")
  return "\n".join(lines + ["", GEOMETRY_LEGEND]) + "\n"


def plot_landscapes(results: dict[str, list[dict]], path: str, title: str = "") -> bool:
  """landscapes.png: per algorithm, the 2D landscape of its first run that has one
  (RUN/landscape.npz from experiments/landscape.py) on one shared colour scale, and their
  centre slices overlaid (`analysis.landscape.save_surfaces`). False (nothing drawn) if none."""
  from fedjax_sharp.analysis import landscape  # pylint: disable=g-import-not-at-top
  surfaces = {}
  for name, runs in _normalised(results).items():
    for run in runs:
      run_dir = run["run_dir"]   # hand-made results have none
      npz = os.path.join(run_dir or "", "landscape.npz")
      if run_dir and os.path.exists(npz):
        seed = run["summary"]["seed"]
        with np.load(npz) as f:
          surfaces[name if seed is None else f"{name}, seed {seed}"] = {k: f[k] for k in f.files}
        break
  if not surfaces:
    return False
  landscape.save_surfaces(surfaces, path, title)
  return True


def geometry_csv(rows: list[dict]) -> str:
  buf = io.StringIO()
  fields = ["algorithm", "seeds"] + [f"{c}_{s}" for _, c, _ in GEOMETRY
                                     for s in ("mean", "std", "n")]
  writer = csv.DictWriter(buf, fieldnames=fields)
  writer.writeheader()
  writer.writerows(rows)
  return buf.getvalue()


def _spread(std, pct=False, fmt=None) -> str:
  """' (std)' after a mean over seeds; nothing for one seed (no spread to show)."""
  if std is None:
    return ""
  return f" ({_fmt(std, pct) if fmt is None else format(std, fmt)})"


def _fmt(v, pct=False):
  if v is None:
    return "x"
  if isinstance(v, float):
    return f"{100 * v:.2f}" if pct else f"{v:.3g}"
  return str(v)


def _last_n_and_std_label(rows: list[dict], last_n: int) -> tuple[str, str]:
  """('last 20', 'mean (std over seeds)')-style header parts: the number of rounds actually
  averaged (fewer than `last_n` when fewer were evaluated) and what the spread is taken over
  (seeds, or the rounds of the one seed)."""
  used = [r["last_n_used"] for r in rows] or [last_n]
  n = max(used)
  last = f"last {n}" if min(used) == n else f"last {min(used)}-{n}"
  over = {"seeds" if r["seeds"] > 1 else "rounds" for r in rows}   # as table_rows takes std
  label = ("std over seeds" if over == {"seeds"} else
           f"std over the {last} rounds of one seed" if over == {"rounds"} else
           "std over seeds; over rounds where seeds = 1")
  return last, f"mean ({label})"


def to_markdown(rows: list[dict], last_n: int, target: float) -> str:
  """The paper-style table; the rounds-to-target columns only when a target is set."""
  with_hessian = any(r["lambda_max_mean"] is not None for r in rows)
  with_target = bool(target)
  metric = rows[0]["metric"] if rows else "test_accuracy"
  pct = metric.endswith("accuracy")
  label = "acc" if metric == "test_accuracy" else metric
  unit = " (%)" if pct else ""
  target_s = f"{100 * target:.0f}%" if pct else f"{target:g}"
  with_acc = any(r["test_acc_last_n_mean"] is not None for r in rows)
  with_dp = any(r["dp_epsilon"] is not None for r in rows)
  last, spread = _last_n_and_std_label(rows, last_n)
  head = (f"| algorithm | seeds | {label} {last}{unit}, {spread} | final {label}{unit} |"
          + (f" acc {last} (%) |" if with_acc else "")
          + (f" rounds to {target_s} |" if with_target else "")
          + " model vectors / client / round |" + (" MB to target |" if with_target else "")
          + " s / round | time vs first |" + (" lambda_max |" if with_hessian else "")
          + (" DP epsilon |" if with_dp else ""))
  lines = [head, "|" + "---|" * (7 + 2 * with_target + with_hessian + with_acc + with_dp)]
  for r in rows:
    lam = ""
    if with_hessian:
      lam = (" x |" if r["lambda_max_mean"] is None else
             f" {r['lambda_max_mean']:.3g}{_spread(r['lambda_max_std'], fmt='.2g')} |")
    lines.append(
        f"| {r['algorithm']} | {r['seeds']} | {_fmt(r['acc_last_n_mean'], pct)} "
        f"({_fmt(r['acc_last_n_std'], pct)}) | {_fmt(r['final_acc'], pct)} |"
        + (f" {_fmt(r['test_acc_last_n_mean'], True)} "
           f"({_fmt(r['test_acc_last_n_std'], True)}) |" if with_acc else "")
        + (f" {_fmt(r['rounds_to_target'])} |" if with_target else "")
        + f" {r['vectors_per_round']} |" + (f" {_fmt(r['mb_to_target'])} |" if with_target else "")
        + f" {_fmt(r['s_per_round'])} | {r['relative_time']:.2f}x |" + lam
        + (f" {_fmt(r['dp_epsilon'])}"
           + (f" ({r['dp_accounting']})" if r.get("dp_accounting") else "") + " |"
           if with_dp else ""))
  return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=COLUMNS)
  writer.writeheader()
  writer.writerows(rows)
  return buf.getvalue()


def plot_accuracy(results: dict[str, list[dict]], path: str, title: str = "") -> None:
  """The primary metric (test accuracy, worst-class accuracy, distance to the saddle, ...)
  against the round; mean over seeds with a min-max band; log scale for distances."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(7, 4.5))
  metric = "test_accuracy"
  for name, runs in _normalised(results).items():
    metric, _ = _metric(runs)
    curves = []
    for run in runs:
      pts = [(r["round"] + 1, r[metric]) for r in metrics_lib.evaluated(run["records"], metric)]
      curves.append(np.array(pts))
    length = min(len(c) for c in curves)
    xs = curves[0][:length, 0]
    ys = np.stack([c[:length, 1] for c in curves])
    line, = ax.plot(xs, ys.mean(0), label=f"{name} ({len(runs)} seed{'s' * (len(runs) > 1)})")
    if len(runs) > 1:
      ax.fill_between(xs, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.2)
  _save_plot(fig, ax, path, "round", metric, title, log=metric in LOG_SCALE_METRICS)


def _save_plot(fig, ax, path: str, xlabel: str, ylabel: str, title: str, log: bool = False):
  """Axis labels, grid and legend, then an atomic PNG write (temporary file + rename)."""
  import matplotlib.pyplot as plt
  if log:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel.replace("_", " "))
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fileio.atomic_savefig(fig, path, dpi=120)
  plt.close(fig)


def to_latex(rows: list[dict], last_n: int) -> str:
  """A booktabs table: metric over the last N rounds as mean $\\pm$ std (over seeds), the
  final value, and lambda_max when measured; the best mean in bold."""
  if not rows:
    return ""
  metric = rows[0]["metric"]
  pct = metric.endswith("accuracy")
  higher = metric not in LOG_SCALE_METRICS and metric != "frechet_distance"
  with_lam = any(r["lambda_max_mean"] is not None for r in rows)
  best = (max if higher else min)(r["acc_last_n_mean"] for r in rows)
  scale = 100.0 if pct else 1.0
  label = metric.replace("_", " ") + (" (\\%)" if pct else "")
  with_dp = any(r["dp_epsilon"] is not None for r in rows)
  cols = "l" + "r" * (3 + with_lam + with_dp)
  lines = [f"\\begin{{tabular}}{{{cols}}}", "\\toprule",
           f"algorithm & seeds & {label}, {_last_n_and_std_label(rows, last_n)[0]} & final"
           + (" & $\\lambda_{\\max}$" if with_lam else "")
           + (" & $\\varepsilon$" if with_dp else "") + " \\\\", "\\midrule"]
  for r in rows:
    mean = f"{scale * r['acc_last_n_mean']:.2f}"
    if r["acc_last_n_mean"] == best:
      mean = f"\\textbf{{{mean}}}"
    cell = f"{mean} $\\pm$ {scale * r['acc_last_n_std']:.2f}"
    lam = ""
    if with_lam:
      lam = (" & --" if r["lambda_max_mean"] is None
             else f" & {r['lambda_max_mean']:.3g}" + (
                 "" if r["lambda_max_std"] is None else f" $\\pm$ {r['lambda_max_std']:.2g}"))
    name = r["algorithm"].replace("_", "\\_")
    eps = f" & {_fmt(r['dp_epsilon'])}" if with_dp else ""
    lines.append(f"{name} & {r['seeds']} & {cell} & {scale * r['final_acc']:.2f}{lam}{eps} \\\\")
  lines += ["\\bottomrule", "\\end{tabular}"]
  return "\n".join(lines) + "\n"


def plot_vs_bytes(results: dict[str, list[dict]], path: str, title: str = "") -> None:
  """The primary metric against the megabytes communicated so far (mean over seeds)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.5))
  metric = "test_accuracy"
  for name, runs in _normalised(results).items():
    metric, _ = _metric(runs)
    curves = [np.array([(r["bytes_total"] / 1e6, r[metric])
                        for r in metrics_lib.evaluated(run["records"], metric)]) for run in runs]
    length = min(len(c) for c in curves)
    if not length:
      continue
    xs = np.mean([c[:length, 0] for c in curves], axis=0)
    ax.plot(xs, np.mean([c[:length, 1] for c in curves], axis=0),
            label=f"{name} ({len(runs)} seed{'s' * (len(runs) > 1)})")
  _save_plot(fig, ax, path, "MB communicated (down + up, all clients)", metric, title,
             log=metric in LOG_SCALE_METRICS)


def plot_series(results: dict[str, list[dict]], key: str, path: str, title: str = "") -> bool:
  """`key` (e.g. 'lambda_max', logged with eval.hessian_every or config.analysis) against the
  round, mean over seeds with a min-max band. False (no file) when no run logged it."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.5))
  drawn = False
  for name, runs in results.items():
    curves = [np.array([(r["round"] + 1, r[key])
                        for r in metrics_lib.evaluated(run["records"], key)]) for run in runs]
    curves = [c for c in curves if len(c)]     # the seeds that logged it
    if not curves:
      continue
    length = min(len(c) for c in curves)
    ys = np.stack([c[:length, 1] for c in curves])
    line, = ax.plot(curves[0][:length, 0], ys.mean(0), marker=".",
                    label=f"{name} ({len(curves)} seed{'s' * (len(curves) > 1)})")
    if len(curves) > 1:
      ax.fill_between(curves[0][:length, 0], ys.min(0), ys.max(0), color=line.get_color(),
                      alpha=0.2)
    drawn = True
  if drawn:
    _save_plot(fig, ax, path, "round", key, title)
  else:
    plt.close(fig)
  return drawn


def plot_privacy(results: dict[str, list[dict]], path: str, title: str = "") -> bool:
  """privacy.png for DP runs: epsilon(delta) against the round, and the test metric against
  epsilon (each evaluated round a point), mean over seeds. False (no file) without DP."""
  if not any(r.get("dp_epsilon") is not None for runs in results.values() for run in runs
             for r in run["records"]):
    return False
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  metric, _ = _metric(next(iter(results.values()), []))
  fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
  drawn = False
  for name, runs in results.items():
    curves = [[(r["round"] + 1, r["dp_epsilon"], r.get(metric)) for r in run["records"]
               if r.get("dp_epsilon") is not None] for run in runs]
    if not all(curves):
      continue
    length = min(len(c) for c in curves)
    arr = np.array([[c[i][:2] for i in range(length)] for c in curves], float)
    label = f"{name} ({len(runs)} seed{'s' * (len(runs) > 1)})"
    line, = left.plot(arr[0, :, 0], arr[:, :, 1].mean(0), label=label)
    points = [[(eps, acc) for _, eps, acc in c[:length] if acc is not None] for c in curves]
    length = min(len(p) for p in points)
    if length:
      pts = np.array([p[:length] for p in points], float).mean(0)
      right.plot(pts[:, 0], pts[:, 1], marker=".", color=line.get_color(), label=label)
    drawn = True
  if not drawn:
    plt.close(fig)
    return False
  left.set_xlabel("round")
  left.set_ylabel("epsilon (delta as in the table)")
  right.set_xlabel("epsilon")
  right.set_ylabel(metric)
  for ax in (left, right):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def write_reports(results, workdir: str, last_n: int, target: float, title: str = "") -> str:
  """results.md, results.csv, results.tex, accuracy.png (metric vs round, band over seeds),
  accuracy_vs_bytes.png (metric vs MB communicated), lambda_max.png (when logged),
  privacy.png (epsilon vs round, metric vs epsilon: `plot_privacy`) for DP runs, and
  geometry.md / geometry.csv (`geometry_rows`) when any run's final model was analysed, and
  landscapes.png (`plot_landscapes`) when any run has a landscape."""
  rows = table_rows(results, last_n, target)
  markdown = to_markdown(rows, last_n, target)
  os.makedirs(workdir, exist_ok=True)
  metrics_lib.atomic_write_text(os.path.join(workdir, "results.md"), markdown)
  metrics_lib.atomic_write_text(os.path.join(workdir, "results.csv"), to_csv(rows))
  metrics_lib.atomic_write_text(os.path.join(workdir, "results.tex"), to_latex(rows, last_n))
  plot_accuracy(results, os.path.join(workdir, "accuracy.png"), title)
  plot_vs_bytes(results, os.path.join(workdir, "accuracy_vs_bytes.png"), title)
  plot_series(results, "lambda_max", os.path.join(workdir, "lambda_max.png"), title)
  plot_privacy(results, os.path.join(workdir, "privacy.png"), title)
  geometry = geometry_rows(results)
  if geometry:
    metrics_lib.atomic_write_text(os.path.join(workdir, "geometry.md"),
                                  geometry_markdown(geometry))
    metrics_lib.atomic_write_text(os.path.join(workdir, "geometry.csv"), geometry_csv(geometry))
  plot_landscapes(results, os.path.join(workdir, "landscapes.png"), title)
  return markdown
