"""Large client populations: memory and time per round vs M, device vs host client table.

FedDyn (a model-sized dual per client) with the linear model on 28x28x1 inputs (7,850
parameters: 31 KB of state per client), M = 1k, 10k, 100k clients of 20 synthetic examples
each (index lists into a shared pool of 20,000 images), 10 clients per round, B = 10, E = 1,
vmap/rolled. Each (M, table) runs in its own process so that its peak RSS is its own.

    python benchmarks/population.py                          # M = 1k, 10k, 100k; both tables
    python benchmarks/population.py --populations=100000 --tables=host --rounds=20

Columns: dense table size (what 'device' holds), touched rows after the run (what 'host'
holds), peak RSS of the process, mean s/round over rounds 2.. (round 1 compiles).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(num_clients: int, table: str, rounds: int) -> dict:
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fedjax_sharp.algorithms import local_sgd
  from fedjax_sharp.algorithms.fed_dyn import fed_dyn
  from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData
  from fedjax_sharp.core.client_table import HostClientTable
  from fedjax_sharp.models import get_model, init_params

  pool, per_client = 20_000, 20
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.integers(0, 256, (pool, 28, 28, 1), dtype=np.uint8))
  y = jnp.asarray(rng.integers(0, 10, pool).astype(np.int32))
  clients = [(m * per_client + np.arange(per_client)) % pool for m in range(num_clients)]
  model = get_model("linear", 10)
  params = init_params(model, jax.random.key(0), (28, 28, 1))
  alg = fed_dyn(lambda p, xb: model.apply({"params": p}, xb), local_sgd(0.9, 1e-5), alpha=0.1)
  engine = RoundEngine(alg, num_clients, ExecutionConfig("vmap", local_loop="rolled"),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0,
                       client_table=table)
  sampler = CohortSampler(clients, 10, 10, local_epochs=1, seed=0)
  server, state = engine.init(params)
  data = TrainData(x, y)
  times = []
  for t in range(rounds):
    t0 = time.time()
    info = RoundInfo(jnp.int32(t), jnp.float32(0.05), num_clients)
    server, state, m = engine.round(server, state, data, sampler.build(t), info,
                                    jax.random.key(1))
    jax.block_until_ready(server)
    times.append(time.time() - t0)
  per_row = 4 * sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
  touched = (int(state.touched.sum()) * per_row if isinstance(state, HostClientTable)
             else num_clients * per_row)
  return {"M": num_clients, "table": table, "dense_mb": num_clients * per_row / 2 ** 20,
          "held_mb": touched / 2 ** 20,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "s_per_round": sum(times[1:]) / max(len(times) - 1, 1), "first_round_s": times[0]}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--populations", default="1000,10000,100000")
  parser.add_argument("--tables", default="device,host")
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--one", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.one:
    m, table = args.one.split(",")
    print(json.dumps(one(int(m), table, args.rounds)))
    return
  print("| M | table | dense table MB | held MB | peak RSS MB | s / round | first round s |")
  print("|---|---|---|---|---|---|---|")
  for m in args.populations.split(","):
    for table in args.tables.split(","):
      proc = subprocess.run([sys.executable, __file__, f"--one={m},{table}",
                             f"--rounds={args.rounds}"], capture_output=True, text=True)
      if proc.returncode:
        print(f"| {m} | {table} | failed: {proc.stderr.strip().splitlines()[-1][:80]} |||||")
        continue
      r = json.loads(proc.stdout.strip().splitlines()[-1])
      print(f"| {r['M']:,} | {table} | {r['dense_mb']:,.0f} | {r['held_mb']:,.1f} | "
            f"{r['peak_rss_mb']:,.0f} | {r['s_per_round']:.4f} | {r['first_round_s']:.2f} |",
            flush=True)


if __name__ == "__main__":
  main()
