"""Run by tests/test_reliability.py: experiments/run.py with the arguments given, SIGKILLed
halfway through hard-linking a disk client table's rows into its second checkpoint (inside
orbax's temporary directory, before the commit)."""
import os
import runpy
import signal
import sys

from fedjax_sharp.core import client_table

RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "experiments", "run.py")
real_snapshot = client_table.DiskRows.snapshot
calls = []


def snapshot(self, target, slots):
  calls.append(target)
  if len(calls) == 2:
    real_snapshot(self, target, slots[:len(slots) // 2])   # half the rows linked, then killed
    os.kill(os.getpid(), signal.SIGKILL)
  real_snapshot(self, target, slots)


client_table.DiskRows.snapshot = snapshot
sys.argv = [RUN, *sys.argv[1:]]
runpy.run_path(RUN, run_name="__main__")
