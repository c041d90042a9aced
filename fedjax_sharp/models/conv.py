"""A convolution layer that can run as patch extraction plus one matrix product (config field
`model.conv_impl`).

Why: the engine vmaps clients that each hold their own weights. Under `vmap`, XLA's convolution
with a batched kernel becomes a *grouped* convolution (`feature_group_count` = clients x
groups), which neither the CPU backend nor the GPU's tensor cores run well: vmapping 10 clients
was no faster than running them one after another (docs/performance.md, "What 'auto' chooses
on each backend"). Written as patches times a reshaped kernel, the same layer becomes one
`dot_general` whose batch dimension is the client axis under vmap: a batched GEMM.

`Conv` is `flax.linen.Conv` with one more field, `impl`:
  'xla'    (default): exactly `nn.Conv.__call__` (lax.conv_general_dilated).
  'matmul': pad, gather the kh x kw shifted strided slices of the input (pure data movement;
            their gradient is pads and adds), stack them in the kernel's HWIO order and contract
            (kh*kw*cin) with the kernel reshaped to [kh*kw*cin, cout] in one `jnp.einsum`.
Parameters, names ('kernel' [kh, kw, cin/groups, cout], 'bias' [cout]), shapes, initialisers
and the dtype promotion are nn.Conv's, so the parameters of one `impl` load in the other and
both initialise to the same values from the same key.

Patch extraction: `lax.conv_general_dilated_patches` was rejected because it is itself a
convolution (an identity-kernel conv: under vmap it lowers to a grouped convolution with
feature_group_count = channels, and so does its gradient), so a vmapped 'matmul' model would
still hold convolution ops, and it was slower than the slices and than XLA's grouped convolution
on the CPU (docs/performance.md). The strided slices lower to slices, concatenates, pads and adds only: the vmapped
'matmul' forward and gradient have no convolution op, and every dot_general has the client axis
as a batch dimension (tests/test_conv_impl.py). Both extractors give the same patches
(`extract_patches(..., method=...)`); `python benchmarks/conv_impl.py` times them.

Grouped convolutions (`feature_group_count` = G > 1, e.g. MobileNetV2's depthwise layers) are
supported too: the contraction then carries the G groups as a batch dimension of the einsum.
`input_dilation` != 1 (transposed convolutions) and unshared weights are 'xla' only.
Cost: the patch tensor is kh*kw times the (padded) input, and on XLA's CPU backend building it
dominates: one client's step is about as fast as 'xla', and vmapped clients are faster than
'xla' but still slower than the same steps one client after another (docs/performance.md).
The gain this option is for is on GPUs (batched GEMMs on the tensor cores).
"""
from __future__ import annotations

import itertools
from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

CONV_IMPLS = ("xla", "matmul")
PATCH_METHODS = ("slices", "lax")


def _tuple(x, n: int) -> tuple[int, ...]:
  if x is None:
    x = 1
  return (int(x),) * n if isinstance(x, int) else tuple(int(v) for v in x)


def explicit_pads(padding, in_spatial: Sequence[int], kernel_size: Sequence[int],
                  strides: Sequence[int], kernel_dilation: Sequence[int]) -> list[tuple[int, int]]:
  """(low, high) zero padding per spatial dimension for nn.Conv's padding values 'SAME',
  'VALID', an int, or a sequence of ints / (low, high) pairs (lax's rules for the strings)."""
  n = len(kernel_size)
  padding = nn.linear.canonicalize_padding(padding, n)
  if isinstance(padding, str):
    if padding not in ("SAME", "VALID", "SAME_LOWER"):
      raise ValueError(f"padding={padding!r}: handled by Conv before explicit_pads")
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    return [tuple(p) for p in lax.padtype_to_pads(tuple(in_spatial), dilated, tuple(strides),
                                                  padding)]
  return [(int(lo), int(hi)) for lo, hi in padding]


def extract_patches(x, kernel_size: Sequence[int], strides: Sequence[int],
                    kernel_dilation: Sequence[int] | None = None,
                    method: str = "slices"):
  """Patches of an already padded input x [N, *spatial, C]: [N, *out_spatial, prod(k) * C],
  feature index = (kernel offsets in row-major order, then channel): the kernel's HWIO order,
  so `patches @ kernel.reshape(-1, cout)` is the VALID convolution.

  method='slices': prod(k) strided slices concatenated (data movement only; what Conv uses).
  method='lax': `lax.conv_general_dilated_patches` (a convolution with an identity kernel whose
  output is channel-major, reordered here); kept for comparison (benchmarks/conv_impl.py).
  """
  n = len(kernel_size)
  kernel_dilation = _tuple(kernel_dilation, n)
  spatial = x.shape[1:-1]
  out = [(s - (k - 1) * d - 1) // st + 1
         for s, k, d, st in zip(spatial, kernel_size, kernel_dilation, strides)]
  if min(out) < 1:
    raise ValueError(f"kernel {tuple(kernel_size)} (dilation {kernel_dilation}) does not fit the "
                     f"padded input {tuple(spatial)}")
  if method == "slices":
    if all(k == 1 for k in kernel_size):
      index = (slice(None),) + tuple(slice(0, (o - 1) * st + 1, st)
                                     for o, st in zip(out, strides))
      return x[index]
    pieces = []
    for offsets in itertools.product(*(range(k) for k in kernel_size)):
      index = (slice(None),) + tuple(
          slice(o * d, o * d + (m - 1) * st + 1, st)
          for o, d, m, st in zip(offsets, kernel_dilation, out, strides))
      pieces.append(x[index])
    return jnp.concatenate(pieces, axis=-1)
  if method == "lax":
    if n != 2:
      raise ValueError("method='lax' handles 2-D convolutions only")
    c = x.shape[-1]
    p = lax.conv_general_dilated_patches(x, tuple(kernel_size), tuple(strides), "VALID",
                                         rhs_dilation=kernel_dilation,
                                         dimension_numbers=("NHWC", "OIHW", "NHWC"))
    # Output features are (channel, kh, kw): reorder to (kh, kw, channel).
    k = kernel_size[0] * kernel_size[1]
    p = p.reshape(*p.shape[:-1], c, k)
    return jnp.swapaxes(p, -1, -2).reshape(*p.shape[:-2], k * c)
  raise ValueError(f"method={method!r} is not one of {list(PATCH_METHODS)}")


