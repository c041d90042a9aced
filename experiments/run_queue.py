"""A file-based experiment queue: one worker per CPU core, sharing a task file.

    python experiments/run_queue.py experiments/tasks/fmnist_hetero.txt --core=0 &
    python experiments/run_queue.py experiments/tasks/fmnist_hetero.txt --core=1 &
    python experiments/run_queue.py FIRST.txt SECOND.txt --core=0 &   # SECOND's tasks after FIRST's

Each line of a task file that is neither empty nor a comment is `NAME COMMAND...`. A worker
claims the first task no worker has claimed (an atomic mkdir of LOCKS/NAME), runs its command
with `bash -c`, pinned to its core by `taskset` where that exists, logs the start, end and exit
status, and goes on until every task is claimed. Tasks should be idempotent (compare.py
--reuse, analyse.py skip what is already done), so a queue restarted with an empty LOCKS
directory finishes what was left and passes quickly over what is done. A failed task stays
claimed with its exit status in LOCKS/NAME/rc: delete LOCKS/NAME to retry it.

A worker that dies with its task (a killed shell, a restarted machine) leaves a claim with no
rc. Each claim names its worker in LOCKS/NAME/owner (host, boot id, pid); a claim with no rc
whose worker no longer runs on this host is stale, and the next worker takes the task again
(its command resumes from its checkpoints). Claims without an owner file are left alone.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import shutil
import socket
import subprocess
import sys


def read_tasks(path: str) -> list[tuple[str, str]]:
  tasks = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      line = line.strip()
      if not line or line.startswith("#"):
        continue
      name, _, command = line.partition(" ")
      if not command.strip():
        raise ValueError(f"{path}:{number}: a task line is 'NAME COMMAND...', got {line!r}")
      tasks.append((name, command.strip()))
  names = [n for n, _ in tasks]
  duplicates = sorted({n for n in names if names.count(n) > 1})
  if duplicates:
    raise ValueError(f"{path}: task names must be unique, repeated: {duplicates}")
  return tasks


def _boot_id() -> str:
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      return f.read().strip()
  except OSError:
    return "unknown"


def owner_line() -> str:
  return f"{socket.gethostname()} {_boot_id()} {os.getpid()}\n"


def _alive(pid: int) -> bool:
  """Whether `pid` is a run_queue worker on this machine (a reused pid is not)."""
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return b"run_queue" in f.read()
  except OSError:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return False
    except PermissionError:
      return True
    return not os.path.isdir("/proc")  # no /proc: trust kill(0)


def _owner(lock: str) -> str | None:
  try:
    with open(os.path.join(lock, "owner")) as f:
      return f.read()
  except OSError:
    return None


def stale_owner(lock: str) -> str | None:
  """The owner line of a claim with no exit status whose worker is gone from this host (see
  the module doc), else None."""
  if os.path.exists(os.path.join(lock, "rc")):
    return None
  owner = _owner(lock)
  fields = (owner or "").split()
  if len(fields) != 3 or not fields[2].isdigit():
    return None  # no owner (yet, or an old claim): leave it alone
  host, boot, pid = fields
  if host != socket.gethostname():
    return None  # another machine's worker on a shared disk: not ours to judge
  return owner if boot != _boot_id() or not _alive(int(pid)) else None


def _write_owner(lock: str) -> None:
  tmp = os.path.join(lock, f".owner.{os.getpid()}")
  with open(tmp, "w") as f:
    f.write(owner_line())
  os.replace(tmp, os.path.join(lock, "owner"))


def claim(locks: str, name: str) -> bool:
  lock = os.path.join(locks, name)
  try:
    os.makedirs(lock)
  except FileExistsError:
    dead = stale_owner(lock)
    if dead is None:
      return False
    # Of two workers finding the same stale claim, the one that creates the token named after
    # the dead owner takes it (O_EXCL is atomic); the owner is then rewritten, so a later
    # death of the new owner makes a new token.
    token = "reclaimed." + hashlib.sha1(dead.encode()).hexdigest()[:12]
    try:
      os.close(os.open(os.path.join(lock, token), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
      return False
    log(f"stale claim of {name} (its worker is gone): taking it again")
  _write_owner(lock)
  return True


def log(message: str) -> None:
  print(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {message}", flush=True)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("tasks", nargs="+", help="Task files, taken in this order.")
  parser.add_argument("--core", type=int, default=None, help="CPU core to pin the tasks to.")
  parser.add_argument("--locks", default=None,
                      help="Lock directory (default: runs/queue/<task file name>, one per file).")
  args = parser.parse_args()
  if args.locks and len(args.tasks) > 1:
    parser.error("--locks takes one task file (each file has its own lock directory)")
  prefix = []
  if args.core is not None and shutil.which("taskset"):
    prefix = ["taskset", "-c", str(args.core)]
  for path in args.tasks:
    read_tasks(path)  # a malformed file fails now, not after hours of the files before it
  failed = 0
  while True:
    task = None
    for path in args.tasks:
      locks = args.locks or os.path.join(
          "runs", "queue", os.path.splitext(os.path.basename(path))[0])
      # Re-read every time: tasks can be appended while the workers run.
      pending = [(n, c) for n, c in read_tasks(path)
                 if not os.path.exists(os.path.join(locks, n))
                 or stale_owner(os.path.join(locks, n))]
      task = next(((n, c) for n, c in pending if claim(locks, n)), None)
      if task is not None:
        break
    if task is None:
      log(f"core {args.core}: no unclaimed task left ({failed} failed)")
      return 1 if failed else 0
    name, command = task
    log(f"core {args.core}: start {name}: {command}")
    rc = subprocess.call(prefix + ["bash", "-c", command])
    with open(os.path.join(locks, name, "rc"), "w") as f:
      f.write(f"{rc}\n")
    failed += rc != 0
    log(f"core {args.core}: end {name} rc {rc}")


if __name__ == "__main__":
  sys.exit(main())
