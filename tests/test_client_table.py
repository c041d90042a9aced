"""The client tables held off the device ('host': touched rows in memory, 'disk': in files):
the device table's rounds, nothing of size M allocated (10^9 clients), checkpoints of the
touched rows that later writes leave intact and that either kind resumes exactly, 'auto', and a
full disk reported in one line."""
import json
import os
import resource
import signal
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms import local_sgd
from fedjax_sharp.algorithms.fed_dyn import fed_dyn
from fedjax_sharp.core import (ClientSlices, CohortSampler, ExecutionConfig, RoundEngine,
                               RoundInfo, TrainData, num_local_steps)
from fedjax_sharp.core import client_table as client_table_lib
from fedjax_sharp.core.client_table import HostClientTable
from fedjax_sharp.errors import WorkdirError
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop


def _rounds(tiny, mode, execution, rounds=2, directory=None):
  alg = fed_dyn(tiny.apply, local_sgd(0.9, 0.01), alpha=0.1)
  engine = RoundEngine(alg, len(tiny.client_indices), execution, client_table=mode)
  server, table = engine.init(tiny.params, directory)
  sampler = CohortSampler(tiny.client_indices, 2, 3, local_epochs=1, seed=1)
  data = TrainData(jnp.asarray(tiny.x), jnp.asarray(tiny.y))
  for t in range(rounds):
    info = RoundInfo(jnp.int32(t), jnp.float32(0.1), len(tiny.client_indices))
    server, table, _ = engine.round(server, table, data, sampler.build(t, pad_to=3), info,
                                    jax.random.key(0))
  return server, table


@pytest.mark.parametrize("kind,execution,batch", [
    ("host", ExecutionConfig("vmap", local_loop="rolled"), None),
    ("host", ExecutionConfig("host", local_loop="unrolled"), None),
    ("disk", ExecutionConfig("vmap", local_loop="rolled"), None),
    ("disk", ExecutionConfig("vmap", local_loop="rolled"), 1)])
def test_held_tables_compute_the_device_tables_rounds(tiny, kind, execution, batch, tmp_path,
                                                     monkeypatch):
  """Catches a store that puts a row in another client's place or a leaf in another's (the
  disk table's flat rows split at the wrong offsets or misplaced within a read or write, or its
  batches of rows misplaced: one row a batch with `batch=1`), or that loses a write-back."""
  if batch:
    monkeypatch.setattr(client_table_lib, "DISK_BATCH_BYTES", batch)
  dev_server, dev_table = _rounds(tiny, "device", execution)
  host_server, host_table = _rounds(tiny, kind, execution, directory=str(tmp_path / "rows"))
  assert isinstance(host_table, HostClientTable) and host_table.kind == kind
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
  assert (host_table.disk_bytes() > 0) == (kind == "disk")
  host_table.close()
  assert not os.path.exists(tmp_path / "rows")


def test_a_billion_clients_start_and_run_a_round(tiny):
  """M = 10^9 clients with a 60-byte state: 'auto' holds them off the device, and building the
  engine, its table and one round allocate no NumPy array of size M (tracemalloc counts NumPy's
  allocations, lazily mapped or not). Catches a dense allocation of M rows anywhere on that
  path (the old `np.zeros((M, ...))`: 60 GB), even a bool[M] mask of touched rows (1 GB)."""
  m = 10 ** 9
  alg = fed_dyn(tiny.apply, local_sgd(0.9, 0.01), alpha=0.1)
  assert client_table_lib.resolve("auto", alg, tiny.params, m, rounds=1,
                                  clients_per_round=3) == "host"
  cohort = CohortSampler(tiny.client_indices, 3, 3, local_epochs=1, seed=1).build(0)
  ids = np.array([0, 123_456_789, m - 1], np.int32)
  cohort = cohort.replace(client_ids=ids)
  data = TrainData(jnp.asarray(tiny.x), jnp.asarray(tiny.y))
  tracemalloc.start()
  try:
    engine = RoundEngine(alg, m, ExecutionConfig("vmap", local_loop="rolled"),
                         client_table="host")
    server, table = engine.init(tiny.params)
    server, table, metrics = engine.round(server, table, data, cohort,
                                          RoundInfo(jnp.int32(0), jnp.float32(0.1), m),
                                          jax.random.key(0))
    table.flush()
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < 64 * 2 ** 20, peak
  assert float(metrics["examples"]) > 0
  np.testing.assert_array_equal(table.touched_ids, ids)
  assert table.nbytes_touched == 3 * table.row_bytes == 3 * 60
  rows, _ = table.gather(np.array([m - 1, 5]))
  dual = jax.tree.leaves(rows)[0]
  assert np.abs(np.asarray(dual[0])).max() > 0 and np.all(np.asarray(dual[1]) == 0)


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


