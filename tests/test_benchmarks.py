"""The benchmark entry points run (tiny shapes) and print their tables; figures are not checked
(tests never depend on wall-clock time)."""
import os
import sys

import pytest

import cli_runner
from fedjax_sharp.core import backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.usefixtures("optimised_compiles")   # compute-bound
def test_accelerator_benchmark_runs_small_on_cpu():
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "accelerator.py"),
                         "--small"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
  names = [line.split("|")[1].strip() for line in table[1:]]
  assert "FedAvg vmap/rolled, conv xla, float32" in names
  assert "FedAvg vmap/rolled, conv matmul, bfloat16" in names
  first = table[2].split("|")
  assert float(first[4]) > 0          # TFLOP/s from XLA's FLOP count (no peak known on a CPU)
  assert any(n.startswith("fedgmt") for n in names)
  assert any("clients per round" in n for n in names)
  assert any(n.startswith("sweep feddyn: 3 seeds") for n in names)
  assert names[-1].startswith("sweep 3 seeds x 2 algorithms")


@pytest.mark.usefixtures("optimised_compiles")   # bits against XLA's defaults
def test_init_compile_pin_keeps_the_initial_parameters(capsys):
  """benchmarks/init_compile.py: the options `init_params` pins on a CPU give the bits of XLA's
  default options (the whole zoo's rows are in results/benchmarks/init_compile_cpu.txt)."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import init_compile  # pylint: disable=g-import-not-at-top
  rows = init_compile.main(["--models=linear,fasttext"])
  assert [r["model"] for r in rows] == ["linear", "fasttext"]
  assert all(r["same_bits"] for r in rows)
  assert "same bits" in capsys.readouterr().out


def test_suite_compile_report_counts_a_tests_programs(tmp_path):
  """benchmarks/suite_compile_report.py: the plugin records each test's compile events by
  program; the report sums them."""
  (tmp_path / "test_tiny.py").write_text(
      "import jax\n\ndef test_one():\n  assert float(jax.jit(lambda x: x + 1)(1.0)) == 2.0\n")
  out = tmp_path / "report"
  proc = cli_runner.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "suite_compile_report", "-p",
       "no:cacheprovider", str(tmp_path / "test_tiny.py")], cwd=tmp_path, capture_output=True,
      text=True, timeout=300, env=dict(os.environ, SUITE_COMPILE_REPORT=str(out),
                                       PYTHONPATH=os.path.join(ROOT, "benchmarks")))
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import suite_compile_report  # pylint: disable=g-import-not-at-top
  text = suite_compile_report.report(str(out))
  assert text.startswith("1 tests,")
  assert "backend_compile_duration / jit(<lambda>)" in text and "test_tiny.py::test_one" in text


def test_hlo_ops_sweep_meets_the_client_axis_in_one_op(capsys):
  """benchmarks/hlo_ops.py: a sweep of S experiments x C clients reaches the kernels as S*C
  grouped convolutions ('xla') or dots batched over S x C ('matmul', no convolution at all)."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import hlo_ops  # pylint: disable=g-import-not-at-top
  hlo_ops.main(["--experiments=2", "--clients=3", "--steps=1", "--batch=2", "--input=8x8x1"])
  rows = {tuple(c.strip() for c in line.split("|")[1:3]): line
          for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
  assert "feature_groups=3" in rows[("round", "xla")]
  assert "feature_groups=6" in rows[("sweep_round S=2", "xla")]
  assert rows[("sweep_round S=2", "matmul")].split("|")[3].strip() == "0"   # no convolution
  assert "'2x3'" in rows[("sweep_round S=2", "matmul")]
  # On a CPU the engine's programs keep convolutions and reductions out of YNNPACK (backends.jit).
  for program in ("round", "sweep_round S=2"):
    assert rows[(program, "xla")].split("|")[6].strip() in ("{'dot': 4}", "-")


def test_rolled_local_step_copies_no_carried_state():
  """benchmarks/hlo_ops.py --local_step: one local step of the rolled loop under 'map' (a GPU's
  default) runs only real steps, so its loop body copies neither the parameters nor the momentum
  at every step (the select that kept a masked step's carry made XLA copy each of the 8
  parameter and 8 momentum leaves: 18 copies in all). The CPU's optimised program as the
  proxy."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import hlo_ops  # pylint: disable=g-import-not-at-top
  ops = hlo_ops.local_step_ops(hlo_ops.local_step_program("map", "float32", 2, 2, 2, (8, 8, 1)))
  assert (ops["convolution"], ops["dot"]) == (5, 2), ops   # the step itself: 2 conv layers, 2 dense
  assert ops["copy"] < 8, ops


_GPU_LIKE_HLO = """\
%command_buffer (p: f32[8,10]) -> f32[8,10] {
  %p = f32[8,10]{1,0} parameter(0)
  %fusion.1 = f32[8,10]{1,0} fusion(%p), kind=kLoop, calls=%fused_computation.1
  ROOT %custom-call.2 = f32[8,10]{1,0} custom-call(%fusion.1), custom_call_target="__cudnn$convForward"
}

%step_body (carry: (s32[], f32[8,10])) -> (s32[], f32[8,10]) {
  %carry = (s32[], f32[8,10]{1,0}) parameter(0)
  %get-tuple-element.1 = f32[8,10]{1,0} get-tuple-element(%carry), index=1
  %call.3 = f32[8,10]{1,0} call(%get-tuple-element.1), to_apply=%command_buffer
  %fusion.4 = (f32[8]{0}, s32[8]{0}, /*index=2*/f32[8]{0}) fusion(%call.3), kind=kLoop, calls=%f.2
  %copy.5 = f32[8,10]{1,0} copy(%call.3)
  ROOT %tuple.6 = (s32[], f32[8,10]{1,0}) tuple(%get-tuple-element.1, %copy.5)
}

ENTRY %main (a: (s32[], f32[8,10])) -> (s32[], f32[8,10]) {
  %a = (s32[], f32[8,10]{1,0}) parameter(0)
  ROOT %while.7 = (s32[], /*index=1*/f32[8,10]{1,0}) while(%a), condition=%cond, body=%step_body
}
"""


def test_local_step_ops_reads_a_gpu_program():
  """The local step's count on a GPU's program: a command buffer's computation counted in place
  of its `call`, cuDNN's convolutions as custom calls, tuple-shaped fusions counted."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import hlo_ops  # pylint: disable=g-import-not-at-top
  ops = hlo_ops.local_step_ops(_GPU_LIKE_HLO)
  assert ops == {"fusion": 2, "custom-call": 1, "copy": 1}, ops


def test_cpu_library_fusions_benchmark_times_every_choice(capsys):
  """benchmarks/cpu_library_fusions.py: the step and the aggregation under each choice of what
  XLA's CPU backend hands to YNNPACK (the library's: dot products only)."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import cpu_library_fusions  # pylint: disable=g-import-not-at-top
  rows = cpu_library_fusions.main(["--small"])
  assert list(rows) == list(cpu_library_fusions.CHOICES)
  assert all(step > 0 and agg > 0 for step, agg in rows.values())
  assert "| dots (the library's) |" in capsys.readouterr().out
  assert cpu_library_fusions.CHOICES["dots (the library's)"] == backends.CPU_LIBRARY_FUSIONS
  assert backends.CPU_COMPILER_OPTIONS == {
      "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


def test_vs_torch_benchmark_runs_small():
  """Our side always runs; the PyTorch side only where torch is installed (an optional extra)."""
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "vs_torch.py"),
                         "--small"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ") and not line.startswith("| side")]
  assert rows[0].startswith("ours host/unrolled")
  try:
    import torch  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    assert rows[-1].startswith("torch")
  except ImportError:
    assert "torch is not installed" in proc.stdout


@pytest.mark.usefixtures("optimised_compiles")   # compute-bound
def test_analysis_benchmark_runs_small():
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "analysis.py"),
                         "--data=digits", "--examples=64", "--batch=32", "--reverse_batch=16",
                         "--iters=2", "--probes=2", "--grid=3"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "reverse-mode pieces of 16" in proc.stdout
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ")][1:]
  assert [r.split(",")[0].split(" ")[0] for r in rows] == [
      "lambda_max", "Hessian", "SAM", "landscape", "total"]


@pytest.mark.parametrize("impl", ["lax", "im2col"])
def test_conv_grad_benchmark_runs_small(impl):
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "conv_grad.py"),
                         "--batches=2,4", "--size=6", "--cin=2", "--cout=3", "--repeats=1",
                         f"--impl={impl}", "--pad=1"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
          if line.startswith("| ")][1:]
  assert rows == ["2", "4"]


def test_round_time_algorithms_with_a_model_and_micro_batches():
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "round_time.py"),
                         "--model=lenet5", "--input=28x28x1", "--clients=2", "--steps=2",
                         "--batch=8", "--rounds=1",
                         "--algorithms=fedavg,fedavg[engine.micro_batch=4]"],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "lenet5 28x28x1" in proc.stdout
  rows = [line.split()[0] for line in proc.stdout.splitlines()
          if line.startswith("fedavg") and line.rstrip().endswith("1 / 1")]
  assert rows == ["fedavg", "fedavg[engine.micro_batch=4]"]


def _check_rows(stdout):
  """{(algorithm, strategy): status} of `accelerator.py --check`'s table."""
  rows = [[c.strip() for c in line.split("|")[1:-1]] for line in stdout.splitlines()
          if line.startswith("| ") and not line.startswith("| algorithm")]
  return {(r[0], r[1]): r[-1] for r in rows}


def test_accelerator_check_small_runs_every_algorithm():
  """The backend smoke check CI runs: every registered algorithm (classification and minimax)
  under 'map' (what 'auto' resolves to on a GPU) for 2 rounds with buffer donation on, each row
  OK. The other client strategies run every algorithm, with donation on and with results
  compared rather than only run, in tests/test_algorithm_invariants.py (map, vmap,
  chunked_vmap, host/unrolled -- the CPU's 'auto' --) and tests/test_minimax.py (every minimax
  algorithm under unrolled, vmap and host/unrolled); `--check` without `--strategies` ('auto'
  and the three others) is what to run on a GPU."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  proc = cli_runner.run([sys.executable, os.path.join(ROOT, "benchmarks", "accelerator.py"),
                         "--check", "--small", "--strategies=map"],
                        env=dict(os.environ, PYTHONPATH=ROOT),
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "RoundEngine(donate=True)" in proc.stdout
  rows = _check_rows(proc.stdout)
  assert {s for _, s in rows} == {"map/rolled"}, rows
  for name in [*ALGORITHMS, *MINIMAX_ALGORITHMS]:
    assert rows.get((name, "map/rolled")) == "OK", (name, rows.get((name, "map/rolled")))
  assert f"check: {len(rows)} ok, 0 failed (" in proc.stdout


def test_accelerator_check_strategies_default_to_auto_and_every_other_one():
  """`--check` without `--strategies`: 'auto' (resolved for this backend), then every client
  strategy it does not resolve to (on a CPU: vmap, map, chunked_vmap)."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  try:
    import accelerator   # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  labels = [label for label, _ in accelerator.check_strategies()]
  assert labels == ["auto (host/unrolled)", "vmap/rolled", "map/rolled", "chunked_vmap/rolled"]
  assert [s for _, s in accelerator.check_strategies("auto,map")] == ["auto/auto", "map/rolled"]


# FedProx deliberately broken (its local step raises while the round is traced), through the
# benchmarks' own `build_algorithm`, so that the test does not depend on how algorithms register.
_BROKEN = """
import dataclasses
import sys
sys.path.insert(0, {bench!r})
import accelerator
import round_time


def local_step(*args):
  raise RuntimeError("deliberately broken\\nsecond line")


def build_algorithm(config, apply_fn, real=round_time.build_algorithm):
  algorithm = real(config, apply_fn)
  if config.algorithm.name == "fedprox":
    algorithm = dataclasses.replace(algorithm, local_step=local_step)
  return algorithm


round_time.build_algorithm = build_algorithm
accelerator.main(["--check", "--small", "--strategies=vmap",
                  "--algorithms=local_sgda,fedprox,fedavg"])
"""


def test_accelerator_check_names_a_failing_algorithm_and_goes_on():
  """A deliberately broken algorithm fails its row, the rows after it still run, and the check
  exits 1 naming it."""
  proc = cli_runner.run([sys.executable, "-c",
                         _BROKEN.format(bench=os.path.join(ROOT, "benchmarks"))],
                        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
  rows = _check_rows(proc.stdout)
  assert list(rows) == [("fedavg", "vmap/rolled"), ("fedprox", "vmap/rolled"),
                        ("local_sgda", "vmap/rolled")]   # each family's baseline first
  assert rows[("fedprox", "vmap/rolled")] == "FAILED: RuntimeError: deliberately broken"
  assert rows[("fedavg", "vmap/rolled")] == rows[("local_sgda", "vmap/rolled")] == "OK"
  summary = [line for line in proc.stdout.splitlines() if line.startswith("check: ")]
  assert summary[0].startswith("check: 2 ok, 1 failed (")
  assert summary[0].endswith("): fedprox (vmap/rolled)")
