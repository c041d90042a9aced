"""Every field of the base config, declared once: its default, its range or choices and its doc.

A section is declared as `name=(default, allowed, doc)`, `allowed` being a range ('>= 0',
'(0, 1]', ...; `algorithms.hyperparameters.parse_range`), a tuple of choices, or None (any value
of the default's type); a None default takes a fourth element, the value's type. Each becomes a
`hyperparameters.Hyperparameter`, the same record as an algorithm's keyword argument, so that
`config.base_config`, `config.FIELD_DOCS` (`--print_config`, `--list_fields`) and the range
checks of `validate` (at the end; also `config.validate`) are derived from one table. What one
field cannot say alone (a field that depends on another, a registry that grows at run time) is
a rule below (`RULES`). The algorithm blocks `config.algorithm.<name>` are declared by the
algorithms' factories.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from fedjax_sharp.algorithms.hyperparameters import Field, Hyperparameter, check
from fedjax_sharp.analysis.round_metrics import ROUND_METRICS
from fedjax_sharp.core.client_table import CLIENT_TABLES
from fedjax_sharp.core.cohort import SAMPLINGS
from fedjax_sharp.core.execution import CLIENT_STRATEGIES, LOCAL_LOOPS
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.models.registry import COMPUTE_DTYPE_VALUES, CONV_IMPL_VALUES

# The metrics `analysis.metrics` may name: the table's (`analysis.round_metrics`).
ANALYSIS_METRICS = ROUND_METRICS
TASKS = ("classification", "quadratic", "pl", "simplex", "bilinear", "fair_classification",
         "gan")
_ON_OFF = (True, False)


def _declare(section: str, **specs: tuple) -> dict[str, dict[str, Hyperparameter]]:
  out = {}
  for name, (default, allowed, doc, *value_type) in specs.items():
    choices = tuple(allowed) if isinstance(allowed, tuple) else None
    field = Field(range=allowed if isinstance(allowed, str) else None, doc=doc, choices=choices)
    out[name] = Hyperparameter(name, default, value_type[0] if value_type else type(default),
                               field)
  return {section: out}


SECTIONS: dict[str, dict[str, Hyperparameter]] = {
    **_declare(
        "",
        name=("experiment", None, "the run's name (tables, plots)"),
        seed=(0, "[0, 4294967296)", "root of every random stream (init, sampling, data order)"),
        rounds=(50, ">= 1", "communication rounds"),
        clients_per_round=(10, ">= 1", "clients sampled each round"),
        aggregation=("auto", ("auto", "examples", "uniform"),
                     "client weights: 'examples' (n_m / sum n) | 'uniform' | 'auto' ('uniform' "
                     "with differential privacy, else the algorithm's own: "
                     "docs/algorithms/index.md)"),
        log_every=(0, ">= 0", "when not on a terminal (a pipe, a file): a progress line after "
                   "the first round, every k rounds and after the last; 0 = about ten in all "
                   "(k = rounds / 10); a terminal's line is redrawn every round"),
        checkpoint_every=(0, ">= 0", "> 0: save server + client state every k rounds (workdir)"),
        checkpoint_keep=(2, ">= 1", "checkpoints kept under <workdir>/checkpoints (orbax)"),
        resume=(True, _ON_OFF, "continue from the newest checkpoint of the same setting; "
                "False: discard the workdir's results and start over")),
    **_declare(
        "data",
        source=("embedded", None, "'embedded' | 'idx' | 'npz' | 'tfds' | 'imagefolder' | "
                "'landmarks_csv' | 'federated_h5' | 'federated_sqlite' | 'leaf'"),
        name=("digits", None, "digits | fashion_mnist | mnist | cifar10 | cifar100 | "
              "emnist[/digits|letters|...] | ag_news_subset | free (files)"),
        path=("", None, "idx dir / npz file / tfds data_dir / ImageFolder root / Landmarks dir / "
              "federated .h5 or .sqlite ('' = default)"),
        download=(True, _ON_OFF, "fetch once what is missing: tfds datasets (prepared into "
                  "data.path; needs the 'prepare' extra), and with data.path '' TFF's "
                  "federated_emnist / shakespeare / stackoverflow SQLite and CINIC-10 (into "
                  "$FEDJAX_SHARP_DATA or ~/.cache/fedjax_sharp)"),
        num_clients=(100, ">= 0", "clients of the partition ('file' / 'natural' partitions: "
                     "0 = all the given clients)"),
        partition=("iid", None, "'iid' | 'dirichlet' | 'pathological' | 'file' | 'natural'"),
        partition_path=("", None, "'file': a .json / .npz of per-client index lists (README)"),
        partition_allow_duplicates=(False, _ON_OFF,
                                    "'file': an index may belong to several clients"),
        alpha=(0.1, ">= 0", "Dirichlet concentration (0 = one class per client)"),
        dirichlet_mode=("label", ("balanced", "label"),
                        "'label' (Wang et al.; FedGMT) | 'balanced' (Hsu et al.; FedGloSS)"),
        long_tail=(False, _ON_OFF, "FedGMT's long-tail Dirichlet setting"),
        imbalance_factor=(2.0, ">= 1", "long tail: n_most / n_least class"),
        shards_per_client=(2, ">= 1", "'pathological': shards of one class per client"),
        examples_per_client=(0, ">= 0", "'balanced' Dirichlet: 0 = N // num_clients "
                             "(FedGloSS: 500)"),
        num_classes=(0, ">= 0", "npz files: the class count if the file does not declare it"),
        feed=("auto", ("auto", "device", "host"),
              "'device' (all examples on the device once) | 'host' (each round's examples "
              "gathered on the host, prefetched) | 'auto'"),
        device_budget_mb=(2048, "> 0", "'auto' feeds from the host above this training-set "
                          "size"),
        augment=("none", ("crop_flip", "none"), "'none' | 'crop_flip' (pad, random crop, "
                 "h-flip)"),
        augment_per_example=(True, _ON_OFF, "crop_flip: a random crop per example (False: one "
                             "per batch)"),
        augment_pad=(4, ">= 0", "zero padding of the random crop (FedGMT's text: 2; its "
                     "code: 4)"),
        max_train_examples=(0, ">= 0", "0 = all (a seeded, class-stratified subset "
                            "otherwise)"),
        max_test_examples=(0, ">= 0", "0 = all (the first N test examples otherwise)"),
        validation_examples=(0, ">= 0", "> 0: hold out this many training examples (never "
                             "trained on) and evaluate on them instead of the test split"),
        validation_seed=(0, ">= 0", "seed of the held-out validation examples"),
        max_length=(200, ">= 1", "text: tokens per example"),
        vocabulary_path=("", None, "'' = build it (saved as <workdir>/vocabulary.json)"),
        vocab_min_count=(2, ">= 0", "text: minimum token count of the vocabulary"),
        vocab_max_size=(0, ">= 0", "text: 0 = no limit"),
        word_counts_path=("", None, "stackoverflow: TFF's stackoverflow.word_count ('' = "
                          "fetched with data.download, else counted from the training split)"),
        image_size=(0, ">= 0", "imagefolder / landmarks_csv: resize to this (0 = keep / 64)"),
        merge_valid=(False, _ON_OFF, "imagefolder: CINIC-10's valid split joins train"),
        train_csv=("", None, "landmarks_csv: '' = <path>/federated_train.csv"),
        test_csv=("", None, "landmarks_csv: '' = <path>/test.csv"),
        image_dir=("", None, "landmarks_csv: '' = <path>/images (or <path>)"),
        test_path=("", None, "federated_h5: '' = path with 'train' -> 'test'"),
        invert_pixels=(True, _ON_OFF, "federated_h5/sqlite: TFF white-background -> MNIST "
                       "style")),
    **_declare(
        "model",
        name=("mcmahan_cnn", None, "mcmahan_cnn | lenet5 | mlp | linear | vgg11 | vgg11_gn | "
              "resnet8 | resnet18 | vit_small | fasttext | mobilenet_v2_gn"),
        compute_dtype=("auto", tuple(sorted(COMPUTE_DTYPE_VALUES)),
                       "'float32' | 'bfloat16' (forward/backward in bfloat16, weights and "
                       "updates in float32) | 'auto' (bfloat16 on GPU/TPU, float32 on CPU)"),
        conv_impl=("auto", tuple(sorted(CONV_IMPL_VALUES)),
                   "'xla' (lax convolutions) | 'matmul' (patches x kernel as one batched "
                   "matmul: vmapped clients run batched GEMMs, not grouped convolutions; same "
                   "parameters) | 'auto' ('matmul' only where measured faster: GPU, float32, "
                   "vmapped clients; else 'xla')")),
    **_declare("model.resnet8", groups=(2, ">= 1", "GroupNorm groups (FedGMT code)"),
               stem=("imagenet", ("cifar", "imagenet"), "FedGMT code: the ImageNet stem")),
    **_declare("model.resnet18", groups=(2, ">= 1", "GroupNorm groups"),
               stem=("cifar", ("cifar", "imagenet"), "3x3 stem without max pool, or ImageNet's")),
    **_declare("model.vit_small",
               attn_scale=("width", ("head_dim", "width"), "FedGMT code: sqrt(384)")),
    **_declare("model.fasttext",
               pool=("nonpad", ("all", "nonpad"), "mean over the real tokens or all of them "
                     "(vocab from the dataset)")),
    **_declare("model.mobilenet_v2_gn", width_mult=(1.0, "> 0", "channel width multiplier"),
               groups=(2, ">= 1", "GroupNorm groups")),
    **_declare("model.vgg11_gn", groups=(2, ">= 1", "GroupNorm groups")),
    **_declare(
        "local",
        epochs=(1, ">= 0", "E; K_m = E * ceil(n_m / B) (>= 1 unless local.steps > 0)"),
        steps=(0, ">= 0", "> 0: a fixed K for every client instead of epochs"),
        batch_size=(50, ">= 1", "B, examples per local step"),
        lr=(0.01, "> 0", "client learning rate"),
        lr_decay=(0.998, "(0, 1]", "eta_t = lr * lr_decay ** t (once per round)"),
        momentum=(None, "[0, 1)", "client momentum; None = 0.9 (the FedGMT setting); an "
                  "algorithm whose paper fixes its own uses its block's momentum instead "
                  "(docs/algorithms/index.md)", float),
        weight_decay=(1e-5, ">= 0", "client weight decay"),
        optimizer=("sgd", ("asam", "sam", "sgd"),
                   "local gradient of the algorithms that take any client optimiser: 'sgd' | "
                   "'sam' | 'asam' (fedavg + sam is the deprecated spelling of fedsam)"),
        rho=(0.05, ">= 0", "SAM radius (FedGMT Table 7: 5 x lr)"),
        asam_eta=(0.0, ">= 0", "ASAM's T = |w| + eta")),
    **_declare(
        "server",
        optimizer=("sgd", ("adagrad", "adam", "sgd", "yogi"),
                   "sgd (FedAvg with lr 1) | adam | yogi | adagrad"),
        lr=(1.0, "> 0", "server learning rate"),
        momentum=(0.0, "[0, 1)", "server momentum")),
    **_declare("algorithm", name=("fedavg", None, "the algorithm (docs/algorithms/index.md); "
                                  "its hyperparameters: config.algorithm.<name>")),
    **_declare("task", name=("classification", tuple(sorted(TASKS)),
                             "classification | quadratic | pl | simplex | bilinear | "
                             "fair_classification | gan")),
    **_declare("task.quadratic", num_clients=(8, ">= 1", "clients of the quadratic game"),
               hetero_a=(0.3, ">= 0", "heterogeneity of the quadratic terms"),
               hetero_bc=(1.0, ">= 0", "heterogeneity of the linear terms")),
    **_declare("task.pl", num_clients=(8, ">= 1", "clients of the PL game"),
               hetero=(0.5, ">= 0", "client heterogeneity")),
    **_declare("task.simplex", num_clients=(6, ">= 1", "clients of the simplex game"),
               lam=(0.0, ">= 0", "regulariser of y"), hetero=(0.5, ">= 0",
                                                            "client heterogeneity")),
    **_declare("task.bilinear", num_clients=(4, ">= 1", "clients of the bilinear game")),
    **_declare("task.fair_classification", lam=(0.1, ">= 0", "regulariser of the group "
                                                 "weights")),
    **_declare("task.gan", fd_samples=(2000, ">= 2", "samples of the Frechet distance"),
               classifier_epochs=(2, ">= 1", "epochs of the feature classifier"),
               classifier_cache=("", None, "feature classifier file ('' = under the "
                                 "workdir)")),
    **_declare(
        "minimax",
        lr_x=(0.02, "> 0", "learning rate of the min player x"),
        lr_y=(0.2, "> 0", "learning rate of the max player y"),
        optimizer_x=("sgd", ("adam", "sgd"), "local optimiser of x"),
        optimizer_y=("sgd", ("adam", "sgd"), "local optimiser of y"),
        momentum=(0.0, "[0, 1)", "'sgd' players' momentum"),
        b1=(0.5, "[0, 1)", "'adam' players' b1"),
        b2=(0.999, "[0, 1)", "'adam' players' b2")),
    **_declare(
        "engine",
        client_strategy=("auto", tuple(sorted(CLIENT_STRATEGIES)),
                         "how the cohort's clients run (core/execution.py)"),
        chunk_size=(4, ">= 1", "clients per vmapped chunk ('chunked_vmap')"),
        host_chunk=(1, ">= 1", "local steps per jitted call ('host'; 1 is fastest on CPU)"),
        host_devices=(0, ">= 0", "'host' runs clients side by side on this many devices (0 = "
                      "every CPU device of the process on a CPU, one on an accelerator)"),
        local_loop=("auto", tuple(sorted(LOCAL_LOOPS)), "how the local steps run"),
        unroll=(4, ">= 1", "'partial': local steps unrolled per scan iteration"),
        skip_padding=(True, _ON_OFF, "rolled loops run only each client's real steps"),
        sort_clients=(False, _ON_OFF, "order the cohort by step count (chunked_vmap buckets)"),
        micro_batch=(0, ">= 0", "model called on pieces of this many examples in training "
                     "(0 = whole batches)"),
        client_table=("auto", tuple(sorted(CLIENT_TABLES)),
                      "per-client state table: 'device' | 'host' (touched rows in memory) | "
                      "'disk' (touched rows in files under the workdir) | 'auto' (host above "
                      "the budget, disk when the rows the run can touch pass half the "
                      "host's memory)"),
        client_table_budget_mb=(0.0, ">= 0", "'auto''s budget for the dense table: 0 = a "
                                "quarter of the device's memory; > 0: MiB"),
        devices=(1, ">= 0", "devices of the client mesh (1 = one device, 0 = all)"),
        experiment_devices=(1, ">= 1", "devices a sweep splits its experiments over"),
        sampling=("fixed", tuple(SAMPLINGS),
                  "'fixed' (clients_per_round clients, uniformly without replacement) | "
                  "'poisson' (each client joins with q = clients_per_round / num_clients; "
                  "padded cohorts, docs/privacy.md)")),
    **_declare(
        "eval",
        every=(1, ">= 1", "evaluate every k rounds (always in the last `last_n`)"),
        target_accuracy=(0.0, ">= 0", "report the first round reaching it (0 = off; at most 1 "
                         "for accuracies)"),
        last_n=(20, ">= 1", "report mean/std of test accuracy over the last N rounds"),
        batch_size=(1000, ">= 1", "examples per evaluation batch"),
        average_last=(0, ">= 0", "> 0: also save the average of the last N global models"),
        hessian_every=(0, ">= 0", "> 0: log lambda_max every k rounds (run by the analysis)"),
        hessian_examples=(1000, ">= 0", "test examples for the logged lambda_max (0 = all)"),
        hessian_iters=(20, ">= 1", "power iterations (FedGloSS Appendix D: 20)"),
        artifact_every=(0, ">= 0", "> 0: task artifacts (GAN sample grids) every k rounds")),
    **_declare("log", tensorboard=(False, _ON_OFF, "write TensorBoard event files under "
                                   "<workdir>/tensorboard (metrics.jsonl stays the record)")),
    **_declare(
        "analysis",
        every=(0, ">= 0", "analysis metrics every k rounds and at the last (0 = off)"),
        metrics=((), None, f"any of {list(ANALYSIS_METRICS)}"),
        examples=(1000, ">= 0", "test examples the analysis uses"),
        rho=(0.05, ">= 0", "sam_sharpness radius"),
        trace_probes=(20, ">= 1", "hessian_trace Hutchinson probes"),
        iters=(20, ">= 1", "lambda_max power iterations")),
    **_declare(
        "dp",
        enabled=(False, _ON_OFF, "client-level differential privacy of the uploads (the other "
                 "dp fields apply only with it): each "
                 "client's upload clipped and noised inside the round (docs/privacy.md)"),
        clip_norm=(1.0, "(0, inf]", "C, the L2 bound of each client's upload (inf: no clipping)"),
        noise_multiplier=(None, ">= 0", "sigma: noise std sigma * C on the sum of the clipped "
                          "uploads (None: 1, or solved from dp.target_epsilon; set one of the two)",
                          float),
        delta=(1e-5, "(0, 1)", "the delta of the reported epsilon(delta)"),
        clip=("global", ("global", "per_tensor"),
              "'global' (one norm over the whole upload) | 'per_tensor' (every tensor clipped "
              "to C, DP-FedSAM's code)"),
        noise=("server", ("client", "server"),
               "'server' (one N(0, sigma^2 C^2) on the sum, DP-FedAvg) | 'client' (each client "
               "adds N(0, sigma^2 C^2 / m), DP-FedSAM's code)"),
        target_epsilon=(None, "> 0", "set: the noise multiplier is solved so that epsilon(delta) "
                        "after config.rounds rounds is this (leave dp.noise_multiplier unset; "
                        "summary.json records the solved value)", float),
        accountant=("auto", ("auto", "pld_poisson", "rdp", "rdp_poisson"),
                    "'rdp' (fixed-size cohorts without replacement; replace-one) | "
                    "'rdp_poisson' | 'pld_poisson' (Poisson sampling, add/remove-one) | 'auto' "
                    "('rdp' for fixed cohorts, 'pld_poisson' under Poisson sampling)"),
        record_client_metrics=(False, _ON_OFF, "record the clients' unnoised train loss, "
                               "accuracy and step counts under DP (outside the guarantee)"),
        noise_cohort_size=(None, ">= 1", "simulate a cohort of N: the noise on the mean is what N "
                           "clients would get (sigma C / N) and the accountant sees N of "
                           "num_clients N / clients_per_round clients (pfl's noise_cohort_size)",
                           int),
        adaptive_clip=(False, _ON_OFF, "adaptive clipping (Andrew et al. 2021): dp.clip_norm is "
                       "C_0, moved each round towards the dp.clip_quantile of the update norms"),
        clip_quantile=(0.5, "[0, 1]", "adaptive clipping: the target quantile of the update "
                       "norms"),
        clip_lr=(0.2, "> 0", "adaptive clipping: C <- C exp(-clip_lr (unclipped fraction - "
                 "quantile))"),
        clip_count_noise=(None, "> 0", "adaptive clipping: noise std of the count of unclipped "
                          "uploads, in clients (None: clients_per_round / 20); must exceed "
                          "dp.noise_multiplier / 2", float)),
    **_declare("training", on_nonfinite=("stop", ("stop", "warn"),
                                         "'stop' (status 'diverged', exit 3) | 'warn' (log, "
                                         "go on)")),
}

DECLARED: dict[str, Hyperparameter] = {
    f"{section}.{name}".lstrip("."): h for section, fields in SECTIONS.items()
    for name, h in fields.items()}


def is_minimax(config) -> bool:
  return config.task.name != "classification"


def _check(cond: bool, field: str, message: str) -> None:
  if not cond:
    raise ConfigError(f"{field} {message}")


def _one_of(value, allowed, field: str) -> None:
  if value not in allowed:
    raise ConfigError(f"{field}={value!r} is not one of {sorted(allowed)}")


# What one declaration cannot say: (config) -> None, raising ConfigError naming the field.
RULES: list[Callable[[Any], None]] = []
rule = RULES.append


@rule
def _registered_names(config) -> None:
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.data import partition as partition_lib
  from fedjax_sharp.data import sources as sources_lib
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  from fedjax_sharp.models.registry import MODELS
  _one_of(config.algorithm.name, MINIMAX_ALGORITHMS if is_minimax(config) else ALGORITHMS,
          "algorithm.name")
  _one_of(config.model.name, MODELS, "model.name")
  _one_of(config.data.source, sources_lib.ALL_SOURCES, "data.source")
  _one_of(config.data.partition, partition_lib.PARTITIONS, "data.partition")
  external = config.data.partition in partition_lib.EXTERNAL_PARTITIONS
  _check(config.data.num_clients >= (0 if external else 1), "data.num_clients",
         f"must be >= {0 if external else 1}"
         f"{' (0 = every client of the ' + config.data.partition + ')' if external else ''}, "
         f"got {config.data.num_clients}")


@rule
def _clients(config) -> None:
  if config.data.partition == "file":
    _check(bool(config.data.partition_path), "data.partition_path",
           "must name a .json or .npz partition file for data.partition='file'")
  task = config.task.name
  if task in ("quadratic", "pl", "simplex", "bilinear"):
    m = config.task[task].num_clients
    _check(config.clients_per_round <= m, "clients_per_round",
           f"({config.clients_per_round}) must be <= task.{task}.num_clients ({m})")
  elif config.data.num_clients:  # 0 with a 'file' / 'natural' partition: checked when loaded
    _check(config.clients_per_round <= config.data.num_clients, "clients_per_round",
           f"({config.clients_per_round}) must be <= data.num_clients "
           f"({config.data.num_clients})")
  _check(config.local.steps > 0 or config.local.epochs >= 1, "local.epochs",
         f"must be >= 1 when local.steps == 0, got {config.local.epochs}")
  _check(isinstance(config.seed, int), "seed", f"must be an integer, got {config.seed!r}")


@rule
def _classification_only(config) -> None:
  from fedjax_sharp.models.registry import conv_impl_models
  task, conv_impl = config.task.name, config.model.conv_impl
  if conv_impl not in ("xla", "auto"):
    _check(not is_minimax(config), "model.conv_impl", f"applies to classification only; "
           f"task.name={task!r} builds its own model: set it to 'xla'")
    _check(config.model.name in conv_impl_models(), "model.conv_impl",
           f"{conv_impl!r} applies to the convolutional models {conv_impl_models()}, not "
           f"model.name={config.model.name!r}: set it to 'xla'")
  _check(config.engine.micro_batch == 0 or not is_minimax(config), "engine.micro_batch",
         f"applies to classification only; task.name={task!r} builds its own players: set "
         f"it to 0")
  if not is_minimax(config) or task == "fair_classification":
    _check(config.eval.target_accuracy <= 1, "eval.target_accuracy",
           f"must be in [0, 1] (0 = off), got {config.eval.target_accuracy}")


@rule
def _analysis(config) -> None:
  unknown = sorted(set(config.analysis.metrics) - set(ANALYSIS_METRICS))
  _check(not unknown, "analysis.metrics", f"{unknown} not in {list(ANALYSIS_METRICS)}")
  _check(not (config.eval.hessian_every and config.analysis.every
              and "lambda_max" in config.analysis.metrics),
         "eval.hessian_every", "logs lambda_max, which analysis.metrics already has: set one of "
         "the two (eval.hessian_every=0, or drop 'lambda_max' from analysis.metrics)")


@rule
def _algorithm_blocks(config) -> None:
  """Every algorithm block: its fields declared by the factory, in their ranges; the selected
  algorithm's `config.server` settings used (algorithms/registration.py)."""
  from fedjax_sharp.algorithms import registry
  from fedjax_sharp.minimax import algorithms as _  # noqa: F401 (registers the minimax ones)
  for registration in registry.REGISTRY.values():
    registration.values(config)
  if not is_minimax(config) and config.algorithm.name in registry.ALGORITHMS:
    registry.ALGORITHMS[config.algorithm.name].check_server(config)


