"""Cost of analysing one final model: lambda_max (20 power iterations), the Hessian trace (100
Hutchinson probes), SAM sharpness, and a 21 x 21 loss landscape, on 2,000 test examples.

McMahan CNN on Fashion-MNIST (28x28x1; the embedded digits' shape with --data=digits), a
randomly initialised model (the cost does not depend on the weights).

    python benchmarks/analysis.py                  # the issue's protocol
    python benchmarks/analysis.py --grid=11 --probes=20 --examples=500
    python benchmarks/analysis.py --parts=lambda,sam --reverse_batch=500   # whole batches
"""
from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.analysis import hessian, landscape, sharpness
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.training.config import base_config


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default="auto", choices=("auto", "fashion_mnist", "digits"))
  parser.add_argument("--examples", type=int, default=2000)
  parser.add_argument("--iters", type=int, default=20)
  parser.add_argument("--probes", type=int, default=100)
  parser.add_argument("--grid", type=int, default=21)
  parser.add_argument("--batch", type=int, default=500)
  parser.add_argument("--reverse_batch", type=int, default=None,
                      help="examples per gradient / Hessian-vector product call (default: "
                           "hessian.default_reverse_batch: 50 on one CPU core, else whole "
                           "batches)")
  parser.add_argument("--parts", default="lambda,trace,sam,landscape",
                      help="comma-separated subset of lambda,trace,sam,landscape")
  args = parser.parse_args()
  name = args.data
  if name == "auto":
    name = "fashion_mnist" if os.path.isdir("/usr/share/datasets/fashion-mnist") else "digits"
  cfg = base_config().data
  cfg.source, cfg.name = ("idx" if name == "fashion_mnist" else "embedded"), name
  ds = data_lib.load_dataset(cfg)
  model = get_model("mcmahan_cnn", ds.num_classes)
  params = init_params(model, jax.random.key(0), ds.input_shape)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  pre = lambda x, key: (x.astype(np.float32) / 255.0)
  batches = hessian.cross_entropy_batches(ds.x_test, ds.y_test, args.batch, pre, args.examples)
  loss_fn = sharpness.cross_entropy_loss(apply_fn)
  parts = set(args.parts.split(","))
  unknown = parts - {"lambda", "trace", "sam", "landscape"}
  if unknown:
    parser.error(f"--parts: unknown {sorted(unknown)}; allowed lambda,trace,sam,landscape")
  rb = args.reverse_batch
  rows = []
  if "lambda" in parts:
    t0 = time.time()
    lam = hessian.top_eigenvalues(loss_fn, params, batches, k=1, iters=args.iters,
                                  reverse_batch=rb)
    rows.append((f"lambda_max, power iteration, {args.iters} iterations", time.time() - t0,
                 f"{lam[0]:.4g}"))
  if "trace" in parts:
    t0 = time.time()
    tr = sharpness.hutchinson_trace(loss_fn, params, batches, num_probes=args.probes)
    rows.append((f"Hessian trace, {args.probes} Rademacher probes", time.time() - t0,
                 f"{tr['trace']:.4g} +- {tr['stderr']:.2g}"))
  if "sam" in parts:
    t0 = time.time()
    sam = sharpness.sam_sharpness(loss_fn, params, batches, rho=0.05, reverse_batch=rb)
    rows.append(("SAM sharpness, rho 0.05", time.time() - t0, f"{sam['sam_sharpness']:.4g}"))
  if "landscape" in parts:
    t0 = time.time()
    surf = landscape.surface(loss_fn, params, batches, jax.random.key(0), num=args.grid)
    rows.append((f"landscape {args.grid} x {args.grid}", time.time() - t0,
                 f"centre loss {surf['loss'][args.grid // 2, args.grid // 2]:.4g}"))
  total = sum(r[1] for r in rows)
  examples = len(ds.y_test[:args.examples])
  print(f"\nbackend {jax.default_backend()}, McMahan CNN on {name}, {examples}"
        f" test examples, batches of {args.batch}, reverse-mode pieces of "
        f"{hessian.default_reverse_batch(rb) or args.batch}\n")
  print("| analysis | seconds | value |")
  print("|---|---|---|")
  for what, sec, value in rows:
    print(f"| {what} | {sec:.1f} | {value} |")
  print(f"| total | {total:.1f} | |")


if __name__ == "__main__":
  main()
