"""Model registry: config name -> Flax module constructor."""
from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.models import cnn, zoo

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mcmahan_cnn": cnn.McMahanCNN,
    "lenet5": cnn.LeNet5,
    "mlp": cnn.MLP,
    "linear": cnn.Linear,
    "vgg11": cnn.VGG11,
    # Model zoo of the seed papers (fedjax_sharp/models/zoo.py).
    "resnet8": zoo.ResNet8,
    "resnet18": zoo.ResNet18,
    "vit_small": zoo.ViTSmall,
    "fasttext": zoo.FastText,
    "mobilenet_v2_gn": zoo.MobileNetV2GN,
    "vgg11_gn": zoo.VGG11GN,
}


def get_model(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
  """Returns the Flax module registered under `name` (config field `model.name`); `kwargs` are
  the module's fields (config block `model.<name>`, e.g. `groups`, `stem`, `vocab_size`)."""
  if name not in MODELS:
    raise ValueError(f"model.name={name!r} is not one of {sorted(MODELS)}")
  fields = set(getattr(MODELS[name], "__dataclass_fields__", {})) - {"parent", "name"}
  unknown = sorted(set(kwargs) - fields)
  if unknown:
    raise ValueError(f"model.{name}: unknown field(s) {unknown}; {name} has {sorted(fields)}")
  return MODELS[name](num_classes=num_classes, **kwargs)


def init_params(model: nn.Module, key: jax.Array, input_shape: tuple[int, ...],
                dtype=jnp.float32):
  """Initialises parameters for inputs of shape `input_shape` (no batch axis), jitted (eager
  init of a ResNet-18 dispatches hundreds of small ops: ~14 s on a busy 2-core CPU)."""
  init = jax.jit(lambda k: model.init(k, jnp.zeros((1, *input_shape), dtype))["params"])
  return init(key)


def count_params(params) -> int:
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(params)))


COMPUTE_DTYPES = ("float32", "bfloat16")


def with_compute_dtype(apply_fn: Callable, compute_dtype: str = "float32") -> Callable:
  """`apply_fn(params, x)` computed in `compute_dtype` (config field `model.compute_dtype`).

  'bfloat16' casts the float32 weights and floating inputs to bfloat16 on the way in and the
  logits back to float32 on the way out: gradients reach the float32 weights through the
  casts, so updates, aggregation and every server state stay float32 (mixed precision; bfloat16
  has float32's exponent range, so no loss scaling). Integer inputs (token ids) pass unchanged.
  """
  if compute_dtype not in COMPUTE_DTYPES:
    raise ValueError(f"model.compute_dtype={compute_dtype!r} is not one of "
                     f"{list(COMPUTE_DTYPES)}")
  if compute_dtype == "float32":
    return apply_fn
  low = jnp.dtype(compute_dtype)

  def cast(x):
    return x.astype(low) if jnp.issubdtype(x.dtype, jnp.floating) else x

  def apply_low(params, x):
    return apply_fn(jax.tree.map(cast, params), cast(x)).astype(jnp.float32)
  return apply_low


def in_pieces(apply_fn: Callable, piece: int = 0) -> Callable:
  """`apply_fn(params, x)` computed on consecutive pieces of at most `piece` examples whose
  logits are concatenated (config field `engine.micro_batch`; 0 = the whole batch, unchanged).

  The same function of the parameters and the batch, so losses, gradients and every algorithm
  are unchanged up to float summation order; what changes is the size of each convolution.
  XLA's CPU backend computes a convolution's gradients at a higher cost per example for larger
  batches: the LeNet-5 gradient on 64 examples costs ~100 ms in pieces of 16 against ~160 ms
  whole (`python benchmarks/round_time.py --model=lenet5 ...`, BUILD_NOTES.md). The pieces
  are static slices, so the program holds one copy of the model per piece (compile time grows
  with the number of pieces); a last piece may be smaller.
  """
  if piece < 0:
    raise ValueError(f"engine.micro_batch={piece} must be >= 0 (0 = the whole batch)")
  if piece == 0:
    return apply_fn

  def apply_pieces(params, x):
    n = x.shape[0]
    if n <= piece:
      return apply_fn(params, x)
    return jnp.concatenate([apply_fn(params, x[i:i + piece]) for i in range(0, n, piece)])
  return apply_pieces