def own_privacy(config) -> bool:
  """Whether the selected algorithm applies its own clipping and noise (DP-FedSAM:
  `Registration.private`)."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  name = config.algorithm.name
  return not is_minimax(config) and name in ALGORITHMS and ALGORITHMS[name].private


def private(config) -> bool:
  """Whether the run applies client-level DP: `dp.enabled`, or an algorithm that applies its
  own."""
  return bool(config.dp.enabled) or own_privacy(config)


def dp_accountant(config) -> str:
  """`dp.accountant` with 'auto' resolved: 'rdp' (fixed-size cohorts without replacement, the
  engine's 'fixed' sampler) or 'pld_poisson' (exact for the engine's 'poisson' sampler)."""
  value = str(config.dp.accountant)
  if value != "auto":
    return value
  return "pld_poisson" if sampling(config) == "poisson" else "rdp"


def sampling(config) -> str:
  """The engine's cohort sampler, `engine.sampling` ('fixed' | 'poisson')."""
  return str(config.engine.sampling)


def aggregation(config) -> str:
  """`aggregation` with 'auto' resolved (`aggregation_choice`)."""
  return aggregation_choice(config)[0]


# The dp fields that describe the mechanism (for an algorithm with its own DP, the resolved
# config copies them from its block: config.json then records what the run applied).
MECHANISM_FIELDS = ("clip_norm", "noise_multiplier", "clip", "noise")


