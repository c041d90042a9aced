"""Per-round wall time of each execution strategy, CIFAR-10 CNN setting.

FedAvg, McMahan CNN on 32x32x3 inputs, 10 clients x 50 local steps x batch 50 (500
client-steps per round, the FedGMT paper's CIFAR-10 round: 10 clients x E = 5 x 500 examples /
B = 50), SGD with momentum, on whatever backend JAX finds. Synthetic uint8 images: timing only.

    python benchmarks/round_time.py                      # all strategies
    python benchmarks/round_time.py --strategies=host/unrolled,vmap/rolled --rounds=3
    python benchmarks/round_time.py --algorithms=fedavg,feddyn,fedgmt,fedgmt_v2  # cost per algorithm
    python benchmarks/round_time.py --algorithms=all --input=28x28x1 --steps=10 --rounds=3
    python benchmarks/round_time.py --model=lenet5 --input=28x28x1 --clients=5 --steps=8 \
        --batch=64 --rounds=5 --algorithms='fedavg,fedavg[engine.micro_batch=16]'
    python benchmarks/round_time.py --algorithms='fedavg,fedavg[dp.enabled=True]'  # DP's cost
    python benchmarks/round_time.py --population=100 --steps=10 --rounds=6 \
        --algorithms='fedavg[dp.enabled=True],fedavg[dp.enabled=True,engine.sampling=poisson]'

With --population M > --clients m the clients are m of M (the training examples split among all
M); a variant with `engine.sampling=poisson` times a round whose Poisson draw has exactly m
clients, padded as a run pads it (`core.cohort.poisson_max_cohort`: 27 of M = 100 for m = 10),
so the row against the fixed-size round is the cost of the padding alone.

For every strategy it first times a small probe round (2 clients x 5 steps). When the probe
predicts that the full round exceeds --budget_s, the full round is not run and the table shows
the figure extrapolated from the probe, marked '~' (XLA CPU runs convolutions inside while
loops ~35x slower, so rolled strategies would take many minutes per round there).
Columns: compile (first call, includes tracing), round time (median of --rounds timed calls),
client-steps per second, and examples per second.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.algorithms import build_algorithm
from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData
from fedjax_sharp.core.execution import Footprint
from fedjax_sharp.models import get_model, in_pieces, init_params
from fedjax_sharp.models.registry import (resolve_compute_dtype, resolve_conv_impl,
                                          with_compute_dtype)
from fedjax_sharp.training.config import base_config
from fedjax_sharp.training.experiment import apply_privacy

ALL = ("host/unrolled", "unrolled/unrolled", "vmap/rolled", "vmap/partial", "vmap/unrolled",
       "map/rolled", "chunked_vmap/rolled", "host/rolled")


def time_strategy(strategy: str, clients: int, steps: int, batch: int, rounds: int, chunk: int,
                  unroll: int, algorithm: str = "fedavg", shape=(32, 32, 3),
                  conv_impl: str = "xla"):
  client_strategy, local_loop = strategy.split("/")
  model = get_model("mcmahan_cnn", 10, conv_impl=conv_impl)
  params = init_params(model, jax.random.key(0), shape)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  config = base_config()
  config.algorithm.name = algorithm
  alg = build_algorithm(config, apply_fn)  # paper defaults; momentum 0.9, wd 1e-5
  rng = np.random.default_rng(0)
  n = clients * steps * batch
  x = jnp.asarray(rng.integers(0, 256, (n, *shape), dtype=np.uint8))
  y = jnp.asarray(rng.integers(0, 10, n).astype(np.int32))
  parts = np.array_split(np.arange(n), clients)
  sampler = CohortSampler(parts, clients, batch, local_steps=steps, seed=0)
  engine = RoundEngine(alg, clients, ExecutionConfig(client_strategy, chunk, local_loop, unroll),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
  server, table = engine.init(params)
  data = TrainData(x, y)
  cohort = sampler.build(0)

  def one(t):
    nonlocal server, table
    info = RoundInfo(jnp.int32(t), jnp.float32(0.01), clients)
    server, table, m = engine.round(server, table, data, cohort, info, jax.random.key(1))
    jax.block_until_ready((server, m))

  t0 = time.perf_counter()
  one(0)
  compile_s = time.perf_counter() - t0
  times = []
  for t in range(rounds):
    t0 = time.perf_counter()
    one(t + 1)
    times.append(time.perf_counter() - t0)
  return compile_s, statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--strategies", default=",".join(ALL))
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--batch", type=int, default=50)
  parser.add_argument("--rounds", type=int, default=2, help="timed rounds after the first")
  parser.add_argument("--chunk", type=int, default=5)
  parser.add_argument("--unroll", type=int, default=5)
  parser.add_argument("--budget_s", type=float, default=120.0,
                      help="skip (extrapolate) full rounds predicted to take longer")
  parser.add_argument("--algorithms", default="",
                      help="instead of strategies: time these algorithms (comma-separated, or "
                           "'all' for every registered one, FedAvg first) with the backend's "
                           "default strategy, interleaved, relative to the first")
  parser.add_argument("--input", default="32x32x3", help="image shape, e.g. 28x28x1")
  parser.add_argument("--conv_impls", default="xla",
                      help="model.conv_impl values to time each strategy with, e.g. xla,matmul")
  parser.add_argument("--model", default="mcmahan_cnn",
                      help="model for --algorithms (strategies always time the McMahan CNN)")
  parser.add_argument("--population", type=int, default=0,
                      help="--algorithms: the clients are --clients of this many (0: all of "
                           "them take part); a variant with engine.sampling=poisson times a "
                           "padded Poisson round of exactly --clients clients")
  args = parser.parse_args()
  shape = tuple(int(v) for v in args.input.split("x"))
  if args.algorithms:
    return compare_algorithms(args, shape)

  device = jax.devices()[0]
  print(f"backend: {jax.default_backend()} ({device.device_kind}), jax {jax.__version__}")
  print(f"setting: FedAvg, McMahan CNN {args.input}, {args.clients} clients x {args.steps} "
        f"steps x batch {args.batch} = {args.clients * args.steps} client-steps per round\n")
  header = (f"{'strategy (clients/local)':<26} {'conv':>6} {'compile s':>10} {'round s':>9} "
            f"{'steps/s':>9} {'examples/s':>11}  note")
  print(header)
  print("-" * len(header))
  full_steps = args.clients * args.steps
  for strategy, conv_impl in [(st, ci) for st in args.strategies.split(",")
                              for ci in args.conv_impls.split(",")]:
    pc, ps = min(2, args.clients), min(5, args.steps)
    p_compile, p_round = time_strategy(strategy, pc, ps, args.batch, 1, min(args.chunk, pc),
                                       args.unroll, shape=shape, conv_impl=conv_impl)
    per_step = p_round / (pc * ps)
    predicted = per_step * full_steps
    note = ""
    if predicted > args.budget_s or (strategy.startswith("unrolled") and full_steps > 100
                                     and jax.default_backend() == "cpu"):
      compile_s, round_s, mark = float("nan"), predicted, "~"
      note = (f"extrapolated from a {pc}x{ps} probe "
              f"(probe compile {p_compile:.1f} s, {per_step * 1e3:.1f} ms/client-step)")
    else:
      compile_s, round_s = time_strategy(strategy, args.clients, args.steps, args.batch,
                                         args.rounds, args.chunk, args.unroll, shape=shape,
                                         conv_impl=conv_impl)
      mark = ""
    steps_s = full_steps / round_s
    print(f"{strategy:<26} {conv_impl:>6} {compile_s:>10.1f} {mark + f'{round_s:.2f}':>9} "
          f"{mark + f'{steps_s:.1f}':>9} {mark + f'{steps_s * args.batch:.0f}':>11}  {note}",
          flush=True)


@functools.lru_cache(maxsize=None)
def _initial(model_name: str, shape, conv_impl: str = "xla", num_classes: int = 10,
             fields: tuple = ()) -> tuple:
  """(model, initial parameters), initialised once per model, input shape, conv_impl, classes
  and model fields (each `init_params` compiles the model's init: ~1 s on a CPU). Shared
  safely: `engine.init` copies every leaf that aliases the parameters it is given, so the
  donating rounds never delete them. The parameters do not depend on conv_impl (same names,
  shapes and initial values)."""
  model = get_model(model_name, num_classes, conv_impl=conv_impl, **dict(fields))
  return model, init_params(model, jax.random.key(0), shape)


def lowered_flops(fn, *args) -> float:
  """FLOPs of `jax.jit(fn)(*args)` as XLA's HLO cost analysis counts them in the *lowered*
  program, before any backend pass: the same count on every backend. (The GPU's compiled
  program hands convolutions to cuDNN as custom calls, which its compiled cost analysis does
  not count: it read 7x low on an H100.) The program is lowered for the CPU, whatever the
  default backend, because jax implements `Lowered.cost_analysis` only there (the GPU and TPU
  plugins raise NotImplementedError); only shapes and dtypes of `args` are used. A loop body is
  counted once."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top
  specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), args)
  lowered = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cpu",))
  # Lowered.cost_analysis asks the default backend's client, which on a GPU is a PJRT plugin
  # without it: ask the CPU client for the same module.
  module = lowered.compiler_ir("hlo").as_hlo_module()
  cost = _jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), module)
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float((cost or {}).get("flops", float("nan")))


