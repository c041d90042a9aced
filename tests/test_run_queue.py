"""experiments/run_queue.py: every task runs once across workers, failures are recorded."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUEUE = os.path.join(ROOT, "experiments", "run_queue.py")


def _worker(tasks, locks):
  return subprocess.Popen([sys.executable, QUEUE, str(tasks), f"--locks={locks}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_workers_run_each_task_once_and_record_failures(tmp_path):
  out = tmp_path / "out.txt"
  lines = ["# a comment", ""]
  lines += [f"t{i} sleep 0.2; echo t{i} >> {out}" for i in range(6)]
  lines.append("bad exit 3")
  tasks = tmp_path / "tasks.txt"
  tasks.write_text("\n".join(lines) + "\n")
  locks = tmp_path / "locks"
  workers = [_worker(tasks, locks) for _ in range(2)]
  codes = [w.wait(timeout=120) for w in workers]
  assert sorted(out.read_text().split()) == [f"t{i}" for i in range(6)]
  assert sorted(codes) == [0, 1]          # the worker that ran 'bad' reports the failure
  assert (locks / "bad" / "rc").read_text().strip() == "3"
  assert (locks / "t0" / "rc").read_text().strip() == "0"
  # A restarted worker finds everything claimed and runs nothing again.
  assert _worker(tasks, locks).wait(timeout=60) == 0
  assert len(out.read_text().split()) == 6


def test_bad_task_files_are_refused(tmp_path):
  tasks = tmp_path / "tasks.txt"
  tasks.write_text("a echo 1\na echo 2\n")
  proc = _worker(tasks, tmp_path / "locks")
  _, err = proc.communicate(timeout=60)
  assert proc.returncode != 0 and "repeated: ['a']" in err
  tasks.write_text("lonely\n")
  proc = _worker(tasks, tmp_path / "locks")
  _, err = proc.communicate(timeout=60)
  assert proc.returncode != 0 and "NAME COMMAND" in err


def test_task_files_are_taken_in_order(tmp_path):
  out = tmp_path / "out.txt"
  first, second = tmp_path / "first.txt", tmp_path / "second.txt"
  second.write_text("".join(f"b{i} echo b{i} >> {out}\n" for i in range(2)))
  first.write_text("".join(f"a{i} echo a{i} >> {out}\n" for i in range(2)))
  proc = subprocess.run([sys.executable, QUEUE, str(first), str(second)], cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert out.read_text().split() == ["a0", "a1", "b0", "b1"]
  # Each file has its own lock directory under runs/queue/.
  assert sorted(os.listdir(tmp_path / "runs" / "queue")) == ["first", "second"]
