"""Round time of chosen execution paths, one row each: the measurements behind 'auto'.

Each variant is `ALGORITHM:STRATEGY:CONV_IMPL:COMPUTE_DTYPE:CLIENTS[:MODEL[:CLASSES]]`, run on the
benchmark round of `round_time._Timed` (CIFAR-shaped synthetic data, --steps local steps of
batch --batch per client; 'auto' fields resolved as a run resolves them). XLA flags go through
the environment (XLA_FLAGS), so compare flags in separate processes.

    python benchmarks/paths.py 'fedavg:auto/auto:auto:auto:10;fedavg:vmap/rolled:xla:bfloat16:10'
    python benchmarks/paths.py 'fedavg:map/rolled:xla:bfloat16:100;fedavg:vmap/rolled:xla:bfloat16:100'
    python benchmarks/paths.py 'fedavg[model.resnet18.stem=imagenet]:auto/auto:auto:auto:10:resnet18:100'
    XLA_FLAGS=--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL python benchmarks/paths.py ...

Columns: the variant, the strategy it ran with, the median and the fastest of --rounds rounds (s),
compile + first round (s), and TFLOP/s from the lowered program's FLOP count.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import round_time  # pylint: disable=g-import-not-at-top


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("variants", help="';'-separated ALG:STRATEGY:CONV:DTYPE:CLIENTS[:MODEL[:CLASSES]]")
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--batch", type=int, default=50)
  parser.add_argument("--rounds", type=int, default=4)
  parser.add_argument("--input", default="32x32x3")
  args = parser.parse_args(argv)
  import jax  # pylint: disable=g-import-not-at-top
  shape = tuple(int(v) for v in args.input.split("x"))
  print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, XLA_FLAGS="
        f"{os.environ.get('XLA_FLAGS', '')!r}; {args.steps} steps x batch {args.batch}\n")
  print("| variant | ran as | median s | min s | compile s | TFLOP/s |")
  print("|---|---|---|---|---|---|", flush=True)
  for spec in [v for v in args.variants.split(";") if v.strip()]:
    fields = spec.split(":")
    algorithm, strategy, conv_impl, dtype, clients = fields[:5]
    cost = argparse.Namespace(clients=int(clients), steps=args.steps, batch=args.batch, chunk=5,
                              unroll=5, model=fields[5] if len(fields) > 5 else "mcmahan_cnn",
                              num_classes=int(fields[6]) if len(fields) > 6 else 10)
    try:
      t = round_time._Timed(round_time.variant(algorithm, conv_impl, dtype), strategy, cost, shape)  # pylint: disable=protected-access
      times = [t.round() for _ in range(args.rounds)]
      med = statistics.median(times)
      print(f"| {spec} | {t.strategy}, conv {t.conv_impl}, {t.compute_dtype} | {med:.4f} | "
            f"{min(times):.4f} | {t.compile_s:.1f} | {t.flops / med / 1e12:.3g} |", flush=True)
      del t
    except Exception as e:  # pylint: disable=broad-except  # a failing variant fails its row
      print(f"| {spec} | FAILED: {type(e).__name__}: {str(e)[:200]} | | | | |", flush=True)


if __name__ == "__main__":
  main()
