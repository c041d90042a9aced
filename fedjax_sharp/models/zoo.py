"""Model zoo of the seed papers: GroupNorm ResNets, the FedGMT ViT, FastText, MobileNetV2-GN, VGG-11-GN.

Every module is stateless (GroupNorm / LayerNorm only, no BatchNorm, no dropout), so
`apply({"params": p}, x)` is a pure function of the parameters and the batch and the engine can
vmap clients freely. Image models take NHWC float images; FastText takes int token ids.

Where the authors' PyTorch code sets an initialiser explicitly it is reproduced (ResNet convs:
Kaiming normal fan-out; MobileNetV2: the torchvision initialisers; ViT positional embedding and
FastText embedding: standard normal); other layers keep Flax's defaults (LeCun normal, zero bias).
Norm epsilons are PyTorch's (1e-5).
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sharp.hyperparameters import Field
from fedjax_sharp.models.cnn import VGG11, max_pool_2x2
from fedjax_sharp.models.conv import Conv

# The stems of the GroupNorm ResNets (`ResNetGN.stem`).
STEMS = ("cifar", "imagenet")

TORCH_EPS = 1e-5
# torch.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out).
kaiming_fan_out = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


def group_norm(groups: int, name: str) -> nn.GroupNorm:
  """torch.nn.GroupNorm(groups, C): per-channel affine scale and bias, eps 1e-5."""
  return nn.GroupNorm(num_groups=groups, epsilon=TORCH_EPS, name=name)


# ---------------------------------------------------------------------------------------------
# ResNets with GroupNorm
# ---------------------------------------------------------------------------------------------

class BasicBlockGN(nn.Module):
  """torchvision BasicBlock with GroupNorm: conv3x3(stride) GN relu conv3x3 GN (+ shortcut) relu.

  Convs have no bias. The shortcut is a 1x1 conv (stride) + GN when the stride or width changes
  (torchvision's option B), otherwise the identity.
  """
  features: int
  stride: int = 1
  groups: int = 2
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    conv = lambda f, k, s, p, name: Conv(f, (k, k), strides=(s, s), padding=p, use_bias=False,
                                         kernel_init=kaiming_fan_out, impl=self.conv_impl,
                                         name=name)
    out = conv(self.features, 3, self.stride, 1, "conv1")(x)
    out = nn.relu(group_norm(self.groups, "gn1")(out))
    out = conv(self.features, 3, 1, 1, "conv2")(out)
    out = group_norm(self.groups, "gn2")(out)
    if self.stride != 1 or x.shape[-1] != self.features:
      x = conv(self.features, 1, self.stride, 0, "down_conv")(x)
      x = group_norm(self.groups, "down_gn")(x)
    return nn.relu(out + x)


class ResNetGN(nn.Module):
  """ResNet with BasicBlocks and GroupNorm (no batch statistics).

  stem="imagenet": conv 7x7 stride 2 pad 3 (64, no bias), GN, relu, max pool 3x3 stride 2 pad 1,
    as torchvision and the FedGMT authors' code (harrylee999/FL-SAM,
    system/flcore/trainmodel/resnet.py), which runs it unchanged on 32x32 CIFAR images.
  stem="cifar": conv 3x3 stride 1 pad 1 (64, no bias), GN, relu, no max pool (the usual CIFAR
    ResNet of kuangliu/pytorch-cifar).
  Then `stage_sizes[i]` blocks of width `widths[i]` (stride 1 for the first stage, 2 after),
  global average pooling and one linear layer widths[-1] -> C. Works on any H, W >= 1 and any
  number of input channels (e.g. 28x28x1 Fashion-MNIST).
  `groups`: GroupNorm group count of every norm layer (2 in FL-SAM's and FedGloSS's code).
  `conv_impl`: 'xla' | 'matmul' for every conv (models/conv.py).
  """
  num_classes: int = 10
  stage_sizes: Sequence[int] = (2, 2, 2, 2)
  widths: Sequence[int] = (64, 128, 256, 512)
  groups: int = 2
  stem: str = "cifar"
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    if self.stem == "imagenet":
      x = Conv(64, (7, 7), strides=(2, 2), padding=3, use_bias=False,
               kernel_init=kaiming_fan_out, impl=self.conv_impl, name="conv1")(x)
      x = nn.relu(group_norm(self.groups, "gn1")(x))
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    elif self.stem == "cifar":
      x = Conv(64, (3, 3), strides=(1, 1), padding=1, use_bias=False,
               kernel_init=kaiming_fan_out, impl=self.conv_impl, name="conv1")(x)
      x = nn.relu(group_norm(self.groups, "gn1")(x))
    else:
      raise ValueError(f"stem={self.stem!r} is not one of ['cifar', 'imagenet']")
    for i, (n, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for j in range(n):
        stride = 2 if (i > 0 and j == 0) else 1
        x = BasicBlockGN(width, stride, self.groups, conv_impl=self.conv_impl,
                         name=f"stage{i + 1}_block{j + 1}")(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, name="fc")(x)


class ResNet8(ResNetGN):
  """ResNet-8 of FedGMT (Li et al. ICML 2025), CIFAR-100 / CINIC-10 runs.

  Follows harrylee999/FL-SAM system/flcore/trainmodel/resnet.py `resnet8()`: BasicBlocks [1, 1, 1]
  with widths 64, 128, 256, GroupNorm(2, C) everywhere, bias-free convs, torchvision's ImageNet
  stem (7x7 stride-2 conv + 3x3 stride-2 max pool) even on 32x32 inputs, average pool, fc 256 -> C.
  Parameters on 32x32x3: 1,258,404 with 100 classes (the authors' default), 1,235,274 with 10.
  """
  stage_sizes: Sequence[int] = (1, 1, 1)
  widths: Sequence[int] = (64, 128, 256)
  stem: str = "imagenet"
  # The fields of the config block `model.resnet8` (defaults: the fields above).
  config_fields = {"groups": Field(">= 1", "GroupNorm groups (FedGMT code)"),
                   "stem": Field(doc="FedGMT code: the ImageNet stem", choices=STEMS)}


class ResNet18(ResNetGN):
  """ResNet-18 with GroupNorm (FedGloSS "ResNet-18-GN"; FedGMT's code also defines one).

  Standard CIFAR ResNet-18 (kuangliu/pytorch-cifar layout: 3x3 stride-1 stem, no max pool,
  BasicBlocks [2, 2, 2, 2], widths 64-128-256-512, 1x1-conv shortcuts, bias-free convs) with
  every BatchNorm replaced by GroupNorm(`groups`, C) (default 2, as the GN ResNets in FL-SAM and
  in FedGloSS's codebase/eigenthings/models.py). `stem="imagenet"` gives the FL-SAM `resnet18()`
  (7x7 stride-2 stem + max pool) instead.
  Parameters on 32x32x3: 11,173,962 with 10 classes, 11,220,132 with 100 (+7,680 with the
  ImageNet stem).
  """
  stage_sizes: Sequence[int] = (2, 2, 2, 2)
  widths: Sequence[int] = (64, 128, 256, 512)
  stem: str = "cifar"
  config_fields = {"groups": Field(">= 1", "GroupNorm groups"),
                   "stem": Field(doc="3x3 stem without max pool, or ImageNet's", choices=STEMS)}


# ---------------------------------------------------------------------------------------------
# ViT (FedGMT's, from omihub777/ViT-CIFAR)
# ---------------------------------------------------------------------------------------------

class SelfAttention(nn.Module):
  """Multi-head self-attention of omihub777/ViT-CIFAR: separate q, k, v, o linears (with bias).

  attn_scale="width" divides the logits by sqrt(width) (e.g. sqrt(384)), as the authors' code
  (`self.sqrt_d = self.feats**0.5`); "head_dim" uses the usual sqrt(width / heads).
  """
  width: int
  heads: int
  attn_scale: str = "width"

  @nn.compact
  def __call__(self, x):
    b, n, _ = x.shape
    hd = self.width // self.heads
    split = lambda t: t.reshape(b, n, self.heads, hd)
    q = split(nn.Dense(self.width, name="q")(x))
    k = split(nn.Dense(self.width, name="k")(x))
    v = split(nn.Dense(self.width, name="v")(x))
    if self.attn_scale == "width":
      scale = self.width ** 0.5
    elif self.attn_scale == "head_dim":
      scale = hd ** 0.5
    else:
      raise ValueError(f"attn_scale={self.attn_scale!r} is not one of ['width', 'head_dim']")
    score = jax.nn.softmax(jnp.einsum("bihf,bjhf->bhij", q, k) / scale, axis=-1)
    attn = jnp.einsum("bhij,bjhf->bihf", score, v).reshape(b, n, self.width)
    return nn.Dense(self.width, name="o")(attn)


class TransformerBlock(nn.Module):
  """Pre-LN encoder block of omihub777/ViT-CIFAR: x + MSA(LN(x)); x + MLP(LN(x)) where
  MLP = Linear(width, mlp_dim), GELU, Linear(mlp_dim, width), GELU (GELU after both linears, as
  in the authors' code; exact erf GELU, PyTorch's default)."""
  width: int
  mlp_dim: int
  heads: int
  attn_scale: str = "width"

  @nn.compact
  def __call__(self, x):
    x = x + SelfAttention(self.width, self.heads, self.attn_scale, name="msa")(
        nn.LayerNorm(epsilon=TORCH_EPS, name="ln1")(x))
    h = nn.LayerNorm(epsilon=TORCH_EPS, name="ln2")(x)
    h = nn.gelu(nn.Dense(self.mlp_dim, name="mlp1")(h), approximate=False)
    h = nn.gelu(nn.Dense(self.width, name="mlp2")(h), approximate=False)
    return x + h


class ViTSmall(nn.Module):
  """Small ViT of FedGMT (CIFAR-10 / CINIC-10), harrylee999/FL-SAM system/flcore/trainmodel/vit.py
  (adapted from omihub777/ViT-CIFAR) with its defaults: non-overlapping 4x4 patches (the code's
  `patch=8` patches per side of a 32x32 image), flattened in (row, col, channel) order, linear
  embedding 48 -> 384, learned positional embedding (one per patch, N(0, 1) init), no class
  token, 2 pre-LN blocks with 8 heads and MLP hidden size 384, mean pooling over tokens, then
  LayerNorm and a linear head 384 -> C.
  Parameters on 32x32x3: 1,825,162 with 10 classes (1,859,812 with 100). The positional
  embedding has one row per patch of the init input, so other image sizes (e.g. 28x28x1, 49
  patches) work when initialised at that size.
  """
  num_classes: int = 10
  patch_size: int = 4
  width: int = 384
  depth: int = 2
  heads: int = 8
  mlp_dim: int = 384
  attn_scale: str = "width"
  config_fields = {"attn_scale": Field(doc="FedGMT code: sqrt(384)",
                                       choices=("head_dim", "width"))}

  @nn.compact
  def __call__(self, x):
    b, h, w, c = x.shape
    p = self.patch_size
    gh, gw = h // p, w // p
    x = x[:, : gh * p, : gw * p, :].reshape(b, gh, p, gw, p, c)
    x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, p * p * c)
    x = nn.Dense(self.width, name="emb")(x)
    pos = self.param("pos_emb", nn.initializers.normal(1.0), (1, gh * gw, self.width))
    x = x + pos
    for i in range(self.depth):
      x = TransformerBlock(self.width, self.mlp_dim, self.heads, self.attn_scale,
                           name=f"block{i + 1}")(x)
    x = jnp.mean(x, axis=1)
    x = nn.LayerNorm(epsilon=TORCH_EPS, name="head_ln")(x)
    return nn.Dense(self.num_classes, name="head")(x)


# ---------------------------------------------------------------------------------------------
# FastText (FedGMT, AG News)
# ---------------------------------------------------------------------------------------------

AG_NEWS_VOCAB_SIZE = 98_635


def _embedding_init_zero_padding_row(key, shape, dtype=jnp.float32):
  """N(0, 1) like torch.nn.Embedding, with the padding row 0 zeroed (padding_idx=0)."""
  return jax.random.normal(key, shape, dtype).at[0].set(0.0)


class FastText(nn.Module):
  """FastText of FedGMT for AG News, harrylee999/FL-SAM system/flcore/trainmodel/nlp.py:
  embedding V x 32 (padding_idx 0), mean over tokens, fc 32 -> 32 (no activation), fc 32 -> C.

  Input: int token ids (batch, L), 0 = padding (L = 200 in the papers); float ids are cast.
  The padding row never contributes: its embedding is masked out, so its value and its gradient
  do not matter (torch's padding_idx keeps it at zero instead).
  pool="nonpad" (default): mean over the non-padding tokens, so appending padding changes
    nothing (an all-padding sequence gives a zero feature).
  pool="all": sum over non-padding tokens / L, which is what the authors' `embedded.mean(1)`
    computes with their zero padding row (the mean over all 200 padded positions).
  V = `vocab_size`: 98,635 for the authors' AG News vocabulary (their default; it is what the
  reported count implies: 3,157,508 = 32 V + (32*32 + 32) + (32*4 + 4)).
  Parameters: 3,157,508 with V = 98,635 and 4 classes.
  """
  num_classes: int = 4
  vocab_size: int = AG_NEWS_VOCAB_SIZE
  embed_dim: int = 32
  hidden: int = 32
  pool: str = "nonpad"
  config_fields = {"pool": Field(doc="mean over the real tokens or all of them (vocab from the "
                                 "dataset)", choices=("all", "nonpad"))}

  @nn.compact
  def __call__(self, tokens):
    tokens = tokens.astype(jnp.int32)
    if tokens.ndim > 2:                              # e.g. (B, L, 1) from a generic data layer
      tokens = tokens.reshape(tokens.shape[0], -1)
    emb = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=_embedding_init_zero_padding_row,
                   name="embedding")(tokens)
    mask = (tokens != 0).astype(emb.dtype)[..., None]
    total = jnp.sum(emb * mask, axis=1)
    if self.pool == "nonpad":
      feat = total / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
    elif self.pool == "all":
      feat = total / tokens.shape[1]
    else:
      raise ValueError(f"pool={self.pool!r} is not one of ['nonpad', 'all']")
    h = nn.Dense(self.hidden, name="fc1")(feat)
    return nn.Dense(self.num_classes, name="fc")(h)


# ---------------------------------------------------------------------------------------------
# MobileNetV2 with GroupNorm (FedGloSS / FedSAM, Landmarks-User-160k)
# ---------------------------------------------------------------------------------------------

def make_divisible(v: float, divisor: int = 8) -> int:
  """torchvision's `_make_divisible`: round to a multiple of `divisor`, never down by > 10%."""
  new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
  if new_v < 0.9 * v:
    new_v += divisor
  return new_v


# (expansion t, output channels c, repeats n, first stride s): MobileNetV2 paper Table 2.
MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class ConvGNReLU6(nn.Module):
  """Conv (no bias) + GroupNorm + optional ReLU6 (torchvision's Conv2dNormActivation)."""
  features: int
  kernel: int = 3
  stride: int = 1
  depthwise: bool = False
  groups: int = 2
  act: bool = True
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    pad = (self.kernel - 1) // 2
    x = Conv(self.features, (self.kernel, self.kernel), strides=(self.stride, self.stride),
             padding=pad, use_bias=False,
             feature_group_count=x.shape[-1] if self.depthwise else 1,
             kernel_init=kaiming_fan_out, impl=self.conv_impl, name="conv")(x)
    x = group_norm(self.groups, "gn")(x)
    return nn.relu6(x) if self.act else x


class InvertedResidualGN(nn.Module):
  """MobileNetV2 inverted residual: [1x1 expand GN ReLU6] 3x3 depthwise GN ReLU6, 1x1 project GN
  (linear); residual when stride 1 and in == out channels."""
  features: int
  stride: int
  expand_ratio: int
  groups: int = 2
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    inp = x.shape[-1]
    hidden = int(round(inp * self.expand_ratio))
    h = x
    impl = self.conv_impl
    if self.expand_ratio != 1:
      h = ConvGNReLU6(hidden, 1, groups=self.groups, conv_impl=impl, name="expand")(h)
    h = ConvGNReLU6(hidden, 3, self.stride, depthwise=True, groups=self.groups, conv_impl=impl,
                    name="dw")(h)
    h = ConvGNReLU6(self.features, 1, groups=self.groups, act=False, conv_impl=impl,
                    name="project")(h)
    if self.stride == 1 and inp == self.features:
      h = x + h
    return h


class MobileNetV2GN(nn.Module):
  """MobileNetV2 (Sandler et al. 2018; torchvision layout) with GroupNorm instead of BatchNorm,
  the Landmarks-User-160k model of FedGloSS / FedSAM (Caldarola et al.; after Hsu et al. 2020).
  Neither the FedGloSS nor the FedSAM public code contains it, so this follows torchvision's
  `mobilenet_v2`: stem conv 3x3 stride 2 -> make_divisible(32 w), the inverted-residual settings
  (t, c, n, s) of MOBILENET_V2_SETTING with channels make_divisible(c w), a 1x1 conv to
  make_divisible(1280 max(1, w)), each conv bias-free and followed by GroupNorm(`groups`, C)
  (+ ReLU6 except after projections), global average pooling and a linear layer -> C.
  torchvision's classifier Dropout(0.2) is omitted (stateless models).
  `width_mult` w (default 1.0); `groups` default 2 (channel counts are multiples of 8, so any
  divisor of 8 is valid; the papers do not state the group count).
  `conv_impl`: 'xla' | 'matmul' for every conv; 'matmul' computes the depthwise convs as an
  einsum with the channels as a batch dimension (models/conv.py).
  Parameters with w = 1: 3,504,872 with 1000 classes (torchvision's MobileNetV2 count, GN has the
  same 2 affine parameters per channel as BN), 4,821,740 with Landmarks' 2028 classes.
  ImageNet-pretrained weights (used by the papers) are not bundled.
  """
  num_classes: int = 10
  width_mult: float = 1.0
  groups: int = 2
  conv_impl: str = "xla"
  config_fields = {"width_mult": Field("> 0", "channel width multiplier"),
                   "groups": Field(">= 1", "GroupNorm groups")}

  @nn.compact
  def __call__(self, x):
    w = self.width_mult
    impl = self.conv_impl
    x = ConvGNReLU6(make_divisible(32 * w), 3, 2, groups=self.groups, conv_impl=impl,
                    name="stem")(x)
    k = 0
    for t, c, n, s in MOBILENET_V2_SETTING:
      out = make_divisible(c * w)
      for i in range(n):
        k += 1
        x = InvertedResidualGN(out, s if i == 0 else 1, t, self.groups, conv_impl=impl,
                               name=f"block{k}")(x)
    x = ConvGNReLU6(make_divisible(1280 * max(1.0, w)), 1, groups=self.groups, conv_impl=impl,
                    name="last")(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, kernel_init=nn.initializers.normal(0.01),
                    name="classifier")(x)


# ---------------------------------------------------------------------------------------------
# VGG-11 with GroupNorm
# ---------------------------------------------------------------------------------------------

class VGG11GN(VGG11):
  """VGG-11 for 32x32 inputs with GroupNorm after every conv (torchvision `vgg11_bn` layout with
  GN for BN; convs keep their bias as there): conv3x3 SAME 64, M, 128, M, 256, 256, M, 512, 512,
  M, 512, 512, M (M = 2x2 max pool), each conv -> GN(`groups`, C) -> ReLU, then linear 512 -> C
  (same classifier as the unnormalised `vgg11`; both are `cnn.VGG11`).
  Parameters on 32x32x3: 9,231,114 with 10 classes (`vgg11`'s 9,225,610 + 2 x 2752 GN affines).
  """
  groups: int = 2
  config_fields = {"groups": Field(">= 1", "GroupNorm groups")}
