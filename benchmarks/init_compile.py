"""XLA CPU compile time of each model's init program: XLA's default options against the options
`models.registry.init_params` pins on a CPU, and whether both give the same initial parameters.

    python benchmarks/init_compile.py                      # every model of the zoo
    python benchmarks/init_compile.py --models=resnet18,mobilenet_v2_gn

The init program is a threefry draw for every parameter and runs once per experiment, so its
compile time is what a CPU run pays for it at start-up. A row whose `same bits` column reads
False means the pinned options change a model's initial parameters: the pin must then go.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.models import get_model
from fedjax_sharp.models import registry

# (model, input shape without the batch axis): the shapes the configs feed them.
ZOO = [
    ("linear", (28, 28, 1)), ("mlp", (28, 28, 1)), ("mcmahan_cnn", (28, 28, 1)),
    ("lenet5", (32, 32, 3)), ("resnet8", (32, 32, 3)), ("resnet18", (32, 32, 3)),
    ("vgg11", (32, 32, 3)), ("vgg11_gn", (32, 32, 3)), ("vit_small", (32, 32, 3)),
    ("mobilenet_v2_gn", (64, 64, 3)), ("fasttext", (200,)), ("char_lstm", (80,)),
    ("word_lstm", (20,)),
]
TOKEN_MODELS = ("fasttext", "char_lstm", "word_lstm")


def compare(name: str, shape: tuple[int, ...], seed: int = 3) -> dict:
  """Compiles `name`'s init program with XLA's defaults and with the pinned options; returns
  both compile times (s) and whether the two programs give the same bits."""
  model = get_model(name, 10)
  dtype = jnp.int32 if name in TOKEN_MODELS else jnp.float32
  lowered = jax.jit(lambda k: model.init(k, jnp.zeros((1, *shape), dtype))["params"]).lower(
      jax.random.key(seed))
  row, leaves = {}, {}
  for label, options in (("default", None), ("pinned", registry.CPU_INIT_OPTIONS)):
    t0 = time.perf_counter()
    compiled = lowered.compile(compiler_options=options)
    row[label] = time.perf_counter() - t0
    leaves[label] = [np.asarray(a) for a in jax.tree.leaves(compiled(jax.random.key(seed)))]
  row["same_bits"] = all(np.array_equal(a, b) for a, b in zip(leaves["default"], leaves["pinned"]))
  return row


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default="", help="comma-separated names (default: the zoo)")
  args = parser.parse_args(argv)
  names = [n for n in args.models.split(",") if n]
  cases = [(n, s) for n, s in ZOO if not names or n in names]
  unknown = set(names) - {n for n, _ in ZOO}
  if unknown:
    parser.error(f"--models: {sorted(unknown)} not among {[n for n, _ in ZOO]}")
  print(f"backend {jax.default_backend()}, jax {jax.__version__}, pinned options "
        f"{registry.CPU_INIT_OPTIONS}")
  print(f"{'model':16s} {'input':>10s} {'default s':>10s} {'pinned s':>9s} {'ratio':>6s}  same bits")
  rows = []
  for name, shape in cases:
    row = dict(model=name, input="x".join(map(str, shape)), **compare(name, shape))
    rows.append(row)
    print(f"{name:16s} {row['input']:>10s} {row['default']:10.2f} {row['pinned']:9.2f} "
          f"{row['default'] / row['pinned']:5.1f}x  {row['same_bits']}", flush=True)
  return rows


if __name__ == "__main__":
  main()
