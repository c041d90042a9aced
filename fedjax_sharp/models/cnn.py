"""Small vision models from the FedGMT / FedGloSS / FedAvg papers.

All models are stateless (no batch statistics, no dropout), so `apply(params, x)` is a pure
function of the parameters and the batch; this is what lets the engine vmap clients freely.
The convolutional models take `conv_impl` ('xla' | 'matmul', config field `model.conv_impl`):
'matmul' computes each convolution as patches times the kernel (models/conv.py), so clients
vmapped with their own weights run batched matrix products instead of grouped convolutions;
the parameters are the same either way.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from fedjax_sharp.models.conv import Conv


def max_pool_2x2(x: jnp.ndarray) -> jnp.ndarray:
  """2x2 max pool with stride 2 on NHWC input, written as reshape + max.

  Same result as `nn.max_pool(x, (2, 2), (2, 2))` for even H and W (odd sizes are floored, as
  with VALID pooling). Its gradient lowers to a compare/select instead of XLA's
  select-and-scatter, which the CPU backend runs slowly (docs/performance.md).
  """
  n, h, w, c = x.shape
  x = x[:, : h - h % 2, : w - w % 2, :]
  return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


class McMahanCNN(nn.Module):
  """CNN of McMahan et al. (2017), used by FedGMT (CIFAR-10) and for (Fashion-)MNIST.

  conv 32 5x5 pad 2, relu, maxpool 2, conv 64 5x5 pad 2, relu, maxpool 2, fc 512, relu, fc C.
  Works on 28x28x1 (fc input 7*7*64) and 32x32x3 (fc input 8*8*64) inputs.
  """
  num_classes: int = 10
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    conv = lambda f, name: Conv(f, (5, 5), padding=2, impl=self.conv_impl, name=name)
    x = max_pool_2x2(nn.relu(conv(32, "conv1")(x)))
    x = max_pool_2x2(nn.relu(conv(64, "conv2")(x)))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(512, name="fc1")(x))
    return nn.Dense(self.num_classes, name="fc2")(x)


class LeNet5(nn.Module):
  """LeNet-5 style CNN of FedGloSS / FedSAM (Hsu et al. 2020; Caldarola et al. 2022).

  conv 64 5x5 (VALID), relu, maxpool 2, conv 64 5x5 (VALID), relu, maxpool 2, fc 384, relu,
  fc 192, relu, fc C. On 32x32x3 the flattened features are 5*5*64 = 1600, as in the authors'
  PyTorch model.
  """
  num_classes: int = 10
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    conv = lambda name: Conv(64, (5, 5), padding="VALID", impl=self.conv_impl, name=name)
    x = max_pool_2x2(nn.relu(conv("conv1")(x)))
    x = max_pool_2x2(nn.relu(conv("conv2")(x)))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(384, name="fc1")(x))
    x = nn.relu(nn.Dense(192, name="fc2")(x))
    return nn.Dense(self.num_classes, name="fc3")(x)


class MLP(nn.Module):
  """Fully connected ReLU network on flattened inputs (McMahan et al.'s 2NN with (200, 200))."""
  num_classes: int = 10
  hidden: Sequence[int] = (200, 200)

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    for i, width in enumerate(self.hidden):
      x = nn.relu(nn.Dense(width, name=f"fc{i + 1}")(x))
    return nn.Dense(self.num_classes, name="out")(x)


class Linear(nn.Module):
  """Softmax regression on flattened inputs: the tiny model of the golden-value tests."""
  num_classes: int = 10
  use_bias: bool = True

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    return nn.Dense(self.num_classes, use_bias=self.use_bias, name="out")(x)


class VGG11(nn.Module):
  """VGG-11 for 32x32 inputs without batch normalisation (stateless): conv3x3 SAME layers
  64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M (M = 2x2 max pool), then one linear
  layer 512 -> C (the CIFAR variant of the federated minimax papers' baselines).
  `groups > 0` puts GroupNorm(groups) (torch eps 1e-5) between every conv and its ReLU:
  `zoo.VGG11GN`. `conv_impl`: 'xla' | 'matmul' (models/conv.py). Parameters on 32x32x3,
  10 classes: 9,225,610."""
  num_classes: int = 10
  widths: Sequence = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
  groups: int = 0
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    i = 0
    for w in self.widths:
      if w == "M":
        x = max_pool_2x2(x)
      else:
        i += 1
        x = Conv(int(w), (3, 3), padding="SAME", impl=self.conv_impl, name=f"conv{i}")(x)
        if self.groups:
          x = nn.GroupNorm(num_groups=self.groups, epsilon=1e-5, name=f"gn{i}")(x)
        x = nn.relu(x)
    return nn.Dense(self.num_classes, name="out")(x.reshape(x.shape[0], -1))
