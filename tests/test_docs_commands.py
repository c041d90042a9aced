"""Every shell command shown in README.md and docs/*.md is run here with tiny settings, or is
listed in NOT_RUN with the reason (install steps, long runs, GPU-only, multi-process: each tested
elsewhere or by CI itself). A command added to the docs fails `test_every_docs_command_is_run_or_
listed` until it is handled, so the docs cannot show a command that does not work.

Tiny settings: `experiments/run.py` and `experiments/compare.py` get 1 round on 1,000 training
and 100 test examples (10 clients unless the command sets `data.num_clients`), one local step,
one seed and one algorithm; their outputs go to a temporary directory.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import sys

import pytest

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL_FENCES = ("bash", "sh", "shell", "")

# Commands not run here, by the start of the command, with the reason.
NOT_RUN = {
    "make demo": "the README's first command; CI runs `make test`, which installs the same way, "
                 "and tests/test_training.py runs the demo config",
    "make test": "what CI runs",
    "nvidia-smi": "GPU machines only",
    "python -m venv": "install step (tests/test_first_hour.py builds the wheel)",
    ".venv/bin/pip install": "install step (tests/test_first_hour.py builds the wheel; the "
                             "'prepare' extra is TensorFlow, for preparing TFDS datasets)",
    ".venv/bin/python -c \"import jax": "GPU install check; prints the CPU here",
    ".venv/bin/python benchmarks/accelerator.py --check --small":
        "run by tests/test_benchmarks.py::test_accelerator_check_small_runs_every_algorithm",
    "for i in 0 1; do": "two processes: tests/test_distributed.py runs the same command",
    "XLA_FLAGS=": "inside the two-process loop above",
    "done; wait": "end of the two-process loop above",
    ".venv/bin/python experiments/run.py --config=my_config.py":
        "the reader's own config file: tests/test_hyperparameters.py runs this command on a "
        "config file written like the page's",
    ".venv/bin/python experiments/run.py --config=configs/fedgmt_table2.py --config.data.path=$HOME/tfds":
        "downloads CIFAR-10 (network); the download path without network is tested by "
        "tests/test_data_sources.py::test_tfds_download_*",
    ".venv/bin/python experiments/run.py --config=configs/shakespeare_lstm.py":
        "downloads Shakespeare (network); one round of the config on a tiny file: "
        "tests/test_natural_configs.py",
    ".venv/bin/python experiments/run.py --config=configs/femnist_cnn.py":
        "downloads federated EMNIST (network); one round of the config on a tiny file: "
        "tests/test_natural_configs.py",
    "make docs": "builds the site: tests/test_docs.py runs the same `mkdocs build --strict` and "
                 "checks the built pages work from disk",
    ".venv/bin/mkdocs serve": "a web server that runs until stopped; it serves what "
                              "`mkdocs build` builds (tests/test_docs.py)",
    ".venv/bin/python experiments/landscape.py":
        "reads a finished run of the compare command before it (tests/test_analysis.py runs it)",
}


def docs_commands() -> list[tuple[str, str]]:
  """(file, command) for every line of every shell code block (continuations joined)."""
  out = []
  for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                               "*.md"))):
    fence, block = None, []
    for line in open(path):
      stripped = line.strip()
      if stripped.startswith("```"):
        if fence is None:
          fence, block = stripped[3:].strip(), []
        else:
          if fence in SHELL_FENCES:
            text = "".join(block).replace("\\\n", " ")
            for cmd in text.splitlines():
              cmd = cmd.strip()
              if cmd and not cmd.startswith("#"):
                out.append((os.path.relpath(path, ROOT), cmd))
          fence = None
      elif fence is not None:
        block.append(line)
  return out


def _not_run(cmd: str) -> str | None:
  return next((why for start, why in NOT_RUN.items() if cmd.startswith(start)), None)


def _tiny(cmd: str, tmp: str) -> list[str]:
  """The command as argv with tiny settings and its outputs under `tmp`."""
  cmd = re.sub(r"\s+#.*$", "", cmd)                      # a trailing comment
  argv = shlex.split(cmd)
  assert argv[0] == ".venv/bin/python", cmd
  argv[0] = sys.executable
  script = os.path.basename(argv[1])
  argv = [re.sub(r"^--workdir=(.*)$", lambda m: f"--workdir={os.path.join(tmp, m.group(1))}", a)
          for a in argv]
  argv = [a.replace("=part.json", f"={os.path.join(tmp, 'part.json')}") for a in argv]
  tiny = ["--config.rounds=1", "--config.data.max_train_examples=1000",
          "--config.data.max_test_examples=100", "--config.local.steps=1",
          "--config.eval.last_n=1"]
  given = " ".join(argv)
  if "--config.data.num_clients=" not in given:   # 1000 examples over at most 10 clients
    tiny += ["--config.data.num_clients=10", "--config.clients_per_round=2"]
  if script == "compare.py":
    algorithms = next((a.split("=", 1)[1] for a in argv if a.startswith("--algorithms=")), "")
    first = re.split(r",(?![^\[]*\])", algorithms.strip("'"))[0] if algorithms else "fedavg"
    tiny += ["--seeds=0", f"--algorithms={first}"]
  return argv + tiny


RUNNABLE = [(f, c) for f, c in docs_commands() if _not_run(c) is None]

# The docs' commands that take over a minute on a 2-core CPU (a pattern of the line that starts
# each): its page says how long, in the lines around it.
LONG = (
    r"^make demo ", r"^make test ",
    r"experiments/run\.py --config=configs/fashion_mnist_cnn\.py",
    r"experiments/compare\.py --config=configs/fedgmt_fmnist_hetero\.py",
    r"experiments/compare\.py --config=configs/demo\.py \\$",
    r"experiments/compare\.py --config=configs/demo\.py --sweep",
    r"`\.venv/bin/python experiments/(hessian|landscape|analyse)\.py",
    r"experiments/landscape\.py --workdir=runs/",
    r"experiments/run\.py --config=configs/(shakespeare_lstm|femnist_cnn)\.py",
    r"experiments/compare\.py --config=configs/dp_fmnist\.py",
)
HOW_LONG = re.compile(r"\b\d[\d.,]*(-\d[\d.,]*)? ?(s|min|h|hours?)\b|\ba minute\b|not timed")


def test_every_long_docs_command_says_how_long_it_takes():
  """The commands of README.md and docs/ that take over a minute on a 2-core CPU (`LONG`) say
  how long, within a few lines. Nothing did for the README's Fashion-MNIST run (16 min), its
  grid of 15 runs (hours) or its landscape (8 min 11 s, silent meanwhile)."""
  pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                            "*.md")))
  found, silent = 0, []
  for path in pages:
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
      if any(re.search(p, line) for p in LONG):
        found += 1
        window = "\n".join(lines[max(0, i - 3):i + 12])
        if not HOW_LONG.search(window.replace(line, line.split("#")[0]) if line.startswith(
            "make ") else window):
          silent.append(f"{os.path.relpath(path, ROOT)}:{i + 1}: {line.strip()[:90]}")
  assert found >= 10, found
  assert not silent, "say how long these take on a 2-core CPU:\n" + "\n".join(silent)


# A repository script or module run by a bare `python`: after `make demo` that is the system's
# Python, without the venv's packages ("No module named 'absl'"). `python -m venv` makes the venv.
BARE_PYTHON = re.compile(r"(?<![\w/.-])python3? (?!-m venv\b)(-m [\w.]+|[\w./-]+\.py\b)")


def test_docs_commands_take_one_form_the_venvs_python():
  """README.md and every page under docs/ (code blocks and inline commands alike) run scripts
  as `.venv/bin/python experiments/...`, as the README does. privacy.md, adding_an_algorithm.md,
  datasets.md, reproducing.md and the algorithm pages wrote `python experiments/...`, which
  fails after `make demo` with "No module named 'absl'"."""
  pages = [os.path.join(ROOT, "README.md")] + sorted(
      glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
  bare = [f"{os.path.relpath(p, ROOT)}:{i}: {m.group(0)}" for p in pages
          for i, line in enumerate(open(p), 1) for m in BARE_PYTHON.finditer(line)]
  assert not bare, "write .venv/bin/python:\n" + "\n".join(bare)
  assert BARE_PYTHON.search("run `python experiments/run.py --config=x`")
  assert BARE_PYTHON.search("python -m pytest tests")
  assert not BARE_PYTHON.search("`.venv/bin/python experiments/run.py` or python -m venv .venv")


def test_every_docs_command_is_run_or_listed():
  commands = docs_commands()
  assert len(commands) >= 10, commands      # the parser finds the docs' commands
  for f, cmd in commands:
    if _not_run(cmd) is None:
      assert re.match(r"\.venv/bin/python experiments/(run|compare)\.py ", cmd), (
          f"{f}: `{cmd}` is neither run by tests/test_docs_commands.py nor listed in its NOT_RUN")


@pytest.mark.parametrize("where,cmd", RUNNABLE, ids=[f"{f}:{i}" for i, (f, _) in
                                                     enumerate(RUNNABLE)])
def test_docs_command_runs(where, cmd, tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  if "--config.data.partition=file" in cmd:   # the partition file the command before writes
    save = next(c for _, c in docs_commands() if "--save_partition=part.json" in c)
    cli_runner.run(_tiny(save, str(tmp_path)), cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=600, check=True)
  proc = cli_runner.run(_tiny(cmd, str(tmp_path)), cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, f"{where}: {cmd}\n{proc.stderr[-3000:]}"
