"""The base experiment config and its validation.

Every file under `configs/` starts from `base_config()` and overrides what its setting needs;
any field can be overridden on the command line: `--config.rounds=50 --config.algorithm.name=fedgmt`.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from fedjax_sharp.core.execution import CLIENT_STRATEGIES, LOCAL_LOOPS
from fedjax_sharp.core.client_table import CLIENT_TABLES
from fedjax_sharp.models.registry import COMPUTE_DTYPE_VALUES

from fedjax_sharp.algorithms.hyperparameters import INF, in_range, range_text
from fedjax_sharp.errors import ConfigError

ANALYSIS_METRICS = ("lambda_max", "hessian_trace", "sam_sharpness", "client_percentiles")


# The docs of base_config's fields (`--print_config`, `training.cli`); the algorithm blocks'
# fields are documented by their factories (`algorithms.hyperparameters.Field`).
FIELD_DOCS = {
    'aggregation': "'examples' (n_m / sum n) or 'uniform'",
    'data.source': "'embedded' | 'idx' | 'npz' | 'tfds' | 'imagefolder' | 'landmarks_csv' | 'federated_h5' | 'federated_sqlite' | 'leaf'",
    'data.name': 'digits | fashion_mnist | mnist | cifar10 | cifar100 | emnist[/digits|letters|...] | ag_news_subset | free (files)',
    'data.path': "idx dir / npz file / tfds data_dir / ImageFolder root / Landmarks dir / federated .h5 or .sqlite ('' = default)",
    'data.download': "fetch once what is missing: tfds datasets (prepared into data.path; needs the 'prepare' extra), and with data.path '' TFF's federated_emnist / shakespeare / stackoverflow SQLite and CINIC-10 (into $FEDJAX_SHARP_DATA or ~/.cache/fedjax_sharp)",
    'data.num_clients': "'file' / 'natural' partitions: 0 = all the given clients",
    'data.partition': "'iid' | 'dirichlet' | 'pathological' | 'file' | 'natural'",
    'data.partition_path': "'file': a .json / .npz of per-client index lists (README)",
    'data.partition_allow_duplicates': "'file': an index may belong to several clients",
    'data.alpha': 'Dirichlet concentration (0 = one class per client)',
    'data.dirichlet_mode': "'label' (Wang et al.; FedGMT) | 'balanced' (Hsu et al.; FedGloSS)",
    'data.long_tail': "FedGMT's long-tail Dirichlet setting",
    'data.imbalance_factor': 'n_most / n_least class',
    'data.shards_per_client': 'Path(r)',
    'data.examples_per_client': "'balanced' Dirichlet: 0 = N // num_clients (FedGloSS: 500)",
    'data.num_classes': 'npz files: the class count if the file does not declare it',
    'data.feed': "'device' (all examples on the device once) | 'host' (each round's examples gathered on the host, prefetched) | 'auto'",
    'data.device_budget_mb': "'auto' feeds from the host above this training-set size",
    'data.augment': "'none' | 'crop_flip' (pad 4, random crop, h-flip)",
    'data.augment_pad': "zero padding of the random crop (FedGMT's text: 2; its code: 4)",
    'data.max_train_examples': '0 = all (a seeded, class-stratified subset otherwise)',
    'data.vocab_max_size': '0 = no limit',
    'data.word_counts_path': "stackoverflow: TFF's stackoverflow.word_count ('' = fetched with data.download, else counted from the training split)",
    'data.vocabulary_path': "'' = build it (saved as <workdir>/vocabulary.json)",
    'data.image_size': 'imagefolder / landmarks_csv: resize to this (0 = keep / 64)',
    'data.merge_valid': "imagefolder: CINIC-10's valid split joins train",
    'data.train_csv': "landmarks_csv: '' = <path>/federated_train.csv",
    'data.test_csv': "landmarks_csv: '' = <path>/test.csv",
    'data.image_dir': "landmarks_csv: '' = <path>/images (or <path>)",
    'data.test_path': "federated_h5: '' = path with 'train' -> 'test'",
    'data.invert_pixels': 'federated_h5/sqlite: TFF white-background -> MNIST style',
    'model.name': 'mcmahan_cnn | lenet5 | mlp | linear | vgg11 | vgg11_gn | resnet8 | resnet18 | vit_small | fasttext | mobilenet_v2_gn',
    'model.resnet8': 'FedGMT code',
    'model.vit_small': 'FedGMT code: sqrt(384)',
    'model.fasttext': 'vocab from the dataset',
    'local.epochs': 'E; K_m = E * ceil(n_m / B)',
    'local.steps': '> 0: a fixed K for every client instead of epochs',
    'local.lr_decay': 'eta_t = lr * lr_decay ** t (once per round)',
    'local.rho': 'SAM radius (FedGMT Table 7: 5 x lr)',
    'local.asam_eta': "ASAM's T = |w| + eta",
    'server.optimizer': 'sgd (FedAvg with lr 1) | adam | yogi | adagrad',
    'task.name': 'classification | quadratic | pl | simplex | bilinear | fair_classification | gan',
    'engine.client_strategy': 'auto | vmap | map | chunked_vmap | unrolled | host',
    'engine.chunk_size': "clients per vmapped chunk ('chunked_vmap')",
    'engine.host_chunk': "local steps per jitted call ('host'; 1 is fastest on CPU)",
    'engine.local_loop': 'auto | rolled | partial | unrolled',
    'engine.skip_padding': "rolled loops stop at each client's last real step",
    'engine.sort_clients': 'order the cohort by step count (chunked_vmap buckets)',
    'engine.micro_batch': 'model called on pieces of this many examples in training',
    'eval.every': 'evaluate every k rounds (always in the last `last_n`)',
    'eval.last_n': 'report mean/std of test accuracy over the last N rounds',
    'eval.target_accuracy': 'report the first round reaching it (0 = off)',
    'eval.average_last': '> 0: also save the average of the last N global models',
    'eval.hessian_every': '> 0: log lambda_max every k rounds (run by the analysis)',
    'eval.hessian_examples': 'test examples for the logged lambda_max (0 = all)',
    'eval.hessian_iters': 'power iterations (FedGloSS Appendix D: 20)',
    'analysis.rho': 'sam_sharpness radius',
    'analysis.trace_probes': 'hessian_trace Hutchinson probes',
    'analysis.iters': 'lambda_max power iterations',
    'eval.artifact_every': '> 0: task artifacts (GAN sample grids) every k rounds',
    'log_every': 'progress line every k rounds',
    'checkpoint_every': '> 0: save server + client state every k rounds (workdir)',
    'checkpoint_keep': 'checkpoints kept under <workdir>/checkpoints (orbax)',
    'resume': "continue from the newest checkpoint of the same setting; False: discard the workdir's results and start over",
    'training.on_nonfinite': "'stop' (status 'diverged', exit 3) | 'warn' (log, go on)",
    'model.compute_dtype': "'float32' | 'bfloat16' (forward/backward in bfloat16, weights and updates in float32) | 'auto' (bfloat16 on GPU/TPU, float32 on CPU)",
    'model.conv_impl': "'xla' (lax convolutions) | 'matmul' (patches x kernel as one batched matmul: vmapped clients run batched GEMMs, not grouped convolutions; same parameters) | 'auto' ('matmul' only where measured faster: GPU, float32, vmapped clients; else 'xla')",
    'local.momentum': "client momentum; None = the algorithm's paper default (0.9, or 0 for SCAFFOLD, FedGamma, FedCM, MoFedSAM, MimeLite)",
    'local.optimizer': "local gradient of the algorithms that take any client optimiser: 'sgd' | 'sam' | 'asam' (fedavg + sam is the deprecated spelling of fedsam)",
    'algorithm.name': 'the algorithm (docs/algorithms/index.md); its hyperparameters: config.algorithm.<name>',
    'engine.client_table': "per-client state table: 'device' | 'host' | 'auto' (host above the budget)",
    'engine.client_table_budget_mb': "'auto''s budget for the dense table: 0 = a quarter of the device's memory; > 0: MiB",
    'engine.devices': 'devices of the client mesh (1 = one device, 0 = all)',
    'engine.experiment_devices': 'devices a sweep splits its experiments over',
    'data.validation_examples': '> 0: hold out this many training examples and evaluate on them (tuning)',
    'data.validation_seed': 'seed of the held-out validation examples',
    'data.max_length': 'text: tokens per example',
    'data.vocab_min_count': 'text: minimum token count of the vocabulary',
    'log.tensorboard': 'write TensorBoard event files under <workdir>/tensorboard',
    'analysis.every': 'analysis metrics every k rounds (0 = off)',
    'analysis.metrics': 'any of ANALYSIS_METRICS',
    'analysis.examples': 'test examples the analysis uses',
}


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = "experiment"
  c.seed = 0
  c.rounds = 50
  c.clients_per_round = 10
  c.aggregation = "examples"

  c.data = ml_collections.ConfigDict()
  c.data.source = "embedded"
  c.data.name = "digits"
  c.data.path = ""
  c.data.download = True
  c.data.num_clients = 100
  c.data.partition = "iid"
  c.data.partition_path = ""
  c.data.partition_allow_duplicates = False
  c.data.alpha = 0.1
  c.data.dirichlet_mode = "label"
  c.data.long_tail = False
  c.data.imbalance_factor = 2.0
  c.data.shards_per_client = 2
  c.data.examples_per_client = 0
  c.data.num_classes = 0
  c.data.feed = "auto"
  c.data.device_budget_mb = 2048
  c.data.augment = "none"
  c.data.augment_per_example = True
  c.data.augment_pad = 4
  c.data.max_train_examples = 0
  c.data.max_test_examples = 0
  # > 0: hold out this many training examples (seeded by validation_seed, class-stratified),
  # never trained on, and evaluate on them instead of the test split: for tuning.
  c.data.validation_examples = 0
  c.data.validation_seed = 0
  # Text (tfds ag_news_subset): tokens per example, vocabulary from the training split.
  c.data.max_length = 200
  c.data.vocab_min_count = 2
  c.data.vocab_max_size = 0
  c.data.vocabulary_path = ""
  c.data.word_counts_path = ""
  # Local file sources (fedjax_sharp/data/federated_files.py).
  c.data.image_size = 0
  c.data.merge_valid = False
  c.data.train_csv = ""
  c.data.test_csv = ""
  c.data.image_dir = ""
  c.data.test_path = ""
  c.data.invert_pixels = True

  c.model = ml_collections.ConfigDict()
  # 'bfloat16': the forward and backward passes in bfloat16, the weights (and every update,
  # aggregate and server state) kept in float32 (mixed precision; no loss scaling needed).
  # 'auto': bfloat16 on GPU/TPU, float32 on CPU (core/backends.py, docs/performance.md).
  c.model.compute_dtype = "auto"
  # 'matmul': every convolution as patch extraction + one matmul (models/conv.py), for the
  # convolutional models (models.registry.conv_impl_models()); same parameters as 'xla'.
  # 'auto': whichever was measured faster for the backend, dtype and client strategy.
  c.model.conv_impl = "auto"
  c.model.name = "mcmahan_cnn"
  # Model fields (fedjax_sharp/models/zoo.py), read for the selected model only.
  c.model.resnet8 = ml_collections.ConfigDict(dict(groups=2, stem="imagenet"))
  c.model.resnet18 = ml_collections.ConfigDict(dict(groups=2, stem="cifar"))
  c.model.vit_small = ml_collections.ConfigDict(dict(attn_scale="width"))
  c.model.fasttext = ml_collections.ConfigDict(dict(pool="nonpad"))
  c.model.mobilenet_v2_gn = ml_collections.ConfigDict(dict(width_mult=1.0, groups=2))
  c.model.vgg11_gn = ml_collections.ConfigDict(dict(groups=2))

  c.local = ml_collections.ConfigDict()
  c.local.epochs = 1
  c.local.steps = 0
  c.local.batch_size = 50
  c.local.lr = 0.01
  c.local.lr_decay = 0.998
  # None = the algorithm's paper default: 0.9 (the FedGMT setting) for most, 0 for SCAFFOLD,
  # FedGamma, FedCM, MoFedSAM and MimeLite. Paper-reproduction configs set it explicitly.
  c.local.momentum = config_dict.placeholder(float)
  c.local.weight_decay = 1e-5
  # Local gradient for algorithms that take any client optimiser (fedavg, fedprox, feddyn,
  # scaffold, fedcm, fedntd): 'sgd' | 'sam' | 'asam' (fedavg + sam = FedSAM, feddyn + sam =
  # FedDyn+SAM). Algorithms with their own perturbation read rho from their block instead.
  c.local.optimizer = "sgd"
  c.local.rho = 0.05
  c.local.asam_eta = 0.0

  c.server = ml_collections.ConfigDict()
  c.server.optimizer = "sgd"
  c.server.lr = 1.0
  c.server.momentum = 0.0

  c.algorithm = ml_collections.ConfigDict()
  c.algorithm.name = "fedavg"
  # Per-algorithm hyperparameters, each in its own block, derived from the keyword arguments
  # of the algorithm's factory (its one home: defaults, ranges, docs; algorithms/registration.py).
  block = lambda **kw: ml_collections.ConfigDict(kw)
  from fedjax_sharp.algorithms.registry import config_blocks
  for name, algorithm_block in config_blocks().items():
    c.algorithm[name] = algorithm_block

  # Federated minimax (task.name != 'classification'): the task, the players' local optimisers
  # and the minimax algorithms' blocks (fedjax_sharp/minimax).
  c.task = ml_collections.ConfigDict()
  c.task.name = "classification"
  c.task.quadratic = block(num_clients=8, hetero_a=0.3, hetero_bc=1.0)
  c.task.pl = block(num_clients=8, hetero=0.5)
  c.task.simplex = block(num_clients=6, lam=0.0, hetero=0.5)
  c.task.bilinear = block(num_clients=4)
  c.task.fair_classification = block(lam=0.1)
  c.task.gan = block(fd_samples=2000, classifier_epochs=2, classifier_cache="")
  c.minimax = ml_collections.ConfigDict(dict(
      lr_x=0.02, lr_y=0.2, optimizer_x="sgd", optimizer_y="sgd", momentum=0.0, b1=0.5,
      b2=0.999))
  from fedjax_sharp.minimax.algorithms import config_blocks as minimax_blocks
  for name, algorithm_block in minimax_blocks().items():
    c.algorithm[name] = algorithm_block

  c.engine = ml_collections.ConfigDict()
  c.engine.client_strategy = "auto"
  c.engine.chunk_size = 4
  c.engine.host_chunk = 1
  c.engine.local_loop = "auto"
  c.engine.unroll = 4
  c.engine.skip_padding = True
  c.engine.sort_clients = False
  c.engine.micro_batch = 0
                                     # (0 = whole batches; models.registry.in_pieces)
  # Per-client state table: 'device' (dense [M, ...] updated inside jit) | 'host' (host memory,
  # the cohort's rows only reach the device; large M) | 'auto' (host above the budget).
  c.engine.client_table = "auto"
  # 'auto''s budget for the dense table: 0 = a quarter of the device's memory (the GPU's/TPU's
  # bytes_limit; on a CPU the host's available memory); > 0: this many MiB.
  c.engine.client_table_budget_mb = 0.0
  # Device mesh (core/sharding.py): the cohort and client table split by client over
  # `devices` devices (1 = one device, 0 = all); sweeps split experiments over
  # `experiment_devices`. Needs a single-jit client_strategy (vmap).
  c.engine.devices = 1
  c.engine.experiment_devices = 1

  c.eval = ml_collections.ConfigDict()
  c.eval.every = 1
  c.eval.batch_size = 1000
  c.eval.last_n = 20
  c.eval.target_accuracy = 0.0
  c.eval.average_last = 0
  c.eval.hessian_every = 0
  c.eval.hessian_examples = 1000
  c.eval.hessian_iters = 20

  # Analysis during training (fedjax_sharp/analysis), logged to metrics.jsonl every `every`
  # rounds and at the last one, on the first `examples` test examples. metrics: any of
  # ANALYSIS_METRICS. Empty / every = 0: nothing is traced or run.
  # TensorBoard event files under <workdir>/tensorboard, one scalar per numeric metric of each
  # round (pip install '.[tensorboard]'); metrics.jsonl stays the source of truth.
  c.log = ml_collections.ConfigDict()
  c.log.tensorboard = False

  c.analysis = ml_collections.ConfigDict()
  c.analysis.every = 0
  c.analysis.metrics = ()
  c.analysis.examples = 1000
  c.analysis.rho = 0.05
  c.analysis.trace_probes = 20
  c.analysis.iters = 20
  c.eval.artifact_every = 0
  c.log_every = 1
  c.checkpoint_every = 0
  c.checkpoint_keep = 2
  c.resume = True
  c.training = ml_collections.ConfigDict()
  c.training.on_nonfinite = "stop"
  return c


def load_config_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config([arg])` of a config file, as `--config=path[:arg]` would (for notebooks, tests)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("fedjax_sharp_config_file", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg is not None else module.get_config()


def _check(cond: bool, field: str, message: str) -> None:
  if not cond:
    raise ConfigError(f"{field} {message}")


def _one_of(value, allowed, field):
  if value not in allowed:
    raise ConfigError(f"{field}={value!r} is not one of {sorted(allowed)}")


# Ranges of the task blocks' fields: (low, high, low inclusive, high inclusive). The algorithm
# blocks' ranges are declared with their factories (`algorithms.hyperparameters.Field`).
_NONNEG, _AT_LEAST_1 = (0.0, INF, True, False), (1.0, INF, True, False)
TASK_RANGES = {
    "num_clients": _AT_LEAST_1, "hetero": _NONNEG, "hetero_a": _NONNEG, "hetero_bc": _NONNEG,
    "lam": _NONNEG, "fd_samples": (2.0, INF, True, False), "classifier_epochs": _AT_LEAST_1,
}


def _validate_task_blocks(section, prefix: str) -> None:
  for block_name, block in section.items():
    if not hasattr(block, "items"):
      continue
    for field, value in block.items():
      if value is None or isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
        continue
      spec = TASK_RANGES.get(field)
      if spec is not None and not in_range(float(value), spec):
        raise ConfigError(f"{prefix}.{block_name}.{field} {range_text(spec)}, got {value}")


def _validate_algorithm_blocks(config) -> None:
  """Every algorithm block: its fields declared by the factory, in their ranges; the selected
  algorithm's `config.server` settings used (algorithms/registration.py)."""
  from fedjax_sharp.algorithms import registry
  from fedjax_sharp.minimax import algorithms as minimax_algorithms
  for name in registry.ALGORITHMS:
    registry.ALGORITHMS[name].values(config)
  minimax_algorithms.check_blocks(config)
  if not is_minimax(config) and config.algorithm.name in registry.ALGORITHMS:
    registry.ALGORITHMS[config.algorithm.name].check_server(config)


