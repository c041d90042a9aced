"""Which operations XLA's CPU backend should hand to the YNNPACK library: a local step and an
aggregation timed under each choice of `xla_cpu_experimental_ynn_fusion_type`
(`backends.CPU_LIBRARY_FUSION_OPTION`).

XLA's CPU backend (jax 0.10) sends convolutions, dot products and reductions to YNNPACK by
default. The library compiles its programs with dot products only there
(`fedjax_sharp.core.backends.CPU_COMPILER_OPTIONS`); this script shows why, in one process with
the programs interleaved:

  step         one SGD step of the McMahan CNN (forward, backward, update) on a batch (the mean
               of 5 calls in a row, as a round's steps run)
  aggregation  FedAvg's weighted sum of the cohort's models over the client axis
               (`tree.weighted_sum`), as the round's `finish` computes it

    python benchmarks/cpu_library_fusions.py                  # batch 50 on 32x32x3, 50 clients
    python benchmarks/cpu_library_fusions.py --batch=10 --input=28x28x1
    python benchmarks/cpu_library_fusions.py --small          # tiny shapes (CI)
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core import backends, tree
from fedjax_sharp.models import get_model, init_params

CHOICES = {
    "XLA's defaults": None,
    "dots (the library's)": backends.CPU_LIBRARY_FUSIONS,
    "dots + reductions": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE",
    "none": "",
}


def programs(batch: int, shape, clients: int):
  """(step, its arguments), (aggregation, its arguments) as plain Python functions."""
  model = get_model("mcmahan_cnn", 10)
  params = init_params(model, jax.random.key(0), shape)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.integers(0, 256, (batch, *shape)), jnp.float32) / 255.0
  y = jnp.asarray(rng.integers(0, 10, batch), jnp.int32)

  def step(p, x, y):
    def loss(p):
      logits = model.apply({"params": p}, x)
      return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
    return jax.tree.map(lambda a, g: a - 0.01 * g, p, jax.grad(loss)(p))

  models = jax.tree.map(lambda a: jnp.stack([a] * clients), params)
  weights = jnp.full((clients,), 1.0 / clients, jnp.float32)
  return (step, (params, x, y)), (tree.weighted_sum, (models, weights))


def timed(fn, args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=50)
  parser.add_argument("--input", default="32x32x3", help="HxWxC")
  parser.add_argument("--clients", type=int, default=50, help="models in the aggregation")
  parser.add_argument("--repeats", type=int, default=15, help="timed calls, interleaved")
  parser.add_argument("--small", action="store_true", help="tiny shapes, 2 calls (CI)")
  args = parser.parse_args(argv)
  if args.small:
    args.batch, args.input, args.clients, args.repeats = 4, "8x8x1", 2, 2
  shape = tuple(int(v) for v in args.input.split("x"))
  print(f"backend: {jax.default_backend()}, jax {jax.__version__}; McMahan CNN {args.input}, "
        f"step batch {args.batch}, aggregation of {args.clients} models; median of "
        f"{args.repeats} rounds of the choices, interleaved\n")
  if backends.kind() != "cpu":
    print("not a CPU: the option is XLA's CPU backend's; nothing to time")
    return {}
  cases = programs(args.batch, shape, args.clients)
  jitted = {name: [jax.jit(fn, compiler_options=None if value is None else
                           {backends.CPU_LIBRARY_FUSION_OPTION: value})
                   for fn, _ in cases] for name, value in CHOICES.items()}
  for fns in jitted.values():            # compile and warm up
    for fn, (_, fn_args) in zip(fns, cases):
      timed(fn, fn_args)
  times = {name: [[], []] for name in CHOICES}
  for _ in range(args.repeats):
    for name, fns in jitted.items():
      for i, (fn, (_, fn_args)) in enumerate(zip(fns, cases)):
        # A round's steps run back to back: the step's time is the mean of a burst of calls.
        burst = 5 if i == 0 else 1
        times[name][i].append(statistics.mean(timed(fn, fn_args) for _ in range(burst)))
  print("| YNNPACK takes | step ms | aggregation ms |")
  print("|---|---|---|")
  rows = {}
  for name, (step_t, agg_t) in times.items():
    rows[name] = (1e3 * statistics.median(step_t), 1e3 * statistics.median(agg_t))
    print(f"| {name} | {rows[name][0]:.2f} | {rows[name][1]:.2f} |", flush=True)
  return rows


if __name__ == "__main__":
  main()
