"""Where the test suite's time goes: JAX's trace / lower / XLA-compile time by test and by program.

A pytest plugin (each xdist worker writes its own JSON file) and a report of those files:

    PYTHONPATH=benchmarks SUITE_COMPILE_REPORT=/tmp/suite .venv/bin/python -m pytest -q -n 2 \
        --dist loadgroup -p suite_compile_report tests
    python benchmarks/suite_compile_report.py /tmp/suite        # the tables

Only compilations inside the pytest processes are seen: the subprocesses a test starts (the
CLI, benchmarks, notebooks) are counted in the test's wall time alone.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys
import time

_EVENTS = ("/jax/core/compile/", "/jax/compilation_cache/")
_by_test = collections.Counter()
_by_program = collections.Counter()
_count = collections.Counter()
_rows: dict[str, dict] = {}


def _listen(event: str, duration: float, **kwargs) -> None:
  if event.startswith(_EVENTS):
    kind = event.rsplit("/", 1)[-1]
    _by_test[kind] += duration
    key = (kind, kwargs.get("fun_name", "?"))
    _by_program[key] += duration
    _count[key] += 1


def pytest_configure(config) -> None:
  del config
  from jax import monitoring  # pylint: disable=g-import-not-at-top
  monitoring.register_event_duration_secs_listener(_listen)


try:
  import pytest  # pylint: disable=g-import-not-at-top

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(item, nextitem):
    del nextitem
    _by_test.clear()
    start = time.perf_counter()
    yield
    _rows[item.nodeid] = dict(wall=time.perf_counter() - start, **_by_test)
except ImportError:   # the report alone needs no pytest
  pass


def pytest_sessionfinish(session) -> None:
  del session
  out = os.environ.get("SUITE_COMPILE_REPORT")
  if not out:
    return
  os.makedirs(out, exist_ok=True)
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  with open(os.path.join(out, f"{worker}.json"), "w") as f:
    json.dump({"tests": _rows, "programs": [[k, fn, v, _count[(k, fn)]]
                                            for (k, fn), v in _by_program.items()]}, f)


def report(directory: str, top: int = 25) -> str:
  tests, programs, counts = {}, collections.Counter(), collections.Counter()
  files = sorted(glob.glob(os.path.join(directory, "*.json")))
  if not files:
    raise SystemExit(f"no report files (*.json) in {directory}: run the suite with the plugin")
  for path in files:
    with open(path) as f:
      data = json.load(f)
    tests.update(data["tests"])
    for kind, fn, seconds, n in data["programs"]:
      programs[(kind, fn)] += seconds
      counts[(kind, fn)] += n
  totals = collections.Counter()
  for (kind, _), seconds in programs.items():
    totals[kind] += seconds
  lines = [f"{len(tests)} tests, {sum(t['wall'] for t in tests.values()):.0f} s of test wall "
           "time (setup, call and teardown); by kind of event (s): " +
           ", ".join(f"{k} {v:.0f}" for k, v in totals.most_common()), "",
           f"{'s':>8s} {'events':>7s}  kind / program"]
  for (kind, fn), seconds in programs.most_common(top):
    lines.append(f"{seconds:8.1f} {counts[(kind, fn)]:7d}  {kind} / {fn}")
  lines += ["", f"{'wall s':>8s} {'compile s':>9s}  test"]
  for nodeid, row in sorted(tests.items(), key=lambda kv: -kv[1]["wall"])[:top]:
    lines.append(f"{row['wall']:8.1f} {row.get('backend_compile_duration', 0.0):9.1f}  {nodeid}")
  return "\n".join(lines)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("directory", help="the SUITE_COMPILE_REPORT folder of a suite run")
  parser.add_argument("--top", type=int, default=25)
  args = parser.parse_args(argv)
  print(report(args.directory, args.top))


if __name__ == "__main__":
  main(sys.argv[1:])
