"""What the `experiments/*.py` entry points share: flag parsing that turns a typo'd config field
into one line with a suggestion, one-line errors with meaningful exit codes instead of
tracebacks, quiet JAX start-up, and `--print_config`.

Exit codes: 0 done; 1 failed; 2 bad input (config field, data file, workdir); 3 diverged;
130 interrupted (SIGINT); 143 terminated (SIGTERM).
"""
from __future__ import annotations

import io
import logging as std_logging
import os
import re
import sys
import traceback
from typing import Callable

from absl import app, flags

from fedjax_sharp.hyperparameters import did_you_mean
from fedjax_sharp.core import backends
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.errors import FedjaxSharpError, RunInterrupted


def _quiet_library_logs(record) -> bool:
  """Drops orbax's INFO chatter (a dozen lines per checkpoint) and TFDS's warnings and INFO
  lines (an unprepared dataset: 'Variant folder ... has no dataset_info.json', and a false 'The
  dataset is already prepared ... in the FileFormat.TFRECORD format' inside another message);
  our own one-line error says what is wrong. `--verbose` keeps TFDS's."""
  path = record.pathname
  if "/orbax/" in path:
    return record.levelno >= std_logging.WARNING
  if "/tensorflow_datasets/" in path and not _SHOW_LIBRARY_LOGS:
    return record.levelno >= std_logging.ERROR
  return True


_SHOW_LIBRARY_LOGS = False


def quiet_startup() -> None:
  """Drop JAX's 'Unable to initialize backend tpu' INFO line on CPU and GPU machines, and
  orbax's and TFDS's chatter from run logs."""
  std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)
  std_logging.getLogger("absl").addFilter(_quiet_library_logs)


def _flat_items(config, prefix=""):
  """(dotted field path, value) for every leaf field of a config, in order."""
  items = []
  for k, v in config.items():
    if hasattr(v, "items"):
      items.extend(_flat_items(v, f"{prefix}{k}."))
    else:
      items.append((f"{prefix}{k}", v))
  return items


def _config_from_argv(argv):
  for arg in argv[1:]:
    m = re.match(r"--config=(.+)$", arg)
    if m:
      path, _, sub = m.group(1).partition(":")
      try:
        return config_lib.load_config_file(path, sub or None) if sub else \
            config_lib.load_config_file(path)
      except Exception:  # pylint: disable=broad-except
        return None
  return None


def describe_flag_error(argv, error: BaseException) -> str:
  """A one-line message for a flag-parsing error: an unknown config field gets the closest
  existing field names."""
  config = _config_from_argv(argv)
  if config is not None:
    known = [key for key, _ in _flat_items(config)]
    for arg in argv[1:]:
      m = re.match(r"--config\.([\w.]+)(=|$)", arg)
      if m and m.group(1) not in known:
        field = m.group(1)
        hint = did_you_mean(field, known, otherwise="; `experiments/run.py --config=... "
                            "--print_config` lists the fields")
        return f"config field {field!r} does not exist{hint}"
  text = str(error).strip().splitlines()
  return text[-1] if text else type(error).__name__


_VERBOSE = flags.DEFINE_bool("verbose", False, "Show the traceback of an error instead of "
                              "its one-line message (also: FEDJAX_SHARP_TRACEBACK=1).")
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", 1, "CPU devices this process gets (0: one per core, at most 4); on a CPU the "
    "'host' strategy runs that many clients side by side (engine.host_devices): faster for "
    "real-sized models, slower for tiny ones (each device compiles the client pieces; "
    "docs/performance.md).", lower_bound=0)


def _missing_config_file(argv) -> str | None:
  """The path of a `--config=PATH[:ARG]` that does not exist, else None."""
  for arg in argv[1:]:
    m = re.match(r"--config=([^:]+)", arg)
    if m and not os.path.isfile(m.group(1)):
      return m.group(1)
  return None


HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def flags_parser(argv):
  """For `app.run(main, flags_parser=...)`: parse flags; a bad flag or config override, or a
  config file that does not exist, exits 2 with one line on stderr; `--help` prints the entry
  point's docstring and flags and exits 0."""
  quiet_startup()
  asked = [a for a in argv[1:] if a in HELP_FLAGS]
  if asked:
    app.usage(shorthelp=asked[0] != "--helpfull", writeto_stdout=True, exitcode=0)
  missing = _missing_config_file(argv)
  if missing is not None:
    sys.stderr.write(f"error: --config={missing}: no such config file (the files under "
                     f"configs/ are the examples)\n")
    sys.exit(2)
  try:
    return flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    sys.stderr.write(f"error: {describe_flag_error(argv, e)}\n")
    sys.exit(2)


def _exit(line: str, code: int, verbose: bool) -> None:
  """The error's one line on stderr (after its traceback with --verbose) and its exit code."""
  if verbose:
    traceback.print_exc()
  sys.stderr.write(line + "\n")
  sys.exit(code)


def _resume_hint(error: BaseException) -> str:
  last = getattr(error, "last_checkpoint", None)
  if last:
    return f"rerun the same command to resume from the checkpoint of round {last}"
  return ("no checkpoint had been written (config.checkpoint_every), so rerunning the same "
          "command starts over")


