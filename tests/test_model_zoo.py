"""Model zoo of the seed papers: parameter counts (authors' numbers or by hand), shapes, jit, vmap
over clients, FastText padding, ViT against a NumPy transcription of the authors' forward pass.

Parameter counts use jax.eval_shape (no compilation); forward passes use tiny inputs.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.models import MODELS, count_params, get_model, init_params
from fedjax_sharp.models import zoo

from algo_helpers import np_normal


def abstract_params(model, shape, dtype=jnp.float32):
  return jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, *shape), dtype)))[
      "params"]


def random_params(model, shape, clients=None, seed=0, dtype=jnp.float32):
  """Random parameters with the model's shapes (no init compile: XLA's CPU compile of the
  threefry initialisers dominates otherwise); `clients` adds a leading client axis."""
  rng = np.random.default_rng(seed)
  lead = () if clients is None else (clients,)
  return jax.tree.map(lambda a: jnp.asarray(rng.normal(0.0, 0.3, lead + a.shape), jnp.float32),
                      abstract_params(model, shape, dtype))


def n_params(name, num_classes, shape, **kw):
  return count_params(abstract_params(get_model(name, num_classes, **kw), shape))


# ---------------------------------------------------------------------------------------------
# Independent counting formulas (written from the architectures, not from zoo.py)
# ---------------------------------------------------------------------------------------------

def gn(c):                    # GroupNorm affine: scale + bias per channel
  return 2 * c


def resnet_count(stage_sizes, widths, in_ch, stem_kernel, num_classes):
  total = stem_kernel * stem_kernel * in_ch * 64 + gn(64)          # bias-free stem conv + GN
  cin = 64
  for i, (n, cout) in enumerate(zip(stage_sizes, widths)):
    for j in range(n):
      total += 9 * cin * cout + gn(cout) + 9 * cout * cout + gn(cout)
      if (i > 0 and j == 0) or cin != cout:                        # 1x1 conv shortcut + GN
        total += cin * cout + gn(cout)
      cin = cout
  return total + cin * num_classes + num_classes


def mobilenet_v2_count(width, num_classes, in_ch=3):
  def divisible(v, d=8):
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new
  settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]
  cin = divisible(32 * width)
  total = 9 * in_ch * cin + gn(cin)
  for t, c, n, _ in settings:
    cout = divisible(c * width)
    for _ in range(n):
      hidden = int(round(cin * t))
      if t != 1:
        total += cin * hidden + gn(hidden)                         # 1x1 expand
      total += 9 * hidden + gn(hidden)                             # 3x3 depthwise
      total += hidden * cout + gn(cout)                            # 1x1 project
      cin = cout
  last = divisible(1280 * max(1.0, width))
  total += cin * last + gn(last)
  return total + last * num_classes + num_classes


# ---------------------------------------------------------------------------------------------
# Parameter counts
# ---------------------------------------------------------------------------------------------

def test_mcmahan_cnn_cifar_count():
  assert n_params("mcmahan_cnn", 10, (32, 32, 3)) == 2_156_490


def test_resnet8_matches_fedgmt_code_count():
  # FL-SAM resnet8(): 7x7/2 stem 9,408 + GN 128; stage 64: 73,984; stage 128 (with 1x1
  # shortcut): 230,144; stage 256: 919,040; fc 256*100+100 = 25,700.
  assert 9_408 + 128 + 73_984 + 230_144 + 919_040 + 25_700 == 1_258_404
  assert n_params("resnet8", 100, (32, 32, 3)) == 1_258_404
  assert resnet_count((1, 1, 1), (64, 128, 256), 3, 7, 100) == 1_258_404
  assert n_params("resnet8", 10, (32, 32, 3)) == resnet_count((1, 1, 1), (64, 128, 256), 3, 7, 10)


def test_resnet8_layout_is_the_authors():
  p = abstract_params(get_model("resnet8", 100), (32, 32, 3))
  assert p["conv1"]["kernel"].shape == (7, 7, 3, 64) and "bias" not in p["conv1"]
  assert set(p) == {"conv1", "gn1", "stage1_block1", "stage2_block1", "stage3_block1", "fc"}
  assert "down_conv" not in p["stage1_block1"]
  assert p["stage2_block1"]["down_conv"]["kernel"].shape == (1, 1, 64, 128)
  assert p["fc"]["kernel"].shape == (256, 100)
  assert get_model("resnet8", 10).groups == 2


@pytest.mark.parametrize("num_classes,stem,kernel,expected", [
    (10, "cifar", 3, 11_173_962),       # the usual CIFAR ResNet-18 count (BN and GN alike)
    (100, "cifar", 3, 11_220_132),
    (10, "imagenet", 7, 11_181_642),    # FL-SAM's resnet18(): 7x7 stem, +49*3*64 - 9*3*64
])
def test_resnet18_count_by_hand(num_classes, stem, kernel, expected):
  assert resnet_count((2, 2, 2, 2), (64, 128, 256, 512), 3, kernel, num_classes) == expected
  assert n_params("resnet18", num_classes, (32, 32, 3), stem=stem) == expected


def test_resnet_group_count_is_a_field_and_changes_outputs_not_counts():
  kw = dict(num_classes=3, stage_sizes=(1, 1), widths=(8, 16))
  m2, m4 = zoo.ResNetGN(groups=2, **kw), zoo.ResNetGN(groups=4, **kw)
  p = random_params(m2, (8, 8, 3))
  assert count_params(p) == count_params(abstract_params(m4, (8, 8, 3)))
  x = np_normal((2, 8, 8, 3), seed=1)
  apply = lambda m: jax.jit(lambda p, x: m.apply({"params": p}, x))
  assert not np.allclose(apply(m2)(p, x), apply(m4)(p, x))


def test_vit_matches_fedgmt_code_count():
  width, mlp, tokens, patch_dim = 384, 384, 64, 4 * 4 * 3
  block = (2 * gn(width)                         # two LayerNorms (scale + bias)
           + 4 * (width * width + width)         # q, k, v, o
           + width * mlp + mlp + mlp * width + width)
  expected = (patch_dim * width + width + tokens * width + 2 * block
              + gn(width) + width * 10 + 10)     # head LayerNorm + linear
  assert expected == 1_825_162
  assert n_params("vit_small", 10, (32, 32, 3)) == 1_825_162
  p = abstract_params(get_model("vit_small", 10), (32, 32, 3))
  assert p["pos_emb"].shape == (1, 64, 384) and "cls_token" not in p
  assert p["block1"]["mlp1"]["kernel"].shape == (384, 384)


def test_fasttext_vocabulary_derived_from_the_count():
  # embedding 32 V + fc1 (32*32 + 32) + fc (32*4 + 4); fc1 has no activation (and an activation
  # would add no parameters anyway), so V = (3,157,508 - 1,056 - 132) / 32.
  v, rem = divmod(3_157_508 - (32 * 32 + 32) - (32 * 4 + 4), 32)
  assert rem == 0 and v == 98_635 == zoo.AG_NEWS_VOCAB_SIZE
  model = get_model("fasttext", 4)
  assert model.vocab_size == 98_635
  p = abstract_params(model, (200,), jnp.int32)
  assert p["embedding"]["embedding"].shape == (98_635, 32)
  assert count_params(p) == 3_157_508


@pytest.mark.parametrize("width,num_classes,expected", [
    (1.0, 1000, 3_504_872),             # torchvision mobilenet_v2 num_params
    (1.0, 2028, 4_821_740),             # Landmarks-User-160k
    (0.5, 10, None),
    (0.35, 100, None),
])
def test_mobilenet_v2_gn_count_by_formula(width, num_classes, expected):
  formula = mobilenet_v2_count(width, num_classes)
  if expected is not None:
    assert formula == expected
  assert n_params("mobilenet_v2_gn", num_classes, (32, 32, 3), width_mult=width) == formula


def test_mobilenet_v2_gn_uses_depthwise_convs_and_no_bias():
  p = abstract_params(get_model("mobilenet_v2_gn", 10), (32, 32, 3))
  assert p["block2"]["dw"]["conv"]["kernel"].shape == (3, 3, 1, 96)
  assert "expand" not in p["block1"]
  convs = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(p)
           if "conv" in jax.tree_util.keystr(path)]
  assert all(jax.tree_util.keystr(path).endswith("['kernel']")
             for path, _ in jax.tree_util.tree_leaves_with_path(p)
             if "['conv']" in jax.tree_util.keystr(path))
  assert len(convs) == 52                # stem + 17 blocks (first without expand) + last


def test_vgg11_gn_count_by_hand():
  widths = [3, 64, 128, 256, 256, 512, 512, 512, 512]
  convs = sum(9 * cin * cout + cout + gn(cout) for cin, cout in zip(widths[:-1], widths[1:]))
  expected = convs + 512 * 10 + 10
  assert expected == 9_231_114
  assert n_params("vgg11_gn", 10, (32, 32, 3)) == expected
  assert n_params("vgg11", 10, (32, 32, 3)) == 9_225_610    # the unnormalised one is separate


def test_lenet5_has_valid_convs_and_a_1600_wide_first_dense():
  p = abstract_params(get_model("lenet5", 10), (32, 32, 3))
  assert p["fc1"]["kernel"].shape == (1600, 384)              # 5*5*64 after two VALID convs


# ---------------------------------------------------------------------------------------------
# Forward passes: shapes, jit, generic inputs, vmap over clients
# ---------------------------------------------------------------------------------------------

def test_registry_has_the_zoo():
  for name in ["resnet8", "resnet18", "vit_small", "fasttext", "mobilenet_v2_gn", "vgg11_gn"]:
    assert name in MODELS
    assert get_model(name, 7).num_classes == 7


@pytest.mark.parametrize("name,shape,kw", [
    ("resnet8", (32, 32, 3), {}),
    ("resnet8", (28, 28, 1), {}),
    ("resnet18", (32, 32, 3), {}),
    ("resnet18", (28, 28, 1), {"stem": "imagenet"}),
    ("vit_small", (32, 32, 3), {}),
    ("vit_small", (28, 28, 1), {}),
    ("mobilenet_v2_gn", (64, 64, 3), {}),
    ("mobilenet_v2_gn", (28, 28, 1), {"width_mult": 0.5}),
    ("vgg11_gn", (32, 32, 3), {}),
])
def test_output_shapes_on_generic_inputs(name, shape, kw):
  model = get_model(name, 5, **kw)
  p = abstract_params(model, shape)
  out = jax.eval_shape(lambda p, x: model.apply({"params": p}, x), p,
                       jax.ShapeDtypeStruct((3, *shape), jnp.float32))
  assert out.shape == (3, 5) and out.dtype == jnp.float32


@pytest.mark.parametrize("name", ["resnet8", "resnet18", "vit_small", "fasttext",
                                  "mobilenet_v2_gn", "vgg11_gn"])
def test_models_are_stateless(name):
  shape, dtype = ((200,), jnp.int32) if name == "fasttext" else ((32, 32, 3), jnp.float32)
  variables = jax.eval_shape(
      lambda: get_model(name, 4).init(jax.random.key(0), jnp.zeros((1, *shape), dtype)))
  assert set(variables) == {"params"}               # no batch_stats or other collections


@pytest.mark.parametrize("name,shape,kw,check_each", [
    ("resnet8", (16, 16, 3), {}, True),
    ("vit_small", (8, 8, 3), {}, True),
    ("resnet18", (8, 8, 1), {}, False),
    ("mobilenet_v2_gn", (16, 16, 3), {"width_mult": 0.35}, False),
    ("vgg11_gn", (32, 32, 1), {"widths": (8, "M", 8, "M", 16, "M", 16, "M", 16, "M")}, False),
])
def test_jit_and_vmap_over_a_client_axis_of_parameters(name, shape, kw, check_each):
  model = get_model(name, 3, **kw)
  params = random_params(model, shape, clients=2)                    # leading client axis
  x = np_normal((4, *shape), seed=1)
  apply = lambda p, x: model.apply({"params": p}, x)
  out = jax.jit(jax.vmap(apply, in_axes=(0, None)))(params, x)
  assert out.shape == (2, 4, 3) and bool(jnp.all(jnp.isfinite(out)))
  assert not np.allclose(out[0], out[1])
  if check_each:
    one = jax.jit(apply)
    for c in range(2):
      np.testing.assert_allclose(out[c], one(jax.tree.map(lambda a: a[c], params), x),
                                 rtol=2e-4, atol=2e-4)


def test_registry_init_params_works_for_the_zoo():
  model = get_model("resnet8", 10)
  params = jax.jit(lambda k: init_params(model, k, (8, 8, 3)))(jax.random.key(0, impl="rbg"))
  assert count_params(params) == n_params("resnet8", 10, (8, 8, 3))
  assert float(jnp.std(params["conv1"]["kernel"])) == pytest.approx(
      math.sqrt(2 / (7 * 7 * 64)), rel=0.1)            # Kaiming normal, fan-out (authors' init)
  assert np.all(params["gn1"]["scale"] == 1) and np.all(params["gn1"]["bias"] == 0)


# ---------------------------------------------------------------------------------------------
# FastText
# ---------------------------------------------------------------------------------------------

def small_fasttext(**kw):
  model = zoo.FastText(num_classes=4, vocab_size=50, **kw)
  params = jax.jit(lambda k: init_params(model, k, (10,)))(jax.random.key(0, impl="rbg"))
  return model, params


def test_fasttext_forward_jit_vmap_and_padding_row_is_ignored():
  model, params = small_fasttext()
  assert np.all(params["embedding"]["embedding"][0] == 0)   # torch padding_idx init
  tokens = jnp.array([[5, 7, 9, 0, 0, 0], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0]], jnp.int32)
  apply = jax.jit(lambda p, t: model.apply({"params": p}, t))
  out = apply(params, tokens)
  assert out.shape == (3, 4)
  # Changing the padding row changes nothing.
  moved = jax.tree.map(lambda a: a, params)
  moved["embedding"]["embedding"] = params["embedding"]["embedding"].at[0].set(3.0)
  np.testing.assert_allclose(apply(moved, tokens), out, rtol=1e-6)
  # Appending padding tokens changes nothing.
  padded = jnp.concatenate([tokens, jnp.zeros((3, 5), jnp.int32)], axis=1)
  np.testing.assert_allclose(apply(params, padded), out, rtol=1e-6, atol=1e-7)
  # The padding row gets no gradient.
  g = jax.jit(jax.grad(lambda p: jnp.sum(model.apply({"params": p}, tokens) ** 2)))(params)
  assert np.all(g["embedding"]["embedding"][0] == 0)
  # All-padding rows give the bias path only (zero feature).
  h = params["fc1"]["bias"] @ params["fc"]["kernel"] + params["fc"]["bias"]
  np.testing.assert_allclose(out[2], h, rtol=1e-5, atol=1e-6)
  # Mean over the non-padding tokens, then two linears, no activation.
  emb = params["embedding"]["embedding"]
  feat = emb[np.array([5, 7, 9])].mean(0)
  ref = (feat @ params["fc1"]["kernel"] + params["fc1"]["bias"]) @ params["fc"]["kernel"] \
      + params["fc"]["bias"]
  np.testing.assert_allclose(out[0], ref, rtol=1e-5, atol=1e-6)
  # vmap over a client axis of parameters.
  stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), params, moved)
  outs = jax.vmap(apply, in_axes=(0, None))(stacked, tokens)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
  # Float-typed ids (from a generic data layer) are cast.
  np.testing.assert_allclose(apply(params, tokens.astype(jnp.float32)), out, rtol=1e-6)


def test_fasttext_pool_all_is_the_authors_mean_over_all_positions():
  model, params = small_fasttext(pool="all")
  tokens = jnp.array([[5, 7, 9, 0, 0, 0]], jnp.int32)
  emb = params["embedding"]["embedding"]                      # row 0 is zero, as in torch
  feat = emb[np.array(tokens[0])].mean(0)                     # torch: embedded.mean(1)
  ref = (feat @ params["fc1"]["kernel"] + params["fc1"]["bias"]) @ params["fc"]["kernel"] \
      + params["fc"]["bias"]
  np.testing.assert_allclose(model.apply({"params": params}, tokens)[0], ref, rtol=1e-5,
                             atol=1e-6)


# ---------------------------------------------------------------------------------------------
# ViT against a NumPy transcription of harrylee999/FL-SAM system/flcore/trainmodel/vit.py
# ---------------------------------------------------------------------------------------------

def np_layernorm(x, p, eps=1e-5):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def np_gelu(x):
  return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_linear(x, p):
  return x @ np.asarray(p["kernel"], np.float64) + np.asarray(p["bias"], np.float64)


def np_vit(params, x_nchw, patches_per_side, heads):
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  b, c, h, w = x_nchw.shape
  ps = h // patches_per_side
  # x.unfold(2, ps, ps).unfold(3, ps, ps).permute(0, 2, 3, 4, 5, 1).reshape(b, n, -1)
  u = x_nchw.reshape(b, c, patches_per_side, ps, patches_per_side, ps).transpose(0, 2, 4, 3, 5, 1)
  out = np_linear(u.reshape(b, patches_per_side ** 2, -1), p["emb"]) + p["pos_emb"]
  feats = out.shape[-1]
  for name in sorted(k for k in p if k.startswith("block")):
    blk = p[name]
    y = np_layernorm(out, blk["ln1"])
    q, k, v = (np_linear(y, blk["msa"][n]).reshape(b, -1, heads, feats // heads).transpose(0, 2, 1, 3)
               for n in "qkv")
    s = np.einsum("bhif,bhjf->bhij", q, k) / feats ** 0.5
    s = np.exp(s - s.max(-1, keepdims=True))
    s = s / s.sum(-1, keepdims=True)
    attn = np.einsum("bhij,bhjf->bihf", s, v).reshape(b, -1, feats)
    out = np_linear(attn, blk["msa"]["o"]) + out
    y = np_gelu(np_linear(np_layernorm(out, blk["ln2"]), blk["mlp1"]))
    out = np_gelu(np_linear(y, blk["mlp2"])) + out
  return np_linear(np_layernorm(out.mean(1), p["head_ln"]), p["head"])


def test_vit_forward_matches_the_authors_code_transcribed():
  model = zoo.ViTSmall(num_classes=3, patch_size=2, width=16, depth=2, heads=4, mlp_dim=24)
  x = np.asarray(np_normal((2, 8, 8, 3), seed=2))
  params = random_params(model, (8, 8, 3))
  ours = jax.jit(lambda p, x: model.apply({"params": p}, x))(params, jnp.asarray(x))
  ref = np_vit(params, x.transpose(0, 3, 1, 2).astype(np.float64), patches_per_side=4, heads=4)
  np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
  # The standard 1/sqrt(head_dim) scaling is an option and differs.
  std = zoo.ViTSmall(num_classes=3, patch_size=2, width=16, depth=2, heads=4, mlp_dim=24,
                     attn_scale="head_dim")
  assert not np.allclose(jax.jit(lambda p, x: std.apply({"params": p}, x))(params, x), ours)