def test_client_slices_give_the_cohorts_of_the_same_index_arrays():
  """A partition as two integer arrays (`ClientSlices`, for millions of clients) samples the
  cohorts, data plans, weights and step counts of the same partition as M index arrays, with
  the default starts (running sums) and with wrapped ones. Catches starts shifted by a client
  (the running sum including the client's own size), a wrap that drops examples, and step
  counts rounded down."""
  sizes = [3, 12, 1, 7, 20, 9]
  starts = np.concatenate([[0], np.cumsum(sizes[:-1])])
  wrapped = [25, 40, 3, 55, 30, 0]
  for slices, arrays in (
      (ClientSlices(sizes), [np.arange(a, a + n) for a, n in zip(starts, sizes)]),
      (ClientSlices(sizes, wrapped, num_examples=50),
       [np.arange(a, a + n) % 50 for a, n in zip(wrapped, sizes)])):
    one = CohortSampler(slices, 3, 4, local_epochs=2, seed=3)
    other = CohortSampler(arrays, 3, 4, local_epochs=2, seed=3)
    want = [num_local_steps(n, 4, 2, 0) for n in sizes]
    assert list(one.steps_per_client) == list(other.steps_per_client) == want
    assert one.max_steps == other.max_steps == 10
    assert [len(slices[m]) for m in range(len(sizes))] == sizes
    for t in range(3):
      jax.tree.map(np.testing.assert_array_equal, one.build(t, pad_to=4),
                   other.build(t, pad_to=4))


def test_a_disk_snapshot_keeps_its_rows_while_the_table_writes_on(tmp_path):
  """A disk table's checkpoint (hard links of its rows' files) keeps the rows it saw while the
  live table rewrites them, and a table of either kind loads it back; the live files go with
  the table. Catches a snapshot that shares the live files' contents (symbolic links, or a
  store writing its files in place) and a load that links or reads the wrong slots."""
  init = {"w": np.full((3,), 2.0, np.float32), "b": np.float32(-1.0)}
  live = HostClientTable(init, 10 ** 6, "disk", str(tmp_path / "live"))
  pad = 10 ** 6
  live.scatter(np.array([7, 999_999, pad]),
               {"w": jnp.arange(9.0).reshape(3, 3), "b": jnp.array([1.0, 2.0, 3.0])})
  live.scatter(np.array([5, pad, pad]),
               {"w": jnp.full((3, 3), 9.0), "b": jnp.array([4.0, 0.0, 0.0])})
  saved = live.to_checkpoint()
  live.snapshot(str(tmp_path / "checkpoint"))
  live.scatter(np.array([7, 5, 999_999]), {"w": jnp.full((3, 3), -5.0), "b": jnp.full(3, -5.0)})
  live.flush()
  np.testing.assert_array_equal(saved["ids"], [5, 7, 999_999])
  want_w = [[3.0, 4.0, 5.0], [9.0, 9.0, 9.0], [0.0, 1.0, 2.0], [2.0, 2.0, 2.0]]
  for kind in ("host", "disk"):
    other = HostClientTable(init, 10 ** 6, kind).load_checkpoint(saved,
                                                                str(tmp_path / "checkpoint"))
    rows, _ = other.gather(np.array([999_999, 5, 7, 8]))
    np.testing.assert_array_equal(np.asarray(rows["w"]), want_w, err_msg=kind)
    np.testing.assert_array_equal(np.asarray(rows["b"]), [2.0, 4.0, 1.0, -1.0], err_msg=kind)
    np.testing.assert_array_equal(other.touched_ids, [5, 7, 999_999])
    other.close()
  rows, _ = live.gather(np.array([7, 5]))
  np.testing.assert_array_equal(np.asarray(rows["w"]), np.full((2, 3), -5.0))
  assert live.disk_bytes() >= 3 * 16
  live.close()
  assert not os.path.exists(tmp_path / "live") and os.path.isdir(tmp_path / "checkpoint")


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


def test_auto_keeps_the_table_on_the_host_above_the_budget_and_on_disk_above_memory(caplog):
  """Catches an estimate of the rows a run touches that ignores the population (more than M
  rows), or that weighs the dense table instead of the touched rows against the host's memory;
  and a choice logged in several lines or without its reason."""
  assert loop.build_experiment(_config()).engine.client_table == "device"
  exp = loop.build_experiment(_config(client_table_budget_mb=1e-3))
  assert exp.engine.client_table == "host"
  # An algorithm without client state never needs a table.
  alg = loop.build_experiment(_config(client_table="host")).algorithm
  c = _config(client_table="host")
  c.algorithm.name = "fedavg"
  assert loop.build_experiment(c).engine.client_table == "device"
  assert client_table_lib.resolve("host", alg, exp.init_params, 8) == "host"
  assert client_table_lib.resolve("disk", alg, exp.init_params, 8) == "disk"
  with pytest.raises(ValueError, match="engine.client_table"):
    config_lib.validate(_config(client_table="tape"))
  # Above the device's budget, the rows the run can touch (rounds x clients per round, at most
  # M) go to the host while they fit half its available memory, else to disk.
  row = sum(leaf.nbytes for leaf in jax.tree.leaves(alg.client_state_init(exp.init_params)))
  resolve = lambda rounds, host: client_table_lib.resolve(
      "auto", alg, exp.init_params, 8, memory_bytes=1, rounds=rounds, clients_per_round=3,
      host_bytes=host)
  touched = 2 * 3 * row
  assert resolve(2, 2 * touched + 8) == "host"
  with caplog.at_level("DEBUG"):
    assert resolve(2, 2 * touched - 8) == "disk"
  lines = [r.getMessage() for r in caplog.records if "'auto' -> disk" in r.getMessage()]
  assert len(lines) == 1 and "\n" not in lines[0] and "6 clients the run can touch" in lines[0]
  assert resolve(100, 2 * 8 * row + 8) == "host"     # 100 rounds of 3 touch the 8 clients only


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """The uninterrupted 4-round run (host table) that every resumed run must equal."""
  workdir = tmp_path_factory.mktemp("straight")
  loop.run(_config(client_table="host"), str(workdir), progress=False)
  return workdir


