"""Padding fraction of the single-jit strategies on a ragged (long-tail) partition.

A cohort is a fixed-shape plan [C, S, B] with S the largest K_m over ALL clients, so a round
that scans S steps for every client computes mostly padding on a long-tail partition. The
engine's `skip_padding` (default) stops each client's rolled loop at its own last step: under
vmap the batched loop runs for the cohort's longest client; with `sort_clients` and
'chunked_vmap' each chunk of `chunk_size` clients (a bucket of similar lengths) runs for its
own longest client; 'map' runs every client for exactly its K_m. This script counts, over the
first --rounds cohorts of a config, the client-steps each execution computes:

    padding fraction = 1 - (real client-steps) / (computed client-steps)

    python benchmarks/padding.py                                  # the FedGMT long-tail FMNIST
    python benchmarks/padding.py --config=configs/fedgmt_fmnist_hetero.py --chunk_size=2

It builds the partition and the cohorts exactly as a run does (no training: host-only counts;
that these executions compute the same round is tested in tests/test_engine.py).
"""
from __future__ import annotations

import argparse
import importlib.util

import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.core.cohort import CohortSampler


def load_config(path: str):
  spec = importlib.util.spec_from_file_location("bench_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def computed_steps(k: np.ndarray, max_steps: int, chunk: int) -> dict[str, int]:
  """Client-steps computed for one cohort with real step counts `k` [C] under each execution."""
  ordered = np.sort(k)[::-1]
  chunks = [ordered[i:i + chunk] for i in range(0, len(ordered), chunk)]
  unsorted = [k[i:i + chunk] for i in range(0, len(k), chunk)]
  return {
      "scan over S (before)": len(k) * max_steps,
      "vmap, skip_padding": len(k) * int(k.max()),
      f"chunked_vmap({chunk}), skip_padding": sum(len(c) * int(c.max()) for c in unsorted),
      f"chunked_vmap({chunk}), skip_padding + sort_clients": sum(len(c) * int(c.max())
                                                                 for c in chunks),
      "map, skip_padding (exact)": int(k.sum()),
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="configs/fedgmt_fmnist_hetero.py")
  parser.add_argument("--rounds", type=int, default=100)
  parser.add_argument("--chunk_size", type=int, default=2)
  args = parser.parse_args()
  config = load_config(args.config)
  dataset = data_lib.load_dataset(config.data)
  clients = data_lib.partition_dataset(dataset, config.data, seed=config.seed)
  sampler = CohortSampler(clients, config.clients_per_round, config.local.batch_size,
                          local_epochs=config.local.epochs, local_steps=config.local.steps,
                          seed=config.seed)
  totals: dict[str, int] = {}
  real = 0
  for t in range(args.rounds):
    k = sampler.steps_per_client[sampler.sample_clients(t)].astype(np.int64)
    real += int(k.sum())
    for name, steps in computed_steps(k, sampler.max_steps, args.chunk_size).items():
      totals[name] = totals.get(name, 0) + steps
  all_k = sampler.steps_per_client
  print(f"\n{config.name}: {len(clients)} clients, {config.clients_per_round} per round, "
        f"K_m from {all_k.min()} to {all_k.max()} (median {int(np.median(all_k))}), "
        f"S = {sampler.max_steps}; {args.rounds} rounds\n")
  print("| execution | client-steps computed | padding fraction | vs before |")
  print("|---|---|---|---|")
  before = totals["scan over S (before)"]
  for name, steps in totals.items():
    print(f"| {name} | {steps:,} | {1 - real / steps:.1%} | {steps / before:.2f}x |")


if __name__ == "__main__":
  main()