def compiled_flops(fn, *args, compiler_options=None) -> float:
  """The same count from the backend-compiled program (right on a CPU only; the check that
  `lowered_flops` agrees with it there is a test). `compiler_options`: XLA options for that
  compile (the count is the cost analysis of the program after XLA's HLO passes)."""
  cost = jax.jit(fn).lower(*args).compile(compiler_options).cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float((cost or {}).get("flops", float("nan")))


def flops_per_step(engine, server, table, data, cohort) -> float:
  """FLOPs of one local step of the cohort's first client (forward, backward and the
  algorithm's extra passes, e.g. SAM's second gradient or FedGMT's teacher forward), counted in
  the lowered program (`lowered_flops`); the round's training FLOPs are this times the real
  steps of the cohort (aggregation and the server update are not counted: they are
  O(parameters), not O(examples))."""
  from fedjax_sharp.core import tree  # pylint: disable=g-import-not-at-top
  info = RoundInfo(jnp.int32(0), jnp.float32(0.01), engine.num_clients)
  bcast, states, infos, round_key = engine.prepare(server, table, cohort, info,
                                                    jax.random.key(1))
  idx, emask, smask = cohort.batch_idx[0], cohort.example_mask[0], cohort.step_mask[0]
  local, metrics, client_key = engine.client_start(
      bcast, tree.index(states, 0), tree.index(infos, 0), info, data, idx[0], emask[0],
      round_key)
  return lowered_flops(engine.run_steps, local, metrics, info, data, jnp.arange(1),
                       idx[:1], emask[:1], smask[:1], client_key)


