"""Large client populations: memory, disk and time per round vs M, for each client table.

Three settings, each a model-sized state per client:
- `linear`: FedDyn, the linear model on 28x28x1 inputs (7,850 parameters: 31 KB of state per
  client), 20 synthetic examples per client, 10 clients per round, B = 10, E = 1, vmap/rolled;
- `word_lstm`: FedDyn, the Stack Overflow word LSTM (4,050,748 parameters: 15.5 MiB per client),
  16 synthetic posts of 20 tokens per client, 50 clients per round, B = 16 (one local step);
- `resnet18`: FedGMT, ResNet-18 with GroupNorm on 32x32x3 inputs (11,173,962 parameters: 42.6
  MiB of dual per client), 10 synthetic images per client, 10 clients per round, B = 10.
Clients index a shared pool of examples (`ClientSlices`: 12 bytes per client, no per-client
arrays). `word_lstm` and `resnet18` run the CPU's default strategy ('auto': host/unrolled).
Each (M, table) runs in its own process so that its peak RSS is its own.

    python benchmarks/population.py                          # linear, M = 1k, 10k, 100k; both tables
    python benchmarks/population.py --populations=1000,100000,1000000,10000000 --tables=host
    python benchmarks/population.py --model=word_lstm --populations=1000,342477 --tables=disk \\
        --rounds=50 --directory=/tmp/rows
    python benchmarks/population.py --model=resnet18 --populations=1000 --tables=disk,host --rounds=5
    python benchmarks/population.py --stores --model=word_lstm --rounds=5   # the row stores

Columns: what `engine.client_table='auto'` picks for the run (this machine's memory, the
rounds x clients per round it can touch), dense table size (what 'device' holds), touched rows
after the run (what 'host' and 'disk' hold), peak RSS of the process, the most disk the rows took after any round, mean s/round
over rounds 2.. (round 1 compiles), the first round, and for a disk table the time to snapshot
its rows as a checkpoint does (hard links + fsync).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

# model: (algorithm, input shape, classes, examples per client, batch, clients per round)
SETTINGS = {
    "linear": ("feddyn", (28, 28, 1), 10, 20, 10, 10),
    "word_lstm": ("feddyn", (20,), 10004, 16, 16, 50),
    "resnet18": ("fedgmt", (32, 32, 3), 10, 10, 10, 10),
}


def one(model_name: str, num_clients: int, table: str, rounds: int, clients_per_round: int,
        directory: str | None) -> dict:
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fedjax_sharp.algorithms import local_sgd
  from fedjax_sharp.algorithms.fed_dyn import fed_dyn
  from fedjax_sharp.algorithms.fed_gmt import fed_gmt
  from fedjax_sharp.core import (ClientSlices, CohortSampler, ExecutionConfig, RoundEngine,
                                 RoundInfo, TrainData)
  from fedjax_sharp.core import client_table as client_table_lib
  from fedjax_sharp.core.client_table import HostClientTable
  from fedjax_sharp.models import get_model, init_params

  algorithm, shape, classes, per_client, batch, default_cohort = SETTINGS[model_name]
  cohort = clients_per_round or default_cohort
  pool = 20_000 if model_name == "linear" else 2_000
  rng = np.random.default_rng(0)
  if model_name == "word_lstm":       # next-token prediction: targets are the inputs shifted
    tokens = rng.integers(3, classes, (pool, shape[0] + 1)).astype(np.int32)
    x, y = jnp.asarray(tokens[:, :-1]), jnp.asarray(tokens[:, 1:])
    preprocess = None
  else:
    x = jnp.asarray(rng.integers(0, 256, (pool, *shape), dtype=np.uint8))
    y = jnp.asarray(rng.integers(0, classes, pool).astype(np.int32))
    preprocess = lambda xb, key: xb.astype(jnp.float32) / 255.0
  clients = ClientSlices(np.full(num_clients, per_client, np.int32), num_examples=pool)
  model = get_model(model_name, classes)
  params = init_params(model, jax.random.key(0), shape)
  apply_fn = lambda p, xb: model.apply({"params": p}, xb)
  if algorithm == "feddyn":
    alg = fed_dyn(apply_fn, local_sgd(0.9, 1e-5), alpha=0.1)
  else:
    alg = fed_gmt(apply_fn, local_sgd(0.9, 1e-5))
  execution = (ExecutionConfig("vmap", local_loop="rolled") if model_name == "linear"
               else ExecutionConfig())
  auto = client_table_lib.resolve("auto", alg, params, num_clients, rounds=rounds,
                                  clients_per_round=cohort)
  per_row = sum(leaf.nbytes for leaf in jax.tree.leaves(
      jax.tree.map(np.asarray, alg.client_state_init(params))))
  available, _ = client_table_lib.device_memory()
  if table == "device" and available and 2 * num_clients * per_row > available:
    # Not tried: a state of many leaves is allocated leaf by leaf until the OS kills a process
    # (ResNet-18 at M = 1,000: 42.6 GB), on a machine others may share; at start the table is
    # built once more than it is held (M = 100,000 linear: 3.0 GB held, 6.3 GB peak).
    raise SystemExit(f"not tried: the dense table takes {num_clients * per_row / 2 ** 30:.1f} "
                     f"GiB, more than half the device's {available / 2 ** 30:.1f} GiB")
  engine = RoundEngine(alg, num_clients, execution, preprocess=preprocess, client_table=table)
  sampler = CohortSampler(clients, cohort, batch, local_epochs=1, seed=0)
  server, state = engine.init(params, directory)
  data = TrainData(x, y)
  times, disk = [], 0
  for t in range(rounds):
    t0 = time.time()
    info = RoundInfo(jnp.int32(t), jnp.float32(0.05), num_clients)
    server, state, m = engine.round(server, state, data, sampler.build(t), info,
                                    jax.random.key(1))
    jax.block_until_ready(server)
    if isinstance(state, HostClientTable):
      state.flush()              # the round's rows written (counted in its time)
    times.append(time.time() - t0)
    if isinstance(state, HostClientTable):
      disk = max(disk, state.disk_bytes())
  held = state.nbytes_touched if isinstance(state, HostClientTable) else num_clients * per_row
  snapshot_s = None
  if isinstance(state, HostClientTable) and state.kind == "disk":
    target = tempfile.mkdtemp(dir=os.path.dirname(state.store.directory))
    t0 = time.time()
    state.snapshot(target)
    snapshot_s = time.time() - t0
    shutil.rmtree(target)
  loss = float(m["loss_sum"] / m["examples"])
  if isinstance(state, HostClientTable):
    state.close()
  return {"model": model_name, "M": num_clients, "table": table, "cohort": cohort,
          "dense_mb": num_clients * per_row / 2 ** 20, "held_mb": held / 2 ** 20,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "disk_mb": disk / 2 ** 20, "s_per_round": sum(times[1:]) / max(len(times) - 1, 1),
          "first_round_s": times[0], "snapshot_s": snapshot_s, "last_loss": loss,
          "rounds": rounds, "auto": auto}


def stores(row_elements: int, clients: int, rounds: int) -> list[dict]:
  """Median ms to read half a cohort's rows (the clients that trained before) and to write the
  whole cohort's, for the row stores the client table could use: NumPy blocks (`MemoryRows`,
  'host'), tensorstore's zarr3 driver on its memory store, on files (`DiskRows`, 'disk'), the
  same files with every write fsync'ed (tensorstore's default), and a NumPy memmap."""
  import numpy as np
  import tensorstore as ts
  from fedjax_sharp.core.client_table import MemoryRows, zarr_spec

  rng = np.random.default_rng(0)
  leaves = [np.zeros((row_elements,), np.float32)]
  base = 4 * clients
  directory = tempfile.mkdtemp()

  def zarr(kvstore, sync):
    spec = zarr_spec("", "float32", base + rounds * clients, row_elements, create=True)
    array = ts.open({**spec, "kvstore": kvstore, "context": {"file_io_sync": sync}}).result()
    return (lambda slots: array[slots].read().result(),
            lambda slots, x: array[slots].write(x).result())

  memory = MemoryRows(leaves)

  def memory_read(slots):
    out = [np.empty((len(slots), row_elements), np.float32)]
    memory.read(slots, out, np.arange(len(slots)))
    return out[0]
  candidates = {
      "NumPy blocks ('host')": (memory_read, lambda slots, x: memory.write(slots, [x])),
      "tensorstore zarr3, memory store": zarr({"driver": "memory"}, False),
      "tensorstore zarr3, files ('disk')": zarr({"driver": "file", "path": os.path.join(
          directory, "files")}, False),
      "tensorstore zarr3, files, fsync'ed": zarr({"driver": "file", "path": os.path.join(
          directory, "synced")}, True),
  }
  # For reference, not a candidate: a memory-mapped .npy file writes rows in place, so a
  # checkpoint would have to copy them, and its pages count in the process's RSS.
  mapped = np.lib.format.open_memmap(os.path.join(directory, "rows.npy"), "w+", np.float32,
                                     (base + rounds * clients, row_elements))
  candidates["NumPy memmap of a .npy file (reference)"] = (
      lambda slots: mapped[slots], lambda slots, x: mapped.__setitem__(slots, x))
  out = []
  for name, (read, write) in candidates.items():
    write(np.arange(base), np.ones((base, row_elements), np.float32))
    reads, writes = [], []
    for r in range(rounds):
      old = rng.choice(base, clients // 2, replace=False)
      slots = np.concatenate([old, base + r * clients + np.arange(clients - len(old))])
      t0 = time.perf_counter()
      x = read(old)
      reads.append(time.perf_counter() - t0)
      x = np.concatenate([x, x])[:clients] + 1
      t0 = time.perf_counter()
      write(slots, x)
      writes.append(time.perf_counter() - t0)
    out.append({"store": name, "read_ms": 1e3 * float(np.median(reads)),
                "write_ms": 1e3 * float(np.median(writes))})
  shutil.rmtree(directory, ignore_errors=True)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="linear", choices=sorted(SETTINGS))
  parser.add_argument("--populations", default="1000,10000,100000")
  parser.add_argument("--tables", default="device,host")
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--clients_per_round", type=int, default=0,
                      help="0: the model's setting (linear 10, word_lstm 50, resnet18 10)")
  parser.add_argument("--directory", default="",
                      help="where 'disk' tables write their rows (default: a temporary "
                      "directory); each run uses and removes a folder of its own inside")
  parser.add_argument("--stores", action="store_true",
                      help="time the row stores instead: reads and writes of a cohort's rows "
                      "of the model's state (linear 10 clients, word_lstm 50, resnet18 10)")
  parser.add_argument("--one", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.stores:
    import jax
    import numpy as np
    from fedjax_sharp.models import get_model, init_params
    _, shape, classes, _, _, cohort = SETTINGS[args.model]
    params = init_params(get_model(args.model, classes), jax.random.key(0), shape)
    elements = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
    clients = args.clients_per_round or cohort
    print(f"{args.model}: rows of {4 * elements / 2 ** 10:,.0f} KiB, {clients} clients a "
          f"round, median of {args.rounds} rounds")
    print("| store | read half the cohort (ms) | write the cohort (ms) |\n|---|---|---|")
    for r in stores(elements, clients, args.rounds):
      print(f"| {r['store']} | {r['read_ms']:.2f} | {r['write_ms']:.2f} |", flush=True)
    return
  if args.one:
    m, table, directory = args.one.split(",", 2)
    print(json.dumps(one(args.model, int(m), table, args.rounds, args.clients_per_round,
                         directory or None)))
    return
  print(f"{args.model}, {args.rounds} rounds")
  print("| M | table | 'auto' picks | dense table MB | held MB | peak RSS MB | disk MB | "
        "s / round | first round s | snapshot s |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for m in args.populations.split(","):
    for table in args.tables.split(","):
      directory = ""
      if table == "disk" and args.directory:
        os.makedirs(args.directory, exist_ok=True)
        directory = tempfile.mkdtemp(dir=args.directory, prefix=f"rows_{m}_")
      proc = subprocess.run([sys.executable, __file__, f"--model={args.model}",
                             f"--one={m},{table},{directory}", f"--rounds={args.rounds}",
                             f"--clients_per_round={args.clients_per_round}"],
                            capture_output=True, text=True)
      if directory:
        shutil.rmtree(directory, ignore_errors=True)
      if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        why = next((l for l in reversed(lines) if "Error" in l or "not tried" in l),
                   lines[-1] if lines else f"killed by signal {-proc.returncode}")
        print(f"| {int(m):,} | {table} | {why.strip()[:100]} ||||||||", flush=True)
        continue
      r = json.loads(proc.stdout.strip().splitlines()[-1])
      snapshot = f"{r['snapshot_s']:.2f}" if r["snapshot_s"] is not None else ""
      print(f"| {r['M']:,} | {table} | {r['auto']} | {r['dense_mb']:,.0f} | {r['held_mb']:,.1f} | "
            f"{r['peak_rss_mb']:,.0f} | {r['disk_mb']:,.0f} | {r['s_per_round']:.4f} | "
            f"{r['first_round_s']:.2f} | {snapshot} |", flush=True)


if __name__ == "__main__":
  main()