def _flag(holder, default):
  """A flag's value; `default` when called as a library (flags not parsed)."""
  try:
    return holder.value
  except flags.UnparsedFlagAccessError:
    return default


def _verbose() -> bool:
  return bool(os.environ.get("FEDJAX_SHARP_TRACEBACK")) or bool(_flag(_VERBOSE, False))


def guarded(main: Callable) -> Callable:
  """Wraps an absl `main`: library errors and usage errors print one line and exit with their
  code (2 for bad input); with `--verbose` (or FEDJAX_SHARP_TRACEBACK=1) the traceback is
  shown first and the exit code stays the same."""
  def wrapper(argv):
    verbose = _verbose()
    cpu_devices = _flag(_CPU_DEVICES, 1)
    if cpu_devices != 1:   # before JAX starts its backends
      backends.use_cpu_devices(cpu_devices or None)
    if verbose:   # TFDS's lines and the long explanations (engine 'auto', the set-up)
      global _SHOW_LIBRARY_LOGS
      _SHOW_LIBRARY_LOGS = True
      from absl import logging  # pylint: disable=g-import-not-at-top
      logging.set_verbosity(logging.DEBUG)
      std_logging.getLogger("jax").setLevel(std_logging.INFO)   # not every trace and compile
    try:
      return main(argv)
    except RunInterrupted as e:
      _exit(f"interrupted ({e}); the summary says status 'interrupted'; {_resume_hint(e)}",
            RunInterrupted.exit_code, verbose)
    except KeyboardInterrupt as e:
      _exit(f"interrupted (SIGINT); {_resume_hint(e)}", 130, verbose)
    except FedjaxSharpError as e:
      _exit(f"error: {e}", e.exit_code, verbose)
    except app.UsageError as e:
      _exit(f"error: {e} (--help lists the flags)", 2, verbose)
    except (ValueError, FileNotFoundError, PermissionError, IsADirectoryError) as e:
      _exit(f"error: {e}", 2, verbose)
  return wrapper


def refuse_unused_overrides(config_flag, configs, grid: bool = False) -> None:
  """Refuses (ConfigError: one line, exit 2) a `--config.<block>.<field>=...` override of
  `config_flag` (the entry point's config FlagHolder) inside a per-choice block that none of
  `configs`, the runs the command makes, uses (`fields.refuse_unused`). `grid`: a comparison,
  whose `--algorithms` names the algorithms (so `--config.algorithm.name` is refused too)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  refuse_unused_paths(list(config_flags.get_override_values(flags.FLAGS[config_flag.name])),
                      configs, grid)


def refuse_unused_paths(paths, configs, grid: bool = False) -> None:
  """`refuse_unused_overrides` of the overridden field paths `paths`."""
  from fedjax_sharp.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from fedjax_sharp.training import fields  # pylint: disable=g-import-not-at-top
  if grid and "algorithm.name" in paths:
    raise ConfigError("--config.algorithm.name is not used here: --algorithms names the "
                      "algorithms to run")
  fields.refuse_unused(paths, configs, grid_fix if grid else None)


def grid_fix(chooser: str, choice: str) -> str:
  """The remedy of an unused block in a comparison: the algorithm joins --algorithms."""
  return (f"add {choice} to --algorithms" if chooser == "algorithm.name"
          else f"add --config.{chooser}={choice}")


def field_docs() -> dict[str, str]:
  """Field path -> one-line doc: `config.FIELD_DOCS` for the base fields, the factories'
  `Field` docs for the algorithm blocks (data, not parsed source)."""
  from fedjax_sharp.algorithms import registry
  from fedjax_sharp.minimax import algorithms as _  # noqa: F401 (registers the minimax ones)
  return {**config_lib.FIELD_DOCS, **registry.field_docs()}


def format_config(config) -> str:
  """Every field of the config with its value and its own doc; a field left at 'auto' also
  says what it resolves to for this config on this backend (and, for `aggregation`, why)."""
  docs = field_docs()
  resolved = dict(_flat_items(config_lib.resolved_setting(config)))
  out = io.StringIO()
  for key, node in _flat_items(config):
    doc = docs.get(key, "")
    if node == "auto" and resolved.get(key, node) != node:
      why = (f" ({config_lib.aggregation_choice(config)[1]})" if key == "aggregation" else "")
      doc = f"here {resolved[key]!r}{why}; {doc}"
    out.write(f"{key} = {node!r}" + (f"    # {doc}" if doc else "") + "\n")
  return out.getvalue()


def format_fields(config, prefix: str = "") -> str:
  """A `--help`-style listing (field, default, doc) of the fields under `prefix`, from the
  same data as `format_config`."""
  docs = field_docs()
  out = io.StringIO()
  for key, node in _flat_items(config):
    if not key.startswith(prefix):
      continue
    out.write(f"  --config.{key}={node!r}\n" + (f"      {docs[key]}\n" if docs.get(key) else ""))
  return out.getvalue()
