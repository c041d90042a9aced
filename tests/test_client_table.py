"""The host-held client table: same rounds as the device table, lazy rows,
checkpoints of the touched rows, clear errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms import local_sgd
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData
from fedjax_sharp.core import client_table as client_table_lib
from fedjax_sharp.core.client_table import HostClientTable
from fedjax_sharp.errors import WorkdirError
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop


def _rounds(tiny, mode, execution, rounds=2):
  alg = fed_dyn(tiny.apply, local_sgd(0.9, 0.01), alpha=0.1)
  engine = RoundEngine(alg, len(tiny.client_indices), execution, client_table=mode)
  server, table = engine.init(tiny.params)
  sampler = CohortSampler(tiny.client_indices, 2, 3, local_epochs=1, seed=1)
  data = TrainData(jnp.asarray(tiny.x), jnp.asarray(tiny.y))
  for t in range(rounds):
    info = RoundInfo(jnp.int32(t), jnp.float32(0.1), len(tiny.client_indices))
    server, table, _ = engine.round(server, table, data, sampler.build(t, pad_to=3), info,
                                    jax.random.key(0))
  return server, table


@pytest.mark.parametrize("execution", [ExecutionConfig("vmap", local_loop="rolled"),
                                       ExecutionConfig("host", local_loop="unrolled")])
def test_host_table_computes_the_device_tables_rounds(tiny, execution):
  dev_server, dev_table = _rounds(tiny, "device", execution)
  host_server, host_table = _rounds(tiny, "host", execution)
  assert isinstance(host_table, HostClientTable)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), dev_server, host_server)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), dev_table,
               host_table.dense())
  # FedDyn's duals moved for the clients that trained, and only for them.
  trained = np.zeros(len(tiny.client_indices), bool)
  trained[host_table.touched_ids] = True
  assert 0 < trained.sum() < len(tiny.client_indices)
  dual = jax.tree.leaves(host_table.dense())[0]
  assert np.all(np.abs(dual[trained]).reshape(trained.sum(), -1).max(1) > 0)
  assert np.all(dual[~trained] == 0)


def test_rows_are_lazy_and_checkpoint_round_trip():
  init = {"w": np.full((3,), 2.0, np.float32), "b": np.float32(-1.0)}
  table = HostClientTable(init, 100_000)
  assert table.nbytes_touched == 0 and table.nbytes_dense == 100_000 * 16
  rows, pos = table.gather(np.array([5, 7, 100_000]))   # the last is a padding client
  np.testing.assert_array_equal(np.asarray(rows["w"]), np.full((3, 3), 2.0))
  np.testing.assert_array_equal(pos, [0, 1, 3])
  table.scatter(np.array([5, 7, 100_000]),
                {"w": jnp.arange(9.0).reshape(3, 3), "b": jnp.array([1.0, 2.0, 3.0])})
  assert table.nbytes_touched == 2 * 16
  saved = table.to_checkpoint()
  np.testing.assert_array_equal(saved["ids"], [5, 7])
  other = HostClientTable(init, 100_000).load_checkpoint(saved)
  rows, _ = other.gather(np.array([7, 6]))
  np.testing.assert_array_equal(np.asarray(rows["w"]), [[3.0, 4.0, 5.0], [2.0, 2.0, 2.0]])
  np.testing.assert_array_equal(np.asarray(rows["b"]), [2.0, -1.0])


def _config(**engine):
  c = config_lib.base_config()
  c.name = "host_table"
  c.data.source, c.data.name = "embedded", "digits"
  c.data.num_clients, c.data.partition = 8, "iid"
  c.clients_per_round = 3
  c.model.name = "linear"
  c.local.steps, c.local.batch_size = 2, 16
  c.algorithm.name = "feddyn"
  c.rounds, c.eval.last_n, c.checkpoint_every = 4, 1, 2
  c.engine.client_strategy, c.engine.local_loop = "vmap", "rolled"
  c.engine.update(engine)
  return c


def test_auto_keeps_the_table_on_the_host_above_the_budget():
  assert loop.build_experiment(_config()).engine.client_table == "device"
  exp = loop.build_experiment(_config(client_table_budget_mb=1e-3))
  assert exp.engine.client_table == "host"
  # An algorithm without client state never needs a table.
  alg = loop.build_experiment(_config(client_table="host")).algorithm
  c = _config(client_table="host")
  c.algorithm.name = "fedavg"
  assert loop.build_experiment(c).engine.client_table == "device"
  assert client_table_lib.resolve("host", alg, exp.init_params, 8) == "host"
  with pytest.raises(ValueError, match="engine.client_table"):
    config_lib.validate(_config(client_table="tape"))


def test_host_table_runs_resume_exactly_and_refuse_the_other_kind(tmp_path):
  straight = loop.run(_config(client_table="host"), str(tmp_path / "a"), progress=False)
  short = _config(client_table="host")
  short.rounds = 2
  loop.run(short, str(tmp_path / "b"), progress=False)
  resumed = loop.run(_config(client_table="host"), str(tmp_path / "b"), progress=False)
  device = loop.run(_config(client_table="device"), str(tmp_path / "c"), progress=False)
  for s in (resumed, device):
    assert s["final_test_accuracy"] == pytest.approx(straight["final_test_accuracy"], abs=1e-6)
  longer = _config(client_table="device")
  longer.rounds = 6
  with pytest.raises(WorkdirError, match="engine.client_table=host"):
    loop.run(longer, str(tmp_path / "b"), progress=False)
