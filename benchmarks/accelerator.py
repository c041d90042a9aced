"""Every accelerator figure of the scale issue in one command, printed as one table.

CIFAR-10 CNN setting of the FedGMT paper on synthetic data (McMahan CNN 32x32x3, 10 clients x
50 local steps x batch 50 per round, SGD momentum 0.9, wd 1e-5):
  1. the execution-strategy table (FedAvg),
  2. the per-algorithm cost (FedAvg, FedDyn, FedGMT, FedSAM, FedGloSS) with the default strategy,
  3. a 100-client round (vmap/rolled),
  4. a sweep: 3 seeds x 4 algorithms x --sweep_rounds rounds, each algorithm's 3 seeds as one
     compiled program (`RoundEngine.sweep_round`, own cohorts and keys per seed).
  5. --big: bigger models with the default settings, same round shape: ResNet-18 GN (the
     FedGloSS CIFAR stem; the FL-SAM authors' ImageNet stem, the row to compare with their
     PyTorch round) and VGG-11 GN, 100 classes (FedGloSS's CIFAR-100 setting).
Row 0 is the round a user gets who changes nothing ('auto' strategy, dtype and conv_impl,
resolved for this backend: core/backends.py). Each row is printed as soon as it is measured,
with its achieved TFLOP/s and the percentage of the device's peak. FLOPs: XLA's HLO cost
analysis of one *lowered* local step (before any backend pass, so the same count on every
backend; forward, backward and each algorithm's extra passes) times the round's real steps
(`round_time.flops_per_step`); aggregation and server updates (O(params)) are not counted.
(The GPU's compiled program hands convolutions to cuDNN as custom calls, which its compiled cost
analysis leaves out.) Peak: `--peak_tflops=FP32,BF16` (TFLOP/s), else the table KNOWN_PEAKS of
dense vendor figures by device kind, else none. Rows 1 cover `model.conv_impl` (xla | matmul)
x `model.compute_dtype` (float32 | bfloat16) x strategy; the later sections use --strategy,
--conv_impl and --compute_dtype (default: 'auto', the library defaults). --xla_flags appends
to XLA_FLAGS before JAX starts its backend (e.g. command buffers:
--xla_flags=--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL).

    python benchmarks/accelerator.py                 # on a GPU / TPU
    python benchmarks/accelerator.py --conv_impl=matmul --compute_dtype=bfloat16
    python benchmarks/accelerator.py --big --sweep_rounds=20
    python benchmarks/accelerator.py --small         # tiny shapes: runs anywhere in seconds (CI)

--check, the backend smoke check: every registered algorithm (the classification registry
`algorithms.registry.ALGORITHMS`, the minimax ones `minimax.algorithms.MINIMAX_ALGORITHMS`) for
2 rounds under the default strategy (`ExecutionConfig()`, 'auto' resolved for this backend) and
every other client strategy (vmap, map, chunked_vmap, host), with the engine's defaults
(buffer donation on). One row per algorithm x strategy, printed as soon as it is measured:
compile + first round, the second round, that round relative to the family's baseline under
the same strategy (FedAvg; Local SGDA, FedAvg's minimax counterpart, for the minimax
algorithms), and OK or FAILED with the exception's first line. A failure does not stop the
check; the exit status is 1 if any row failed. Classification runs the table's CNN setting
(--small: a linear model on 4x4x1 inputs, 4 clients x 2 steps x batch 4), minimax the
'quadratic' test problem (every client one coefficient row, K local steps).

    python benchmarks/accelerator.py --check         # every algorithm x strategy on this backend
    python benchmarks/accelerator.py --check --small # tiny shapes (CI; ~1-2 min on 2 CPU cores)
    python benchmarks/accelerator.py --check --algorithms=fedavg,fedsmoo --strategies=auto,vmap

On a CPU without --small the rolled strategies take minutes per round (XLA CPU runs
convolutions inside loops slowly; docs/performance.md, "What 'auto' chooses on each backend"):
use benchmarks/round_time.py there. The targets these rows are measured against:
docs/performance.md, "Targets on the H100".
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import round_time  # pylint: disable=g-import-not-at-top

from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, TrainData, tree
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.models.registry import (resolve_compute_dtype, resolve_conv_impl,
                                          with_compute_dtype)
from fedjax_sharp.training import compare
from fedjax_sharp.training.config import base_config
from fedjax_sharp.algorithms import build_algorithm

STRATEGIES = ("vmap/rolled", "map/rolled", "chunked_vmap/rolled", "host/unrolled")
# --check: 'auto' (ExecutionConfig() resolved) and every other client strategy, each with the
# local loop it is run with (the accelerators' rolled scan; host: one unrolled step per call).
CHECK_STRATEGIES = {"vmap": "vmap/rolled", "map": "map/rolled",
                    "chunked_vmap": "chunked_vmap/rolled", "host": "host/unrolled"}
CHECK_BASELINES = ("fedavg", "local_sgda")   # the relative column's reference, per family
COST_ALGORITHMS = ("fedavg", "feddyn", "fedgmt", "fedsam", "fedgloss")
SWEEP_ALGORITHMS = ("fedavg", "feddyn", "fedgmt", "fedsam")
CONV_IMPLS, COMPUTE_DTYPES = ("xla", "matmul"), ("float32", "bfloat16")
# Dense peak TFLOP/s (float32 on CUDA cores, bfloat16 on tensor cores / MXUs), vendor figures,
# by a substring of `jax.devices()[0].device_kind`; first match wins. JAX's default matmul
# precision may run float32 through TF32 tensor cores on NVIDIA GPUs: a float32 row above 100%
# of the CUDA-core figure says so.
KNOWN_PEAKS = (("H200", 67.0, 989.0), ("H100 PCIe", 51.0, 756.0), ("H100", 67.0, 989.0),
               ("A100", 19.5, 312.0), ("L4", 30.3, 121.0), ("TPU v5p", None, 459.0),
               ("TPU v5 lite", None, 197.0), ("TPU v5e", None, 197.0), ("TPU v4", None, 275.0))


def peaks(arg: str = "") -> dict:
  """{'float32': TFLOP/s or None, 'bfloat16': ...} from --peak_tflops ('FP32,BF16' or one value
  for both) or KNOWN_PEAKS."""
  if arg:
    values = [float(v) if v.strip() else None for v in arg.split(",")]
    fp32, bf16 = (values * 2)[:2] if len(values) == 1 else values[:2]
    return {"float32": fp32, "bfloat16": bf16}
  kind = jax.devices()[0].device_kind
  for name, fp32, bf16 in KNOWN_PEAKS:
    if name.lower() in kind.lower():
      return {"float32": fp32, "bfloat16": bf16}
  return {"float32": None, "bfloat16": None}


def throughput(flops: float, seconds: float, dtype: str, peak: dict) -> tuple[str, str]:
  """('TFLOP/s', '% of peak') cells."""
  if not (flops == flops and seconds > 0):
    return "-", "-"
  tflops = flops / seconds / 1e12
  ref = peak.get(dtype)
  return f"{tflops:.3g}", (f"{100 * tflops / ref:.1f}%" if ref else "-")


variant = round_time.variant


def timed_sweep(algorithm: str, seeds, rounds: int, clients: int, steps: int, batch: int,
                shape, conv_impl: str = "xla", compute_dtype: str = "float32",
                strategy: str = "vmap/rolled") -> tuple[float, float]:
  """(compile s, total s for `rounds` rounds) of one algorithm's seeds as one program (vmapped
  over the seeds; `strategy` runs each seed's clients)."""
  model = get_model("mcmahan_cnn", 10,
                    conv_impl=conv_impl)
  apply_fn = with_compute_dtype(lambda p, x: model.apply({"params": p}, x),
                                resolve_compute_dtype(compute_dtype))
  alg = build_algorithm(compare.configure_variant(base_config(), algorithm, 0), apply_fn)
  rng = np.random.default_rng(0)
  pool = 10 * clients * batch
  data = TrainData(jnp.asarray(rng.integers(0, 256, (pool, *shape), dtype=np.uint8)),
                   jnp.asarray(rng.integers(0, 10, pool).astype(np.int32)))
  parts = np.array_split(np.arange(pool), 10 * clients)     # 10x more clients than sampled
  samplers = [CohortSampler(parts, clients, batch, local_steps=steps, seed=s) for s in seeds]
  client_strategy, local_loop = strategy.split("/")
  engine = RoundEngine(alg, len(parts), ExecutionConfig(client_strategy, local_loop=local_loop),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
  states = [engine.init(init_params(model, jax.random.key(s), shape)) for s in seeds]
  servers, tables = tree.stack([s for s, _ in states]), tree.stack([t for _, t in states])
  keys = jnp.stack([jax.random.key(s) for s in seeds])
  rates = [0.01] * len(seeds)
  compile_s, t_start = None, None
  for t in range(rounds + 1):
    t0 = time.perf_counter()
    cohorts = tree.stack([s.build(t) for s in samplers])
    servers, tables, m = engine.sweep_round(servers, tables, data, cohorts, t, rates, keys)
    jax.block_until_ready((servers, m))
    if t == 0:
      compile_s, t_start = time.perf_counter() - t0, time.perf_counter()
  return compile_s, time.perf_counter() - t_start


def fast_compiles() -> None:
  """XLA CPU code generation without LLVM's optimisations (`--xla_backend_optimization_level=0`
  unless XLA_FLAGS sets the level): compiles ~1.5x faster, and --check --small compiles ~300
  tiny programs whose run time means nothing. The HLO passes (buffer donation and
  aliasing included) run as always. No effect once JAX has started its backends."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_backend_optimization_level" not in flags and not xla_bridge.backends_are_initialized():
    os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()


class _MinimaxTimed(round_time._Timed):
  """A minimax algorithm's engine on the 'quadratic' test problem, built as experiments build
  it (`training.loop.build_experiment`); timed like the classification ones."""

  def __init__(self, name: str, strategy: str, clients: int, steps: int, chunk: int):
    from fedjax_sharp.training import loop  # pylint: disable=g-import-not-at-top
    client_strategy, local_loop = strategy.split("/")
    config = base_config()
    config.task.name = "quadratic"
    config.task.quadratic.num_clients = clients
    config.clients_per_round, config.aggregation, config.local.steps = clients, "uniform", steps
    config.algorithm.name = name
    config.engine.update(client_strategy=client_strategy, local_loop=local_loop,
                         chunk_size=chunk)
    exp = loop.build_experiment(config)
    self.algorithm, self.engine, self.data = exp.algorithm, exp.engine, exp.train_data
    self.cohort = exp.sampler.build(0)
    self.server, self.table = self.engine.init(exp.init_params)
    self.clients, self.t = clients, 0
    self.compile_s = self.round()  # the first call compiles


def check_strategies(selected: str = "") -> list[tuple[str, str]]:
  """[(label, 'client_strategy/local_loop')] for --check: 'auto' (the default ExecutionConfig,
  resolved by the engine for this backend), then every other client strategy; `selected`
  (comma-separated names) picks some, including the one 'auto' resolves to."""
  auto = ExecutionConfig().resolved()
  default = f"{auto.client_strategy}/{auto.local_loop}"
  every = [(f"auto ({default})", "auto/auto")] + [(spec, spec) for spec in
                                                    CHECK_STRATEGIES.values()]
  if not selected:
    return [every[0]] + [(l, s) for l, s in every[1:] if s.split("/")[0] != auto.client_strategy]
  names = [n.strip() for n in selected.split(",") if n.strip()]
  unknown = sorted(set(names) - {"auto", *CHECK_STRATEGIES})
  if unknown:
    raise SystemExit(f"--strategies: {unknown} not in {['auto', *CHECK_STRATEGIES]}")
  return [every[0]] * ("auto" in names) + [(CHECK_STRATEGIES[n],) * 2 for n in names
                                          if n != "auto"]


def run_check(names, strategies, make_timer, out=sys.stdout) -> list[str]:
  """Runs `make_timer(name, strategy)` (compiles and runs round 1: `.compile_s`) and its
  `.round()` (round 2) for every strategy x name, printing each row as soon as it is measured;
  an exception fails its row only. Returns the failed rows' 'name (strategy)'. A row's relative
  column divides by the round time of the first of CHECK_BASELINES of its family (`names`
  entries are (name, family)) under the same strategy, when that was measured."""
  print("| algorithm | strategy | compile + round 1 s | round 2 s | round 2 vs baseline | "
        "status |", file=out)
  print("|---|---|---|---|---|---|", file=out, flush=True)
  failed, t0 = [], time.perf_counter()
  seconds = lambda v, digits: "-" if v != v else f"{v:.{digits}f}"   # nan: not measured
  for label, strategy in strategies:
    base = {}
    for name, family in names:
      compile_s = round_s = float("nan")
      timer = None
      try:
        timer = make_timer(name, strategy)
        compile_s = timer.compile_s
        round_s = timer.round()
        status = "OK"
      except Exception as e:  # pylint: disable=broad-except  # a failure fails its row only
        lines = str(e).strip().splitlines()
        status = f"FAILED: {type(e).__name__}: {lines[0] if lines else ''}"[:300]
        failed.append(f"{name} ({label})")
      if name in CHECK_BASELINES and status == "OK":
        base[family] = (name, round_s)
      ref = base.get(family)
      relative = f"{round_s / ref[1]:.2f}x {ref[0]}" if ref and status == "OK" else "-"
      del timer   # its engine and buffers
      print(f"| {name} | {label} | {seconds(compile_s, 2)} | {seconds(round_s, 4)} | {relative} "
            f"| {status.replace('|', '/')} |", file=out, flush=True)
  rows = len(names) * len(strategies)
  print(f"\ncheck: {rows - len(failed)} ok, {len(failed)} failed "
        f"({time.perf_counter() - t0:.0f} s)" + (f": {', '.join(failed)}" if failed else ""),
        file=out, flush=True)
  return failed


def check_main(args) -> None:
  """--check: every registered algorithm (or --algorithms) x strategy; exits 1 on a failure."""
  if args.small:
    fast_compiles()
  from fedjax_sharp.algorithms.registry import ALGORITHMS  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS  # pylint: disable=g-import-not-at-top
  every = [(n, "classification") for n in ALGORITHMS] + [(n, "minimax")
                                                         for n in MINIMAX_ALGORITHMS]
  if args.algorithms:
    wanted = [n.strip() for n in args.algorithms.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {n for n, _ in every})
    if unknown:
      raise SystemExit(f"--algorithms: {unknown} not in {[n for n, _ in every]}")
    every = [(n, f) for n, f in every if n in wanted]
  # Each family's baseline first, so that the others' rows can be relative to it.
  names = sorted(every, key=lambda nf: (nf[1] != "classification", nf[0] not in CHECK_BASELINES))
  strategies = check_strategies(args.strategies)
  if args.small:
    cost = argparse.Namespace(clients=4, steps=2, batch=4, chunk=2, unroll=2, model="linear")
    shape, minimax_clients, minimax_steps = (4, 4, 1), 4, 2
  else:
    cost = argparse.Namespace(clients=10, steps=50, batch=50, chunk=5, unroll=5,
                              model="mcmahan_cnn")
    shape, minimax_clients, minimax_steps = (32, 32, 3), 8, 5

  def make_timer(name, strategy):
    if dict(every)[name] == "minimax":
      return _MinimaxTimed(name, strategy, minimax_clients, minimax_steps, cost.chunk)
    return round_time._Timed(name, strategy, cost, shape)  # pylint: disable=protected-access

  donate = inspect.signature(RoundEngine).parameters["donate"].default
  print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}), jax "
        f"{jax.__version__}; RoundEngine(donate={donate}); classification: {cost.model} "
        f"{'x'.join(map(str, shape))}, {cost.clients} clients x {cost.steps} steps x batch "
        f"{cost.batch}, chunk {cost.chunk}; minimax: 'quadratic', {minimax_clients} clients x "
        f"{minimax_steps} steps{' (--small)' if args.small else ''}\n", flush=True)
  if run_check(names, strategies, make_timer):
    sys.exit(1)


BIG_MODELS = (("resnet18", "ResNet-18 GN, CIFAR stem (FedGloSS)", "fedavg"),
              ("resnet18", "ResNet-18 GN, ImageNet stem (the FL-SAM authors' model)",
               "fedavg[model.resnet18.stem=imagenet]"),
              ("vgg11_gn", "VGG-11 GN", "fedavg"))


def add_xla_flags(flags: str) -> None:
  """Appends `flags` to XLA_FLAGS; only before JAX has started its backends (else an error)."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if not flags:
    return
  if xla_bridge.backends_are_initialized():
    raise SystemExit("--xla_flags: JAX's backends are already initialised")
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--small", action="store_true", help="tiny shapes (CI, CPU)")
  parser.add_argument("--sweep_rounds", type=int, default=500)
  parser.add_argument("--rounds", type=int, default=5, help="timed rounds per strategy")
  parser.add_argument("--check", action="store_true",
                      help="instead of the table: every registered algorithm x strategy for 2 "
                           "rounds, OK / FAILED per row; exit status 1 if any failed")
  parser.add_argument("--algorithms", default="",
                      help="--check: these algorithms only (comma-separated; default: all)")
  parser.add_argument("--strategy", default="auto/auto",
                      help="client_strategy/local_loop of the per-algorithm, 100-client and "
                           "--big rows (default: 'auto', resolved for this backend)")
  parser.add_argument("--conv_impl", default="auto", choices=CONV_IMPLS + ("auto",),
                      help="model.conv_impl of the per-algorithm, 100-client and sweep rows")
  parser.add_argument("--compute_dtype", default="auto",
                      help="model.compute_dtype of those rows: float32 | bfloat16 | auto")
  parser.add_argument("--peak_tflops", default="",
                      help="FP32,BF16 peak TFLOP/s of this device (default: KNOWN_PEAKS)")
  parser.add_argument("--strategies", default="",
                      help="--check: these of auto," + ",".join(CHECK_STRATEGIES) +
                           " only (default: all)")
  parser.add_argument("--sections", default="0,1,2,3,4",
                      help="which sections of the table to run (0 = the default settings row; "
                           "5 = --big)")
  parser.add_argument("--big", action="store_true",
                      help="add section 5: ResNet-18 GN and VGG-11 GN rounds")
  parser.add_argument("--xla_flags", default="",
                      help="appended to XLA_FLAGS before JAX starts (e.g. "
                           "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL)")
  args = parser.parse_args(argv)
  add_xla_flags(args.xla_flags)
  if args.check:
    return check_main(args)
  sections = {int(v) for v in args.sections.split(",") if v.strip()} | ({5} if args.big else set())
  strategies, cost_algorithms, sweep_algorithms = STRATEGIES, COST_ALGORITHMS, SWEEP_ALGORITHMS
  big_models = BIG_MODELS
  if args.small:   # every kind of row, fewer of each (compile time dominates here)
    clients, steps, batch, shape, big = 2, 2, 4, (16, 16, 3), 4
    sweep_rounds, rounds = min(args.sweep_rounds, 3), 2
    strategies, cost_algorithms, sweep_algorithms = STRATEGIES[:1], COST_ALGORITHMS[:3:2], \
        SWEEP_ALGORITHMS[:2]
    big_models = BIG_MODELS[1:2]
  else:
    clients, steps, batch, shape, big = 10, 50, 50, (32, 32, 3), 100
    sweep_rounds, rounds = args.sweep_rounds, args.rounds
  default_strategy = round_time.resolved_strategy("auto/auto", clients)
  default_dtype = resolve_compute_dtype("auto")
  print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}), jax "
        f"{jax.__version__}; McMahan CNN {'x'.join(map(str, shape))}, {clients} clients x "
        f"{steps} steps x batch {batch} per round{' (--small)' if args.small else ''}; "
        f"defaults here: {default_strategy}, {default_dtype}, conv "
        f"{resolve_conv_impl('auto', default_dtype, default_strategy.split('/')[0])}"
        + (f"; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}" if args.xla_flags else "") + "\n")
  peak = peaks(args.peak_tflops)
  print(f"peak TFLOP/s: float32 {peak['float32'] or '-'}, bfloat16 {peak['bfloat16'] or '-'} "
        f"({'--peak_tflops' if args.peak_tflops else 'KNOWN_PEAKS'}); FLOPs: XLA's cost "
        f"analysis of one lowered local step x the round's steps\n")
  print("| what | s / round | compile s | TFLOP/s | % of peak | note |")
  print("|---|---|---|---|---|---|", flush=True)

  def row(name, per_round, compile_s, note, flops=float("nan"), dtype="float32"):
    tf, pct = throughput(flops, per_round, dtype, peak)
    print(f"| {name} | {per_round:.4f} | {compile_s:.1f} | {tf} | {pct} | {note} |", flush=True)

  def timed(name, strategy, n_clients, conv_impl, dtype, model="mcmahan_cnn", num_classes=10):
    cost = argparse.Namespace(clients=n_clients, steps=steps, batch=batch, chunk=5, unroll=5,
                              model=model, num_classes=num_classes)
    return round_time._Timed(variant(name, conv_impl, dtype), strategy, cost, shape)  # pylint: disable=protected-access

  def median_round(t):
    return statistics.median(t.round() for _ in range(rounds))

  def label(t):
    return f"{t.strategy}, conv {t.conv_impl}, {t.compute_dtype}"

  # 0. What a user who changes nothing gets.
  if 0 in sections:
    t = timed("fedavg", "auto/auto", clients, "auto", "auto")
    row(f"FedAvg, default settings ({label(t)})", median_round(t), t.compile_s, "'auto'",
        t.flops, t.compute_dtype)
    del t
  # 1. conv_impl x compute_dtype x strategy (FedAvg); --small: two corners of the grid.
  grid = ([("xla", "float32"), ("matmul", "bfloat16")] if args.small else
          [(c, d) for c in CONV_IMPLS for d in COMPUTE_DTYPES])
  for strategy in strategies if 1 in sections else ():
    for conv_impl, dtype in grid:
      t = timed("fedavg", strategy, clients, conv_impl, dtype)
      row(f"FedAvg {strategy}, conv {conv_impl}, {dtype}", median_round(t), t.compile_s, "",
          t.flops, dtype)
      del t
  # 2. Cost per algorithm, interleaved, with --strategy / --conv_impl / --compute_dtype.
  flops = {}
  if 2 in sections:
    timers = {name: timed(name, args.strategy, clients, args.conv_impl, args.compute_dtype)
              for name in cost_algorithms}
    times = {name: [] for name in cost_algorithms}
    for _ in range(rounds):
      for name in cost_algorithms:
        times[name].append(timers[name].round())
    base = statistics.median(times["fedavg"])
    flops = {name: timers[name].flops for name in cost_algorithms}
    for name in cost_algorithms:
      med = statistics.median(times[name])
      row(f"{name}, {label(timers[name])}", med, timers[name].compile_s,
          f"{med / base:.2f}x FedAvg", flops[name], timers[name].compute_dtype)
    del timers
  # 3. 100 clients per round.
  if 3 in sections:
    t = timed("fedavg", args.strategy, big, args.conv_impl, args.compute_dtype)
    row(f"{big} clients per round, {label(t)}, FedAvg", median_round(t), t.compile_s, "",
        t.flops, t.compute_dtype)
    del t
  # 4. Sweeps: each algorithm's 3 seeds as one program (vmapped over the seeds; --strategy for
  # the clients, a single-jit one: 'host' is the CPU's 'auto' and runs no sweep).
  if 4 in sections:
    st = round_time.resolved_strategy(args.strategy, clients)
    st = "vmap/rolled" if st.startswith("host/") else st
    dt = resolve_compute_dtype(args.compute_dtype)
    ci = resolve_conv_impl(args.conv_impl, dt, st.split("/")[0])
    total = 0.0
    for name in sweep_algorithms:
      c, secs = timed_sweep(name, (0, 1, 2), sweep_rounds, clients, steps, batch, shape, ci, dt,
                            st)
      total += secs
      row(f"sweep {name}: 3 seeds x {sweep_rounds} rounds, one program, {st}, conv {ci}, {dt}",
          secs / sweep_rounds, c, f"{secs:.1f} s in all", 3 * flops.get(name, float("nan")), dt)
    row(f"sweep 3 seeds x {len(sweep_algorithms)} algorithms x {sweep_rounds} rounds",
        float("nan"), float("nan"), f"{total:.1f} s ({total / 60:.2f} min)")
  # 5. Bigger models, FedGloSS's CIFAR-100 setting (100 classes), the same round shape.
  for model, what, name in big_models if 5 in sections else ():
    t = timed(name, args.strategy, clients, args.conv_impl, args.compute_dtype, model, 100)
    row(f"{what}, FedAvg, {label(t)}", median_round(t), t.compile_s, "", t.flops,
        t.compute_dtype)
    del t


if __name__ == "__main__":
  main()
