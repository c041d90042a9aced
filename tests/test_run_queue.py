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


def _load_queue_module():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("run_queue_under_test", QUEUE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_claims_of_dead_workers_are_taken_again_and_live_ones_are_not(tmp_path):
  rq = _load_queue_module()
  host, boot = rq.socket.gethostname(), rq._boot_id()
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "run_queue"])
  try:
    out = tmp_path / "out.txt"
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"t{i} echo t{i} >> {out}\n" for i in range(6)))
    locks = tmp_path / "locks"
    owners = {"t0": f"{host} {boot} {gone.pid}",          # this boot, worker gone
              "t1": f"{host} another-boot {live.pid}",    # an earlier boot: gone too
              "t2": f"{host} {boot} {live.pid}",          # still running
              "t3": None,                                 # an old claim with no owner
              "t4": f"{host} {boot} {gone.pid}",          # finished: has its rc
              "t5": f"other-host {boot} {gone.pid}"}      # another machine's worker
    for name, owner in owners.items():
      (locks / name).mkdir(parents=True)
      if owner:
        (locks / name / "owner").write_text(owner + "\n")
    (locks / "t4" / "rc").write_text("0\n")
    proc = subprocess.run([sys.executable, QUEUE, str(tasks), f"--locks={locks}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(out.read_text().split()) == ["t0", "t1"]
    assert "stale claim of t0" in proc.stdout and "stale claim of t1" in proc.stdout
    for name in ("t0", "t1"):
      assert (locks / name / "rc").read_text().strip() == "0"
      assert (locks / name / "owner").read_text().split()[2] != str(gone.pid)
  finally:
    live.kill()
    live.wait()


def test_two_workers_racing_for_one_stale_claim_take_it_once(tmp_path, monkeypatch):
  rq = _load_queue_module()
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  dead = f"{rq.socket.gethostname()} {rq._boot_id()} {gone.pid}\n"
  lock = tmp_path / "locks" / "t"
  lock.mkdir(parents=True)
  (lock / "owner").write_text(dead)
  assert rq.stale_owner(str(lock)) == dead
  assert rq.claim(str(tmp_path / "locks"), "t")           # worker A takes it over
  assert (lock / "owner").read_text() == rq.owner_line()
  # Worker B judged the claim stale from the dead owner before A rewrote it: it must lose.
  monkeypatch.setattr(rq, "stale_owner", lambda _: dead)
  assert not rq.claim(str(tmp_path / "locks"), "t")
