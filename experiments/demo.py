"""The README demo: FedAvg next to FedGMT on real, heterogeneous handwritten digits, offline.

    python experiments/demo.py            # or: make demo

Uses configs/demo.py (the UCI digits shipped with the package, long-tail Dirichlet split over
20 clients), runs each algorithm with the same seed, prints the table and writes
runs/demo/{results.md, results.csv, accuracy.png}. Any config field can be overridden, e.g.
`--config.rounds=100`.
"""
from __future__ import annotations

import os
import time

from absl import app, flags, logging
from ml_collections import config_flags

_HERE = os.path.dirname(os.path.abspath(__file__))
_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_HERE, "..", "configs", "demo.py"), "Demo config.", lock_config=True)
_ALGORITHMS = flags.DEFINE_list("algorithms", ["fedavg", "feddyn", "fedgmt"],
                                "Algorithms to run.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Output directory.")


def main(argv):
  del argv
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.training import cli, compare

  config = _CONFIG.value
  algorithms = [a for a in _ALGORITHMS.value if a in ALGORITHMS]
  skipped = sorted(set(_ALGORITHMS.value) - set(algorithms))
  if skipped:
    logging.warning("not registered, skipped: %s", skipped)
  cli.refuse_unused_overrides(_CONFIG, [compare.configure_variant(config, a, config.seed)
                                        for a in algorithms], grid=True)
  t0 = time.time()
  results = compare.run_grid(config, algorithms, [config.seed], _WORKDIR.value)
  print(compare.reuse_note(results, _WORKDIR.value, f"delete {_WORKDIR.value} to retrain")
        or "", end="")
  markdown = compare.write_reports(results, _WORKDIR.value, config.eval.last_n,
                                   config.eval.target_accuracy, title=config.name)
  print(f"\nDemo: {config.data.name} ({len(results[algorithms[0]][0]['records'])} rounds, "
        f"{config.data.num_clients} clients, {config.data.partition} alpha={config.data.alpha}"
        f"{', long-tail' if config.data.long_tail else ''}, {config.clients_per_round} per "
        f"round), seed {config.seed}\n")
  print(markdown)
  for name in algorithms:
    print(f"{name}: final test accuracy {results[name][0]['summary']['final_test_accuracy']:.4f}")
  print(f"\nTotal {time.time() - t0:.0f} s. Table, CSV and plot in {_WORKDIR.value}/")


if __name__ == "__main__":
  logging.set_verbosity(logging.WARNING)
  from fedjax_sharp.training import cli as _cli
  app.run(_cli.guarded(main), flags_parser=_cli.flags_parser)
