"""Cost of a convolution's forward pass and filter gradient against the batch size (XLA CPU).

The McMahan CNN's second convolution (14x14x32 -> 64, 5x5, SAME) by default; times per 50
examples, so a flat column means linear cost. On XLA's CPU backend the filter gradient grows
superlinearly with the batch, which is why the analysis takes its reverse-mode derivatives on
pieces of `hessian.default_reverse_batch()` examples.

    python benchmarks/conv_grad.py
    python benchmarks/conv_grad.py --batches=50,500 --size=24 --cin=64 --cout=64 --pad=0
    python benchmarks/conv_grad.py --impl=im2col     # shifted slices + one matmul instead

`--impl=im2col` builds the convolution from k*k shifted slices and one matmul (its filter
gradient is then a plain matmul); on this CPU it was no faster than XLA's convolution
(docs/performance.md, "Tried and not kept"). XLA flags go through the environment as usual
(XLA_FLAGS=...).
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np


def _ms(f, *args, n: int) -> float:
  jax.block_until_ready(f(*args))
  t0 = time.perf_counter()
  for _ in range(n):
    out = f(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - t0) / n * 1e3


def _im2col_conv(x, w, pad: int):
  """Stride-1 convolution as k*k shifted slices concatenated on channels, then one matmul."""
  k = w.shape[0]
  x = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
  h, wd = x.shape[1] - k + 1, x.shape[2] - k + 1
  cols = jnp.concatenate([x[:, i:i + h, j:j + wd] for i in range(k) for j in range(k)], -1)
  return cols @ w.reshape(-1, w.shape[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default="50,100,250,500")
  parser.add_argument("--size", type=int, default=14)
  parser.add_argument("--cin", type=int, default=32)
  parser.add_argument("--cout", type=int, default=64)
  parser.add_argument("--kernel", type=int, default=5)
  parser.add_argument("--pad", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--impl", default="lax", choices=("lax", "im2col"))
  args = parser.parse_args()
  dn = ("NHWC", "HWIO", "NHWC")
  pad = ((args.pad, args.pad), (args.pad, args.pad))
  reference = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), pad, dimension_numbers=dn)
  conv = reference
  if args.impl == "im2col":
    conv = lambda x, w: _im2col_conv(x, w, args.pad)
  fwd = jax.jit(conv)
  filter_grad = jax.jit(lambda x, w, g: jax.vjp(lambda w: conv(x, w), w)[1](g)[0])
  rng = np.random.default_rng(0)
  k = args.kernel
  w = jnp.asarray(rng.normal(size=(k, k, args.cin, args.cout)) * 0.1, jnp.float32)
  print(f"backend {jax.default_backend()}, {args.impl}, conv {args.size}x{args.size}x{args.cin} -> "
        f"{args.cout}, {k}x{k}, pad {args.pad}\n")
  print("| batch | forward ms | filter gradient ms | forward ms per 50 | filter gradient ms per 50 |")
  print("|---|---|---|---|---|")
  for b in (int(v) for v in args.batches.split(",")):
    x = jnp.asarray(rng.normal(size=(b, args.size, args.size, args.cin)), jnp.float32)
    y = conv(x, w)
    err = float(jnp.max(jnp.abs(y - reference(x, w))) / jnp.max(jnp.abs(y)))
    if err > 1e-4:   # a timing of a wrong convolution would be meaningless
      raise SystemExit(f"--impl={args.impl} differs from lax.conv_general_dilated: {err:.2e}")
    g = jnp.ones_like(y)
    f_ms = _ms(fwd, x, w, n=args.repeats)
    g_ms = _ms(filter_grad, x, w, g, n=args.repeats)
    print(f"| {b} | {f_ms:.1f} | {g_ms:.1f} | {f_ms * 50 / b:.1f} | {g_ms * 50 / b:.1f} |")


if __name__ == "__main__":
  main()
