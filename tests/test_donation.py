"""Buffer donation on the CPU: the CPU runs the program an accelerator runs.

The round donates the server state and the client table on every backend. Each minimax algorithm
(default hyperparameters, vmap strategy) runs init and two donating rounds, and no two leaves of
its state share a buffer after init, after a round and after a checkpoint restore; every
classification algorithm is checked the same way in its vmapped run of
tests/test_algorithm_invariants.py (`_run_donating`). The engine's guard copies shared leaves of
a hand-made aliased state (FedSMOO's old `server_init`) and names them. And
`engine.client_table='auto'` decides from the memory it is given.
"""
from __future__ import annotations

import dataclasses

from absl import logging as absl_logging
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core import client_table as client_table_lib
from fedjax_sharp.core import donation
from fedjax_sharp.core.algorithm import RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import minimax_experiment
from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
from fedjax_sharp.training import config as config_lib

from algo_helpers import apply_fn, init_params, make_problem, run_donating_rounds, tmap

VMAP = ExecutionConfig("vmap", local_loop="rolled")


def _minimax(name):
  config = config_lib.base_config()
  config.task.name = "quadratic"
  config.aggregation = "uniform"
  config.minimax.update(lr_x=0.02, lr_y=0.2)
  config.algorithm.name = name
  config.task.quadratic.num_clients = config.clients_per_round = 3
  config.local.steps = 2
  exp = minimax_experiment.build_experiment(config)
  return config, exp.algorithm, exp.init_params, exp.train_data, exp.sampler


@pytest.mark.parametrize("name", list(MINIMAX_ALGORITHMS))
def test_every_minimax_algorithm_runs_donating_rounds_and_never_shares_a_buffer(name, tmp_path):
  """Init, two donating rounds, a checkpoint round trip and a round of the restored state
  (`algo_helpers.run_donating_rounds`). Every classification algorithm:
  tests/test_algorithm_invariants.py, `_run_donating`."""
  config, alg, params, data, sampler = _minimax(name)
  engine = RoundEngine(alg, sampler.num_clients, VMAP)
  inputs = lambda t: (data, sampler.build(t),
                      RoundInfo(jnp.int32(t), jnp.float32(0.05), sampler.num_clients),
                      jax.random.key(t))
  run_donating_rounds(engine, params, 2, inputs, config, str(tmp_path), name)


def _aliasing_fedavg():
  """FedAvg whose server state holds one zeros array twice and whose client row holds one
  array twice, as FedSMOO's `server_init` once did."""
  base = build_algorithm(config_lib.base_config(), apply_fn)

  def server_init(p):
    zeros = jax.tree.map(jnp.zeros_like, p)
    return {"inner": base.server_init(p), "h": zeros, "s": zeros}

  def client_state_init(p):
    z = jnp.zeros(())
    return {"a": z, "b": z}

  return dataclasses.replace(
      base, name="aliasing_fedavg", server_init=server_init,
      client_state_init=client_state_init,
      broadcast=lambda ss, ri: base.broadcast(ss["inner"], ri),
      client_finalize=lambda *a: (base.client_finalize(*a)[0], a[2]),
      server_update=lambda ss, *a: {**ss, "inner": base.server_update(ss["inner"], *a)},
      eval_params=lambda ss: base.eval_params(ss["inner"]))


def test_a_state_that_donates_one_buffer_twice_fails_and_the_engine_guard_copies_it(caplog):
  alg = _aliasing_fedavg()
  params = init_params(3)
  aliased = alg.server_init(params)
  assert donation.shared_leaves(aliased) == [("['h']['b']", "['s']['b']"),
                                             ("['h']['w']", "['s']['w']")]
  # What every GPU run of FedSMOO met, and the CPU too once it donates.
  donate = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)
  with pytest.raises(Exception, match="donate the same buffer twice"):
    donate(aliased)
  # The engine copies the shared leaves, names the algorithm and both paths, and runs.
  data, parts = make_problem((4, 6, 5), seed=3)
  sampler = CohortSampler(parts, 2, 3, local_steps=2, seed=3)
  engine = RoundEngine(alg, sampler.num_clients, VMAP)
  absl_logging.get_absl_handler()   # absl logs through the std logging caplog captures
  with caplog.at_level("WARNING"):
    server, table = engine.init(params)
  message = " ".join(r.getMessage() for r in caplog.records)
  assert "aliasing_fedavg" in message and "['server_state']['h']['w'] and ['server_state']['s']['w']" in message, message
  assert donation.shared_leaves((server, table)) == []
  tmap(np.testing.assert_array_equal, server["h"], server["s"])
  server, table, _ = engine.round(server, table, data, sampler.build(0),
                                  RoundInfo(jnp.int32(0), jnp.float32(0.1), 3),
                                  jax.random.key(0))
  # `unalias` on a hand-made aliased (server, table): every duplicate copied, values kept,
  # arrays the caller reserves copied too, leaves that share nothing left as they are.
  x, y = jnp.arange(3.0), jnp.ones(2)
  state = ({"a": x, "b": x, "c": y}, {"t": x})
  fixed = donation.unalias(state, "hand-made", reserved=[y])
  assert donation.shared_leaves(fixed) == []
  assert fixed[0]["a"] is x and fixed[0]["b"] is not x and fixed[1]["t"] is not x
  assert fixed[0]["c"] is not y
  tmap(np.testing.assert_array_equal, fixed, state)


