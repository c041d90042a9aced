"""Models: architectures match the papers (parameter counts by hand), pooling, registry."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.models import count_params, get_model, in_pieces, init_params, max_pool_2x2

from algo_helpers import np_normal


@pytest.mark.parametrize("name,shape,expected", [
    # conv1 5*5*1*32+32 + conv2 5*5*32*64+64 + fc1 (7*7*64)*512+512 + fc2 512*10+10
    ("mcmahan_cnn", (28, 28, 1), 832 + 51_264 + 1_606_144 + 5_130),
    # same with 3 input channels and an 8*8*64 = 4096-wide flatten
    ("mcmahan_cnn", (32, 32, 3), 2_432 + 51_264 + 2_097_664 + 5_130),
    # conv 64 5x5 VALID (x2), flatten 5*5*64 = 1600, fc 384, fc 192, fc 10
    ("lenet5", (32, 32, 3), 4_864 + 102_464 + 614_784 + 73_920 + 1_930),
    ("mlp", (28, 28, 1), 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),
    ("linear", (8, 8, 1), 64 * 10 + 10),
])
def test_parameter_counts_match_the_papers_architectures(name, shape, expected):
  model = get_model(name, 10)
  params = init_params(model, jax.random.key(0), shape)
  assert count_params(params) == expected
  logits = model.apply({"params": params}, jnp.zeros((3, *shape)))
  assert logits.shape == (3, 10)


def test_max_pool_2x2_equals_flax_max_pool_values_and_gradients():
  x = np_normal((2, 6, 8, 3), seed=1)
  ours = lambda x: max_pool_2x2(x)
  ref = lambda x: nn.max_pool(x, (2, 2), strides=(2, 2))
  np.testing.assert_array_equal(ours(x), ref(x))
  g_ours = jax.grad(lambda x: jnp.sum(ours(x) ** 2))(x)
  g_ref = jax.grad(lambda x: jnp.sum(ref(x) ** 2))(x)
  np.testing.assert_allclose(g_ours, g_ref, rtol=1e-6)


def test_unknown_model_names_the_field():
  with pytest.raises(ValueError, match=r"model\.name='resnet1000' is not one of"):
    get_model("resnet1000", 10)


def test_vgg11_parameter_count_by_hand():
  from fedjax_sharp.models import get_model, init_params
  from fedjax_sharp.models.registry import count_params
  import jax
  widths = [3, 64, 128, 256, 256, 512, 512, 512, 512]
  convs = sum(cin * cout * 9 + cout for cin, cout in zip(widths[:-1], widths[1:]))
  expected = convs + 512 * 10 + 10                      # after 5 pools: 1 x 1 x 512
  params = init_params(get_model("vgg11", 10), jax.random.key(0), (32, 32, 3))
  assert count_params(params) == expected == 9_225_610


def test_in_pieces_is_the_same_function_on_smaller_model_calls():
  sizes = []

  def counting(apply_fn):
    def f(p, x):
      sizes.append(x.shape[0])
      return apply_fn(p, x)
    return f

  model = get_model("lenet5", 10)
  params = init_params(model, jax.random.key(0), (28, 28, 1))
  whole = lambda p, x: model.apply({"params": p}, x)
  pieces = in_pieces(counting(whole), 4)
  x = np_normal((9, 28, 28, 1), seed=1)
  y = jnp.arange(9) % 10
  mask = jnp.array([1, 1, 1, 1, 1, 1, 1, 0, 0], jnp.float32)   # padded examples, as in training

  def loss(apply_fn):
    def f(p):
      nll = -jax.nn.log_softmax(apply_fn(p, x))[jnp.arange(9), y]
      return jnp.sum(mask * nll) / jnp.sum(mask)
    return f

  # Each side compiled (one program each, not hundreds of eager operations); the piece sizes
  # are recorded while `pieces` is traced.
  y_whole = jax.jit(whole)(params, x)
  np.testing.assert_allclose(jax.jit(pieces)(params, x), y_whole, rtol=1e-5, atol=1e-6)
  assert sizes == [4, 4, 1]                      # consecutive pieces, the last one smaller
  g_whole, g_pieces = (jax.jit(jax.grad(loss(whole)))(params),
                       jax.jit(jax.grad(loss(pieces)))(params))
  for a, b in zip(jax.tree.leaves(g_whole), jax.tree.leaves(g_pieces)):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
  # Swapping two pieces' logits would not be the same function: the check above would see it.
  swapped = lambda p, x: jnp.concatenate([whole(p, x[4:8]), whole(p, x[:4]), whole(p, x[8:])])
  assert not np.allclose(jax.jit(swapped)(params, x), y_whole)
  assert in_pieces(whole, 0) is whole and jax.eval_shape(in_pieces(whole, 16), params,
                                                          x).shape == (9, 10)
  with pytest.raises(ValueError, match=r"engine\.micro_batch"):
    in_pieces(whole, -1)


def test_init_params_reuses_one_program_per_model_and_shape():
  """Another seed's init (a sweep's seeds, compare's) reuses the jitted init of an equal model
  and shape: no new trace or compile, the same bits as a program of its own."""
  from fedjax_sharp.models import registry  # pylint: disable=g-import-not-at-top
  before = registry._jitted_init.cache_info()   # pylint: disable=protected-access
  a = init_params(get_model("mcmahan_cnn", 10), jax.random.key(0), (8, 8, 1))
  b = init_params(get_model("mcmahan_cnn", 10), jax.random.key(1), (8, 8, 1))
  after = registry._jitted_init.cache_info()    # pylint: disable=protected-access
  assert after.misses - before.misses <= 1 and after.hits - before.hits >= 1
  own = registry._jitted_init.__wrapped__(      # pylint: disable=protected-access
      get_model("mcmahan_cnn", 10), (8, 8, 1), jnp.dtype(jnp.float32), True)(jax.random.key(1))
  jax.tree.map(np.testing.assert_array_equal, b, own)
  assert not np.array_equal(a["conv1"]["kernel"], b["conv1"]["kernel"])
