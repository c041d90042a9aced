"""Shared fixtures: tiny federated problems for exact engine and algorithm tests."""
import os

# Keep tests on the CPU and single-threaded in XLA's view of the world (CI has 2 cores).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One persistent compilation cache for the whole session, shared by the xdist workers and every
# subprocess they start (the CLI, benchmarks, notebooks inherit the environment): a program
# compiled once (the demo config's round, say) is read back instead of compiled again. Made
# fresh by the controlling process and removed at the end, so a run starts as cold as a fresh
# clone. JAX_COMPILATION_CACHE_DIR set beforehand wins (set it empty to run without a cache).
_OWN_CACHE_DIR = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
  import tempfile
  _OWN_CACHE_DIR = tempfile.mkdtemp(prefix="fedjax_sharp_test_jax_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE_DIR
  # Tiny programs too: the suite's programs compile in well under JAX's default 1 s.
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# XLA's older CPU emitters compile the suite's many small programs (tiny models, a few steps)
# about 2x faster than its fusion emitters, and the suite is compile-bound: the whole suite,
# workers and the subprocesses they start, compiles with them (docs/performance.md, "The test
# suite", with the measurements). The programs are the same; only XLA's CPU code generation
# differs.
# The models' init program keeps its own compile options (`models.registry.init_params` pins
# them), so initial parameters are the same bits as in a user's run.
#
# And each program's LLVM code generation runs in one piece: XLA splits a CPU program into
# parts compiled on several threads, which is faster for one process on idle cores but costs
# CPU time, and the suite's xdist workers keep every core busy (the same bits; tiny rounds
# compile faster with two processes on two cores: docs/performance.md, "The test suite").
# Set either flag in XLA_FLAGS beforehand to choose otherwise.
#
# And LLVM's optimisations off (JAX's `jax_disable_most_optimizations`: LLVM at level 0, no
# expensive LLVM passes; every XLA HLO pass still runs, so the programs are the same and only
# their machine code is slower). The suite's programs are tiny and compile-bound: fresh clones
# back to back, 8 min 39 s and 8 min 52 s of pytest without, 7 min 09 s and 7 min 02 s with it
# (docs/performance.md, "The test suite"). The tests whose assertion is about a user's machine
# code (bits pinned against XLA's defaults, an exact zero, XLA's CPU miscompile of conv ->
# GroupNorm -> pool gradients, which at level 0 reaches VGG-11-GN's vmapped gradient), or whose
# compute outweighs their compile, take the `optimised_compiles` fixture below.
# JAX_DISABLE_MOST_OPTIMIZATIONS=0 beforehand runs the whole suite optimised.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
for _flag, _value in (("xla_cpu_use_fusion_emitters", "false"),
                      ("xla_cpu_parallel_codegen_split_count", "1")):
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.models import get_model, init_params


class TinyProblem:
  """Softmax regression on random 2x2x1 'images', 3 classes, ragged clients."""

  def __init__(self, sizes=(5, 9, 12, 7, 3), num_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    self.x = rng.normal(size=(n, 2, 2, 1)).astype(np.float32)
    self.y = rng.integers(0, num_classes, n).astype(np.int32)
    offsets = np.cumsum((0,) + tuple(sizes))
    self.client_indices = [np.arange(offsets[i], offsets[i + 1]) for i in range(len(sizes))]
    self.model = get_model("linear", num_classes)
    self.params = init_params(self.model, jax.random.key(seed), (2, 2, 1))
    # Non-trivial starting point: random, not the near-zero default.
    self.params = jax.tree.map(
        lambda p: jnp.asarray(rng.normal(size=p.shape).astype(np.float32) * 0.5), self.params)
    self.num_classes = num_classes

  def apply(self, params, x):
    return self.model.apply({"params": params}, x)


def pytest_unconfigure(config):
  if _OWN_CACHE_DIR is not None:
    import shutil
    shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def tiny():
  return TinyProblem()


@pytest.fixture
def optimised_compiles(monkeypatch):
  """LLVM's optimisations back on, as in a user's run, for a test and the processes it starts:
  the tests whose assertion is about the machine code a user gets (bits pinned against XLA's
  defaults, the XLA CPU miscompile, an exact zero), and the benchmarks and the real-data run,
  whose compute outweighs their compile. The programs compiled in memory are dropped before and
  after, so that none is shared with the other tests of the worker (the persistent cache's keys
  hold the options)."""
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
  before = jax.config.values["jax_disable_most_optimizations"]
  jax.config.update("jax_disable_most_optimizations", False)
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before)
    jax.clear_caches()


# Scheduling over the xdist workers (`make test` runs `--dist loadgroup`):
# - the tests that share an expensive module-scoped fixture (a CLI run the module's tests all
#   read, such as tests/test_reliability.py's uninterrupted run) go to one worker as a group,
#   so that the fixture runs once, not once per worker;
# - the slowest tests (SLOW_FIRST, from `pytest --durations`, see docs/performance.md, "The
#   test suite")
#   start first, so that no long test starts last while the other worker sits idle.
SLOW_FIRST = (
    "tests/test_sweep.py::test_sweep_of_3_seeds_x_2_lrs_equals_the_6_separate_runs",
    "tests/test_benchmarks.py::test_accelerator_benchmark_runs_small_on_cpu",
    "tests/test_benchmarks.py::test_accelerator_check_small_runs_every_algorithm",
    "tests/test_sweep.py::test_sweep_over_algorithm_hyperparameters_equals_the_separate_runs",
    "tests/test_sweep.py::test_sweep_resumes_from_its_checkpoints",
    "tests/test_sharding.py::test_sharded_rounds_and_sweeps_equal_one_device",
    "tests/test_real_data.py::test_fedavg_mcmahan_cnn_learns_fashion_mnist",
    "tests/test_training.py::test_compare_with_hessian_column",
    "tests/test_analysis.py::test_analyse_cli_stores_every_part_and_resumes",
    "tests/test_training.py::test_bfloat16_compute_keeps_float32_weights",
    "tests/test_distributed.py",
    "tests/test_training.py::test_resume_from_checkpoint_equals_an_uninterrupted_run",
    "tests/test_training.py::test_final_and_average_models_lambda_max",
    "tests/test_reliability.py",
    "tests/test_analysis.py::test_landscape_cli_on_a_finished_run",
    "tests/test_config_rows.py::test_config_runs_one_round_on_mock_data",
    "tests/test_host_devices.py::test_clients_side_by_side_on_two_cpu_devices_compute_the_same_rounds",
    "tests/test_benchmarks.py",
    "tests/test_docs_commands.py::test_docs_command_runs",
    "tests/test_notebooks.py::test_notebook_runs_on_tiny_settings",
)


def _slow_rank(item) -> int:
  for rank, prefix in enumerate(SLOW_FIRST):
    if item.nodeid.startswith(prefix):
      return rank
  return len(SLOW_FIRST)


def _uses_a_module_fixture(item) -> bool:
  info = getattr(item, "_fixtureinfo", None)
  for name in getattr(item, "fixturenames", ()):
    defs = info.name2fixturedefs.get(name) if info is not None else None
    if defs and defs[-1].scope != "function" and defs[-1].baseid.endswith(".py"):
      return True
  return False


@pytest.hookimpl(tryfirst=True)   # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
  for item in items:
    if _uses_a_module_fixture(item):
      item.add_marker(pytest.mark.xdist_group(item.module.__name__))
  items.sort(key=_slow_rank)      # stable: the rest keeps its order


# A test that reads a module fixture, so it is in a group when the worker collected it.
_A_GROUPED_TEST = "tests/test_reliability.py::test_a_real_kill_then_rerun"


def pytest_xdist_node_collection_finished(node, ids):
  """In the controller of `--dist loadgroup`: a worker's grouped tests must carry their group in
  their node ids (`...@group`), or xdist spreads each group over the workers and every worker
  runs the module fixtures (pytest 9.2 with pytest-xdist 3.8: pytest-dev/pytest-xdist#1386;
  pyproject.toml's test extra pins pytest below 9.2)."""
  if node.config.getvalue("dist") == "loadgroup" and not any("@" in i for i in ids) and any(
      i.startswith(_A_GROUPED_TEST) for i in ids):
    pytest.exit(f"--dist loadgroup forms no groups with pytest {pytest.__version__} and this "
                "pytest-xdist (pytest-dev/pytest-xdist#1386): install the test extra "
                "(pip install -e '.[test]'), which pins pytest", returncode=4)
