"""How the library's programs are compiled on a CPU (`backends.compiler_options`, `backends.jit`):
convolutions and reductions by XLA's own emitters instead of the YNNPACK library, where a CNN
step ran 1.4x and an aggregation 5.7x slower (docs/performance.md); called inside another trace,
the same functions compile with the enclosing program's options."""
import os
import dataclasses
import sys

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest

from algo_helpers import apply_fn
from fedjax_sharp.algorithms import fed_avg, local_sgd
from fedjax_sharp.core import ExecutionConfig, RoundEngine, backends, tree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import hlo_ops  # pylint: disable=g-import-not-at-top,wrong-import-position


def conv_relu_sum(x, k):
  y = lax.conv_general_dilated(x, k, (1, 1), ((2, 2), (2, 2)),
                               dimension_numbers=("NHWC", "HWIO", "NHWC"))
  return jnp.sum(jax.nn.relu(y) ** 2)


def inputs(batch=2):
  rng = np.random.default_rng(0)
  return (jnp.asarray(rng.normal(size=(batch, 8, 8, 3)), jnp.float32),
          jnp.asarray(rng.normal(size=(5, 5, 3, 32)) * 0.2, jnp.float32))   # YNNPACK takes 32 out


def test_cpu_options_unless_xla_flags_choose(monkeypatch):
  assert backends.compiler_options("cpu") == backends.CPU_COMPILER_OPTIONS
  assert backends.compiler_options("gpu") is None and backends.compiler_options("tpu") is None
  monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "")
                     + " --xla_cpu_experimental_ynn_fusion_type=individual_dot")
  assert backends.compiler_options("cpu") is None


def test_jit_keeps_convolutions_out_of_ynnpack_and_nests_in_other_traces():
  x, k = inputs()
  grad = jax.grad(conv_relu_sum, argnums=1)
  tuned = backends.jit(grad)
  hlo = tuned.lower(x, k).compile().as_text()
  assert "convolution(" in hlo and hlo_ops.library_ops(hlo) == {}   # defaults: 2 convolutions
  # The aggregation's weighted sum over clients (XLA's defaults: a YNNPACK reduction).
  updates, weights = jnp.ones((4, 64, 512)), jnp.arange(4.0)
  hlo = backends.jit(tree.weighted_sum).lower(updates, weights).compile().as_text()
  assert "reduce(" in hlo and hlo_ops.library_ops(hlo) == {}
  want = jax.jit(grad)(x, k)                       # XLA's defaults
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.max(np.abs(b)))
  close(tuned(x, k), want)                          # float rounding apart (float64: both 2e-7)
  # Inside jit, vmap and grad (JAX refuses compiler options on a nested jit): the same values.
  close(jax.jit(lambda a, b: tuned(a, b))(x, k), want)
  close(jax.vmap(tuned, (0, None))(jnp.stack([x, 2 * x]), k)[0], want)
  close(jax.grad(lambda b: jnp.sum(tuned(x, b)))(k), jax.grad(lambda b: jnp.sum(grad(x, b)))(k))


def test_every_compiled_entry_point_of_the_engine_carries_the_options():
  engine = RoundEngine(fed_avg(apply_fn, local_sgd(0.9, 0.0)), 2, ExecutionConfig("host"))
  entry_points = {name: fn for name, fn in vars(engine).items() if name.startswith("_jit_")}
  assert set(entry_points) >= {"_jit_round", "_jit_sweep", "_jit_repeat"}
  # The pieces a dispatched strategy runs ('host'), compiled one by one.
  pieces = {f"compiled.{f.name}": getattr(engine.compiled, f.name)
            for f in dataclasses.fields(engine.compiled)}
  assert set(pieces) >= {"compiled.prepare", "compiled.steps", "compiled.finish"}
  entry_points.update(pieces)
  for name, fn in entry_points.items():
    assert isinstance(fn, backends._TopLevelJit), name   # pylint: disable=protected-access


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"]))