def own_mechanism_recorded(config) -> bool:
  """Whether `dp.enabled` of an own-DP algorithm is the resolved config's record of its
  mechanism (`config.resolved_setting`): every mechanism field equals the algorithm's."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  block = ALGORITHMS[config.algorithm.name].values(config)
  return all(config.dp[k] == block[k] for k in MECHANISM_FIELDS)


def aggregation_choice(config) -> tuple[str, str]:
  """(weighting, why): `aggregation` as set, or 'auto' resolved: 'uniform' under differential
  privacy, else the selected algorithm's own default (`register(..., weighting=...)`: the source
  it follows), 'examples' for the minimax algorithms."""
  value = str(config.aggregation)
  if value != "auto":
    return value, "as set"
  if private(config):
    return "uniform", "differential privacy (the sensitivity bound needs uniform weights)"
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  name = config.algorithm.name
  if not is_minimax(config) and name in ALGORITHMS:
    return ALGORITHMS[name].weighting, f"{name}'s default: {ALGORITHMS[name].weighting_source}"
  return "examples", "the default weighting"


@rule
def _privacy(config) -> None:
  dp = config.dp
  if dp.enabled:
    _check(not is_minimax(config), "dp.enabled", f"applies to classification; task.name="
           f"{config.task.name!r} (minimax) has no DP mechanism: leave it False")
    _check(not own_privacy(config) or own_mechanism_recorded(config), "dp.enabled",
           f"algorithm.name={config.algorithm.name!r} applies its own clipping and noise "
           f"(config.algorithm.{config.algorithm.name}): leave dp.enabled False")
    _check(dp.noise_multiplier == 0 or math.isfinite(dp.clip_norm), "dp.clip_norm",
           f"must be finite when dp.noise_multiplier > 0 (the noise std is sigma * C), got "
           f"{dp.clip_norm}")
  if dp.target_epsilon is not None:
    _check(bool(dp.enabled), f"dp.target_epsilon={dp.target_epsilon:g}",
           "is set but dp.enabled is False"
           + (f" (algorithm.name={config.algorithm.name!r} applies its own noise: set "
              f"algorithm.{config.algorithm.name}.noise_multiplier)" if own_privacy(config)
              else ": add --config.dp.enabled=True, or unset dp.target_epsilon"))
    _check(dp.noise_multiplier is None or own_privacy(config),
           f"dp.target_epsilon={dp.target_epsilon:g}",
           f"and dp.noise_multiplier={dp.noise_multiplier} are both set: the noise multiplier "
           f"is solved from the target; set only one of them")
  if dp.noise_cohort_size is not None:
    _check(bool(dp.enabled) and not own_privacy(config), "dp.noise_cohort_size",
           "applies to dp.enabled's mechanism: set dp.enabled=True"
           + (f" (algorithm.name={config.algorithm.name!r} applies its own noise)"
              if own_privacy(config) else ""))
    _check(dp.noise_cohort_size >= config.clients_per_round,
           f"dp.noise_cohort_size={dp.noise_cohort_size}",
           f"must be >= clients_per_round={config.clients_per_round} (it simulates a larger "
           f"cohort's noise)")
  if private(config):
    _check(str(config.aggregation) != "examples", "aggregation",
           "='examples' weighs clients by their example counts, which the DP sensitivity bound "
           "does not cover: use 'uniform' (or 'auto') with differential privacy")
    if dp.target_epsilon is not None:
      _check(int(config.data.num_clients) > 0, "dp.target_epsilon",
             "needs data.num_clients > 0 (the sampling rate clients_per_round / num_clients)")


def _algorithm_reads_cohort_size(config) -> str:
  """The selected algorithm's `FederatedAlgorithm.reads_cohort_size` (built from the config
  without a model: the factories only close over `apply_fn`)."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  return ALGORITHMS[config.algorithm.name].build(config, None).reads_cohort_size


