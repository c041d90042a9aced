"""Run by tests/test_sharding.py in a process with 8 simulated CPU devices (XLA_FLAGS)."""
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.algorithms import local_sgd
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.core import (CohortSampler, ExecutionConfig, RoundEngine, RoundInfo,
                               TrainData, sharding, tree)
from fedjax_sharp.models import get_model, init_params

assert len(jax.devices()) == 8, jax.devices()
rng = np.random.default_rng(0)
sizes = (5, 9, 12, 7, 3, 8, 6, 10, 4, 11, 5)          # M = 11 ragged clients
x = rng.normal(size=(sum(sizes), 2, 2, 1)).astype(np.float32)
y = rng.integers(0, 3, sum(sizes)).astype(np.int32)
offsets = np.cumsum((0,) + sizes)
clients = [np.arange(offsets[i], offsets[i + 1]) for i in range(len(sizes))]
M = len(clients)
model = get_model("linear", 3)
params = init_params(model, jax.random.key(0), (2, 2, 1))
params = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape).astype(np.float32)), params)
alg = fed_dyn(lambda p, xb: model.apply({"params": p}, xb), local_sgd(0.9, 0.01), alpha=0.1)
sampler = CohortSampler(clients, 5, 3, local_epochs=1, seed=2)   # C = 5: padded to the mesh
data = TrainData(jnp.asarray(x), jnp.asarray(y))
VMAP = ExecutionConfig("vmap", local_loop="rolled")


def info(t, lr=0.1):
  return RoundInfo(jnp.int32(t), jnp.float32(lr), M)


def run(mesh, table="device", rounds=3):
  engine = RoundEngine(alg, M, VMAP, client_table=table, mesh=mesh)
  server, state = engine.init(params)
  for t in range(rounds):
    server, state, metrics = engine.round(server, state, data, sampler.build(t), info(t),
                                          jax.random.key(1))
  rows = state.dense() if table == "host" else jax.tree.map(lambda a: a[:M], state)
  return server, rows, metrics, engine


def close(a, b):
  jax.tree.map(lambda p, q: np.testing.assert_allclose(np.asarray(p), np.asarray(q),
                                                       rtol=2e-5, atol=2e-6), a, b)


ref_server, ref_rows, ref_metrics, _ = run(None)
assert float(ref_metrics["steps"]) > 0
for mesh in (sharding.make_mesh(clients=8), sharding.make_mesh(clients=4, experiments=2)):
  for table in ("device", "host"):
    server, rows, metrics, engine = run(mesh, table)
    close(server, ref_server)
    close(rows, ref_rows)
    close(metrics, ref_metrics)
  # The inputs really are split by client: each device holds C' / n clients of the plan.
  engine = RoundEngine(alg, M, VMAP, mesh=mesh)
  placed = engine._shard(ref_server, engine.init(params)[1], data, sampler.build(0))
  n = sharding.axis_size(mesh, sharding.CLIENTS)
  cohort = placed[3]
  assert cohort.batch_idx.shape[0] == 8 and cohort.batch_idx.shape[0] % n == 0
  assert cohort.batch_idx.sharding.shard_shape(cohort.batch_idx.shape)[0] == 8 // n
  table_leaf = jax.tree.leaves(placed[1])[0]
  assert table_leaf.sharding.shard_shape(table_leaf.shape)[0] == table_leaf.shape[0] // n

# A sweep of 2 experiments (own learning rate, key and cohorts) over experiments x clients.
def sweep(mesh):
  engine = RoundEngine(alg, M, VMAP, mesh=mesh)
  states = [engine.init(params) for _ in range(2)]
  servers = tree.stack([s for s, _ in states])
  tables = tree.stack([t for _, t in states])
  keys = jnp.stack([jax.random.key(1), jax.random.key(2)])
  samplers = [sampler, CohortSampler(clients, 5, 3, local_epochs=1, seed=3)]
  for t in range(2):
    cohorts = tree.stack([s.build(t) for s in samplers])
    servers, tables, metrics = engine.sweep_round(servers, tables, data, cohorts, t,
                                                  [0.1, 0.05], keys)
  return servers, jax.tree.map(lambda a: a[:, :M], tables), metrics


ref = sweep(None)
close(sweep(sharding.make_mesh(clients=4, experiments=2)), ref)
print("SHARDING OK")

# Through the config: engine.devices shards a run; engine.experiment_devices a sweep.
from fedjax_sharp.training import config as config_lib, loop, sweep as sweep_lib


def tiny(seed=0, **engine):
  c = config_lib.base_config()
  c.data.source, c.data.name = "embedded", "digits"
  c.data.num_clients, c.data.partition, c.data.alpha = 10, "dirichlet", 0.5
  c.clients_per_round = 3
  c.model.name = "linear"
  c.local.epochs, c.local.batch_size = 1, 64
  c.algorithm.name = "feddyn"
  c.rounds, c.eval.last_n = 2, 1
  c.seed = seed
  c.engine.update(client_strategy="vmap", local_loop="rolled", **engine)
  return c


one = loop.run(tiny(), None, progress=False)
eight = loop.run(tiny(devices=8), None, progress=False)
assert abs(one["final_test_accuracy"] - eight["final_test_accuracy"]) < 1e-6, (one, eight)
assert loop.build_experiment(tiny(devices=0)).engine.mesh.shape["clients"] == 8
alone = [loop.run(tiny(s), None, progress=False) for s in (0, 1)]
swept = sweep_lib.run_sweep([tiny(s, devices=4, experiment_devices=2) for s in (0, 1)],
                            progress=False)
for a, b in zip(alone, swept):
  assert abs(a["final_test_accuracy"] - b["final_test_accuracy"]) < 1e-6, (a, b)
try:
  sweep_lib.run_sweep([tiny(s, devices=4, experiment_devices=2) for s in (0, 1, 2)],
                      progress=False)
  raise AssertionError("3 experiments over 2 experiment devices were accepted")
except ValueError as e:
  assert "engine.experiment_devices=2" in str(e), e
print("CONFIG SHARDING OK")
