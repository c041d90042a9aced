"""Every accelerator figure of the scale issue in one command, printed as one table.

CIFAR-10 CNN setting of the FedGMT paper on synthetic data (McMahan CNN 32x32x3, 10 clients x
50 local steps x batch 50 per round, SGD momentum 0.9, wd 1e-5):
  1. the execution-strategy table (FedAvg),
  2. the per-algorithm cost (FedAvg, FedDyn, FedGMT, FedSAM, FedGloSS) with the default strategy,
  3. a 100-client round (vmap/rolled),
  4. a sweep: 3 seeds x 4 algorithms x --sweep_rounds rounds, each algorithm's 3 seeds as one
     compiled program (`RoundEngine.sweep_round`, own cohorts and keys per seed).

    python benchmarks/accelerator.py                 # on a GPU / TPU (targets: BUILD_NOTES.md)
    python benchmarks/accelerator.py --small         # tiny shapes: runs anywhere in seconds (CI)

On a CPU without --small the rolled strategies take minutes per round (XLA CPU runs
convolutions inside loops slowly; BUILD_NOTES.md): use benchmarks/round_time.py there.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import round_time  # pylint: disable=g-import-not-at-top

from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, TrainData, tree
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.training import compare
from fedjax_sharp.training.config import base_config
from fedjax_sharp.algorithms import build_algorithm

STRATEGIES = ("vmap/rolled", "map/rolled", "chunked_vmap/rolled", "host/unrolled")
COST_ALGORITHMS = ("fedavg", "feddyn", "fedgmt", "fedsam", "fedgloss")
SWEEP_ALGORITHMS = ("fedavg", "feddyn", "fedgmt", "fedsam")


def timed_sweep(algorithm: str, seeds, rounds: int, clients: int, steps: int, batch: int,
                shape) -> tuple[float, float]:
  """(compile s, total s for `rounds` rounds) of one algorithm's seeds as one program."""
  model = get_model("mcmahan_cnn", 10)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  alg = build_algorithm(compare.configure_variant(base_config(), algorithm, 0), apply_fn)
  rng = np.random.default_rng(0)
  pool = 10 * clients * batch
  data = TrainData(jnp.asarray(rng.integers(0, 256, (pool, *shape), dtype=np.uint8)),
                   jnp.asarray(rng.integers(0, 10, pool).astype(np.int32)))
  parts = np.array_split(np.arange(pool), 10 * clients)     # 10x more clients than sampled
  samplers = [CohortSampler(parts, clients, batch, local_steps=steps, seed=s) for s in seeds]
  engine = RoundEngine(alg, len(parts), ExecutionConfig("vmap", local_loop="rolled"),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
  states = [engine.init(init_params(model, jax.random.key(s), shape)) for s in seeds]
  servers, tables = tree.stack([s for s, _ in states]), tree.stack([t for _, t in states])
  keys = jnp.stack([jax.random.key(s) for s in seeds])
  rates = [0.01] * len(seeds)
  compile_s, t_start = None, None
  for t in range(rounds + 1):
    t0 = time.perf_counter()
    cohorts = tree.stack([s.build(t) for s in samplers])
    servers, tables, m = engine.sweep_round(servers, tables, data, cohorts, t, rates, keys)
    jax.block_until_ready((servers, m))
    if t == 0:
      compile_s, t_start = time.perf_counter() - t0, time.perf_counter()
  return compile_s, time.perf_counter() - t_start


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--small", action="store_true", help="tiny shapes (CI, CPU)")
  parser.add_argument("--sweep_rounds", type=int, default=500)
  parser.add_argument("--rounds", type=int, default=5, help="timed rounds per strategy")
  args = parser.parse_args()
  strategies, cost_algorithms, sweep_algorithms = STRATEGIES, COST_ALGORITHMS, SWEEP_ALGORITHMS
  if args.small:   # every kind of row, fewer of each (compile time dominates here)
    clients, steps, batch, shape, big = 2, 2, 4, (16, 16, 3), 4
    sweep_rounds, rounds = min(args.sweep_rounds, 3), 2
    strategies, cost_algorithms, sweep_algorithms = STRATEGIES[:1], COST_ALGORITHMS[:3:2], \
        SWEEP_ALGORITHMS[:2]
  else:
    clients, steps, batch, shape, big = 10, 50, 50, (32, 32, 3), 100
    sweep_rounds, rounds = args.sweep_rounds, args.rounds
  print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}), jax "
        f"{jax.__version__}; McMahan CNN {'x'.join(map(str, shape))}, {clients} clients x "
        f"{steps} steps x batch {batch} per round{' (--small)' if args.small else ''}\n")
  rows = []
  for strategy in strategies:
    c, r = round_time.time_strategy(strategy, clients, steps, batch, rounds, 5, 5,
                                    shape=shape)
    rows.append((f"strategy {strategy}, FedAvg", r, c, ""))
  cost = argparse.Namespace(clients=clients, steps=steps, batch=batch, chunk=5, unroll=5,
                            model="mcmahan_cnn")
  timed = {name: round_time._Timed(name, "vmap/rolled", cost, shape)  # pylint: disable=protected-access
           for name in cost_algorithms}
  times = {name: [] for name in cost_algorithms}
  for _ in range(rounds):
    for name in cost_algorithms:
      times[name].append(timed[name].round())
  base = statistics.median(times["fedavg"])
  for name in cost_algorithms:
    med = statistics.median(times[name])
    rows.append((f"{name}, vmap/rolled", med, timed[name].compile_s, f"{med / base:.2f}x FedAvg"))
  c, r = round_time.time_strategy("vmap/rolled", big, steps, batch, rounds, 5, 5, shape=shape)
  rows.append((f"{big} clients per round, vmap/rolled, FedAvg", r, c, ""))
  total = 0.0
  for name in sweep_algorithms:
    c, s = timed_sweep(name, (0, 1, 2), sweep_rounds, clients, steps, batch, shape)
    total += s
    rows.append((f"sweep {name}: 3 seeds x {sweep_rounds} rounds, one program", s / sweep_rounds,
                 c, f"{s:.1f} s in all"))
  rows.append((f"sweep 3 seeds x {len(sweep_algorithms)} algorithms x {sweep_rounds} rounds",
               float("nan"), float("nan"), f"{total:.1f} s ({total / 60:.2f} min)"))
  print("| what | s / round | compile s | note |")
  print("|---|---|---|---|")
  for name, per_round, compile_s, note in rows:
    print(f"| {name} | {per_round:.4f} | {compile_s:.1f} | {note} |")


if __name__ == "__main__":
  main()