@rule
def _sampling(config) -> None:
  """Poisson sampling: classification only; under DP, server noise (the fixed-denominator mean)
  and an algorithm that does not read the realised cohort size."""
  if sampling(config) != "poisson":
    return
  _check(not is_minimax(config), "engine.sampling",
         f"='poisson' applies to classification; task.name={config.task.name!r} (minimax) "
         f"samples fixed cohorts: leave it 'fixed'")
  if not private(config):
    return
  _check(dp_accountant(config) != "rdp", "dp.accountant",
         "='rdp' accounts for fixed-size cohorts; with engine.sampling='poisson' use "
         "'pld_poisson' or 'rdp_poisson' (or 'auto')")
  name = config.algorithm.name
  noise_field = "dp.noise" if config.dp.enabled else f"algorithm.{name}.noise"
  noise = config.dp.noise if config.dp.enabled else config.algorithm[name].get("noise", "server")
  _check(noise != "client", noise_field,
         f"='client' with engine.sampling='poisson': each client's share sigma^2 C^2 / m of "
         f"the noise would sum to a variance that depends on the realised cohort size; use "
         f"{noise_field}='server' (or engine.sampling='fixed')")
  why = _algorithm_reads_cohort_size(config)
  _check(not why, "engine.sampling",
         f"='poisson' with differential privacy: algorithm.name={name!r} {why}, which the "
         f"fixed-denominator mean does not cover; use engine.sampling='fixed'")


