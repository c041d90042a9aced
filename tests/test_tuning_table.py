"""experiments/tuning_table.py: reads compare.py's trial directories, picks each algorithm's best
completed trial (a diverged one never wins) and writes the table and best.json."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import tuning_table  # pylint: disable=g-import-not-at-top,wrong-import-position


def _trial(root, trial, algorithm, lr, status, values, accuracies, seed_dir=True):
  run = root / trial / algorithm / ("seed_0" if seed_dir else "")
  run.mkdir(parents=True)
  done = status == "completed"
  (run / "config.json").write_text(json.dumps(
      {"minimax": {"lr_x": lr, "lr_y": 0.01}, "algorithm": {"name": algorithm,
                                                            "fess_gda": {"p": 0.1}}}))
  (run / "summary.json").write_text(json.dumps(
      {"algorithm": algorithm, "metric": "worst_class_accuracy", "last_n": 2, "seed": 0,
       "status": status, "completed_rounds": 3 if done else 1, "configured_rounds": 3,
       "eval_split": "validation",
       "mean_worst_class_accuracy_last_2":
           sum([v for v in values if v is not None][-2:]) / 2 if done else None}))
  (run / "metrics.jsonl").write_text("".join(
      json.dumps({"round": i, "worst_class_accuracy": v, "test_accuracy": a}) + "\n"
      for i, (v, a) in enumerate(zip(values, accuracies))))


def test_best_trial_per_algorithm_and_files(tmp_path):
  runs = tmp_path / "runs"
  _trial(runs, "a", "local_sgda", 0.05, "completed", [0.1, 0.4, 0.6], [0.5, 0.7, 0.9])
  _trial(runs, "b", "local_sgda", 0.1, "diverged", [0.9], [0.9])
  _trial(runs, "c", "local_sgda", 0.025, "completed", [0.2, 0.3, 0.5], [0.6, 0.6, 0.8],
         seed_dir=False)
  _trial(runs, "d", "fess_gda", 0.05, "completed", [0.3, 0.3, 0.3], [0.8, 0.8, 0.8])
  out = tmp_path / "out"
  tuning_table.main([str(runs), f"--out={out}"])
  best = json.loads((out / "best.json").read_text())
  # a: (0.4 + 0.6) / 2 = 0.5 beats c: 0.4; b diverged (0.9 never counts).
  assert best["local_sgda"] == {"trial": "a", "minimax.lr_x": 0.05, "minimax.lr_y": 0.01}
  assert best["fess_gda"]["trial"] == "d" and best["fess_gda"]["algorithm.fess_gda.p"] == 0.1
  table = (out / "table.md").read_text()
  row_a = next(line for line in table.splitlines() if "| a |" in line)
  assert "50.00" in row_a and "80.00" in row_a and "**best**" in row_a  # accuracy (0.7+0.9)/2
  row_b = next(line for line in table.splitlines() if "| b |" in line)
  assert "diverged" in row_b and "**best**" not in row_b and "1/3" in row_b
  assert "p=" not in row_a   # algorithm.fess_gda.* shown for fess_gda only


def test_rounds_between_evaluations_are_not_averaged(tmp_path):
  # eval.every=2: the rounds between evaluations write the metrics as explicit nulls.
  runs = tmp_path / "runs"
  _trial(runs, "a", "local_sgda", 0.05, "completed", [0.1, None, 0.6, None, 0.4],
         [0.5, None, 0.9, None, 0.7])
  out = tmp_path / "out"
  tuning_table.main([str(runs), f"--out={out}"])
  row = next(line for line in (out / "table.md").read_text().splitlines() if "| a |" in line)
  assert "80.00" in row     # test accuracy over the last 2 evaluated rounds: (0.9 + 0.7) / 2