def test_donation_can_be_turned_off_explicitly():
  alg = build_algorithm(config_lib.base_config(), apply_fn)
  data, parts = make_problem((4, 6, 5), seed=3)
  sampler = CohortSampler(parts, 2, 3, local_steps=1, seed=3)
  engine = RoundEngine(alg, sampler.num_clients, VMAP, donate=False)
  server, table = engine.init(init_params(3))
  engine.round(server, table, data, sampler.build(0),
               RoundInfo(jnp.int32(0), jnp.float32(0.1), 3), jax.random.key(0))
  assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(server))


# ------------------------------------------------------------------ 'auto' table placement
def test_auto_places_the_table_from_the_memory_it_is_given():
  c = config_lib.base_config()
  c.algorithm.name = "feddyn"                   # one parameter-sized dual per client
  alg = build_algorithm(c, apply_fn)
  params = init_params(0)
  row_bytes = 4 * sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))   # 72 bytes
  m = 1000
  dense = m * row_bytes
  fraction = client_table_lib.TABLE_MEMORY_FRACTION
  resolve = lambda **kw: client_table_lib.resolve("auto", alg, params, m, **kw)
  # A quarter of the memory: fits just above, not just below.
  assert resolve(memory_bytes=int(dense / fraction) + 8) == "device"
  assert resolve(memory_bytes=int(dense / fraction) - 8) == "host"
  # An H200-sized case: 1.3 GB of FedSMOO/FedLESAM-D state on a 141 GB device stays on
  # the device (the old fixed 1 GiB budget sent it to the host).
  assert resolve(memory_bytes=141 * 10 ** 9) == "device"
  # An explicit budget (MiB) overrides the memory.
  assert resolve(budget_mb=dense / 2 ** 20 * 1.01, memory_bytes=1) == "device"
  assert resolve(budget_mb=dense / 2 ** 20 * 0.99, memory_bytes=10 ** 12) == "host"
  # Explicit modes are kept; an algorithm without client state never needs a table.
  assert client_table_lib.resolve("host", alg, params, m, memory_bytes=10 ** 12) == "host"
  fedavg = build_algorithm(config_lib.base_config(), apply_fn)
  assert client_table_lib.resolve("auto", fedavg, params, m, memory_bytes=1) == "device"
  # On the CPU the memory is the host's available memory.
  memory, source = client_table_lib.device_memory()
  assert memory and memory > 2 ** 20 and "host" in source


def test_bad_table_settings_name_the_field():
  alg = build_algorithm(config_lib.base_config(), apply_fn)
  with pytest.raises(ValueError, match=r"engine.client_table='tape' is not one of"):
    client_table_lib.resolve("tape", alg, init_params(0), 4)
  with pytest.raises(ValueError, match=r"engine.client_table_budget_mb must be >= 0"):
    client_table_lib.resolve("auto", alg, init_params(0), 4, budget_mb=-1.0)
  c = config_lib.base_config()
  c.engine.client_table_budget_mb = -5.0
  with pytest.raises(ConfigError, match=r"engine.client_table_budget_mb must be >= 0.*-5.0"):
    config_lib.validate(c)
  c = config_lib.base_config()
  c.engine.client_table = "tape"
  with pytest.raises(ConfigError, match=r"engine.client_table='tape' is not one of"):
    config_lib.validate(c)
