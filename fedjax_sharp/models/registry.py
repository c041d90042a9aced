"""Model registry: config name -> Flax module constructor, and the model options of the config
(`model.conv_impl`, `model.compute_dtype`)."""
from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core import backends
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.hyperparameters import Hyperparameter, declare
from fedjax_sharp.models import cnn, zoo
from fedjax_sharp.models.conv import CONV_IMPLS
from fedjax_sharp.models import sequence

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
    # Next-token models (fedjax_sharp/models/sequence.py): logits [B, L, V], per-token labels.
    "char_lstm": sequence.CharLSTM,
    "word_lstm": sequence.WordLSTM,
}


def blocks() -> dict[str, dict[str, Hyperparameter]]:
  """The config blocks `model.<name>`: for every registered model with `config_fields` (a
  class attribute {field: `Field`}), those fields with the module's own defaults."""
  out = {}
  for name, cls in MODELS.items():
    declared = getattr(cls, "config_fields", {})
    defaults = {f.name: f.default for f in dataclasses.fields(cls)} if declared else {}
    out[name] = {k: Hyperparameter(k, defaults[k], type(defaults[k]), field)
                 for k, field in declared.items()}
  return {name: block for name, block in out.items() if block}


def conv_impl_models() -> list[str]:
  """The registered models that take `conv_impl` (config field `model.conv_impl`)."""
  return sorted(name for name, cls in MODELS.items()
                if "conv_impl" in getattr(cls, "__dataclass_fields__", {}))


def get_model(name: str, num_classes: int, conv_impl: str = "xla", **kwargs: Any) -> nn.Module:
  """Returns the Flax module registered under `name` (config field `model.name`); `kwargs` are
  the module's fields (config block `model.<name>`, e.g. `groups`, `stem`, `vocab_size`).
  `conv_impl` (config field `model.conv_impl`): 'xla' | 'matmul' (models/conv.py), passed to
  the models that have the field; 'matmul' for any other model is a ConfigError."""
  if name not in MODELS:
    raise ValueError(f"model.name={name!r} is not one of {sorted(MODELS)}")
  fields = set(getattr(MODELS[name], "__dataclass_fields__", {})) - {"parent", "name"}
  unknown = sorted(set(kwargs) - fields)
  if unknown:
    raise ValueError(f"model.{name}: unknown field(s) {unknown}; {name} has {sorted(fields)}")
  if conv_impl not in CONV_IMPL_VALUES:
    raise ConfigError(f"model.conv_impl={conv_impl!r} is not one of {list(CONV_IMPL_VALUES)}")
  if "conv_impl" in fields:
    kwargs["conv_impl"] = resolve_conv_impl(conv_impl)
  elif conv_impl not in ("xla", "auto"):
    raise ConfigError(f"model.conv_impl={conv_impl!r} applies to the convolutional models "
                      f"{conv_impl_models()}, not model.name={name!r}: set it to 'xla'")
  return MODELS[name](num_classes=num_classes, **kwargs)


def init_params(model: nn.Module, key: jax.Array, input_shape: tuple[int, ...],
                dtype=jnp.float32):
  """Initialises parameters for inputs of shape `input_shape` (no batch axis), jitted (eager
  init of a ResNet-18 dispatches hundreds of small ops, each compiled: docs/performance.md)."""
  pinned = backends.kind() == "cpu" and not isinstance(key, jax.core.Tracer)
  args = (model, tuple(input_shape), jnp.dtype(dtype), pinned)
  try:
    init = _jitted_init(*args)
  except TypeError:   # a module with an unhashable field: not cached
    init = _jitted_init.__wrapped__(*args)
  return init(key)


@functools.lru_cache(maxsize=32)
def _jitted_init(model: nn.Module, input_shape: tuple[int, ...], dtype, pinned: bool):
  """One jitted init per (model, input shape, dtype): another seed's init (a sweep's, compare's
  seeds) reuses the traced and compiled program. Flax modules compare and hash by their
  fields."""
  return jax.jit(lambda k: model.init(k, jnp.zeros((1, *input_shape), dtype))["params"],
                 compiler_options=CPU_INIT_OPTIONS if pinned else None)


# How the CPU compiles the init program (a threefry draw for every parameter), pinned so that the
# initial parameters are the same bits whatever XLA_FLAGS choose for other programs (the test
# suite turns the fusion emitters off: its many small programs compile faster without them):
# - XLA's fusion emitters: faster to compile a big init program than its older emitters;
# - LLVM at optimisation level 1: faster to compile than XLA's defaults with the same bits for
#   every model of the zoo (results/benchmarks/init_compile_cpu.txt, from
#   benchmarks/init_compile.py; docs/performance.md), and the program runs once.
# Called inside another jit (a traced key), the enclosing program's options apply.
CPU_INIT_OPTIONS = {"xla_cpu_use_fusion_emitters": True, "xla_backend_optimization_level": 1}


