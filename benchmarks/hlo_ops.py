"""What a round and a sweep round reach the kernels as: the compiled program's operations.

For FedAvg on the McMahan CNN (vmap over clients, rolled local loop), compiles one round of C
clients and one `sweep_round` of S experiments x C clients, with `model.conv_impl` 'xla' and
'matmul', and counts in the optimised HLO (`compiled.as_text()`, this backend) the convolutions
(with their `feature_group_count` / `batch_group_count`: C or S*C groups = per-client weights
run as one grouped convolution), the dot products (with their batch dimensions: a batched GEMM
over C or S*C clients) and the while loops. What it checks: the experiment axis of a sweep
and the client axis meet in the same operation (S*C groups or batch S x C), not as S rounds in
a row.

    python benchmarks/hlo_ops.py                       # S = 3, C = 10, small shapes
    python benchmarks/hlo_ops.py --experiments=3 --clients=10 --input=32x32x3

`--local_step` prints instead what one local step of a rolled loop costs in the optimised
program: the operations of the while loop's body (FedAvg with momentum, the McMahan CNN), by
client strategy and compute dtype. On a GPU each fusion and copy there is a kernel run at every
step; on a CPU the same counts are the proxy for the step's work outside its convolutions and
dots. (A GPU's program holds its cuDNN convolutions and cuBLAS GEMMs as custom calls.)

    python benchmarks/hlo_ops.py --local_step --clients=4 --steps=3 --batch=8 --input=32x32x3
"""
from __future__ import annotations

import argparse
import collections
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.algorithms import build_algorithm
from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData, tree
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.models.registry import with_compute_dtype
from fedjax_sharp.training.config import base_config

_OP = re.compile(r"=.*?\s(convolution|dot|while)\(")


