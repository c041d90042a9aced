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
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
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


def claim(locks: str, name: str) -> bool:
  try:
    os.makedirs(os.path.join(locks, name))
    return True
  except FileExistsError:
    return False


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
                 if not os.path.exists(os.path.join(locks, n))]
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