TASKS = ("classification", "quadratic", "pl", "simplex", "bilinear", "fair_classification",
         "gan")


def is_minimax(config) -> bool:
  return config.get("task", {}).get("name", "classification") != "classification"


def validate(config) -> None:
  """Checks the fields the whole pipeline relies on; errors name the field and allowed values."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  from fedjax_sharp.models.registry import MODELS

  task = config.get("task", {}).get("name", "classification")
  _one_of(task, TASKS, "task.name")
  if is_minimax(config):
    ALGORITHMS = MINIMAX_ALGORITHMS  # noqa: N806 (the allowed names for this task)

  _check(config.rounds >= 1, "rounds", f"must be >= 1, got {config.rounds}")
  _check(config.clients_per_round >= 1, "clients_per_round",
         f"must be >= 1, got {config.clients_per_round}")
  from fedjax_sharp.data import partition as partition_lib
  from fedjax_sharp.data import sources as sources_lib
  _one_of(config.data.source, sources_lib.ALL_SOURCES, "data.source")
  _one_of(config.data.partition, partition_lib.PARTITIONS, "data.partition")
  external = config.data.partition in partition_lib.EXTERNAL_PARTITIONS
  _check(config.data.num_clients >= (0 if external else 1), "data.num_clients",
         f"must be >= {0 if external else 1}"
         f"{' (0 = every client of the ' + config.data.partition + ')' if external else ''}, "
         f"got {config.data.num_clients}")
  if config.data.partition == "file":
    _check(bool(config.data.get("partition_path", "")), "data.partition_path",
           "must name a .json or .npz partition file for data.partition='file'")
  if task in ("quadratic", "pl", "simplex", "bilinear"):
    m = config.task[task].get("num_clients", 1)
    _check(config.clients_per_round <= m, "clients_per_round",
           f"({config.clients_per_round}) must be <= task.{task}.num_clients ({m})")
  elif config.data.num_clients:  # 0 with a 'file' / 'natural' partition: checked when loaded
    _check(config.clients_per_round <= config.data.num_clients, "clients_per_round",
           f"({config.clients_per_round}) must be <= data.num_clients "
           f"({config.data.num_clients})")
  _one_of(config.aggregation, ("examples", "uniform"), "aggregation")
  _one_of(config.algorithm.name, ALGORITHMS, "algorithm.name")
  _one_of(config.model.name, MODELS, "model.name")
  _one_of(config.data.augment, ("none", "crop_flip"), "data.augment")
  _one_of(config.data.get("download", True), (True, False), "data.download")
  _check(config.data.alpha >= 0, "data.alpha", f"must be >= 0, got {config.data.alpha}")
  _check(config.local.batch_size >= 1, "local.batch_size",
         f"must be >= 1, got {config.local.batch_size}")
  _check(config.local.steps >= 0, "local.steps", f"must be >= 0, got {config.local.steps}")
  _check(config.local.steps > 0 or config.local.epochs >= 1, "local.epochs",
         f"must be >= 1 when local.steps == 0, got {config.local.epochs}")
  _check(config.local.lr > 0, "local.lr", f"must be > 0, got {config.local.lr}")
  _check(0 < config.local.lr_decay <= 1, "local.lr_decay",
         f"must be in (0, 1], got {config.local.lr_decay}")
  _check(config.local.momentum is None or 0 <= config.local.momentum < 1, "local.momentum",
         f"must be in [0, 1) or None (the algorithm's default), got {config.local.momentum}")
  _one_of(config.local.get("optimizer", "sgd"), ("sgd", "sam", "asam"), "local.optimizer")
  _check(config.local.get("rho", 0.0) >= 0, "local.rho", f"must be >= 0, got {config.local.get('rho')}")
  _check(config.local.weight_decay >= 0, "local.weight_decay",
         f"must be >= 0, got {config.local.weight_decay}")
  _one_of(config.engine.client_strategy, CLIENT_STRATEGIES, "engine.client_strategy")
  _one_of(config.engine.local_loop, LOCAL_LOOPS, "engine.local_loop")
  _one_of(config.model.get("compute_dtype", "auto"), COMPUTE_DTYPE_VALUES,
          "model.compute_dtype")
  from fedjax_sharp.models.registry import CONV_IMPL_VALUES, conv_impl_models
  conv_impl = config.model.get("conv_impl", "auto")
  _one_of(conv_impl, CONV_IMPL_VALUES, "model.conv_impl")
  if conv_impl not in ("xla", "auto"):
    _check(not is_minimax(config), "model.conv_impl", f"applies to classification only; "
           f"task.name={task!r} builds its own model: set it to 'xla'")
    _check(config.model.name in conv_impl_models(), "model.conv_impl",
           f"{conv_impl!r} applies to the convolutional models {conv_impl_models()}, not "
           f"model.name={config.model.name!r}: set it to 'xla'")
  _one_of(config.engine.get("client_table", "auto"), CLIENT_TABLES, "engine.client_table")
  _check(config.engine.get("client_table_budget_mb", 0) >= 0, "engine.client_table_budget_mb",
         f"must be >= 0 (0 = a quarter of the device's memory), got "
         f"{config.engine.get('client_table_budget_mb')}")
  _check(config.engine.get("devices", 1) >= 0, "engine.devices",
         f"must be >= 0 (1 = one device, 0 = all), got {config.engine.get('devices')}")
  _check(config.engine.get("micro_batch", 0) >= 0, "engine.micro_batch",
         f"must be >= 0 (examples per model call in training; 0 = whole batches), got "
         f"{config.engine.get('micro_batch')}")
  _check(config.engine.get("micro_batch", 0) == 0 or not is_minimax(config),
         "engine.micro_batch", f"applies to classification only; task.name={task!r} builds its "
         f"own players: set it to 0")
  _check(config.engine.get("experiment_devices", 1) >= 1, "engine.experiment_devices",
         f"must be >= 1, got {config.engine.get('experiment_devices')}")
  _check(config.eval.every >= 1, "eval.every", f"must be >= 1, got {config.eval.every}")
  _check(config.eval.last_n >= 1, "eval.last_n", f"must be >= 1, got {config.eval.last_n}")
  _check(config.checkpoint_every >= 0, "checkpoint_every",
         f"must be >= 0 (0 = off), got {config.checkpoint_every}")
  _check(config.eval.get("average_last", 0) >= 0, "eval.average_last",
         f"must be >= 0 (0 = off), got {config.eval.get('average_last')}")
  if "analysis" in config:
    _check(config.analysis.every >= 0, "analysis.every",
           f"must be >= 0 (0 = off), got {config.analysis.every}")
    unknown = sorted(set(config.analysis.metrics) - set(ANALYSIS_METRICS))
    _check(not unknown, "analysis.metrics", f"{unknown} not in {list(ANALYSIS_METRICS)}")
    for field in ("examples", "trace_probes", "iters"):
      _check(config.analysis[field] >= (0 if field == "examples" else 1), f"analysis.{field}",
             f"must be >= {0 if field == 'examples' else 1}, got {config.analysis[field]}")
  _check(config.eval.get("hessian_every", 0) >= 0, "eval.hessian_every",
         f"must be >= 0 (0 = off), got {config.eval.get('hessian_every')}")
  _check(config.eval.get("hessian_iters", 20) >= 1, "eval.hessian_iters",
         f"must be >= 1, got {config.eval.get('hessian_iters')}")
  _check(not (config.eval.get("hessian_every", 0) and "analysis" in config
              and config.analysis.every and "lambda_max" in config.analysis.metrics),
         "eval.hessian_every", "logs lambda_max, which analysis.metrics already has: set one of "
         "the two (eval.hessian_every=0, or drop 'lambda_max' from analysis.metrics)")
  _check(config.eval.batch_size >= 1, "eval.batch_size",
         f"must be >= 1, got {config.eval.batch_size}")
  _check(isinstance(config.seed, int) and 0 <= config.seed < 2 ** 32, "seed",
         f"must be an integer in [0, 2**32), got {config.seed!r}")
  _one_of(config.server.optimizer, ("sgd", "adam", "yogi", "adagrad"), "server.optimizer")
  _check(config.server.lr > 0, "server.lr", f"must be > 0, got {config.server.lr}")
  _check(0 <= config.server.get("momentum", 0.0) < 1, "server.momentum",
         f"must be in [0, 1), got {config.server.get('momentum')}")
  _check(config.local.get("asam_eta", 0.0) >= 0, "local.asam_eta",
         f"must be >= 0, got {config.local.get('asam_eta')}")
  if not is_minimax(config) or task == "fair_classification":
    _check(0 <= config.eval.target_accuracy <= 1, "eval.target_accuracy",
           f"must be in [0, 1] (0 = off), got {config.eval.target_accuracy}")
  else:
    _check(config.eval.target_accuracy >= 0, "eval.target_accuracy",
           f"must be >= 0 (0 = off), got {config.eval.target_accuracy}")
  _check(config.get("checkpoint_keep", 2) >= 1, "checkpoint_keep",
         f"must be >= 1, got {config.get('checkpoint_keep')}")
  _one_of(config.get("training", {}).get("on_nonfinite", "stop"), ("stop", "warn"),
          "training.on_nonfinite")
  _one_of(config.data.get("feed", "auto"), ("auto", "device", "host"), "data.feed")
  _check(config.data.get("device_budget_mb", 2048) > 0, "data.device_budget_mb",
         f"must be > 0, got {config.data.get('device_budget_mb')}")
  _check(config.data.get("augment_pad", 4) >= 0, "data.augment_pad",
         f"must be >= 0, got {config.data.get('augment_pad')}")
  _check(config.data.get("examples_per_client", 0) >= 0, "data.examples_per_client",
         f"must be >= 0 (0 = N // num_clients), got {config.data.get('examples_per_client')}")
  _check(config.data.get("imbalance_factor", 2.0) >= 1, "data.imbalance_factor",
         f"must be >= 1, got {config.data.get('imbalance_factor')}")
  _check(config.data.get("max_train_examples", 0) >= 0, "data.max_train_examples",
         f"must be >= 0 (0 = all), got {config.data.get('max_train_examples')}")
  _check(config.data.get("validation_examples", 0) >= 0, "data.validation_examples",
         f"must be >= 0 (0 = evaluate on the test split), got "
         f"{config.data.get('validation_examples')}")
  _validate_algorithm_blocks(config)
  if "task" in config:
    _validate_task_blocks(config.task, "task")
  if "minimax" in config:
    for field in ("lr_x", "lr_y"):
      _check(config.minimax[field] > 0, f"minimax.{field}", f"must be > 0, got "
             f"{config.minimax[field]}")
    for field in ("optimizer_x", "optimizer_y"):
      _one_of(config.minimax[field], ("sgd", "adam"), f"minimax.{field}")


# Fields that define a run's numbers (everything but logging, evaluation cadence, engine and
# checkpointing); `algorithm` counts as its name and the selected algorithm's block only.
SETTING_FIELDS = ("seed", "rounds", "clients_per_round", "aggregation", "data", "model", "local",
                  "server", "task", "minimax")


# Fields that change how fast a round runs, not its numbers (the same function to float
# rounding, tested): a resume or a finished run's reuse may differ in them. The engine block is
# not a setting field at all; `model.compute_dtype` is one (bfloat16 changes the arithmetic), and
# is compared by the dtype it resolves to (`resolved_setting`).
PERFORMANCE_FIELDS = ("model.conv_impl",)


def resolved_setting(config) -> ml_collections.ConfigDict:
  """A copy of `config` with `model.compute_dtype` and `model.conv_impl` resolved for the
  default backend ('auto' -> what runs: models.registry, core/backends.py): what config.json
  records, so that a run started in bfloat16 on a GPU is not resumed in float32 on a CPU."""
  from fedjax_sharp.models import registry  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(config.to_dict())
  if "model" in config and not is_minimax(config):
    dtype = registry.resolve_compute_dtype(str(config.model.compute_dtype))
    config.model.conv_impl = registry.resolve_conv_impl(
        str(config.model.conv_impl), dtype, str(config.engine.client_strategy),
        clients=int(config.clients_per_round))
    config.model.compute_dtype = dtype
  return config


def _flatten(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def setting_differences(saved: dict, config, allow: tuple[str, ...] = ()) -> list[str]:
  """'field: saved X, now Y' for every setting field (SETTING_FIELDS, `algorithm.name` and the
  algorithm's own block) where a saved config.json differs from `config`, except `allow`. A
  field the saved config lacks (written by an older version) counts as equal only if `config`
  holds the library default for it."""
  import json
  new = json.loads(resolved_setting(config).to_json_best_effort())
  if "compute_dtype" in saved.get("model", {}):   # 'auto' in a config.json of an older version
    from fedjax_sharp.models import registry  # pylint: disable=g-import-not-at-top
    saved = json.loads(json.dumps(saved))
    saved["model"]["compute_dtype"] = registry.resolve_compute_dtype(
        saved["model"]["compute_dtype"])
  default = _flatten(json.loads(base_config().to_json_best_effort()))
  name = new["algorithm"]["name"]
  fields = list(SETTING_FIELDS) + ["algorithm"]
  new_flat = _flatten({k: new[k] for k in fields if k in new})
  old_flat = _flatten({k: saved[k] for k in fields if k in saved})
  if "model" in saved:   # written before the field existed: computed in float32
    old_flat.setdefault("model.compute_dtype", "float32")
  keep = lambda key: (not key.startswith("algorithm.") or key == "algorithm.name"
                      or key.startswith(f"algorithm.{name}."))
  diffs = []
  for key, value in new_flat.items():
    if not keep(key) or key in allow or key in PERFORMANCE_FIELDS:
      continue
    old = old_flat.get(key, default.get(key, value))
    if old != value:
      diffs.append(f"{key}: saved {old!r}, now {value!r}")
  return diffs
