"""The base experiment config and its validation.

Every file under `configs/` starts from `base_config()` and overrides what its setting needs;
any field can be overridden on the command line: `--config.rounds=50 --config.algorithm.name=fedgmt`.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from fedjax_sharp.core.engine import CLIENT_STRATEGIES, LOCAL_LOOPS
from fedjax_sharp.core.client_table import CLIENT_TABLES
from fedjax_sharp.models.registry import COMPUTE_DTYPES

ANALYSIS_METRICS = ("lambda_max", "hessian_trace", "sam_sharpness", "client_percentiles")
from fedjax_sharp.errors import ConfigError


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = "experiment"
  c.seed = 0
  c.rounds = 50
  c.clients_per_round = 10
  c.aggregation = "examples"       # 'examples' (n_m / sum n) or 'uniform'

  c.data = ml_collections.ConfigDict()
  c.data.source = "embedded"       # 'embedded' | 'idx' | 'npz' | 'tfds' | 'imagefolder' |
  #                                  'landmarks_csv' | 'federated_h5' | 'federated_sqlite'
  c.data.name = "digits"           # digits | fashion_mnist | mnist | cifar10 | cifar100 |
  #                                  emnist[/digits|letters|...] | ag_news_subset | free (files)
  c.data.path = ""                 # idx dir / npz file / tfds data_dir / ImageFolder root /
  #                                  Landmarks dir / federated .h5 or .sqlite ('' = default)
  c.data.num_clients = 100         # 'file' / 'natural' partitions: 0 = all the given clients
  c.data.partition = "iid"         # 'iid' | 'dirichlet' | 'pathological' | 'file' | 'natural'
  c.data.partition_path = ""       # 'file': a .json / .npz of per-client index lists (README)
  c.data.partition_allow_duplicates = False  # 'file': an index may belong to several clients
  c.data.alpha = 0.1               # Dirichlet concentration (0 = one class per client)
  c.data.dirichlet_mode = "label"  # 'label' (Wang et al.; FedGMT) | 'balanced' (Hsu et al.; FedGloSS)
  c.data.long_tail = False         # FedGMT's long-tail Dirichlet setting
  c.data.imbalance_factor = 2.0    # n_most / n_least class
  c.data.shards_per_client = 2     # Path(r)
  c.data.examples_per_client = 0   # 'balanced' Dirichlet: 0 = N // num_clients (FedGloSS: 500)
  c.data.num_classes = 0           # npz files: the class count if the file does not declare it
  c.data.feed = "auto"             # 'device' (all examples on the device once) | 'host' (each
  #                                  round's examples gathered on the host, prefetched) | 'auto'
  c.data.device_budget_mb = 2048   # 'auto' feeds from the host above this training-set size
  c.data.augment = "none"          # 'none' | 'crop_flip' (pad 4, random crop, h-flip)
  c.data.augment_per_example = True
  c.data.augment_pad = 4           # zero padding of the random crop (FedGMT's text: 2; its code: 4)
  c.data.max_train_examples = 0    # 0 = all (a seeded, class-stratified subset otherwise)
  c.data.max_test_examples = 0
  # > 0: hold out this many training examples (seeded by validation_seed, class-stratified),
  # never trained on, and evaluate on them instead of the test split: for tuning.
  c.data.validation_examples = 0
  c.data.validation_seed = 0
  # Text (tfds ag_news_subset): tokens per example, vocabulary from the training split.
  c.data.max_length = 200
  c.data.vocab_min_count = 2
  c.data.vocab_max_size = 0        # 0 = no limit
  c.data.vocabulary_path = ""      # '' = build it (saved as <workdir>/vocabulary.json)
  # Local file sources (fedjax_sharp/data/federated_files.py).
  c.data.image_size = 0            # imagefolder / landmarks_csv: resize to this (0 = keep / 64)
  c.data.merge_valid = False       # imagefolder: CINIC-10's valid split joins train
  c.data.train_csv = ""            # landmarks_csv: '' = <path>/federated_train.csv
  c.data.test_csv = ""             # landmarks_csv: '' = <path>/test.csv
  c.data.image_dir = ""            # landmarks_csv: '' = <path>/images (or <path>)
  c.data.test_path = ""            # federated_h5: '' = path with 'train' -> 'test'
  c.data.invert_pixels = True      # federated_h5/sqlite: TFF white-background -> MNIST style

  c.model = ml_collections.ConfigDict()
  # 'bfloat16': the forward and backward passes in bfloat16, the weights (and every update,
  # aggregate and server state) kept in float32 (mixed precision; no loss scaling needed).
  c.model.compute_dtype = "float32"
  c.model.name = "mcmahan_cnn"     # mcmahan_cnn | lenet5 | mlp | linear | vgg11 | vgg11_gn |
  #                                  resnet8 | resnet18 | vit_small | fasttext | mobilenet_v2_gn
  # Model fields (fedjax_sharp/models/zoo.py), read for the selected model only.
  c.model.resnet8 = ml_collections.ConfigDict(dict(groups=2, stem="imagenet"))   # FedGMT code
  c.model.resnet18 = ml_collections.ConfigDict(dict(groups=2, stem="cifar"))
  c.model.vit_small = ml_collections.ConfigDict(dict(attn_scale="width"))  # FedGMT code: sqrt(384)
  c.model.fasttext = ml_collections.ConfigDict(dict(pool="nonpad"))  # vocab from the dataset
  c.model.mobilenet_v2_gn = ml_collections.ConfigDict(dict(width_mult=1.0, groups=2))
  c.model.vgg11_gn = ml_collections.ConfigDict(dict(groups=2))

  c.local = ml_collections.ConfigDict()
  c.local.epochs = 1               # E; K_m = E * ceil(n_m / B)
  c.local.steps = 0                # > 0: a fixed K for every client instead of epochs
  c.local.batch_size = 50
  c.local.lr = 0.01
  c.local.lr_decay = 0.998         # eta_t = lr * lr_decay ** t (once per round)
  # None = the algorithm's paper default: 0.9 (the FedGMT setting) for most, 0 for SCAFFOLD,
  # FedGamma, FedCM, MoFedSAM and MimeLite. Paper-reproduction configs set it explicitly.
  c.local.momentum = config_dict.placeholder(float)
  c.local.weight_decay = 1e-5
  # Local gradient for algorithms that take any client optimiser (fedavg, fedprox, feddyn,
  # scaffold, fedcm, fedntd): 'sgd' | 'sam' | 'asam' (fedavg + sam = FedSAM, feddyn + sam =
  # FedDyn+SAM). Algorithms with their own perturbation read rho from their block instead.
  c.local.optimizer = "sgd"
  c.local.rho = 0.05               # SAM radius (FedGMT Table 7: 5 x lr)
  c.local.asam_eta = 0.0           # ASAM's T = |w| + eta

  c.server = ml_collections.ConfigDict()
  c.server.optimizer = "sgd"       # sgd (FedAvg with lr 1) | adam | yogi | adagrad
  c.server.lr = 1.0
  c.server.momentum = 0.0

  c.algorithm = ml_collections.ConfigDict()
  c.algorithm.name = "fedavg"
  # Per-algorithm hyperparameters, each in its own block (paper defaults; rho = 5 x lr is the
  # FedGMT Table 7 choice at lr 0.01, rho = lr on CIFAR-100). `momentum` inside a block is the
  # client momentum of algorithms whose papers fix it (0); the others use `local.momentum`.
  block = lambda **kw: ml_collections.ConfigDict(kw)
  c.algorithm.fedprox = block(mu=0.01)
  c.algorithm.scaffold = block(momentum=0.0)
  c.algorithm.fedcm = block(beta=0.1, server_lr_relative=1.0, momentum=0.0)
  c.algorithm.mimelite = block(beta=0.9, momentum=0.0)
  c.algorithm.fedntd = block(beta=1.0, tau=1.0)                  # FedGMT Table 7
  c.algorithm.feddyn = block(alpha=0.1, prox="squared")          # 1/beta, beta=10 (FedGMT Table 7)
  c.algorithm.fedsam = block(rho=0.05)
  c.algorithm.fedasam = block(rho=0.5, eta=0.2)                  # Caldarola et al. 2022
  c.algorithm.mofedsam = block(rho=0.1, beta=0.1, server_lr_relative=1.0, momentum=0.0)
  c.algorithm.fedgamma = block(rho=0.05, momentum=0.0)
  c.algorithm.feddyn_sam = block(rho=0.05, alpha=0.1, prox="squared")
  c.algorithm.fedspeed = block(lam=10.0, rho=0.05, variant="paper",
                               alpha=config_dict.placeholder(float),
                               normalize_ascent=config_dict.placeholder(bool),
                               dual_average=config_dict.placeholder(str),
                               prox=config_dict.placeholder(str))
  c.algorithm.fedsmoo = block(alpha=0.1, rho=0.05, prox="squared", dual_average="all",
                              s_update="paper")
  c.algorithm.fedlesam = block(alpha=0.1, rho=0.05, prox="squared", perturbation="paper",
                               first_participation="zero")
  c.algorithm.fedlesam_d = block(alpha=0.1, rho=0.05, prox="squared", perturbation="paper",
                                 first_participation="zero")
  fedgloss = dict(rho=0.15, rho_l=0.15, rho0=0.001, ramp_rounds=0, beta=10.0, eta_s=1.0,
                  admm=True, client_optimizer="sgd", asam_eta=0.0, dual_scale="paper",
                  server_schedule="paper", refresh_per_epoch=False)
  c.algorithm.fedgloss = block(**fedgloss)          # FedGloSS CIFAR-10 CNN (Table 13)
  c.algorithm.naive_fedgloss = block(**fedgloss)
  c.algorithm.fedgmt = block(gamma=1.0, tau=3.0, alpha=0.95, beta=10.0, admm=True,
                             bookkeeping="paper", tau_squared=True)
  c.algorithm.fedgmt_v2 = block(gamma=1.0, tau=3.0, alpha=0.5, beta=10.0, admm=True,
                                bookkeeping="paper", tau_squared=True,
                                v2_ema_init="first_received")

  # Federated minimax (task.name != 'classification'): the task, the players' local optimisers
  # and the minimax algorithms' blocks (fedjax_sharp/minimax).
  c.task = ml_collections.ConfigDict()
  c.task.name = "classification"   # classification | quadratic | pl | simplex | bilinear |
  #                                  fair_classification | gan
  c.task.quadratic = block(num_clients=8, hetero_a=0.3, hetero_bc=1.0)
  c.task.pl = block(num_clients=8, hetero=0.5)
  c.task.simplex = block(num_clients=6, lam=0.0, hetero=0.5)
  c.task.bilinear = block(num_clients=4)
  c.task.fair_classification = block(lam=0.1)
  c.task.gan = block(fd_samples=2000, classifier_epochs=2, classifier_cache="")
  c.minimax = ml_collections.ConfigDict(dict(
      lr_x=0.02, lr_y=0.2, optimizer_x="sgd", optimizer_y="sgd", momentum=0.0, b1=0.5,
      b2=0.999))
  c.algorithm.fess_gda = block(eta_xg=1.0, eta_yg=1.0, p=0.0, beta=0.1)
  c.algorithm.local_sgda = block()
  c.algorithm.local_sgda_plus = block(snapshot_every=10)
  c.algorithm.fed_norm_sgda = block(gamma_x=config_dict.placeholder(float),
                                    gamma_y=config_dict.placeholder(float))
  c.algorithm.fed_norm_sgda_plus = block(gamma_x=config_dict.placeholder(float),
                                         gamma_y=config_dict.placeholder(float),
                                         snapshot_every=10)

  c.engine = ml_collections.ConfigDict()
  c.engine.client_strategy = "auto"  # auto | vmap | map | chunked_vmap | unrolled | host
  c.engine.chunk_size = 4            # clients per vmapped chunk ('chunked_vmap')
  c.engine.host_chunk = 1            # local steps per jitted call ('host'; 1 is fastest on CPU)
  c.engine.local_loop = "auto"       # auto | rolled | partial | unrolled
  c.engine.unroll = 4
  c.engine.skip_padding = True       # rolled loops stop at each client's last real step
  c.engine.sort_clients = False      # order the cohort by step count (chunked_vmap buckets)
  c.engine.micro_batch = 0           # model called on pieces of this many examples in training
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
  c.eval.every = 1                 # evaluate every k rounds (always in the last `last_n`)
  c.eval.batch_size = 1000
  c.eval.last_n = 20               # report mean/std of test accuracy over the last N rounds
  c.eval.target_accuracy = 0.0     # report the first round reaching it (0 = off)
  c.eval.average_last = 0          # > 0: also save the average of the last N global models
  c.eval.hessian_every = 0         # > 0: log lambda_max every k rounds (run by the analysis)
  c.eval.hessian_examples = 1000   # test examples for the logged lambda_max (0 = all)
  c.eval.hessian_iters = 20        # power iterations (FedGloSS Appendix D: 20)

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
  c.analysis.rho = 0.05            # sam_sharpness radius
  c.analysis.trace_probes = 20     # hessian_trace Hutchinson probes
  c.analysis.iters = 20            # lambda_max power iterations
  c.eval.artifact_every = 0        # > 0: task artifacts (GAN sample grids) every k rounds
  c.log_every = 1                  # progress line every k rounds
  c.checkpoint_every = 0           # > 0: save server + client state every k rounds (workdir)
  c.checkpoint_keep = 2            # checkpoints kept under <workdir>/checkpoints (orbax)
  c.resume = True                  # continue from the newest checkpoint of the same setting;
  #                                  False: discard the workdir's results and start over
  c.training = ml_collections.ConfigDict()
  c.training.on_nonfinite = "stop"  # 'stop' (status 'diverged', exit 3) | 'warn' (log, go on)
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


INF = float("inf")
# Numeric ranges of every algorithm block's fields: (low, high, low inclusive, high inclusive).
# None values (placeholders: "the variant's / algorithm's default") are allowed.
_NONNEG, _POS = (0.0, INF, True, False), (0.0, INF, False, False)
_UNIT_OPEN_HIGH, _UNIT_OPEN_LOW = (0.0, 1.0, True, False), (0.0, 1.0, False, True)
_UNIT, _UNIT_OPEN = (0.0, 1.0, True, True), (0.0, 1.0, False, False)
BLOCK_RANGES = {
    "rho": _NONNEG, "rho_l": _NONNEG, "rho0": _NONNEG, "mu": _NONNEG, "eta": _NONNEG,
    "asam_eta": _NONNEG, "gamma": _NONNEG, "p": _NONNEG, "tau": _POS, "lam": _POS,
    "eta_s": _POS, "eta_xg": _POS, "eta_yg": _POS, "gamma_x": _POS, "gamma_y": _POS,
    "server_lr_relative": _POS, "momentum": _UNIT_OPEN_HIGH, "ramp_rounds": _NONNEG,
    "snapshot_every": (1.0, INF, True, False), "num_clients": (1.0, INF, True, False),
    "hetero": _NONNEG, "hetero_a": _NONNEG, "hetero_bc": _NONNEG, "fd_samples": (2.0, INF, True, False),
    "classifier_epochs": (1.0, INF, True, False),
}
# Fields whose range depends on the block.
BLOCK_FIELD_RANGES = {
    ("feddyn", "alpha"): _POS, ("feddyn_sam", "alpha"): _POS, ("fedsmoo", "alpha"): _POS,
    ("fedlesam", "alpha"): _POS, ("fedlesam_d", "alpha"): _POS, ("fedspeed", "alpha"): _UNIT,
    ("fedgmt", "alpha"): _UNIT, ("fedgmt_v2", "alpha"): _UNIT,
    ("fedgmt", "beta"): _POS, ("fedgmt_v2", "beta"): _POS, ("fedgloss", "beta"): _POS,
    ("naive_fedgloss", "beta"): _POS, ("fedntd", "beta"): _NONNEG, ("fedcm", "beta"): _UNIT_OPEN_LOW,
    ("mofedsam", "beta"): _UNIT_OPEN_LOW, ("mimelite", "beta"): _UNIT_OPEN_HIGH,
    ("fess_gda", "beta"): _UNIT_OPEN, ("simplex", "lam"): _NONNEG, ("fair_classification", "lam"): _NONNEG,
}


def _in_range(value, spec) -> bool:
  low, high, low_in, high_in = spec
  return ((value > low or (low_in and value == low)) and
          (value < high or (high_in and value == high)))


def _range_text(spec) -> str:
  low, high, low_in, high_in = spec
  if high == INF:
    return f"must be {'>=' if low_in else '>'} {low:g}"
  return f"must be in {'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"


def _validate_blocks(section, prefix: str) -> None:
  for block_name, block in section.items():
    if not hasattr(block, "items"):
      continue
    for field, value in block.items():
      if value is None or isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
        continue
      spec = BLOCK_FIELD_RANGES.get((block_name, field), BLOCK_RANGES.get(field))
      if spec is not None and not _in_range(float(value), spec):
        raise ConfigError(f"{prefix}.{block_name}.{field} {_range_text(spec)}, got {value}")


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
  _one_of(config.model.get("compute_dtype", "float32"), COMPUTE_DTYPES, "model.compute_dtype")
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
  _validate_blocks(config.algorithm, "algorithm")
  if "task" in config:
    _validate_blocks(config.task, "task")
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
  new = json.loads(config.to_json_best_effort())
  default = _flatten(json.loads(base_config().to_json_best_effort()))
  name = new["algorithm"]["name"]
  fields = list(SETTING_FIELDS) + ["algorithm"]
  new_flat = _flatten({k: new[k] for k in fields if k in new})
  old_flat = _flatten({k: saved[k] for k in fields if k in saved})
  keep = lambda key: (not key.startswith("algorithm.") or key == "algorithm.name"
                      or key.startswith(f"algorithm.{name}."))
  diffs = []
  for key, value in new_flat.items():
    if not keep(key) or key in allow:
      continue
    old = old_flat.get(key, default.get(key, value))
    if old != value:
      diffs.append(f"{key}: saved {old!r}, now {value!r}")
  return diffs