def _compile_options():
  """The operations are read from the program after XLA's HLO passes; on a CPU the backend's
  (LLVM's) optimisation level leaves those alone, and level 0 compiles ~1.6x faster."""
  return {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None


def op_summary(hlo: str) -> dict:
  """Counts of convolution / dot / while ops in HLO text, with the conv group counts and the
  dots' batch dimension sizes."""
  counts = collections.Counter()
  groups, dot_batches = collections.Counter(), collections.Counter()
  for line in hlo.splitlines():
    m = _OP.search(line)
    if not m:
      continue
    kind = m.group(1)
    counts[kind] += 1
    if kind == "convolution":
      g = re.search(r"feature_group_count=(\d+)", line)
      b = re.search(r"batch_group_count=(\d+)", line)
      groups[f"feature_groups={g.group(1) if g else 1}"
             + (f",batch_groups={b.group(1)}" if b else "")] += 1
    if kind == "dot":
      dims = re.search(r"lhs_batch_dims=\{([\d,]*)\}", line)
      shape = re.search(r"=\s*\w+\[([\d,]*)\]", line)
      if dims and dims.group(1) and shape:
        sizes = [int(v) for v in shape.group(1).split(",")]
        batch = [sizes[i] for i in range(len(dims.group(1).split(",")))]
        dot_batches["x".join(map(str, batch))] += 1
      else:
        dot_batches["none"] += 1
  return {"convolution": counts["convolution"], "conv groups": dict(groups),
          "dot": counts["dot"], "dot batch dims": dict(dot_batches), "while": counts["while"],
          "library": library_ops(hlo)}


_CALLS = re.compile(r"calls=(%[\w.\-]+)")
_HEADER = re.compile(r"^(?:ENTRY )?(%[\w.\-]+) ")
_LIBRARY_OP = re.compile(r"=.*?\s(convolution|dot|reduce)\(")


def computations(hlo: str) -> dict[str, list[str]]:
  """The instruction lines of each computation of an HLO module, by name."""
  comps, name = {}, None
  for line in hlo.splitlines():
    header = _HEADER.match(line)
    if header and line.rstrip().endswith("{"):
      name = header.group(1)
      comps[name] = []
    elif name and line.strip() == "}":
      name = None
    elif name:
      comps[name].append(line)
  return comps


def library_ops(hlo: str) -> dict:
  """Convolutions, dots and reductions that XLA's CPU backend hands to the YNNPACK library
  (inside `__ynn_fusion` fusions), by kind; the library's programs keep convolutions and
  reductions out of it (`backends.compiler_options`)."""
  called = {m.group(1) for line in hlo.splitlines() if '"__ynn_fusion"' in line
            for m in [_CALLS.search(line)] if m}
  comps = computations(hlo)
  return dict(collections.Counter(m.group(1) for name in called for line in comps.get(name, ())
                                  if (m := _LIBRARY_OP.search(line))))


_BODY = re.compile(r"body=(%[\w.\-]+)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = .*? ([\w\-]+)\(")   # after the shape
_TO_APPLY = re.compile(r"to_apply=(%[\w.\-]+)")


def local_step_ops(hlo: str) -> collections.Counter:
  """Operations of the local step: the body of the while loop holding the most convolutions,
  dots and library calls (tuple plumbing, parameters and constants left out). Computations the
  body `call`s (a GPU's command buffers) are counted in place of the call."""
  comps = computations(hlo)
  bodies = [m.group(1) for lines in comps.values() for line in lines
            if " while(" in line and (m := _BODY.search(line))]
  if not bodies:
    raise ValueError("the program has no while loop")

  def ops_of(name: str) -> collections.Counter:
    ops = collections.Counter()
    for line in comps[name]:
      m = _INSTRUCTION.search(line)
      callee = _TO_APPLY.search(line) if m and m.group(1) == "call" else None
      if callee and callee.group(1) in comps:
        ops += ops_of(callee.group(1))
      elif m:
        ops[m.group(1)] += 1
    return ops

  kernels = ("convolution", "dot", "custom-call")   # a GPU's cuDNN and cuBLAS: custom calls
  body = max(bodies, key=lambda b: sum(ops_of(b)[k] for k in kernels)
             + sum("ynn_fusion" in line for line in comps[b]))
  ops = ops_of(body)
  for plumbing in ("get-tuple-element", "tuple", "parameter", "constant", "bitcast"):
    ops.pop(plumbing, None)
  return ops


def _fedavg(client_strategy: str, clients: int, steps: int, batch: int, shape,
            conv_impl: str = "xla", compute_dtype: str = "float32", momentum=None):
  """FedAvg on the McMahan CNN with a rolled local loop and uint8 inputs scaled by 1/255:
  (engine, initial parameters, training data, each client's example indices)."""
  model = get_model("mcmahan_cnn", 10, conv_impl=conv_impl)
  apply_fn = with_compute_dtype(lambda p, x: model.apply({"params": p}, x), compute_dtype)
  config = base_config()
  config.algorithm.name = "fedavg"
  config.local.momentum = momentum
  engine = RoundEngine(build_algorithm(config, apply_fn), clients,
                       ExecutionConfig(client_strategy, local_loop="rolled"),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
  rng = np.random.default_rng(0)
  n = clients * steps * batch
  data = TrainData(jnp.asarray(rng.integers(0, 256, (n, *shape), dtype=np.uint8)),
                   jnp.asarray(rng.integers(0, 10, n).astype(np.int32)))
  return (engine, init_params(model, jax.random.key(0), shape), data,
          np.array_split(np.arange(n), clients))


def _round_hlo(engine, params, data, cohort, clients: int) -> str:
  """The optimised HLO of `engine`'s round from `params` on `cohort`."""
  server, table = engine.init(params)
  info = RoundInfo(jnp.int32(0), jnp.float32(0.01), clients)
  return engine._jit_round.lower(server, table, data, cohort, info, jax.random.key(0)).compile(  # pylint: disable=protected-access
      _compile_options()).as_text()


def local_step_program(client_strategy: str, compute_dtype: str, clients: int, steps: int,
                       batch: int, shape) -> str:
  """The optimised HLO of FedAvg's round (momentum 0.9, rolled local loop) under
  `client_strategy`, the model computing in `compute_dtype`."""
  engine, params, data, parts = _fedavg(client_strategy, clients, steps, batch, shape,
                                        compute_dtype=compute_dtype, momentum=0.9)
  cohort = CohortSampler(parts, clients, batch, local_steps=steps, seed=0).build(0)
  return _round_hlo(engine, params, data, cohort, clients)


def programs(conv_impl: str, experiments: int, clients: int, steps: int, batch: int, shape):
  """(round HLO, sweep HLO) of FedAvg with `conv_impl`."""
  engine, params, data, parts = _fedavg("vmap", clients, steps, batch, shape, conv_impl)
  samplers = [CohortSampler(parts, clients, batch, local_steps=steps, seed=s)
              for s in range(experiments)]
  one = _round_hlo(engine, params, data, samplers[0].build(0), clients)
  states = [engine.init(params) for _ in range(experiments)]
  servers, tables = tree.stack([s for s, _ in states]), tree.stack([t for _, t in states])
  cohorts = tree.stack([s.build(0) for s in samplers])
  keys = jnp.stack([jax.random.key(s) for s in range(experiments)])
  rates = jnp.full((experiments,), 0.01, jnp.float32)
  sweep = engine._jit_sweep.lower(servers, tables, data, cohorts, jnp.int32(0), rates, keys,  # pylint: disable=protected-access
                                  {}).compile(_compile_options()).as_text()
  return one, sweep


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--experiments", type=int, default=3)
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--input", default="16x16x3")
  parser.add_argument("--local_step", action="store_true",
                      help="the operations of one local step of a rolled loop, by client "
                           "strategy and compute dtype")
  args = parser.parse_args(argv)
  shape = tuple(int(v) for v in args.input.split("x"))
  if args.local_step:
    print(f"backend: {jax.default_backend()}, jax {jax.__version__}; FedAvg (momentum 0.9), "
          f"McMahan CNN {args.input}, {args.clients} clients x {args.steps} steps x batch "
          f"{args.batch}, rolled local loop: the loop body's operations\n")
    print("| client strategy | compute dtype | operations | fusions | copies | convolutions | "
          "dots | custom calls |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for strategy, dtype in itertools.product(("map", "vmap"), ("float32", "bfloat16")):
      ops = local_step_ops(local_step_program(strategy, dtype, args.clients, args.steps,
                                              args.batch, shape))
      print(f"| {strategy} | {dtype} | {sum(ops.values())} | {ops['fusion']} | {ops['copy']} | "
            f"{ops['convolution']} | {ops['dot']} | {ops['custom-call']} |", flush=True)
    return
  print(f"backend: {jax.default_backend()}, jax {jax.__version__}; FedAvg, McMahan CNN "
        f"{args.input}, vmap/rolled, C = {args.clients} clients, S = {args.experiments} "
        f"experiments (sweep_round)\n")
  print("| program | conv_impl | convolutions (groups) | dots (batch dims) | while loops | in "
        "YNNPACK |")
  print("|---|---|---|---|---|---|", flush=True)
  for conv_impl in ("xla", "matmul"):
    one, sweep = programs(conv_impl, args.experiments, args.clients, args.steps, args.batch,
                          shape)
    for label, hlo in (("round", one), (f"sweep_round S={args.experiments}", sweep)):
      s = op_summary(hlo)
      print(f"| {label} | {conv_impl} | {s['convolution']} {s['conv groups'] or ''} | "
            f"{s['dot']} {s['dot batch dims']} | {s['while']} | {s['library'] or '-'} |",
            flush=True)


if __name__ == "__main__":
  main()
