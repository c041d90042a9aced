r"""Compare algorithms (and seeds) on one config; print and save a paper-style table.

    python experiments/compare.py --config=configs/fedgmt_fmnist_hetero.py \
        --algorithms=fedavg,feddyn,fedgmt --seeds=0,1,2 --workdir=runs/compare
    # the FedGMT paper's ablation (Table 3): full, no ADMM, no trajectory loss
    python experiments/compare.py --config=configs/fedgmt_fmnist_hetero.py \
        --algorithms='fedgmt,fedgmt[admm=False],fedgmt[gamma=0]' --workdir=runs/ablation

Writes, under --workdir: one run directory per (algorithm, seed) with config.json,
metrics.jsonl and summary.json; results.md and results.csv (mean and std of test accuracy over
the last `eval.last_n` rounds, final accuracy, rounds to `eval.target_accuracy`, communication,
time per round); accuracy.png (test accuracy vs round); geometry.md and geometry.csv when the
runs' final models were analysed (experiments/hessian.py, experiments/landscape.py): lambda_max,
Hessian trace, SAM sharpness, global vs local sharpness, client percentiles, over seeds.
"""
from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file.",
                                          lock_config=True)
_ALGORITHMS = flags.DEFINE_string(
    "algorithms", "fedavg,fedgmt",
    "Comma-separated algorithms; a variant overrides its hyperparameter block, e.g. "
    "'fedgmt,fedgmt[admm=False],fedgmt[gamma=0]' (the paper's Table 3 ablation).")
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Seeds (each algorithm runs with each seed).")
_WORKDIR = flags.DEFINE_string("workdir", "runs/compare", "Output directory.")
_HESSIAN = flags.DEFINE_integer(
    "hessian_k", 0, "> 0: the top-k Hessian eigenvalues of every run's final model on the test "
    "set (power iteration, --hessian_iters), stored in its hessian.json; the table gets a "
    "lambda_max column.")
_HESSIAN_ITERS = flags.DEFINE_integer("hessian_iters", 20, "Power iterations per eigenvalue.")
_HESSIAN_EXAMPLES = flags.DEFINE_integer(
    "hessian_examples", 0, "Test examples for the Hessian (0 = the whole test set; each "
    "power iteration is a Hessian-vector product over them).")
_REUSE = flags.DEFINE_bool(
    "reuse", True, "Read finished runs of the same setting under --workdir instead of running "
    "them again (the default: an interrupted grid continues; a finished run of another setting "
    "is an error). Kept for old command lines; --overwrite retrains.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Retrain every (algorithm, seed) from round 0, replacing the finished "
    "runs under --workdir (without it, finished runs of the same setting are reused).")


_SWEEP = flags.DEFINE_bool(
    "sweep", False, "Run the runs that differ only in seed, learning rate and the algorithm's "
    "sweepable hyperparameters (every seed of a variant; variants such as "
    "'fedavg[local.lr=0.05]', 'fedgmt[alpha=0.5]', 'fedsam[rho=0.1]'; the list: "
    "algorithms.registry.SWEEPABLE) as one compiled program, vmapped over the experiments "
    "(needs --config.engine.client_strategy=vmap or another single-jit one).")


_REPORT_ONLY = flags.DEFINE_bool(
    "report_only", False, "Start no run: tabulate the finished runs of the same setting under "
    "--workdir (a partial grid, or one still running elsewhere); missing ones are listed.")


def main(argv):
  del argv
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax import tasks
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  from fedjax_sharp.training import compare
  from fedjax_sharp.training.config import is_minimax

  config = _CONFIG.value
  if config is None:
    raise app.UsageError("--config is required, e.g. --config=configs/demo.py")
  from fedjax_sharp.training import cli
  algorithms = compare.parse_algorithms(_ALGORITHMS.value)
  compare.check_algorithms(algorithms, MINIMAX_ALGORITHMS if is_minimax(config) else ALGORITHMS)
  cli.refuse_unused_overrides(_CONFIG, [compare.configure_variant(config, a, 0)
                                        for a in algorithms], grid=True)
  results = compare.run_grid(config, algorithms, [int(s) for s in _SEEDS.value],
                             _WORKDIR.value, reuse=_REUSE.value, overwrite=_OVERWRITE.value,
                             report_only=_REPORT_ONLY.value, sweep=_SWEEP.value,
                             hessian=({"k": _HESSIAN.value, "iters": _HESSIAN_ITERS.value,
                                       "max_examples": _HESSIAN_EXAMPLES.value}
                                      if _HESSIAN.value > 0 else None))
  print(compare.reuse_note(results, _WORKDIR.value) or "", end="")
  markdown = compare.write_reports(results, _WORKDIR.value, config.eval.last_n,
                                   config.eval.target_accuracy, title=config.name)
  where = (f"task {config.task.name}" if config.task.name in tasks.TOY_PROBLEMS else
           f"{config.data.name}, {config.data.partition}, {config.data.num_clients} clients")
  print(f"\n{config.name}: {where}, {config.clients_per_round} per round, "
        f"{config.rounds} rounds\n")
  print(markdown)
  print(f"Written: {_WORKDIR.value}/results.md, results.csv, accuracy.png")


if __name__ == "__main__":
  logging.set_verbosity(logging.INFO)
  from fedjax_sharp.training import cli as _cli
  app.run(_cli.guarded(main), flags_parser=_cli.flags_parser)