def count_params(params) -> int:
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(params)))


COMPUTE_DTYPES = ("float32", "bfloat16")
# Values of the config field `model.compute_dtype`: a dtype, or 'auto' (resolve_compute_dtype).
COMPUTE_DTYPE_VALUES = COMPUTE_DTYPES + ("auto",)
# Values of the config field `model.conv_impl`: an implementation, or 'auto' (resolve_conv_impl).
CONV_IMPL_VALUES = CONV_IMPLS + ("auto",)

# The config block `model` (each model's own block `model.<name>`: `blocks`).
FIELDS = declare(
    name=("mcmahan_cnn", None, f"one of models.registry.MODELS ({' | '.join(MODELS)})"),
    compute_dtype=("auto", tuple(sorted(COMPUTE_DTYPE_VALUES)),
                   "'float32' | 'bfloat16' (forward/backward in bfloat16, weights and updates "
                   "in float32) | 'auto' (bfloat16 on GPU/TPU, float32 on CPU)"),
    conv_impl=("auto", tuple(sorted(CONV_IMPL_VALUES)),
               "'xla' (lax convolutions) | 'matmul' (patches x kernel as one batched matmul: "
               "vmapped clients run batched GEMMs, not grouped convolutions; same parameters) | "
               "'auto' ('matmul' only where measured faster: GPU, float32, vmapped clients; "
               "else 'xla')"))
_logged_resolutions: set[str] = set()


def _log_once(message: str) -> None:
  if message not in _logged_resolutions:
    _logged_resolutions.add(message)
    logging.getLogger(__name__).debug(message)   # shown with --verbose


def resolve_compute_dtype(value: str, backend: str | None = None) -> str:
  """The dtype that `model.compute_dtype=value` computes in: 'float32' and 'bfloat16' as given;
  'auto' -> the backend's measured default (`core.backends`): 'bfloat16' on a GPU or TPU
  (tensor cores; float32 master weights, see with_compute_dtype), 'float32' on a CPU, where
  bfloat16 is no faster and only loses precision. `backend`: None = jax.default_backend().
  The resolution of 'auto' is logged once per backend (DEBUG: shown with --verbose)."""
  if value not in COMPUTE_DTYPE_VALUES:
    raise ConfigError(f"model.compute_dtype={value!r} is not one of {list(COMPUTE_DTYPE_VALUES)}")
  if value != "auto":
    return value
  kind = backends.kind(backend)
  resolved = backends.DEFAULTS[kind].compute_dtype
  _log_once(f"model.compute_dtype 'auto' -> {resolved} on {kind}")
  return resolved


def resolve_conv_impl(value: str, compute_dtype: str = "auto", client_strategy: str = "auto",
                      backend: str | None = None, clients: int | None = None) -> str:
  """The convolution that `model.conv_impl=value` runs: 'xla' and 'matmul' as given; 'auto' ->
  'matmul' only where it was measured faster on this backend for the (resolved) compute dtype
  and whether clients are vmapped (`core.backends`: on a GPU, float32 with vmapped clients),
  else 'xla'. `compute_dtype`, `client_strategy`: the config's values ('auto' resolved here,
  the strategy for a cohort of `clients`, the config's `clients_per_round`)."""
  if value not in CONV_IMPL_VALUES:
    raise ConfigError(f"model.conv_impl={value!r} is not one of {list(CONV_IMPL_VALUES)}")
  if value != "auto":
    return value
  dtype = resolve_compute_dtype(compute_dtype, backend)
  strategy = (backends.client_strategy(clients, backend) if client_strategy == "auto"
              else client_strategy)
  resolved = backends.conv_impl(dtype, strategy, backend)
  _log_once(f"model.conv_impl 'auto' -> {resolved} on {backends.kind(backend)} ({dtype}, "
            f"client_strategy {strategy})")
  return resolved


def with_compute_dtype(apply_fn: Callable, compute_dtype: str = "float32") -> Callable:
  """`apply_fn(params, x)` computed in `compute_dtype` (config field `model.compute_dtype`;
  'auto' is resolved for the default backend by resolve_compute_dtype).

  'bfloat16' casts the float32 weights and floating inputs to bfloat16 on the way in and the
  logits back to float32 on the way out: gradients reach the float32 weights through the
  casts, so updates, aggregation and every server state stay float32 (mixed precision; bfloat16
  has float32's exponent range, so no loss scaling). Integer inputs (token ids) pass unchanged.
  """
  compute_dtype = resolve_compute_dtype(compute_dtype)
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
  batches, so pieces of a large batch can be faster (docs/performance.md, "Model calls in
  pieces"). The pieces
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
