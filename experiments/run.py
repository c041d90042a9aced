r"""Runs one federated experiment from an ml_collections config.

    python experiments/run.py --config=configs/fashion_mnist_cnn.py --workdir=runs/fmnist \
        --config.algorithm.name=fedavg --config.rounds=50
    python experiments/run.py --config=configs/demo.py --print_config   # every field, commented
    python experiments/run.py --config=configs/demo.py --list_fields=algorithm.fedgmt  # docs
    python experiments/run.py --config=configs/demo.py --save_partition=/tmp/part.json  # and exit

Writes `<workdir>/config.json` (the resolved config), `<workdir>/metrics.jsonl` (one line per
round: train loss, test loss/accuracy, wall time, bytes communicated) and `<workdir>/summary.json`
(status, mean/std of the metric over the last `eval.last_n` rounds, rounds to target, ...), and
prints the summary. Rerunning the same command resumes from the newest checkpoint
(`--config.checkpoint_every=K`); a workdir holding another setting's results is refused.
Exit codes: 0 done, 1 failed, 2 bad input, 3 diverged, 130/143 interrupted (SIGINT/SIGTERM).
"""
from __future__ import annotations

import json

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file (configs/*.py).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where to write config, metrics and summary.")
_PRINT_PARTITION = flags.DEFINE_bool("print_partition", False,
                                     "Print per-client label histograms and exit.")
_SAVE_PARTITION = flags.DEFINE_string(
    "save_partition", None,
    "Write the run's client partition to this .json or .npz file (format: README, "
    "fedjax_sharp/data/partition_files.py) and exit; load it back with "
    "--config.data.partition=file --config.data.partition_path=PATH.")
_PRINT_CONFIG = flags.DEFINE_bool("print_config", False,
                                  "Print the resolved config, one commented field a line, and exit.")
_LIST_FIELDS = flags.DEFINE_string(
    "list_fields", None, "List the config's fields under this prefix ('' or 'all': every "
    "field; e.g. 'algorithm.fedgmt', 'engine') with their values and docs, and exit.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator", "", "Multi-process (multi-host) runs: process 0's HOST:PORT "
    "(jax.distributed; fedjax_sharp/core/distributed.py). Every process runs the same command "
    "with its own --process_id; process 0 writes --workdir.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 1, "Processes of a multi-process run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", 0, "This process's index in [0, num_processes).")


def main(argv):
  del argv
  from fedjax_sharp.core import distributed
  # Before anything touches a JAX device: the mesh then spans every process's devices.
  distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  from fedjax_sharp import data as data_lib
  from fedjax_sharp.errors import DivergedError
  from fedjax_sharp.training import cli, loop

  config = _CONFIG.value
  if config is None:
    raise app.UsageError("--config is required, e.g. --config=configs/demo.py")
  if _PRINT_CONFIG.value:
    print(cli.format_config(config), end="")
    return
  if _LIST_FIELDS.value is not None:
    prefix = "" if _LIST_FIELDS.value in ("", "all") else _LIST_FIELDS.value
    listing = cli.format_fields(config, prefix)
    if not listing:
      raise app.UsageError(f"--list_fields={_LIST_FIELDS.value!r}: no config field starts with "
                           f"it (e.g. 'algorithm.{config.algorithm.name}', 'engine', 'data')")
    print(listing, end="")
    return
  cli.refuse_unused_overrides(_CONFIG, [config])   # a block the run does not use: one line
  if _PRINT_PARTITION.value or _SAVE_PARTITION.value:
    dataset = data_lib.load_dataset(config.data)
    parts = data_lib.partition_dataset(dataset, config.data, seed=config.seed)
    if _PRINT_PARTITION.value:
      hist = data_lib.label_histograms(dataset.y_train, parts, dataset.num_classes)
      print(data_lib.format_histograms(hist))
    if _SAVE_PARTITION.value:
      meta = {"data": config.data.to_dict(), "seed": config.seed}
      data_lib.save_partition(_SAVE_PARTITION.value, parts, meta,
                              num_examples=len(dataset.y_train),
                              client_ids=data_lib.natural_client_ids(dataset, config.data,
                                                                     config.seed))
      print(f"wrote {len(parts)} clients ({sum(len(p) for p in parts)} examples) to "
            f"{_SAVE_PARTITION.value}")
    return
  if not _WORKDIR.value:
    logging.warning("no --workdir: nothing will be saved (metrics are only printed)")
  try:
    summary = loop.run(config, _WORKDIR.value)
  except DivergedError as e:   # what the run spent is still reported (exit code 3 follows)
    if distributed.writes_files():
      _print_privacy(getattr(e, "summary", None) or {})
    raise
  if not distributed.writes_files():
    return                 # process 0 prints and writes
  print(json.dumps(summary, indent=2, sort_keys=True))
  n, metric = summary["last_n"], summary.get("metric", "test_accuracy")
  print(f"\n{summary['algorithm']}: final {metric.replace('_', ' ')} "
        f"{summary[f'final_{metric}']:.4g}; "
        f"mean over the last {n} rounds {summary[f'mean_{metric}_last_{n}']:.4g} "
        f"(+/- {summary[f'std_{metric}_last_{n}']:.4g}); {summary['wall_time_s']:.1f} s")
  _print_privacy(summary)


def _print_privacy(summary: dict) -> None:
  """Differential privacy: the epsilon the run spent (docs/privacy.md); nothing without DP."""
  if "dp_epsilon" not in summary:
    return
  eps = summary["dp_epsilon"]
  print(f"differential privacy: epsilon {'inf' if eps is None else format(eps, '.4g')} at "
        f"delta {summary['dp']['delta']:g} after {summary['completed_rounds']} rounds "
        f"(noise multiplier {summary['dp']['noise_multiplier']:.4g}, "
        f"{summary['dp']['accountant']} accountant, {summary['dp']['sampling']} sampling"
        + (f"; simulates {summary['dp']['simulates']}" if "simulates" in summary["dp"] else "")
        + ")", flush=True)


if __name__ == "__main__":
  from fedjax_sharp.training import cli as _cli
  logging.set_verbosity(logging.INFO)
  app.run(_cli.guarded(main), flags_parser=_cli.flags_parser)