def choice_blocks(config) -> dict[str, str]:
  """{block: the field that chooses it} for every per-choice block of the config: a section with
  a `name` field and sub-blocks keyed by the names it may take ('algorithm.fedgmt':
  'algorithm.name', 'model.resnet8': 'model.name', 'task.pl': 'task.name'). Only the block the
  name picks is used."""
  out = {}
  for section in config:
    node = config[section]
    if hasattr(node, "items") and "name" in node:
      out.update({f"{section}.{key}": f"{section}.name" for key in node
                  if hasattr(node[key], "items")})
  return out


def unused_blocks(config) -> set[str]:
  """The per-choice blocks (`choice_blocks`) that `config`'s choices do not pick: what a run's
  config.json leaves out ('algorithm.fedavg' when algorithm.name is 'fedgmt')."""
  return {block for block, chooser in choice_blocks(config).items()
          if block.split(".")[1] != str(config[chooser.split(".")[0]].name)}


def refuse_unused(paths, configs, fix: Callable[[str, str], str] | None = None) -> None:
  """Refuses, in one line naming the fix, a field of `paths` (what a command line or a variant
  set) inside a per-choice block (`choice_blocks`) that none of `configs` (the runs it makes)
  uses: `--config.algorithm.my_fedprox.mu=0.1` with algorithm.name 'fedavg' would otherwise
  train FedAvg and say nothing. `fix(chooser, choice)`: the remedy (default `add
  --config.<chooser>=<choice>`). Values a config file writes into several blocks are not
  refused (a comparison's file holds every algorithm's hyperparameters), nor is anything in a
  finished run's config.json: only what was set for this command."""
  configs = list(configs)
  blocks = choice_blocks(configs[0])
  for path in paths:
    block = ".".join(path.split(".")[:2])
    if block not in blocks:
      continue
    chooser = blocks[block]
    section, choice = block.split(".")
    chosen = sorted({str(c[section].name) for c in configs})
    if choice not in chosen:
      now = repr(chosen[0]) if len(chosen) == 1 else f"one of {chosen}"
      remedy = fix(chooser, choice) if fix else f"add --config.{chooser}={choice}"
      raise ConfigError(f"{path} is set but {chooser} is {now}; {remedy}")


def validate(config, multiprocess: bool = False) -> None:
  """Every declared field in its range or choices, no undeclared field in a section, then the
  rules between fields and the algorithm blocks (`RULES`), and with `multiprocess` (a run of
  several processes, `core.distributed`) what such runs do not support; an error is one line
  naming the field and its allowed values."""
  for section, declared in SECTIONS.items():
    node = config
    for part in filter(None, section.split(".")):
      node = node[part]
    leaves = {k: node[k] for k in node if not hasattr(node[k], "items")}
    if not section:   # the top level's other fields are its sections
      leaves = {k: v for k, v in leaves.items() if k in declared}
    check(section, leaves, declared)
  for rule in RULES:
    rule(config)
  if multiprocess and config.engine.client_table == "host":
    raise ConfigError("engine.client_table='host': multi-process runs keep the client table "
                      "on the devices of the mesh; use 'device' (or 'auto')")