def _same_run(workdir, straight):
  """Same final model (bytes) and the same training loss every round."""
  final = lambda w: open(os.path.join(w, "final_params.msgpack"), "rb").read()
  losses = lambda w: [json.loads(line)["train_loss"] for line in open(os.path.join(
      w, "metrics.jsonl"))]
  assert final(workdir) == final(straight)
  assert losses(workdir) == losses(straight)


def test_held_tables_resume_exactly_from_either_kind_and_refuse_the_device_kind(tmp_path,
                                                                                straight):
  """A run stopped after round 2's checkpoint and resumed, with the same kind of held table or
  the other, ends with the uninterrupted run's model, bytes for bytes. Catches a checkpoint or
  a restore that misplaces rows (a disk table's snapshot linked back at the wrong slots, the
  rows of a memory checkpoint written at others' slots), and a resume across device and held
  tables that is not refused."""
  exps = {kind: loop.build_experiment(_config(client_table=kind)) for kind in ("host", "disk")}
  for first, then in (("disk", "disk"), ("host", "disk"), ("disk", "host")):
    workdir = str(tmp_path / f"{first}_then_{then}")
    short = _config(client_table=first)
    short.rounds = 2
    loop.run(short, workdir, progress=False, experiment=exps[first])
    assert not os.path.exists(os.path.join(workdir, "client_rows"))   # removed at the end
    summary = loop.run(_config(client_table=then), workdir, progress=False,
                       experiment=exps[then])
    assert summary["status"] == "completed"
    _same_run(workdir, straight)
  device = loop.run(_config(client_table="device"), str(tmp_path / "device"), progress=False)
  straight_summary = json.load(open(straight / "summary.json"))
  assert device["final_test_accuracy"] == pytest.approx(straight_summary["final_test_accuracy"],
                                                        abs=1e-6)
  longer = _config(client_table="device")
  longer.rounds = 6
  with pytest.raises(WorkdirError, match="in files on disk.*engine.client_table=disk"):
    loop.run(longer, str(tmp_path / "host_then_disk"), progress=False)
  with pytest.raises(WorkdirError, match="engine.client_table=device"):
    loop.run(_config(client_table="host"), str(tmp_path / "device"), progress=False)


def test_a_full_disk_under_a_disk_table_is_one_line_exit_2_and_loses_no_round(
    tmp_path, straight, monkeypatch, capsys):
  """From the third write-back of rows on (round 2's, at round 3's start), the OS refuses the
  rows' files: RLIMIT_FSIZE, a real EFBIG through tensorstore, as a full disk's ENOSPC would
  be. The run stops with one line naming the field and the directory and exits 2; the three
  rounds it recorded and the checkpoint of round 2 stay; the rerun with room ends as the
  uninterrupted run. Catches the write error passed on as a traceback (exit 1), and a
  checkpoint or record lost with the failed round."""
  from test_first_hour import _guarded_exit  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.core.client_table import DiskRows  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import checkpoints  # pylint: disable=g-import-not-at-top
  real_write, calls = DiskRows.write, []

  def write(self, slots, rows):
    calls.append(len(slots))
    if len(calls) < 3:
      return real_write(self, slots, rows)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
    try:
      return real_write(self, slots, rows)
    finally:
      resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
  work = tmp_path / "small_disk"
  old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG, not a signal
  try:
    with monkeypatch.context() as m:
      m.setattr(DiskRows, "write", write)
      with pytest.raises(WorkdirError) as e:
        loop.run(_config(client_table="disk"), str(work), progress=False)
  finally:
    signal.signal(signal.SIGXFSZ, old_handler)
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(
      "engine.client_table='disk': the disk is full (File too large while writing client rows "
      f"to {work / 'client_rows'}")
  code, lines = _guarded_exit(e.value, capsys, monkeypatch)
  assert code == 2 and lines == [f"error: {msg}"]
  assert json.load(open(work / "summary.json"))["status"] == "failed"
  assert len(open(work / "metrics.jsonl").readlines()) == 3
  assert checkpoints.latest_round(str(work)) == 2
  resumed = loop.run(_config(client_table="disk"), str(work), progress=False)
  assert resumed["status"] == "completed"
  _same_run(str(work), straight)
