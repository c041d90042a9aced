"""Fault injection through the real CLI (subprocesses): kills at a random round, concurrent runs
into one workdir, bad inputs of every kind, divergence. Nothing may lose or mix up results."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import signal
import sys
import time

import numpy as np
import pytest

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "experiments", "run.py")
DEMO = os.path.join(ROOT, "configs", "demo.py")
# A small, deterministic run whose rounds take tens of milliseconds (evaluation every round in
# small batches), so that a signal can land in the middle of the run.
BASE = [f"--config={DEMO}", "--config.model.name=linear", "--config.eval.batch_size=16",
        "--config.engine.client_strategy=host", "--config.engine.local_loop=unrolled"]
TIMING = ("round_time_s", "wall_time_s", "build_time_s", "first_round_time_s",
          "mean_round_time_s", "provenance", "status", "traces")


def cli(*args, workdir=None, wait=True, timeout=300):
  cmd = [sys.executable, RUN, *BASE, *args] + ([f"--workdir={workdir}"] if workdir else [])
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  if not wait:   # a running command (Popen's calls), forked from a zygote of its own
    return cli_runner.start(cmd, env=env)
  return cli_runner.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def read_metrics(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def strip(record):
  return {k: v for k, v in record.items() if k not in TIMING}


def snapshot(workdir):
  """Hashes of every result file (the lock file is not a result)."""
  out = {}
  for base, _, files in os.walk(workdir):
    for name in files:
      if name == ".lock":
        continue
      path = os.path.join(base, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, workdir)] = hashlib.sha256(f.read()).hexdigest()
  return out


ROUNDS = 14


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("straight"))
  out = cli(f"--config.rounds={ROUNDS}", "--config.checkpoint_every=2", workdir=workdir)
  assert out.returncode == 0, out.stderr[-2000:]
  with open(os.path.join(workdir, "summary.json")) as f:
    return read_metrics(workdir), json.load(f), workdir


@pytest.mark.parametrize("sig,status,code", [(signal.SIGKILL, None, -9),
                                             (signal.SIGTERM, "interrupted", 143),
                                             (signal.SIGINT, "interrupted", 130)])
def test_a_real_kill_then_rerun_equals_an_uninterrupted_run(tmp_path, uninterrupted, sig, status,
                                                            code):
  straight, straight_summary, _ = uninterrupted
  kill_at = random.Random(int(sig)).randint(3, ROUNDS - 4)   # seeded by the signal
  workdir = str(tmp_path / "run")
  args = (f"--config.rounds={ROUNDS}", "--config.checkpoint_every=2")
  proc = cli(*args, workdir=workdir, wait=False)
  deadline = time.time() + 240
  while len(read_metrics(workdir)) < kill_at and proc.poll() is None and time.time() < deadline:
    time.sleep(0.002)
  assert proc.poll() is None, "the run finished before the signal: make the rounds slower"
  proc.send_signal(sig)
  proc.communicate(timeout=120)
  assert proc.returncode == code
  done = len(read_metrics(workdir))
  assert done < ROUNDS
  if status:
    with open(os.path.join(workdir, "summary.json")) as f:
      summary = json.load(f)
    assert summary["status"] == status and summary["completed_rounds"] == done
  out = cli(*args, workdir=workdir)   # the same command resumes
  assert out.returncode == 0, out.stderr[-2000:]
  assert "resuming" in out.stderr
  resumed = read_metrics(workdir)
  assert [strip(r) for r in resumed] == [strip(r) for r in straight]
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  assert summary["status"] == "completed"
  assert strip(summary) == strip(straight_summary)


def test_a_kill_while_a_disk_table_is_checkpointed_loses_nothing(tmp_path):
  """FedDyn (a dual per client) with its client table on disk, SIGKILLed halfway through linking
  the rows into the checkpoint of round 4, the only one kept besides round 2's. The checkpoint
  of round 2 stays the newest, and the same command resumes from it to the uninterrupted run's
  records and final model. Catches rows linked outside orbax's atomic commit (into the
  committed step directory after its rename: the kill then leaves a committed checkpoint of
  round 4 with half its rows, and round 2's deleted)."""
  args = ("--config.rounds=4", "--config.checkpoint_every=2", "--config.checkpoint_keep=1",
          "--config.algorithm.name=feddyn", "--config.engine.client_table=disk",
          "--config.eval.last_n=1", "--config.eval.batch_size=1000")
  straight = str(tmp_path / "straight")
  out = cli(*args, workdir=straight)
  assert out.returncode == 0, out.stderr[-2000:]
  workdir = str(tmp_path / "killed")
  killed = cli_runner.run(
      [sys.executable, os.path.join(ROOT, "tests", "scripts", "kill_in_checkpoint.py"), *BASE,
       *args, f"--workdir={workdir}"], capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert killed.returncode == -9, killed.stderr[-2000:]
  saved = os.listdir(os.path.join(workdir, "checkpoints"))
  assert "2" in saved and "4" not in saved, saved
  assert any(".orbax-checkpoint-tmp" in d for d in saved), saved    # killed mid-write
  assert len(read_metrics(workdir)) == 4
  out = cli(*args, workdir=workdir)   # the same command resumes
  assert out.returncode == 0, out.stderr[-2000:]
  assert "resuming" in out.stderr
  assert [strip(r) for r in read_metrics(workdir)] == [strip(r) for r in read_metrics(straight)]
  final = lambda w: open(os.path.join(w, "final_params.msgpack"), "rb").read()
  assert final(workdir) == final(straight)
  assert not os.path.exists(os.path.join(workdir, "client_rows"))


def test_two_runs_into_one_workdir(tmp_path):
  workdir = str(tmp_path / "shared")
  first = cli("--config.rounds=6", workdir=workdir, wait=False)
  lock = os.path.join(workdir, ".lock")
  deadline = time.time() + 120
  while not (os.path.exists(lock) and open(lock).read().strip()) and time.time() < deadline:
    time.sleep(0.01)
  # The first run is held (SIGSTOP) while the second starts, so it still holds the lock however
  # fast it would otherwise finish.
  os.kill(first.pid, signal.SIGSTOP)
  try:
    second = cli("--config.rounds=6", "--config.algorithm.name=fedgmt", workdir=workdir)
  finally:
    os.kill(first.pid, signal.SIGCONT)
  assert second.returncode != 0
  assert f"in use by another run (pid {first.pid})" in second.stderr
  first.communicate(timeout=240)
  assert first.returncode == 0
  records = read_metrics(workdir)
  assert [r["round"] for r in records] == list(range(6))
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["algorithm"]["name"] == "fedavg"
  with open(os.path.join(workdir, "summary.json")) as f:
    assert json.load(f)["status"] == "completed"


# ------------------------------------------------------------------------------------------
# Bad inputs: each names the field or file, exits non-zero, and changes no existing result.
@pytest.fixture(scope="module")
def existing(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("existing"))
  out = cli("--config.rounds=3", "--config.checkpoint_every=1", workdir=workdir)
  assert out.returncode == 0, out.stderr[-2000:]
  return workdir


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("files")
  rng = np.random.default_rng(0)
  x, y = rng.integers(0, 256, (20, 8, 8), dtype=np.uint8), rng.integers(0, 10, 20)
  np.savez(d / "no_classes.npz", x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  np.savez(d / "labels99.npz", x_train=x, y_train=np.r_[y[:-1], 99], x_test=x[:5], y_test=y[:5],
           num_classes=10)
  np.savez(d / "float.npz", x_train=x.astype(np.float32) / 255, y_train=y, x_test=x[:5],
           y_test=y[:5], num_classes=10)
  np.savez(d / "shape.npz", x_train=x.reshape(20, 64)[:, :10].reshape(20, 10), y_train=y,
           x_test=x[:5], y_test=y[:5], num_classes=10)
  (d / "garbage.npz").write_bytes(os.urandom(300))
  idx = d / "idx_truncated"
  idx.mkdir()
  for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"):
    payload = gzip.compress(bytes(4) + os.urandom(200))
    (idx / (stem + ".gz")).write_bytes(payload[:len(payload) // 2])   # truncated gzip
  bad = d / "idx_corrupt"
  bad.mkdir()
  for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"):
    (bad / (stem + ".gz")).write_bytes(os.urandom(100))
  return d


CONFIG_CASES = [
    ("--config.rounds=0", "rounds"),
    ("--config.clients_per_round=0", "clients_per_round"),
    ("--config.clients_per_round=500", "clients_per_round"),
    ("--config.data.alpha=-1", "data.alpha"),
    ("--config.local.lr=0", "local.lr"),
    ("--config.local.lr_decay=1.5", "local.lr_decay"),
    ("--config.local.momentum=1.0", "local.momentum"),
    ("--config.local.batch_size=0", "local.batch_size"),
    ("--config.local.optimizer=adam", "local.optimizer"),
    ("--config.server.lr=-1", "server.lr"),
    ("--config.server.optimizer=rmsprop", "server.optimizer"),
    ("--config.seed=-1", "seed"),
    ("--config.eval.target_accuracy=1.5", "eval.target_accuracy"),
    ("--config.eval.every=0", "eval.every"),
    ("--config.algorithm.name=fedfoo", "algorithm.name"),
    ("--config.model.name=resnet1000", "model.name"),
    ("--config.data.augment=mixup", "data.augment"),
    ("--config.engine.client_strategy=pmap", "engine.client_strategy"),
    ("--config.aggregation=median", "aggregation"),
    ("--config.algorithm.fedprox.mu=-0.1", "algorithm.fedprox.mu"),
    ("--config.algorithm.fedsam.rho=-1", "algorithm.fedsam.rho"),
    ("--config.algorithm.fedcm.beta=0", "algorithm.fedcm.beta"),
    ("--config.algorithm.fedgloss.beta=0", "algorithm.fedgloss.beta"),
    ("--config.algorithm.fedgmt.alpha=2", "algorithm.fedgmt.alpha"),
    ("--config.training.on_nonfinite=ignore", "training.on_nonfinite"),
    ("--config.checkpoint_keep=0", "checkpoint_keep"),
    ("--config.local.lrr=0.1", "'local.lrr' does not exist; did you mean 'local.lr'"),
    ("--config.algorithm.fedsam.rhoo=0.1", "'algorithm.fedsam.rhoo' does not exist"),
    # A block the run does not use: it used to be ignored without a word (FedAvg trained).
    ("--config.algorithm.fedprox.mu=0.5", "error: algorithm.fedprox.mu is set but algorithm.name "
     "is 'fedavg'; add --config.algorithm.name=fedprox"),
    ("--config.model.resnet8.groups=4", "error: model.resnet8.groups is set but model.name is "
     "'linear'; add --config.model.name=resnet8"),
]


@pytest.mark.parametrize("arg,field", CONFIG_CASES, ids=[c[0][9:] for c in CONFIG_CASES])
def test_bad_config_field(existing, arg, field):
  before = snapshot(existing)
  out = cli("--config.rounds=3", arg, workdir=existing)
  assert out.returncode == 2, out.stderr[-1500:]
  assert field in out.stderr
  assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 3
  assert snapshot(existing) == before


DATA_CASES = [
    (["--config.data.source=idx", "--config.data.name=fashion_mnist",
      "--config.data.path={d}/missing_dir"], "missing_dir"),
    (["--config.data.source=idx", "--config.data.name=fashion_mnist",
      "--config.data.path={d}/idx_truncated"], "idx_truncated/"),
    (["--config.data.source=idx", "--config.data.name=fashion_mnist",
      "--config.data.path={d}/idx_corrupt"], "idx_corrupt/"),
    (["--config.data.source=npz", "--config.data.path={d}/absent.npz"], "absent.npz"),
    (["--config.data.source=npz", "--config.data.path={d}/no_classes.npz"],
     "no_classes.npz: the number of classes is not declared"),
    (["--config.data.source=npz", "--config.data.path={d}/labels99.npz"],
     "labels99.npz: toy: labels go up to 99 but num_classes=10"),
    (["--config.data.source=npz", "--config.data.path={d}/float.npz"], "float.npz"),
    (["--config.data.source=npz", "--config.data.path={d}/shape.npz"], "shape.npz"),
    (["--config.data.source=npz", "--config.data.path={d}/garbage.npz"], "garbage.npz"),
]


@pytest.mark.parametrize("args,expected", DATA_CASES, ids=[c[1].split(":")[0][:20]
                                                          for c in DATA_CASES])
def test_bad_data_file_names_the_file(tmp_path, files, args, expected):
  workdir = str(tmp_path / "fresh")
  extra = ["--config.data.name=toy"] if "npz" in args[0] else []
  out = cli("--config.rounds=2", *extra, *[a.format(d=files) for a in args], workdir=workdir)
  assert out.returncode == 2, out.stderr[-1500:]
  assert expected in out.stderr, out.stderr[-1500:]
  assert "Traceback" not in out.stderr
  assert not os.path.exists(os.path.join(workdir, "metrics.jsonl"))
  assert not os.path.exists(os.path.join(workdir, "config.json"))


@pytest.mark.parametrize("arg,field", [("--config.local.lr=0.07", "local.lr"),
                                       ("--config.algorithm.name=fedgmt", "algorithm.name"),
                                       ("--config.model.name=mlp", "model.name"),
                                       ("--config.seed=4", "seed")])
def test_workdir_of_another_setting_is_refused(existing, arg, field):
  before = snapshot(existing)
  out = cli("--config.rounds=3", arg, workdir=existing)
  assert out.returncode == 2
  assert f"holds results of another setting ({field}:" in out.stderr
  assert "--config.resume=False" in out.stderr
  assert snapshot(existing) == before


def test_checkpoint_of_another_setting_and_corrupt_checkpoint(tmp_path):
  workdir = str(tmp_path / "ckpt")
  assert cli("--config.rounds=4", "--config.checkpoint_every=2", workdir=workdir).returncode == 0
  # config.json rewritten by hand (as an older version would have left it): the checkpoint's
  # own record of the config still refuses the mix.
  cfg_path = os.path.join(workdir, "config.json")
  os.remove(os.path.join(workdir, "metrics.jsonl"))
  before = snapshot(workdir)
  out = cli("--config.rounds=6", "--config.local.lr=0.2", "--config.checkpoint_every=2",
            workdir=workdir)
  assert out.returncode == 2 and "holds a checkpoint of another setting (local.lr:" in out.stderr
  assert snapshot(workdir) == before
  # Extending `rounds` is allowed and resumes.
  out = cli("--config.rounds=6", "--config.checkpoint_every=2", workdir=workdir)
  assert out.returncode == 0, out.stderr[-1500:]
  assert "resuming" in out.stderr and os.path.exists(cfg_path)
  assert "metrics.jsonl is missing" in out.stderr   # said, not silently papered over
  # A corrupt newest checkpoint (its data files truncated, as a crash of the disk may leave
  # them): the run falls back to the newest readable one by itself, says so in one line and
  # keeps the bad one aside. It used to exit 2 ("delete it to resume from an older one"),
  # often followed by asyncio tracebacks ("Event loop is closed", "Task exception was never
  # retrieved") from orbax's abandoned reads.
  newest = os.path.join(workdir, "checkpoints", "6")
  for base, _, names in os.walk(os.path.join(newest, "state")):
    for name in names:
      if os.sep + "d" + os.sep in os.path.join(base, name):
        with open(os.path.join(base, name), "r+b") as f:
          f.truncate(10)
  bad = snapshot(newest)
  out = cli("--config.rounds=8", "--config.checkpoint_every=2", workdir=workdir)
  assert out.returncode == 0, out.stderr[-3000:]
  aside = os.path.join(workdir, "checkpoints.unreadable", "6")
  warned = [l for l in out.stderr.splitlines() if "cannot be read" in l]
  assert len(warned) == 1 and f"checkpoint {newest} cannot be read (" in warned[0], out.stderr
  assert warned[0].endswith(f"moved it to {aside} and resuming from the checkpoint of round 4")
  assert snapshot(aside) == bad                         # kept as it was, never deleted
  for noise in ("Traceback", "Event loop is closed", "never retrieved"):
    assert noise not in out.stderr, out.stderr[-3000:]
  assert "resuming demo_digits from round 4" in out.stderr
  # Rounds 4 and 5 again from the checkpoint of round 4 (0-3 were deleted above), then 6, 7.
  assert [r["round"] for r in read_metrics(workdir)] == [4, 5, 6, 7]


def test_resume_without_a_checkpoint_keeps_the_replaced_rounds(tmp_path):
  workdir = str(tmp_path / "nockpt")
  assert cli("--config.rounds=3", workdir=workdir).returncode == 0   # no checkpoints
  before = read_metrics(workdir)
  assert len(before) == 3
  out = cli("--config.rounds=4", workdir=workdir)   # resume is on: nothing to resume from
  assert out.returncode == 0, out.stderr[-1500:]
  assert "has no checkpoint to resume from" in out.stderr and "the 3 rounds" in out.stderr
  with open(os.path.join(workdir, "metrics.replaced.jsonl")) as f:
    assert [json.loads(line) for line in f] == before
  assert [r["round"] for r in read_metrics(workdir)] == [0, 1, 2, 3]


def test_a_checkpoint_of_the_format_before_orbax_is_refused_not_passed_over(tmp_path):
  workdir = str(tmp_path / "legacy")
  assert cli("--config.rounds=3", workdir=workdir).returncode == 0
  with open(os.path.join(workdir, "checkpoint.msgpack"), "wb") as f:
    f.write(b"\x82\xa5state")   # what versions before orbax checkpoints left
  before = snapshot(workdir)
  out = cli("--config.rounds=6", "--config.checkpoint_every=2", workdir=workdir)
  assert out.returncode == 2, out.stderr[-1500:]
  assert "checkpoint.msgpack is a checkpoint in the format of versions before orbax" in out.stderr
  assert "over the 3 rounds in metrics.jsonl" in out.stderr
  assert "--config.resume=False" in out.stderr and "Traceback" not in out.stderr
  assert snapshot(workdir) == before
  out = cli("--config.rounds=3", "--config.resume=False", workdir=workdir)   # explicit
  assert out.returncode == 0, out.stderr[-1500:]


def test_diverging_learning_rate_stops_with_status_diverged(tmp_path):
  workdir = str(tmp_path / "div")
  out = cli("--config.rounds=30", "--config.local.lr=1e6", workdir=workdir)
  assert out.returncode == 3
  assert "non-finite training loss or global model" in out.stderr
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  assert summary["status"] == "diverged" and summary["completed_rounds"] <= 5
  text = open(os.path.join(workdir, "metrics.jsonl")).read()
  assert "NaN" not in text and '"nan"' not in text
  assert json.loads(text.splitlines()[-1])["nonfinite"] is True


def test_finiteness_check_in_host_memory_and_compiled_agree():
  """The divergence guard's check: NumPy on leaves in host memory, one compiled reduction
  elsewhere; both ignore integer leaves and see a NaN or inf in any float leaf, bfloat16 too."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import recorder  # pylint: disable=g-import-not-at-top
  tree = {"w": jnp.ones((2, 3)), "h": jnp.ones(4, jnp.bfloat16), "n": jnp.array([2**31 - 1]),
          "host": np.zeros(2, np.float32)}
  assert recorder._all_finite(tree) and bool(recorder._floats_finite(tree))
  for leaf, bad in (("w", jnp.nan), ("h", jnp.inf), ("host", -np.inf)):
    broken = dict(tree, **{leaf: tree[leaf].at[0].set(bad) if leaf != "host"
                           else np.array([0.0, bad], np.float32)})
    assert not recorder._all_finite(broken), leaf
    assert not bool(recorder._floats_finite(broken)), leaf


def test_print_config_and_no_workdir_note():
  out = cli_runner.run([sys.executable, RUN, f"--config={DEMO}", "--print_config"],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0
  assert "local.lr = 0.05    # " in out.stdout or "local.lr = 0.05" in out.stdout
  assert "training.on_nonfinite = 'stop'    # 'stop'" in out.stdout
  out = cli("--config.rounds=1")
  assert out.returncode == 0 and "no --workdir: nothing will be saved" in out.stderr
  assert "Unable to initialize backend 'tpu'" not in out.stderr


@pytest.mark.parametrize("sig,expected", [(signal.SIGINT, "KeyboardInterrupt"),
                                          (signal.SIGTERM, "RunInterrupted")])
def test_a_swallowed_signal_still_stops_the_run_at_the_round_boundary(sig, expected):
  from fedjax_sharp.errors import RunInterrupted  # noqa: F811
  from fedjax_sharp.training import loop
  # Python only prints an exception raised inside __del__ or a callback; the flag survives.
  with loop.signals_as_interrupt() as check:
    check()                                   # nothing received: no-op
    try:
      os.kill(os.getpid(), sig)
      time.sleep(1)
    except (KeyboardInterrupt, RunInterrupted):
      pass                                    # swallowed, as a __del__ would
    with pytest.raises((KeyboardInterrupt, RunInterrupted)) as raised:
      check()
    assert type(raised.value).__name__ == expected


def test_concurrent_figure_writes_do_not_collide(tmp_path):
  """Two workers refreshing one study's plot at the same moment (the queue's compare.py runs
  did): each renders to its own temporary file, so both succeed and the file is whole. A fixed
  temporary name (`path + '.tmp.png'`) fails here, deterministically, on the second rename."""
  import threading  # pylint: disable=g-import-not-at-top
  from fedjax_sharp import fileio  # pylint: disable=g-import-not-at-top

  barrier = threading.Barrier(2)

  class SlowFigure:
    def __init__(self, payload):
      self.payload = payload

    def savefig(self, target, format=None, **kwargs):  # pylint: disable=redefined-builtin
      del format, kwargs
      barrier.wait(timeout=10)  # both writers are mid-write before either renames
      if isinstance(target, str):
        with open(target, "wb") as f:
          f.write(self.payload)
      else:
        target.write(self.payload)

  path = str(tmp_path / "accuracy.png")
  errors = []

  def write(payload):
    try:
      fileio.atomic_savefig(SlowFigure(payload), path, dpi=100)
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=write, args=(p,)) for p in (b"A" * 1000, b"B" * 1000)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  assert open(path, "rb").read() in (b"A" * 1000, b"B" * 1000)
  assert sorted(os.listdir(tmp_path)) == ["accuracy.png"]


def test_atomic_savez_round_trip(tmp_path):
  from fedjax_sharp import fileio  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "grid.npz")
  fileio.atomic_savez(path, loss=np.arange(6.0).reshape(2, 3), alpha=np.linspace(-1, 1, 3))
  with np.load(path) as z:
    np.testing.assert_array_equal(z["loss"], np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(z["alpha"], np.linspace(-1, 1, 3))
  assert sorted(os.listdir(tmp_path)) == ["grid.npz"]