class Conv(nn.Conv):
  """`flax.linen.Conv` with `impl` ('xla' | 'matmul'); see the module docstring. Same fields,
  parameters and initialisers as nn.Conv, so it is a drop-in replacement."""
  impl: str = "xla"

  @nn.compact
  def __call__(self, inputs):
    if self.impl == "xla":
      return super().__call__(inputs)
    if self.impl != "matmul":
      raise ValueError(f"conv impl={self.impl!r} is not one of {list(CONV_IMPLS)}")
    kernel_size = _tuple(self.kernel_size, 1 if isinstance(self.kernel_size, int)
                         else len(self.kernel_size))
    n = len(kernel_size)
    if _tuple(self.input_dilation, n) != (1,) * n:
      raise ValueError("Conv impl='matmul' needs input_dilation=1 (use impl='xla')")
    strides = _tuple(self.strides, n)
    kernel_dilation = _tuple(self.kernel_dilation, n)

    num_batch_dimensions = inputs.ndim - (n + 1)
    if num_batch_dimensions != 1:
      input_batch_shape = inputs.shape[:num_batch_dimensions]
      inputs = jnp.reshape(inputs, (-1,) + inputs.shape[num_batch_dimensions:])

    padding = nn.linear.canonicalize_padding(self.padding, n)
    if padding in ("CIRCULAR", "REFLECT"):             # as nn.Conv: pad, then VALID
      dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
      pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in dilated] + [(0, 0)]
      inputs = jnp.pad(inputs, pads, mode={"CIRCULAR": "wrap", "REFLECT": "reflect"}[padding])
      padding = "VALID"
    elif padding == "CAUSAL":
      if n != 1:
        raise ValueError("Causal padding is only implemented for 1D convolutions.")
      inputs = jnp.pad(inputs, [(0, 0), (kernel_dilation[0] * (kernel_size[0] - 1), 0), (0, 0)])
      padding = "VALID"

    in_features = inputs.shape[-1]
    groups = self.feature_group_count
    if in_features % groups or self.features % groups:
      raise ValueError(f"feature_group_count={groups} must divide the input ({in_features}) and "
                       f"output ({self.features}) features")
    kernel_shape = kernel_size + (in_features // groups, self.features)
    if self.mask is not None and self.mask.shape != kernel_shape:
      raise ValueError("Mask needs to have the same shape as weights. "
                       f"Shapes are: {self.mask.shape}, {kernel_shape}")
    kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
    if self.mask is not None:
      kernel *= self.mask
    bias = (self.param("bias", self.bias_init, (self.features,), self.param_dtype)
            if self.use_bias else None)
    inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)

    pads = explicit_pads(padding, inputs.shape[1:-1], kernel_size, strides, kernel_dilation)
    if any(lo or hi for lo, hi in pads):
      # lax.pad also takes negative (cropping) pads, as lax.conv_general_dilated does.
      inputs = lax.pad(inputs, jnp.zeros((), inputs.dtype),
                       [(0, 0, 0)] + [(lo, hi, 0) for lo, hi in pads] + [(0, 0, 0)])
    patches = extract_patches(inputs, kernel_size, strides, kernel_dilation)
    k = 1
    for v in kernel_size:
      k *= v
    if groups == 1:
      y = jnp.einsum("...k,ko->...o", patches, kernel.reshape(k * in_features, self.features),
                     precision=self.precision)
    else:
      cin_g, cout_g = in_features // groups, self.features // groups
      p = patches.reshape(*patches.shape[:-1], k, groups, cin_g)
      w = kernel.reshape(k, cin_g, groups, cout_g)
      y = jnp.einsum("...kgi,kigo->...go", p, w, precision=self.precision)
      y = y.reshape(*y.shape[:-2], self.features)
    if bias is not None:
      y = y + bias.reshape((1,) * (y.ndim - 1) + bias.shape)
    if num_batch_dimensions != 1:
      y = jnp.reshape(y, input_batch_shape + y.shape[1:])
    return y