def resolved_strategy(strategy: str, clients: int) -> str:
  """'client_strategy/local_loop' with 'auto' resolved as a run resolves it for a cohort of
  `clients` on this backend (the device's memory is not weighed here)."""
  client_strategy, local_loop = strategy.split("/")
  got = ExecutionConfig(client_strategy, local_loop=local_loop).resolved(
      footprint=Footprint(clients, 0, None))
  return f"{got.client_strategy}/{got.local_loop}"


def variant(name: str, conv_impl: str, compute_dtype: str) -> str:
  """compare.py's variant string: the algorithm (or a variant of it, 'fedavg[...]') with the
  model options added."""
  base, _, options = name.partition("[")
  options = options.rstrip("]")
  return (f"{base}[{options + ',' if options else ''}model.conv_impl={conv_impl},"
          f"model.compute_dtype={compute_dtype}]")


class _Timed:
  """One algorithm's engine on the benchmark cohort, compiled once, timed round by round."""

  def __init__(self, variant: str, strategy: str, args, shape):
    from fedjax_sharp.training import compare
    self.strategy = resolved_strategy(strategy, args.clients)
    client_strategy, local_loop = self.strategy.split("/")
    config = compare.configure_variant(base_config(), variant, seed=0)
    # e.g. 'fedavg[model.conv_impl=matmul,model.compute_dtype=bfloat16]'; 'auto' (the
    # defaults) resolved for this backend and strategy as a run resolves it.
    self.compute_dtype = resolve_compute_dtype(str(config.model.compute_dtype))
    self.conv_impl = resolve_conv_impl(str(config.model.conv_impl), self.compute_dtype,
                                       client_strategy, clients=args.clients)
    fields = tuple(sorted(dict(config.model.get(args.model) or {}).items()))
    model, params = _initial(args.model, tuple(shape), self.conv_impl,
                             getattr(args, "num_classes", 10), fields)
    apply_fn = with_compute_dtype(lambda p, x: model.apply({"params": p}, x), self.compute_dtype)
    apply_fn = in_pieces(apply_fn, int(config.engine.micro_batch))  # 'fedavg[engine.micro_batch=16]'
    # Paper defaults of each block; 'fedavg[dp.enabled=True]' wraps it in the DP mechanism
    # (accounted as full participation of the benchmark's clients).
    config.clients_per_round = args.clients
    population = max(getattr(args, "population", 0) or args.clients, args.clients)
    self.algorithm, _ = apply_privacy(config, build_algorithm(config, apply_fn), params,
                                      population)
    rng = np.random.default_rng(0)
    n = args.clients * args.steps * args.batch
    self.data = TrainData(jnp.asarray(rng.integers(0, 256, (n, *shape), dtype=np.uint8)),
                          jnp.asarray(rng.integers(0, 10, n).astype(np.int32)))
    parts = np.array_split(np.arange(n), population)
    sampler = CohortSampler(parts, args.clients, args.batch, local_steps=args.steps, seed=0,
                            sampling=str(config.engine.sampling),
                            weighting="uniform" if self.algorithm.privacy else "examples",
                            fixed_denominator=self.algorithm.privacy is not None)
    # A Poisson variant: the first round that drew exactly m clients (padded as a run pads).
    first = next(t for t in range(10_000) if sampler.cohort_size(t) == args.clients)
    self.cohort = sampler.build(first)
    self.engine = RoundEngine(self.algorithm, population,
                              ExecutionConfig(client_strategy, args.chunk, local_loop, args.unroll),
                              preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
    self.server, self.table = self.engine.init(params)
    self.clients, self.t = population, 0
    self.steps = int(np.asarray(self.cohort.step_mask).sum())
    self.compile_s = self.round()  # the first call compiles

  @functools.cached_property
  def flops(self) -> float:
    """Training FLOPs of one round (`flops_per_step` x the cohort's real steps; lowers a
    one-step program the first time)."""
    return self.steps * flops_per_step(self.engine, self.server, self.table, self.data,
                                       self.cohort)

  def round(self) -> float:
    t0 = time.perf_counter()
    info = RoundInfo(jnp.int32(self.t), jnp.float32(0.01), self.clients)
    self.server, self.table, m = self.engine.round(self.server, self.table, self.data,
                                                   self.cohort, info, jax.random.key(1))
    jax.block_until_ready((self.server, m))
    self.t += 1
    return time.perf_counter() - t0


def compare_algorithms(args, shape):
  """Per-round time of each algorithm (or variant, e.g. 'fedgloss[client_optimizer=sam]') on
  the same cohort: every engine is compiled first, then the timed rounds are interleaved so that
  load from other processes hits every algorithm alike; the median is reported."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.training import compare
  strategy = "/".join((lambda e: (e.client_strategy, e.local_loop))(ExecutionConfig().resolved()))
  names = (["fedavg"] + sorted(set(ALGORITHMS) - {"fedavg"}) if args.algorithms == "all"
           else compare.parse_algorithms(args.algorithms))
  unknown = sorted({compare.parse_variant(n)[0] for n in names} - set(ALGORITHMS))
  if unknown:
    raise SystemExit(f"--algorithms: {unknown} not in {sorted(ALGORITHMS)}")
  print(f"backend: {jax.default_backend()}, strategy {strategy}, {args.model} {args.input}, "
        f"{args.clients} clients{f' of {args.population}' if args.population else ''} x "
        f"{args.steps} steps x batch {args.batch}, {args.rounds} interleaved repetitions\n",
        flush=True)
  engines = {}
  for name in names:
    engines[name] = _Timed(name, strategy, args, shape)
    print(f"  compiled {name}: {engines[name].compile_s:.1f} s", flush=True)
  times = {name: [] for name in names}
  for rep in range(args.rounds):
    for name in names:
      times[name].append(engines[name].round())
  base = statistics.median(times[names[0]])
  width = max(12, max(len(n) for n in names))
  print(f"\n{'algorithm':<{width}} {'round s':>9} {'vs ' + names[0]:>10} {'compile s':>10} "
        f"{'cohort':>7} {'vectors down/up':>16}")
  for name in names:
    comm = engines[name].algorithm.communication
    med = statistics.median(times[name])
    ids = np.asarray(engines[name].cohort.client_ids)
    cohort = f"{int((ids < engines[name].clients).sum())}/{len(ids)}"   # real / padded size
    print(f"{name:<{width}} {med:>9.2f} {med / base:>9.2f}x {engines[name].compile_s:>10.1f} "
          f"{cohort:>7} {f'{comm.down:g} / {comm.up:g}':>16}")


if __name__ == "__main__":
  main()
