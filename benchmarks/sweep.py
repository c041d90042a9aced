"""Per-round time of a sweep (E experiments as one compiled program) vs E separate runs.

Small-model setting where per-round overhead matters: MLP on Fashion-MNIST (the embedded
digits with --data=digits), 100 clients, 10 per round, E = 1 local epoch, B = 50, FedAvg;
3 seeds x 2 learning rates = 6 experiments; evaluation only in the last round. Both sides run
the same library code end to end (cohort sampling, metrics written, summaries); the separate
runs use each --separate_strategies in turn ('host' is the CPU default, 'vmap' the sweep's).

    python benchmarks/sweep.py                       # Fashion-MNIST if installed, else digits
    python benchmarks/sweep.py --rounds=30 --algorithm=fedgmt --data=digits

Figures: mean s/round over rounds 2.. (the first round compiles) from the runs' summaries;
"6 separate" is the sum over the six runs (what running them one after the other costs per
round); the speed-up is separate / sweep.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from absl import logging

from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop, sweep

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"


def make_config(data: str, algorithm: str, rounds: int, seed: int, lr: float, strategy: str,
                model: str = "mlp", partition: str = "dirichlet"):
  c = config_lib.base_config()
  c.name = "bench_sweep"
  if data == "fashion_mnist":
    c.data.source, c.data.name = "idx", "fashion_mnist"
  else:
    c.data.source, c.data.name = "embedded", "digits"
  c.data.num_clients = 100 if data == "fashion_mnist" else 20
  c.data.partition = partition
  c.data.alpha = 0.1
  c.clients_per_round = 10 if data == "fashion_mnist" else 5
  c.model.name = model
  c.local.epochs = 1
  c.local.batch_size = 50 if data == "fashion_mnist" else 10
  c.local.lr = lr
  c.algorithm.name = algorithm
  c.rounds = rounds
  c.eval.every = rounds
  c.eval.last_n = 1
  c.checkpoint_every = 0
  c.seed = seed
  c.engine.client_strategy = strategy
  c.engine.local_loop = "rolled" if strategy != "host" else "auto"
  return c


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default="auto", choices=("auto", "fashion_mnist", "digits"))
  parser.add_argument("--algorithm", default="fedavg")
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--lrs", default="0.01,0.03")
  parser.add_argument("--separate_strategies", default="host,vmap")
  parser.add_argument("--model", default="mlp", help="mlp | linear | ... (config model.name)")
  parser.add_argument("--partition", default="dirichlet", help="dirichlet (alpha 0.1) | iid")
  args = parser.parse_args()
  logging.set_verbosity(logging.WARNING)
  data = args.data
  if data == "auto":
    data = "fashion_mnist" if os.path.isdir(FMNIST_DIR) else "digits"
  grid = [(int(s), float(lr)) for lr in args.lrs.split(",") for s in args.seeds.split(",")]
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    t0 = time.time()
    summaries = sweep.run_sweep(
        [make_config(data, args.algorithm, args.rounds, s, lr, "vmap", args.model,
                     args.partition) for s, lr in grid],
        [os.path.join(tmp, f"sweep_{i}") for i in range(len(grid))], progress=False)
    sweep_wall = time.time() - t0
    rows.append((f"sweep of {len(grid)} (vmap/rolled)", summaries[0]["mean_round_time_s"],
                 summaries[0]["first_round_time_s"], sweep_wall))
    for strategy in args.separate_strategies.split(","):
      t0 = time.time()
      per_round, first = 0.0, 0.0
      for i, (s, lr) in enumerate(grid):
        summary = loop.run(make_config(data, args.algorithm, args.rounds, s, lr, strategy, args.model,
                                       args.partition),
                           os.path.join(tmp, f"{strategy}_{i}"), progress=False)
        per_round += summary["mean_round_time_s"]
        first += summary["first_round_time_s"]
      rows.append((f"{len(grid)} separate ({strategy})", per_round, first, time.time() - t0))
  print(f"\n{args.algorithm}, {args.model} on {data} ({args.partition}), {args.rounds} rounds, "
        f"seeds x lrs = {len(grid)} experiments\n")
  print("| how | s / round (all experiments) | first round (compile) s | whole wall s | "
        "sweep speed-up |")
  print("|---|---|---|---|---|")
  for name, per_round, first, wall in rows:
    print(f"| {name} | {per_round:.4f} | {first:.2f} | {wall:.1f} | "
          f"{per_round / rows[0][1]:.2f}x |")


if __name__ == "__main__":
  main()
