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
