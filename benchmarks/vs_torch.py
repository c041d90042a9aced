"""The CIFAR-10 CNN FedAvg round, ours against a plain PyTorch loop, timed in one interleaved run.

Same round on both sides: McMahan CNN on 32x32x3 inputs, 10 clients x 50 local steps x batch 50
(the FedGMT paper's CIFAR-10 round), SGD lr 0.01, momentum 0.9 (reset every round), weight decay
1e-5 (PyTorch semantics on both sides), mean cross-entropy, uint8 images scaled by 1/255 per batch,
weighted average of the client models. Synthetic data (timing only). The rounds alternate
(ours, torch, ours, torch, ...) so that whatever else the machine is doing falls on both; the table
gives the median of the timed rounds and the ratio ours / torch.

    pip install torch==2.13.0     # optional; never a dependency of the library
    python benchmarks/vs_torch.py                           # the CPU default strategy
    python benchmarks/vs_torch.py --host_chunks=1,8,25 --strategies=host/unrolled
    python benchmarks/vs_torch.py --setting=small_batch --conv_impls=xla,matmul  # 50 x 5 x B 10
    python benchmarks/vs_torch.py --small                   # tiny shapes (CI; no torch needed)
    python benchmarks/vs_torch.py --host_devices=1,2        # clients side by side on 2 CPU devices

Without torch the PyTorch column is left out (and said so), so the script runs anywhere.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.algorithms import build_algorithm
from fedjax_sharp.core import (CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData,
                               backends)
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.training.config import base_config

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-5


def synthetic(clients: int, steps: int, batch: int, shape, seed: int = 0):
  rng = np.random.default_rng(seed)
  n = clients * steps * batch
  x = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  return x, y, np.array_split(np.arange(n), clients)


def jax_round(x, y, parts, steps: int, batch: int, strategy: str, host_chunk: int,
              conv_impl: str = "xla", host_devices: int = 1):
  """A callable running one FedAvg round of the library (blocks until done)."""
  client_strategy, local_loop = strategy.split("/")
  shape = x.shape[1:]
  model = get_model("mcmahan_cnn", 10, conv_impl=conv_impl)
  apply_fn = lambda p, xb: model.apply({"params": p}, xb)
  config = base_config()
  config.algorithm.name = "fedavg"
  config.local.lr, config.local.momentum, config.local.weight_decay = LR, MOMENTUM, WEIGHT_DECAY
  engine = RoundEngine(build_algorithm(config, apply_fn), len(parts),
                       ExecutionConfig(client_strategy, local_loop=local_loop,
                                       host_chunk=host_chunk, host_devices=host_devices),
                       preprocess=lambda xb, key: xb.astype(jnp.float32) / 255.0)
  server, table = engine.init(init_params(model, jax.random.key(0), shape))
  data = TrainData(jnp.asarray(x), jnp.asarray(y))
  cohort = CohortSampler(parts, len(parts), batch, local_steps=steps, seed=0).build(0)
  state = {"server": server, "table": table, "t": 0}

  def one():
    info = RoundInfo(jnp.int32(state["t"]), jnp.float32(LR), len(parts))
    state["server"], state["table"], m = engine.round(state["server"], state["table"], data,
                                                      cohort, info, jax.random.key(1))
    jax.block_until_ready((state["server"], m))
    state["t"] += 1
  return one


def torch_round(x, y, parts, steps: int, batch: int):
  """A callable running the same FedAvg round as a plain PyTorch loop, or None without torch."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    from torch import nn  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  torch.manual_seed(0)
  h, w, c = x.shape[1:]
  flat = 64 * (h // 4) * (w // 4)
  model = nn.Sequential(
      nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, 10))
  xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))   # NCHW uint8
  yt = torch.from_numpy(y.astype(np.int64))
  weights = np.array([len(p) for p in parts], np.float64)
  weights /= weights.sum()
  loss_fn = nn.CrossEntropyLoss()

  def one():
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    new_state = {k: torch.zeros_like(v) for k, v in global_state.items()}
    for part, p_m in zip(parts, weights):
      model.load_state_dict(global_state)
      opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM,
                            weight_decay=WEIGHT_DECAY)
      order = torch.from_numpy(np.random.default_rng(len(part)).permutation(part))
      for s in range(steps):
        idx = order[(s * batch) % len(order):][:batch]
        xb = xt[idx].float() / 255.0
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xb), yt[idx]).backward()
        opt.step()
      with torch.no_grad():
        for k, v in model.state_dict().items():
          new_state[k] += float(p_m) * v
    model.load_state_dict(new_state)
  return one


