"""Shared fixtures: tiny federated problems for exact engine and algorithm tests."""
import os

# Keep tests on the CPU and single-threaded in XLA's view of the world (CI has 2 cores).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

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


@pytest.fixture
def tiny():
  return TinyProblem()
