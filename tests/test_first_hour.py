"""What a new user meets first: every user-input error is one stderr line naming the
field, file or path, with exit 2; a bad config value is reported as itself even when the workdir
holds another run; the ETA shown after the first round excludes compilation (a fake clock)."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training.progress import Progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "experiments", "run.py")
DEMO = os.path.join(ROOT, "configs", "demo.py")
LOG_LINE = re.compile(r"^[IWEF]\d{4} ")   # absl's own log lines


def run(*flags):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  env.pop("FEDJAX_SHARP_TRACEBACK", None)
  return subprocess.run([sys.executable, RUN, *flags], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=600)


def one_error_line(proc) -> str:
  lines = [l for l in proc.stderr.splitlines() if l.strip() and not LOG_LINE.match(l)]
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(lines) == 1, proc.stderr[-2000:]
  assert lines[0].startswith("error: ")
  return lines[0]


def test_a_config_file_that_does_not_exist(tmp_path):
  missing = str(tmp_path / "nope.py")
  assert missing in one_error_line(run(f"--config={missing}"))


def test_a_workdir_that_is_an_existing_file(tmp_path):
  afile = tmp_path / "afile"
  afile.write_text("x")
  line = one_error_line(run(f"--config={DEMO}", "--config.rounds=1", f"--workdir={afile}"))
  assert f"--workdir={afile}" in line and "file" in line


def test_an_unprepared_tfds_dataset(tmp_path):
  proc = run(f"--config={DEMO}", "--config.data.source=tfds", "--config.data.name=cifar10",
             f"--config.data.path={tmp_path}")
  line = one_error_line(proc)
  assert "data.name='cifar10'" in line and "not prepared" in line and str(tmp_path) in line
  assert "tfds build cifar10 --file_format=array_record" in line
  # No TFDS log lines before it (one of them falsely said the dataset was already prepared).
  assert "already prepared" not in proc.stderr and "dataset_info.json" not in proc.stderr
  assert not [l for l in proc.stderr.splitlines() if "tfds" in l.lower() and l != line]


def test_a_bad_value_is_reported_as_itself_before_the_workdir_is_compared(tmp_path):
  # A workdir holding an earlier run of another setting (its config.json).
  earlier = config_lib.load_config_file(DEMO)
  earlier.seed = 7
  (tmp_path / "config.json").write_text(earlier.to_json_best_effort())
  (tmp_path / "metrics.jsonl").write_text(json.dumps({"round": 0}) + "\n")
  line = one_error_line(run(f"--config={DEMO}", "--config.clients_per_round=1000",
                            f"--workdir={tmp_path}"))
  assert "clients_per_round" in line and "another setting" not in line


def test_the_eta_after_the_first_round_excludes_compilation():
  now = [0.0]
  bar = Progress(total=10, every=1, stream=io.StringIO(), clock=lambda: now[0])
  record = {"train_loss": 1.0, "round_time_s": 1.0, "test_accuracy": 0.5}
  now[0] = 100.0                      # round 1: 99 s of compilation + 1 s of training
  first = bar.update(1, record)
  assert bar.eta_s(1) is None and "eta after the next round" in first
  assert "first round 1 min 40 s (compile)" in first
  for done in range(2, 6):            # steady rounds of 1 s each
    now[0] += 1.0
    line = bar.update(done, record)
  assert bar.eta_s(5) == pytest.approx(5.0)      # 5 rounds left x 1 s, not x 20 s
  assert "eta 5 s" in line
  # A resumed run counts from where it started.
  now[0] = 0.0
  resumed = Progress(total=10, every=1, stream=io.StringIO(), start=6, clock=lambda: now[0])
  now[0] = 50.0
  resumed.update(7, record)
  now[0] = 52.0
  resumed.update(8, record)
  assert resumed.eta_s(8) == pytest.approx(4.0)  # 2 rounds left x 2 s


def test_the_progress_line_fits_80_columns_with_the_eta_kept():
  now = [0.0]
  out = io.StringIO()
  bar = Progress(total=500, every=1, stream=out, clock=lambda: now[0], width=80)
  assert bar.live
  record = {"train_loss": 0.4645, "round_time_s": 0.04, "test_accuracy": 0.8478}
  lines = []
  for done in range(1, 501):
    now[0] += 4.0 if done == 1 else 1.5
    lines.append(bar.update(done, record))
  drawn = out.getvalue()
  assert drawn.endswith("\n") and drawn.count("\n") == 1   # one line, redrawn in place
  frames = drawn.rstrip("\n").split("\r")[1:]
  assert len(frames) == 500 and {len(f) for f in frames} == {79}   # never wraps or jumps
  for line in lines[1:]:
    assert len(line) <= 79 and "eta " in line and "elapsed " in line, line
    assert re.match(r"^\[[# ]{10}\] round +\d+/500 \| acc 0\.8478 \| ", line), line
  assert "eta 12 min 27 s" in lines[1] and lines[-1].startswith("[##########] round 500/500")
  assert ", acc" not in drawn                     # no stray comma
  # Narrower still: the round and the ETA survive, the least useful fields go first.
  narrow = Progress(total=500, stream=io.StringIO(), clock=lambda: now[0], width=40)
  narrow.update(1, record)
  now[0] += 100
  line = narrow.update(2, record)
  assert line.startswith("round   2/500 | ") and "eta " in line and len(line) <= 39


def test_the_progress_falls_back_to_log_lines_when_the_terminal_size_is_unknown():
  import fcntl
  import struct
  import termios
  master, slave = os.openpty()           # a fresh pty is 0x0, as under `script -q -c ...`
  try:
    with os.fdopen(slave, "w", closefd=False) as tty:
      bar = Progress(total=3, stream=tty)
      assert not bar.live
      line = bar.update(1, {"train_loss": 1.0, "round_time_s": 1.0, "test_accuracy": 0.5})
      assert line.startswith("round 1/3 | acc 0.5 | ")   # logged: absl's log line
      fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
      assert Progress(total=3, stream=tty).width == 80
  finally:
    os.close(master)
    os.close(slave)
  assert Progress(total=3, stream=io.StringIO()).live is False   # not a terminal


def _tiny_grid_config():
  c = config_lib.base_config()
  c.data.num_clients, c.clients_per_round = 4, 2
  c.data.max_train_examples, c.data.max_test_examples = 200, 100
  c.model.name = "linear"
  c.local.steps, c.local.batch_size = 2, 10
  c.rounds, c.eval.last_n = 3, 20           # fewer rounds than last_n
  return c


def test_compare_reuses_finished_runs_by_default_and_retrains_with_overwrite(tmp_path,
                                                                            monkeypatch):
  from fedjax_sharp.training import compare, loop   # pylint: disable=g-import-not-at-top
  config = _tiny_grid_config()
  first = compare.run_grid(config, ["fedavg"], [0], str(tmp_path), progress=False)
  calls = []
  real_run = loop.run
  monkeypatch.setattr(loop, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
  again = compare.run_grid(config, ["fedavg"], [0], str(tmp_path), progress=False)
  assert calls == []                                   # read back, not retrained
  assert again["fedavg"][0]["records"] == first["fedavg"][0]["records"]
  assert again["fedavg"][0]["reused"] and not first["fedavg"][0]["reused"]
  assert compare.reuse_note(first, str(tmp_path)) is None   # a second `make demo` says so:
  assert compare.reuse_note(again, str(tmp_path), "delete it to retrain") == (
      f"Reused all 1 finished run(s) in {tmp_path} instead of training again (delete it to "
      "retrain)\n")
  (tmp_path / "fedavg" / "seed_0" / "marker").write_text("x")
  redone = compare.run_grid(config, ["fedavg"], [0], str(tmp_path), progress=False,
                            overwrite=True)
  assert len(calls) == 1 and calls[0][0].resume is False     # retrained from round 0
  assert [r["round"] for r in redone["fedavg"][0]["records"]] == [0, 1, 2]
  with pytest.raises(ValueError, match="--overwrite"):
    compare.run_grid(config, ["fedavg"], [0], str(tmp_path), progress=False, overwrite=True,
                     report_only=True)
  # The table says over what the std is taken and how many rounds were averaged.
  one_seed = compare.to_markdown(compare.table_rows(first, 20, 0.0), 20, 0.0)
  assert "acc last 3 (%), mean (std over the last 3 rounds of one seed)" in one_seed
  assert "last 20" not in one_seed
  two = compare.run_grid(config, ["fedavg"], [0, 1], str(tmp_path / "two"), progress=False)
  table = compare.to_markdown(compare.table_rows(two, 20, 0.0), 20, 0.0)
  assert "mean (std over seeds)" in table


def test_tensorboard_after_a_resume_has_each_step_once(tmp_path):
  import glob                                           # pylint: disable=g-import-not-at-top
  import shutil                                         # pylint: disable=g-import-not-at-top
  import struct                                         # pylint: disable=g-import-not-at-top
  pytest.importorskip("tensorboardX")
  from tensorboardX.proto import event_pb2              # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import loop                # pylint: disable=g-import-not-at-top
  config = _tiny_grid_config()
  config.rounds, config.checkpoint_every = 6, 4         # checkpoints after rounds 4 and 6
  config.log.tensorboard = True
  straight = loop.run(config, str(tmp_path / "straight"), progress=False)
  work = tmp_path / "resumed"
  loop.run(config, str(work), progress=False)
  # As if the job died after round 6 but before its last checkpoint: resume from round 4.
  shutil.rmtree(work / "checkpoints" / "6")
  resumed = loop.run(config, str(work), progress=False)
  assert resumed["final_test_accuracy"] == pytest.approx(straight["final_test_accuracy"])
  steps = {}
  for path in glob.glob(str(work / "tensorboard" / "events.out.tfevents.*")):
    with open(path, "rb") as f:   # TFRecord: length, crc, event proto, crc
      while header := f.read(12):
        (length,) = struct.unpack("<Q", header[:8])
        event = event_pb2.Event.FromString(f.read(length))
        f.read(4)
        for v in event.summary.value:
          if v.tag == "train_loss":
            steps.setdefault(event.step, []).append(v.simple_value)
  assert sorted(steps) == [1, 2, 3, 4, 5, 6]
  assert all(len(v) == 1 for v in steps.values()), steps       # each step once
  records = [json.loads(l) for l in open(work / "metrics.jsonl")]
  for r in records:
    assert steps[r["round"] + 1][0] == pytest.approx(r["train_loss"], rel=1e-6)


def test_pip_install_from_a_clone_builds_a_complete_wheel(tmp_path):
  """`pip install .` without make: the wheel holds every subpackage and the embedded data."""
  import shutil                                         # pylint: disable=g-import-not-at-top
  import zipfile                                        # pylint: disable=g-import-not-at-top
  src = tmp_path / "clone"   # a copy: an in-tree build would leave build/ in the checkout
  shutil.copytree(os.path.join(ROOT, "fedjax_sharp"), src / "fedjax_sharp",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for f in ("pyproject.toml", "README.md"):
    shutil.copy(os.path.join(ROOT, f), src / f)
  proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                         "--wheel-dir", str(tmp_path), str(src)], capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  (wheel,) = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
  names = set(zipfile.ZipFile(tmp_path / wheel).namelist())
  for pkg in ("core", "algorithms", "training", "data", "models", "minimax", "analysis"):
    assert f"fedjax_sharp/{pkg}/__init__.py" in names, pkg
  assert "fedjax_sharp/data/assets/digits.csv.gz" in names
  assert "fedjax_sharp/training/recorder.py" in names
  meta = next(n for n in names if n.endswith("METADATA"))
  text = zipfile.ZipFile(tmp_path / wheel).read(meta).decode()
  assert "Provides-Extra: cuda13" in text and "Provides-Extra: cuda12" in text


# Help, exit codes, quiet logs, interrupts, run folders, a full disk: in-process (the entry
# points' wrappers are called directly; one tiny compiled run shared by the checks below).

def test_help_exits_0_and_keeps_the_example_line_continuations(monkeypatch, capsys):
  import ast                                            # pylint: disable=g-import-not-at-top
  import types                                          # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import cli                 # pylint: disable=g-import-not-at-top
  for script in ("run.py", "compare.py", "demo.py", "landscape.py", "hessian.py",
                 "analyse.py"):
    path = os.path.join(ROOT, "experiments", script)
    source = open(path).read()
    first = ast.parse(source).body[0]
    shown = ast.get_docstring(ast.parse(source), clean=False)
    written = ast.get_source_segment(source, first)
    if "\\\n" in written:     # a shell continuation in the example lines must survive
      assert "\\\n" in shown, f"{script}: make the docstring raw (r\"\"\"...) to keep its `\\`"
  doc = ast.get_docstring(ast.parse(open(RUN).read()), clean=False)
  monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__", doc))
  for flag in ("--help", "-h"):
    with pytest.raises(SystemExit) as e:
      cli.flags_parser(["run.py", flag])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--workdir=runs/fmnist \\\n        --config.algorithm.name=fedavg" in out


def _guarded_exit(error, capsys, monkeypatch, verbose=False):
  """(exit code, non-empty stderr lines) of `cli.guarded` around a main raising `error`."""
  from absl import logging as absl_logging              # pylint: disable=g-import-not-at-top
  import logging as std_logging                         # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import cli                 # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(cli, "_SHOW_LIBRARY_LOGS", False)
  if verbose:
    monkeypatch.setenv("FEDJAX_SHARP_TRACEBACK", "1")
  else:
    monkeypatch.delenv("FEDJAX_SHARP_TRACEBACK", raising=False)
  level, jax_level = absl_logging.get_verbosity(), std_logging.getLogger("jax").level
  absl_level = std_logging.getLogger("absl").level

  def main(argv):
    raise error
  try:
    with pytest.raises(SystemExit) as e:
      cli.guarded(main)(["x"])
  finally:
    absl_logging.set_verbosity(level)
    std_logging.getLogger("absl").setLevel(absl_level)
    std_logging.getLogger("jax").setLevel(jax_level)
  return e.value.code, [l for l in capsys.readouterr().err.splitlines() if l.strip()]


def test_usage_errors_are_one_line_exit_2_and_verbose_keeps_the_code(capsys, monkeypatch):
  from absl import app                                  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.algorithms.registry import ALGORITHMS  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.errors import DataError             # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import compare             # pylint: disable=g-import-not-at-top
  code, lines = _guarded_exit(app.UsageError("--config is required, e.g. "
                                             "--config=configs/demo.py"), capsys, monkeypatch)
  assert code == 2 and lines == ["error: --config is required, e.g. --config=configs/demo.py "
                                 "(--help lists the flags)"]
  with pytest.raises(ValueError) as e:
    compare.check_algorithms(["fedavg", "fedgtm"], ALGORITHMS)
  assert "\n" not in str(e.value) and "'fedgtm' is not a registered algorithm; did you mean " \
      "'fedgmt'" in str(e.value)
  code, lines = _guarded_exit(e.value, capsys, monkeypatch)
  assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --algorithms: 'fedgtm'")
  # --verbose (FEDJAX_SHARP_TRACEBACK=1) adds the traceback, not a different exit code.
  code, lines = _guarded_exit(DataError("data.path: no such file"), capsys, monkeypatch,
                              verbose=True)
  assert code == 2 and lines[0].startswith("Traceback") and lines[-1] == \
      "error: data.path: no such file"


def test_variant_folders_have_no_stray_separators(tmp_path):
  from fedjax_sharp.training import compare             # pylint: disable=g-import-not-at-top
  assert compare.variant_dir_name("fedavg") == "fedavg"
  assert compare.variant_dir_name("my_fedprox[decay_mu=0.1]") == "my_fedprox-decay_mu=0.1"
  assert compare.variant_dir_name("fedgloss[client_optimizer='sam',rho=0.05]") == \
      "fedgloss-client_optimizer=sam-rho=0.05"
  # A grid started by an older release (its folder 'scaffold_local.lr=0.05_') is still found.
  (tmp_path / "scaffold_local.lr=0.05_").mkdir()
  assert compare.variant_dir(str(tmp_path), "scaffold[local.lr=0.05]") == \
      str(tmp_path / "scaffold_local.lr=0.05_")
  assert compare.variant_dir(str(tmp_path), "fedprox[mu=0.1]") == str(tmp_path / "fedprox-mu=0.1")


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_run_resumes_exactly(
    tmp_path, monkeypatch, capsys, caplog):
  import contextlib                                     # pylint: disable=g-import-not-at-top
  import logging as std_logging                         # pylint: disable=g-import-not-at-top
  import shutil                                         # pylint: disable=g-import-not-at-top
  from fedjax_sharp.errors import WorkdirError          # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import checkpoints, loop   # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import recorder            # pylint: disable=g-import-not-at-top
  config = _tiny_grid_config()
  config.rounds, config.checkpoint_every = 4, 2
  exp = loop.build_experiment(config)    # built and compiled once for the four runs below
  # Quiet logs: one short INFO line per run; the 'auto' explanations are DEBUG (--verbose).
  with caplog.at_level(std_logging.INFO):
    straight = loop.run(config, str(tmp_path / "straight"), progress=False,
                        experiment=exp)
  ours = [r for r in caplog.records if "fedjax_sharp" in r.pathname
          and r.levelno >= std_logging.INFO]
  assert ours and all(len(r.getMessage()) < 100 for r in ours), [r.getMessage() for r in ours]
  assert not any("'auto' ->" in r.getMessage() for r in ours)

  real = checkpoints._manager
  orbax_error = ("RESOURCE_EXHAUSTED: Error writing \"d/ocdbt.process_0/d/ab12\" in OCDBT "
                 "database at local file \"/w/checkpoints/4.orbax-checkpoint-tmp/\"\n" +
                 "\n".join(f"  traceback line {i}" for i in range(100)))

  @contextlib.contextmanager
  def full_at_round_4(workdir, keep):
    with real(workdir, keep) as manager:
      save = manager.save
      def failing(step, *args, **kwargs):
        if step == 4:
          raise ValueError(orbax_error)
        return save(step, *args, **kwargs)
      manager.save = failing
      yield manager
  monkeypatch.setattr(checkpoints, "_manager", full_at_round_4)
  work = tmp_path / "small_disk"
  with pytest.raises(WorkdirError) as e:
    loop.run(config, str(work), progress=False, experiment=exp)
  msg = str(e.value)
  assert "\n" not in msg and len(msg) < 220 + len(str(work)), msg
  assert msg.startswith(f"--workdir={work}: the disk is full") and "round 2" in msg
  code, lines = _guarded_exit(e.value, capsys, monkeypatch)
  assert code == 2 and lines == [f"error: {msg}"]
  assert json.load(open(work / "summary.json"))["status"] == "failed"
  assert len(open(work / "metrics.jsonl").readlines()) == 4
  assert checkpoints.latest_round(str(work)) == 2
  monkeypatch.setattr(checkpoints, "_manager", real)

  # An interrupt names the checkpoint a rerun resumes from (or says there is none).
  def interrupted(self, t, *args, **kwargs):
    raise KeyboardInterrupt
  with monkeypatch.context() as m:
    m.setattr(recorder.RunRecorder, "record_round", interrupted)
    with pytest.raises(KeyboardInterrupt) as stop:
      loop.run(config, str(work), progress=False, experiment=exp)
  assert stop.value.last_checkpoint == 2
  code, lines = _guarded_exit(stop.value, capsys, monkeypatch)
  assert code == 130 and lines == ["interrupted (SIGINT); rerun the same command to resume "
                                   "from the checkpoint of round 2"]
  stop.value.last_checkpoint = None
  code, lines = _guarded_exit(stop.value, capsys, monkeypatch)
  assert "no checkpoint had been written" in lines[0] and "resume" not in lines[0]

  # Moved to a disk with room, the same run resumes from round 2 and ends as if never stopped.
  moved = tmp_path / "big_disk"
  shutil.move(str(work), str(moved))
  resumed = loop.run(config, str(moved), progress=False, experiment=exp)
  assert resumed["status"] == "completed"
  records = [json.loads(l) for l in open(moved / "metrics.jsonl")]
  expected = [json.loads(l) for l in open(tmp_path / "straight" / "metrics.jsonl")]
  assert [r["round"] for r in records] == [0, 1, 2, 3]
  for got, want in zip(records, expected):
    assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-6)
    assert got["test_accuracy"] == pytest.approx(want["test_accuracy"])
  assert resumed["final_test_accuracy"] == pytest.approx(straight["final_test_accuracy"])


def test_did_you_mean_looks_in_the_typed_section_first_and_the_seed_range_reads_2_to_the_32():
  """A typo'd field is matched by its last part among its own section's fields: 'local.momentun'
  suggested 'local.asam_eta' and 'local.rho' beside 'local.momentum' (whole dotted names share
  the section's letters), and 'algorithm.fedgmt.gama' another algorithm's 'gamma'. The seed's
  range was printed as '[0, 4.29497e+09)'."""
  from fedjax_sharp.errors import ConfigError           # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import cli, fields         # pylint: disable=g-import-not-at-top
  hint = lambda arg: cli.describe_flag_error(["run.py", f"--config={DEMO}", arg], ValueError())
  assert hint("--config.local.momentun=0.5") == (
      "config field 'local.momentun' does not exist; did you mean 'local.momentum'?")
  assert hint("--config.algorithm.fedgmt.gama=1").endswith("did you mean "
                                                          "'algorithm.fedgmt.gamma'?")
  assert hint("--config.algorithm.fedgf.w=1").endswith("did you mean 'algorithm.fedgf.W'?")
  assert hint("--config.server.lr_decay=1").endswith("did you mean 'local.lr_decay'?")
  assert hint("--config.lcoal.lr=1").endswith("did you mean 'local.lr' or 'server.lr'?")
  assert "did you mean" not in hint("--config.local.xyz=1")    # no odd neighbour
  config = config_lib.load_config_file(DEMO)
  config.seed = -1
  with pytest.raises(ConfigError, match=r"^seed must be in \[0, 2\*\*32\), got -1$"):
    fields.validate(config)


def test_piped_progress_is_about_ten_lines_a_run_with_4_significant_digits(monkeypatch):
  """Piped (not a terminal), the demo's 150 rounds log 11 lines (the first round, every 15th),
  not one ~170-character line per round (151 lines), and a diverging loss reads 2.146e+35, not
  214620535609590549992450458713587712.0000."""
  from fedjax_sharp.training import progress as progress_lib  # pylint: disable=g-import-not-at-top
  logged = []
  monkeypatch.setattr(progress_lib.logging, "info", logged.append)
  demo = config_lib.load_config_file(DEMO)
  assert demo.log_every == 0           # the default: about ten lines a run
  now = [0.0]
  bar = Progress(total=demo.rounds, every=demo.log_every or None, stream=io.StringIO(),
                 clock=lambda: now[0])
  for done in range(1, demo.rounds + 1):
    now[0] += 1.0
    bar.update(done, {"train_loss": 2.1462053560959055e+35, "round_time_s": 0.0187654321,
                      "test_accuracy": 0.96378830})
  assert len(logged) == 11 and len(logged) + 1 < 20, logged     # + the run's one INFO line
  assert [int(re.match(r"round +(\d+)/150", l).group(1)) for l in logged] == [
      1] + list(range(15, 151, 15))
  assert "acc 0.9638 | train loss 2.146e+35 | 0.0188 s/round" in logged[-1]
  assert all(len(l) < 110 for l in logged[1:]), logged   # the compile time: on the first
  logged.clear()
  Progress(total=5, every=2, stream=io.StringIO()).update(5, {
      "train_loss": 0.5, "round_time_s": 1.0, "test_accuracy": 0.5})
  assert len(logged) == 1 and logged[0].startswith("round 5/5")   # --config.log_every=2


def test_analysis_and_comparison_lines_name_their_work_and_keep_the_eta():
  """The analysis commands' steps use the training's line (bar, counter, elapsed, ETA after the
  compiled first step) under a label naming the work; a comparison's line names the algorithm
  and seed. (The Hessian, trace and landscape commands printed nothing while they ran.)"""
  now = [0.0]
  out = io.StringIO()
  bar = Progress(0, every=None, stream=out, clock=lambda: now[0], width=80,
                 label="landscape fedgmt seed 0", unit="point")
  lines = []
  for done in range(1, 442):
    now[0] += 30.0 if done == 1 else 1.0
    lines.append(bar.advance(done, 441))
  assert lines[0].startswith("[          ] landscape fedgmt seed 0 point   1/441 | ")
  assert "eta after the next point" in lines[0]
  assert lines[10].endswith("eta 7 min 10 s") and len(lines[10]) <= 79, lines[10]
  assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1
  labelled = Progress(total=150, stream=io.StringIO(), clock=lambda: now[0], width=80,
                      label="fedgloss[client_optimizer='sam',rho=0.1] seed 2")
  line = labelled.update(1, {"train_loss": 1.0, "round_time_s": 1.0, "test_accuracy": 0.5})
  assert line.startswith("[          ] fedgloss[client~] seed 2 round   1/150 | "), line
  assert line.endswith("| eta after the next round"), line
  assert len(line) <= 79


def test_compare_names_the_algorithm_and_seed_on_each_runs_progress_line(tmp_path, monkeypatch):
  """`run_grid` passes each run its name for the line (the line used to show only the round, so
  five algorithms x three seeds looked alike)."""
  from fedjax_sharp.training import compare, loop       # pylint: disable=g-import-not-at-top
  shown = []
  monkeypatch.setattr(loop, "run", lambda cfg, run_dir, progress=True, **_: shown.append(
      progress) or {})
  monkeypatch.setattr(compare.metrics_lib, "read_jsonl", lambda path: [])
  compare.run_grid(_tiny_grid_config(), ["fedavg", "fedgmt[gamma=0]"], [0, 3], str(tmp_path))
  assert shown == ["fedavg seed 0", "fedavg seed 3", "fedgmt[gamma=0] seed 0",
                   "fedgmt[gamma=0] seed 3"]
  shown.clear()
  compare.run_grid(_tiny_grid_config(), ["fedavg"], [0], str(tmp_path / "quiet"), progress=False)
  assert shown == [False]


def test_a_block_the_run_does_not_use_is_refused_and_a_run_resumes_from_its_config_json(
    tmp_path):
  """A field set for a block no run of the command uses is one line naming the fix (the docs'
  own `--config.algorithm.my_fedprox.mu=0.1` trained FedAvg and said nothing), for the
  algorithm, model and task blocks, a comparison and a variant alike. Values a config file
  writes into several blocks (a comparison's file) are not refused, and such a run resumes
  from its config.json, which holds only the blocks it used."""
  from fedjax_sharp.errors import ConfigError           # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import cli, compare, fields, loop, run_analysis  # pylint: disable=g-import-not-at-top
  config = _tiny_grid_config()
  assert fields.choice_blocks(config)["model.resnet8"] == "model.name"
  assert fields.choice_blocks(config)["task.pl"] == "task.name"
  with pytest.raises(ConfigError, match=r"^algorithm\.my_block\.mu is set but algorithm\.name is "
                     r"'fedavg'; add --config\.algorithm\.name=my_block$"):
    config.algorithm.my_block = {"mu": 0.1}    # as a registered user algorithm's block
    fields.refuse_unused(["algorithm.my_block.mu"], [config])
  fields.refuse_unused(["algorithm.name", "algorithm.fedavg", "local.lr", "model.name"],
                       [config])   # used
  with pytest.raises(ConfigError, match=r"^task\.pl\.hetero is set but task\.name is "
                     r"'classification'; add --config\.task\.name=pl$"):
    fields.refuse_unused(["task.pl.hetero"], [config])
  grid = [compare.configure_variant(config, v, 0) for v in ("fedavg", "feddyn[alpha=0.2]")]
  cli.refuse_unused_paths(["algorithm.feddyn.alpha"], grid, grid=True)
  with pytest.raises(ConfigError, match=r"^algorithm\.fedgmt\.gamma is set but algorithm\.name "
                     r"is one of \['fedavg', 'feddyn'\]; add fedgmt to --algorithms$"):
    cli.refuse_unused_paths(["algorithm.fedgmt.gamma"], grid, grid=True)
  with pytest.raises(ConfigError, match=r"--config\.algorithm\.name is not used here: "
                     r"--algorithms names"):                 # a comparison overwrote it
    cli.refuse_unused_paths(["algorithm.name"], grid, grid=True)
  with pytest.raises(ConfigError, match=r"add model\.name=resnet8 to 'fedavg\[model\.resnet8"):
    compare.configure_variant(config, "fedavg[model.resnet8.groups=4]", 0)
  # A config file may fill other blocks (a comparison's hyperparameters); the run and its
  # resume from config.json accept them.
  config = _tiny_grid_config()
  config.algorithm.fedgmt.gamma, config.model.resnet8.groups = 0.3, 4
  config.checkpoint_every = 1
  exp = loop.build_experiment(config)
  loop.run(config, str(tmp_path), progress=False, experiment=exp)
  saved = run_analysis.load_run_config(str(tmp_path))
  # config.json leaves out the blocks the run did not use: they read back at their defaults.
  recorded = json.loads((tmp_path / "config.json").read_text())
  assert "fedgmt" not in recorded["algorithm"] and "resnet8" not in recorded["model"]
  base = config_lib.base_config()
  assert saved.algorithm.fedgmt.gamma == base.algorithm.fedgmt.gamma
  assert saved.model.resnet8.groups == base.model.resnet8.groups
  fields.refuse_unused([], [saved])
  resumed = loop.run(saved, str(tmp_path), progress=False, experiment=exp)
  assert resumed["status"] == "completed" and resumed["completed_rounds"] == 3
  assert not (tmp_path / "metrics.replaced.jsonl").exists()     # resumed, not restarted


def test_a_real_full_disk_is_one_line_without_orbax_tracebacks(tmp_path):
  """Files that cannot grow past 60 kB (RLIMIT_FSIZE: EFBIG from tensorstore, as on a full
  disk) while the first checkpoint is written: our one line, exit 2, and none of orbax's two
  ERROR tracebacks (~50 lines each) that came before it."""
  import cli_runner                                     # pylint: disable=g-import-not-at-top
  limited = os.path.join(ROOT, "tests", "scripts", "file_size_limit.py")
  work = tmp_path / "full"
  proc = cli_runner.run(
      [sys.executable, limited, "60000", RUN, f"--config={DEMO}", "--config.rounds=2",
       "--config.checkpoint_every=2", f"--workdir={work}"],
      env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"),
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  ours = [l for l in proc.stderr.splitlines() if l.strip() and not re.match(r"^I\d{4} ", l)]
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert len(ours) == 1 and ours[0].startswith(f"error: --workdir={work}: the disk is full "
                                               "(File too large while writing the checkpoint "
                                               "of round 2)"), proc.stderr[-3000:]
  assert json.load(open(work / "summary.json"))["status"] == "failed"


def test_orbax_abandoned_async_work_is_not_printed_after_a_failed_restore(monkeypatch, caplog):
  """What orbax's reads still in flight print once it closed their event loop at the first
  error ('RuntimeError: Event loop is closed' through sys.unraisablehook, at any time up to
  the exit; 'Task exception was never retrieved' from asyncio's logger) is dropped; any other
  unraisable exception or asyncio record still gets through. (Both followed the one-line error
  of a corrupted checkpoint in 7 of 8 tries.)"""
  import logging as std_logging                         # pylint: disable=g-import-not-at-top
  import types                                          # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import checkpoints         # pylint: disable=g-import-not-at-top
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(str(u.exc_value)))
  monkeypatch.setattr(checkpoints, "_IGNORING_ABANDONED", [])
  logger = std_logging.getLogger("asyncio")
  filters = list(logger.filters)
  try:
    checkpoints.ignore_abandoned_async_work()
    checkpoints.ignore_abandoned_async_work()           # once per process
    for e in (RuntimeError("Event loop is closed"), RuntimeError("something else")):
      sys.unraisablehook(types.SimpleNamespace(exc_value=e))
    assert seen == ["something else"]
    with caplog.at_level(std_logging.ERROR, logger="asyncio"):
      logger.error("Task exception was never retrieved\nfuture: <Task finished ...>")
      logger.error("Unclosed client session")
    assert [r.getMessage() for r in caplog.records] == ["Unclosed client session"]
    assert len(logger.filters) == len(filters) + 1
  finally:
    logger.filters[:] = filters
