"""Forward + backward time of a training step with `model.conv_impl` 'xla' against 'matmul'.

One SGD step (cross-entropy value_and_grad + update) of the McMahan CNN (or --model) on
--input images, batch --batch: (a) one client, (b) --clients clients vmapped, each with its own
weights (the engine's vmap strategy: XLA's convolutions become grouped convolutions there,
'matmul' becomes batched matrix products, models/conv.py). Then the layer alone (the McMahan
CNN's conv2, 14x14x32 -> 64, 5x5, vmapped over the clients) with the two patch extractors:
strided slices (what 'matmul' uses) and lax.conv_general_dilated_patches.
Times: median of --reps jitted calls after a warm-up, block_until_ready; rows are printed as
they are measured. On a busy CPU, read them as ratios.

    python benchmarks/conv_impl.py
    python benchmarks/conv_impl.py --model=lenet5 --input=32x32x3 --batch=50 --clients=10
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fedjax_sharp.models import get_model
from fedjax_sharp.models.conv import CONV_IMPLS, extract_patches


def median_s(fn, *args, reps: int) -> tuple[float, float]:
  """(compile + first call, median of `reps` calls) in seconds."""
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times)


def sgd_step(model, lr: float = 0.01):
  def loss(params, x, y):
    logits = model.apply({"params": params}, x)
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

  def step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value
  return step


def row(label: str, impl: str, first: float, median: float, per: int) -> None:
  print(f"| {label:<34} | {impl:<14} | {first:>9.2f} | {median * 1e3:>10.1f} | "
        f"{median * 1e3 / per:>12.1f} |", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="mcmahan_cnn")
  parser.add_argument("--input", default="28x28x1", help="HxWxC")
  parser.add_argument("--batch", type=int, default=10)
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--reps", type=int, default=7)
  parser.add_argument("--layer", action=argparse.BooleanOptionalAction, default=True,
                      help="also time the conv2 layer with both patch extractors")
  args = parser.parse_args()
  shape = tuple(int(v) for v in args.input.split("x"))
  rng = np.random.default_rng(0)
  x1 = jnp.asarray(rng.normal(size=(args.batch, *shape)), jnp.float32)
  y1 = jnp.asarray(rng.integers(0, 10, args.batch), jnp.int32)
  xc = jnp.asarray(rng.normal(size=(args.clients, args.batch, *shape)), jnp.float32)
  yc = jnp.asarray(rng.integers(0, 10, (args.clients, args.batch)), jnp.int32)
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {args.model} on {args.input}, "
        f"batch {args.batch}, {args.clients} clients; median of {args.reps}", flush=True)
  print("| step | impl | first (s) | median (ms) | ms / client |")
  print("|---|---|---|---|---|")
  models = {impl: get_model(args.model, 10, conv_impl=impl) for impl in CONV_IMPLS}
  params = jax.jit(models["xla"].init)(jax.random.key(0), x1)["params"]
  # Per-client weights: the same parameters plus a small per-client perturbation.
  params_c = jax.tree.map(
      lambda p: p[None] + 0.01 * jnp.asarray(rng.normal(size=(args.clients, *p.shape)),
                                             jnp.float32), params)
  for label, p, x, y, per, vmapped in (
      ("(a) one client", params, x1, y1, 1, False),
      (f"(b) vmap over {args.clients} clients", params_c, xc, yc, args.clients, True)):
    for impl in CONV_IMPLS:
      step = sgd_step(models[impl])
      fn = jax.jit(jax.vmap(step) if vmapped else step)
      row(label, impl, *median_s(fn, p, x, y, reps=args.reps), per)

  if args.layer:
    # The McMahan CNN's conv2 on 28x28 inputs: 14x14x32 -> 64, 5x5, pad 2, vmapped over clients.
    n, c = args.clients, args.batch
    xl = jnp.asarray(rng.normal(size=(n, c, 14, 14, 32)), jnp.float32)
    wl = jnp.asarray(rng.normal(size=(n, 5, 5, 32, 64)) / 40, jnp.float32)

    def layer(method):
      def conv(x, w):
        if method == "xla":
          return lax.conv_general_dilated(x, w, (1, 1), ((2, 2), (2, 2)),
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
        xp = jnp.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
        return extract_patches(xp, (5, 5), (1, 1), method=method) @ w.reshape(-1, 64)
      loss = lambda w, x: jnp.sum(conv(x, w) ** 2)
      return jax.jit(jax.vmap(jax.value_and_grad(loss, argnums=(0, 1))))
    for method in ("xla", "slices", "lax"):
      label = "matmul/" + method if method != "xla" else "xla"
      row(f"(c) conv2 layer fwd+bwd, vmap {n}", label, *median_s(layer(method), wl, xl,
                                                               reps=args.reps), n)


if __name__ == "__main__":
  main()
