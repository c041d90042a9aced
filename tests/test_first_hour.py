"""What a new user meets first (issue 35): every user-input error is one stderr line naming the
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
from fedjax_sharp.training.recorder import Progress

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
  line = one_error_line(run(f"--config={DEMO}", "--config.data.source=tfds",
                            "--config.data.name=cifar10", f"--config.data.path={tmp_path}"))
  assert "data.name='cifar10'" in line and "not prepared" in line and str(tmp_path) in line
  assert "tfds build cifar10" in line


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