def timed(fn) -> float:
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--batch", type=int, default=50)
  parser.add_argument("--input", default="32x32x3", help="HxWxC")
  parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side")
  parser.add_argument("--strategies", default="host/unrolled",
                      help="comma-separated client_strategy/local_loop pairs for our side")
  parser.add_argument("--host_chunks", default="1", help="comma-separated engine.host_chunk")
  parser.add_argument("--conv_impls", default="xla", help="comma-separated model.conv_impl")
  parser.add_argument("--host_devices", default="1",
                      help="comma-separated engine.host_devices: 'host' runs that many clients "
                           "side by side on as many CPU devices (the process gets the largest)")
  parser.add_argument("--setting", default="", choices=("", "small_batch"),
                      help="small_batch: 50 clients x 5 steps x batch 10 on 28x28x1 (pfl-research's "
                           "benchmark cohort: many small clients, small batches)")
  parser.add_argument("--small", action="store_true",
                      help="2 clients x 3 steps x batch 8 on 16x16x3, one timed round (CI)")
  args = parser.parse_args()
  host_devices = [int(d) for d in args.host_devices.split(",")]
  if max(host_devices) > 1:   # before JAX starts its backends
    backends.use_cpu_devices(max(host_devices))
  if args.setting == "small_batch":
    args.clients, args.steps, args.batch, args.input = 50, 5, 10, "28x28x1"
  if args.small:
    args.clients, args.steps, args.batch, args.input, args.rounds = 2, 3, 8, "16x16x3", 1
  shape = tuple(int(s) for s in args.input.split("x"))
  x, y, parts = synthetic(args.clients, args.steps, args.batch, shape)

  sides = {}
  for strategy in args.strategies.split(","):
    for chunk in (int(c) for c in args.host_chunks.split(",")):
      for conv_impl in args.conv_impls.split(","):
        for devices in host_devices:
          name = f"ours {strategy} host_chunk={chunk} conv={conv_impl}"
          if len(host_devices) > 1 or devices > 1:
            name += f" host_devices={devices}"
          sides[name] = jax_round(x, y, parts, args.steps, args.batch, strategy, chunk,
                                  conv_impl, devices)
  theirs = torch_round(x, y, parts, args.steps, args.batch)
  if theirs is not None:
    import torch  # pylint: disable=g-import-not-at-top
    sides[f"torch {torch.__version__} ({torch.get_num_threads()} threads)"] = theirs
  first = {name: timed(fn) for name, fn in sides.items()}        # compile / warm-up
  times = {name: [] for name in sides}
  for _ in range(args.rounds):                                    # interleaved
    for name, fn in sides.items():
      times[name].append(timed(fn))

  client_steps = args.clients * args.steps
  print(f"\nbackend {jax.default_backend()}, jax {jax.__version__}, {os.cpu_count()} CPUs; FedAvg, "
        f"McMahan CNN {args.input}, {args.clients} clients x {args.steps} steps x batch "
        f"{args.batch}; median of {args.rounds} interleaved rounds\n")
  torch_name = next((n for n in sides if n.startswith("torch")), None)
  print("| side | first round s | round s | ms per step | ours / torch |")
  print("|---|---|---|---|---|")
  for name in sides:
    med = statistics.median(times[name])
    ratio = (f"{med / statistics.median(times[torch_name]):.2f}x"
             if torch_name and name != torch_name else "")
    print(f"| {name} | {first[name]:.2f} | {med:.2f} | {1000 * med / client_steps:.1f} | {ratio} |")
  if torch_name is None:
    print("\ntorch is not installed: `pip install torch` for the PyTorch column.")


if __name__ == "__main__":
  main()
