"""The benchmarks' FLOP count (`benchmarks/round_time.lowered_flops`): XLA's cost analysis of the
*lowered* program, so that a GPU (whose compiled program hands convolutions to cuDNN as custom
calls that its cost analysis leaves out) reports the same count as a CPU. On this CPU the lowered
count must match the CPU-compiled count, forward + backward, for every registered model."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import round_time  # pylint: disable=g-import-not-at-top

from fedjax_sharp.models import MODELS, get_model

TOKEN_MODELS = {"fasttext": {"vocab_size": 50}, "char_lstm": {}, "word_lstm": {"vocab_size": 40}}


def _inputs(name):
  """A small batch the model accepts (token ids for the text models)."""
  if name in TOKEN_MODELS:
    return jnp.asarray(np.random.default_rng(0).integers(1, 20, (2, 12)), jnp.int32)
  shape = ((28, 28, 1) if name in ("lenet5", "mlp", "linear") else
           (32, 32, 3) if name.startswith("vgg") else (16, 16, 3))
  return jnp.asarray(np.random.default_rng(0).normal(size=(2, *shape)), jnp.float32)


def _has_grouped_convolutions(params) -> bool:
  """Depthwise / grouped convolution kernels (input features per group < the layer's input)."""
  return "mobilenet" in str(jax.tree_util.tree_structure(params)) or any(
      "dw" in str(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0])


# The compiled count is XLA's cost analysis of the program after its HLO passes; the backend's
# optimisation level (LLVM's) leaves those alone: every zoo model has the same count at level 0
# as at the default, compiled 3.3x faster (10.9 -> 3.3 s for the 13 models).
O0 = {"xla_backend_optimization_level": 0}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_lowered_flop_count_matches_the_cpu_compiled_count(name):
  """Forward + backward, lowered against CPU-compiled, within 5%. A model with grouped
  (depthwise) convolutions is compared on its forward pass: XLA's CPU backend rewrites a grouped
  convolution's weight gradient as a dense convolution over all channels, so its compiled count
  exceeds the work (the lowered count, which a GPU's cuDNN call also does, is the model's; see
  test_cpu_compiled_count_inflates_depthwise_gradients)."""
  classes = 20 if name in TOKEN_MODELS else 10
  model = get_model(name, classes, **TOKEN_MODELS.get(name, {}))
  x = _inputs(name)
  params = jax.eval_shape(lambda: model.init(jax.random.key(0), x)["params"])
  params = jax.tree.map(lambda a: jnp.full(a.shape, 0.01, a.dtype), params)

  def forward(p, xb):
    return jnp.sum(jnp.square(model.apply({"params": p}, xb)))

  def grad_of_loss(p, xb):
    return jax.grad(forward)(p, xb)

  lowered = round_time.lowered_flops(grad_of_loss, params, x)
  assert lowered > 0
  if _has_grouped_convolutions(params):
    lowered, compiled = (round_time.lowered_flops(forward, params, x),
                         round_time.compiled_flops(forward, params, x, compiler_options=O0))
  else:
    compiled = round_time.compiled_flops(grad_of_loss, params, x, compiler_options=O0)
  assert abs(lowered - compiled) <= 0.05 * compiled, (name, lowered, compiled)


def test_lowered_count_is_the_convolutions_flops():
  """A hand count: one 5x5 SAME convolution 3->8 channels on 2 images of 16x16. XLA counts the
  taps that land on the image, not on the padding: per spatial dimension 3+4+12*5+4+3 = 74 (output
  position, tap) pairs, so 2 FLOPs x 2 images x 74^2 x 3 x 8. The count comes from the lowered
  program and uses only shapes, so it is the same whatever backend compiles it."""
  w = jnp.ones((5, 5, 3, 8))
  x = jnp.ones((2, 16, 16, 3))
  conv = lambda a, b: jax.lax.conv_general_dilated(a, b, (1, 1), "SAME",
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
  assert round_time.lowered_flops(conv, x, w) == 2 * 2 * 74 ** 2 * 3 * 8
  spec = jax.ShapeDtypeStruct
  assert round_time.lowered_flops(conv, spec(x.shape, x.dtype), spec(w.shape, w.dtype)) == \
      round_time.lowered_flops(conv, x, w)


def test_cpu_compiled_count_inflates_depthwise_gradients():
  """Why grouped-convolution models are compared on their forward pass: the forward of a
  depthwise convolution counts the same lowered and CPU-compiled, its weight gradient does not
  (XLA's CPU backend computes it as a dense convolution over all channels)."""
  w = jnp.ones((3, 3, 1, 8))
  x = jnp.ones((2, 16, 16, 8))
  dw = lambda a, b: jax.lax.conv_general_dilated(a, b, (1, 1), "SAME",
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                 feature_group_count=8)
  assert round_time.lowered_flops(dw, x, w) == round_time.compiled_flops(dw, x, w)
  grad = lambda a, b: jax.grad(lambda q: jnp.sum(dw(a, q) ** 2))(b)
  assert round_time.compiled_flops(grad, x, w) > 3 * round_time.lowered_flops(grad, x, w)


def test_compiled_count_does_not_depend_on_the_backend_level():
  """What lets the zoo test above compile at LLVM level 0: the same compiled count as XLA's
  default level (all 13 models were compared once; here a convolutional one, forward+backward)."""
  model = get_model("mcmahan_cnn", 10)
  x = _inputs("mcmahan_cnn")
  params = jax.eval_shape(lambda: model.init(jax.random.key(0), x)["params"])
  params = jax.tree.map(lambda a: jnp.full(a.shape, 0.01, a.dtype), params)
  grad = jax.grad(lambda p, xb: jnp.sum(model.apply({"params": p}, xb)))
  assert round_time.compiled_flops(grad, params, x, compiler_options=O0) == \
      round_time.compiled_flops(grad, params, x) > 0
