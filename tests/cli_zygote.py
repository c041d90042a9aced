"""The process `cli_runner` forks the suite's command-line runs from (a "zygote").

It imports the library's heavy modules once (JAX, Flax, optax, orbax, the training loop: ~2 s of a
CPU-only command's start), without starting a JAX backend, and then serves requests, one JSON
line each on stdin: `{"argv": [script, *args], "cwd", "env", "stdout", "stderr"}`. For each
it forks a child, replies `{"pid": ...}`, waits for it and replies `{"returncode": ...}`.

The child becomes what `python script args` would be: the request's working directory and
environment, stdin from /dev/null, stdout and stderr into the named files, `sys.argv` and
`sys.path` (the script's folder, then PYTHONPATH) as the interpreter sets them, and the script
run as `__main__` from this module's top level, so its exit is the interpreter's own: an exit
code from `sys.exit`, a traceback (below this module's and runpy's frames) and code 1 from an
uncaught exception, atexit handlers and non-daemon threads finished.

What the child shares with the zygote is module state set at import time. JAX reads its
`JAX_*` environment variables then, so `cli_runner` keeps one zygote per set of them; the XLA
flags are read when the child starts its backend, after its environment is set.
"""
from __future__ import annotations

import importlib
import json
import os
import sys

PRELOAD = ("jax", "jax.numpy", "flax.linen", "optax", "ml_collections", "absl.app",
           "absl.flags", "orbax.checkpoint", "fedjax_sharp.training.loop",
           "fedjax_sharp.training.cli")


def _reply(out, **fields) -> None:
  out.write(json.dumps(fields) + "\n")
  out.flush()


def serve(requests, replies) -> dict | None:
  """Forks a child per request; returns the request in the child, None in the zygote at EOF."""
  for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      return request
    _reply(replies, pid=pid)
    _, status = os.waitpid(pid, 0)
    _reply(replies, returncode=os.waitstatus_to_exitcode(status))
  return None


def become(request: dict) -> str:
  """In the child: the process `python argv...` would be; returns the script's path."""
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                          (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                          (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
  script = os.path.abspath(request["argv"][0])
  sys.argv = list(request["argv"])
  zygote_path = _python_path(_ZYGOTE_ENV)
  sys.path[:] = ([os.path.dirname(script)] + _python_path(request["env"])
                 + [p for p in sys.path[1:] if p not in zygote_path])
  return script


def _python_path(env) -> list[str]:
  return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


_ZYGOTE_ENV = dict(os.environ)

if __name__ == "__main__":
  for name in PRELOAD:
    importlib.import_module(name)
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if xla_bridge.backends_are_initialized():   # a backend's threads do not survive a fork
    raise SystemExit("cli_zygote: a preloaded module started a JAX backend")
  _reply(sys.stdout, ready=True)
  child = serve(sys.stdin, sys.stdout)
  if child is not None:
    import runpy  # pylint: disable=g-import-not-at-top
    runpy.run_path(become(child), run_name="__main__")
