"""The data sources, one reader module per format, and `load_dataset`, which dispatches on
`data.source` through the table `LOADERS`:

  'embedded'          the UCI digits shipped with the package (`embedded`).
  'idx'               MNIST-style IDX files (`idx`).
  'npz'               x_train / y_train / x_test / y_test arrays (`npz`).
  'tfds'              a prepared TFDS dataset (`tfds_datasets`, read by `tfds_reader`):
                      cifar10, cifar100 (fine labels), mnist, fashion_mnist, emnist[/byclass,
                      bymerge, balanced, letters, digits, mnist] (turned upright),
                      ag_news_subset (text).
  'imagefolder'       `<path>/{train,test[,valid]}/<class>/*.png` (CINIC-10; `image_files`).
  'landmarks_csv'     Landmarks-User-160k split CSVs + a local image directory; natural
                      partition by user (`image_files`).
  'federated_h5'      TFF/fedjax Federated EMNIST HDF5; natural partition by writer (`hdf5`).
  'federated_sqlite'  TFF's SQLite client data (`tff_sqlite`); natural partition by client;
                      data.name 'shakespeare' / 'stackoverflow': next-token sequences.
  'leaf'              LEAF's JSON files (femnist, shakespeare; `leaf`).

A loader takes the config's data section and its own block's values as keyword arguments
(`register_source`) and returns an `ArrayDataset` (uint8 `[N, H, W, C]` images, int32 labels)
or a `TokenDataset` (int32 token ids + the vocabulary); it reads the shared fields as
`data_cfg.<field>` (`FIELDS`). Adding a source is one module with a loader and one
`register_source` call (docs/adding_a_data_source.md).

With an empty data.path and data.download=True, the published files of federated EMNIST,
Shakespeare, Stack Overflow (TFF's SQLite) and CINIC-10 are fetched once (`data.download`).
Nothing here imports TensorFlow, tensorflow_datasets, pillow or h5py at module import time.
"""
from __future__ import annotations

from typing import Any, Callable

from fedjax_sharp import hyperparameters
from fedjax_sharp.data import embedded
from fedjax_sharp.data import hdf5
from fedjax_sharp.data import idx
from fedjax_sharp.data import image_files
from fedjax_sharp.data import leaf
from fedjax_sharp.data import npz
from fedjax_sharp.data import partition
from fedjax_sharp.data import tff_sqlite
from fedjax_sharp.data import tfds_datasets
from fedjax_sharp.data.arrays import hold_out_validation, subsample
from fedjax_sharp.data.types import TokenDataset
from fedjax_sharp.hyperparameters import ON_OFF, Hyperparameter, declare

# The package's sources, registered below.
BUILT_IN = {"embedded": embedded.from_config, "idx": idx.from_config, "npz": npz.from_config,
            "tfds": tfds_datasets.from_config,
            "imagefolder": image_files.imagefolder_from_config,
            "landmarks_csv": image_files.landmarks_from_config,
            "federated_h5": hdf5.from_config, "federated_sqlite": tff_sqlite.from_config,
            "leaf": leaf.from_config}
# data.source -> loader(data_cfg, **block) -> ArrayDataset | TokenDataset (`register_source`);
# the config check of data.source reads its keys.
LOADERS: dict[str, Callable[..., Any]] = {}


def register_source(name: str, loader: Callable[..., Any]) -> None:
  """Makes `data.source=name` load with `loader(data_cfg, **block)`. The loader's keyword-only
  arguments annotated with a `Field` (as an algorithm factory's hyperparameters,
  `fedjax_sharp.hyperparameters`) become the config block `data.<name>`: their defaults, ranges
  and docs give `base_config()`, `--print_config` and the checks, and `block` holds the run's
  values. The fields every source shares are `FIELDS`, read from `data_cfg`."""
  if hyperparameters.fields(loader) and name in FIELDS:
    raise ValueError(f"data source {name!r}: its block data.{name} would hide the shared field")
  LOADERS[name] = loader


def blocks() -> dict[str, dict[str, Hyperparameter]]:
  """The config blocks `data.<source>` of the sources whose loader declares fields."""
  out = {name: hyperparameters.fields(loader) for name, loader in LOADERS.items()}
  return {name: block for name, block in out.items() if block}


# The config block `data`: the fields every source shares (`load_dataset`, the partitions) and
# those several read from `data_cfg`; a source's own fields are its block `data.<source>`,
# declared by its loader's keyword arguments (`register_source`).
FIELDS = declare(
    source=("embedded", None, f"a registered source ({' | '.join(BUILT_IN)}, and any "
            "register_source adds)"),
    name=("digits", None, "digits | fashion_mnist | mnist | cifar10 | cifar100 | "
          "emnist[/digits|letters|...] | ag_news_subset | free (files)"),
    path=("", None, "idx dir / npz file / tfds data_dir / ImageFolder root / Landmarks dir / "
          "federated .h5 or .sqlite ('' = default)"),
    download=(True, ON_OFF, "fetch once what is missing: tfds datasets (prepared into "
              "data.path; needs the 'prepare' extra), and with data.path '' TFF's "
              "federated_emnist / shakespeare / stackoverflow SQLite and CINIC-10 (into "
              "$FEDJAX_SHARP_DATA or ~/.cache/fedjax_sharp)"),
    num_clients=(100, ">= 0", "clients of the partition ('file' / 'natural' partitions: 0 = "
                 "all the given clients)"),
    partition=("iid", None, f"{' | '.join(partition.PARTITIONS)}"),
    partition_path=("", None, "'file': a .json / .npz of per-client index lists (README)"),
    partition_allow_duplicates=(False, ON_OFF, "'file': an index may belong to several "
                                "clients"),
    alpha=(0.1, ">= 0", "Dirichlet concentration (0 = one class per client)"),
    dirichlet_mode=("label", ("balanced", "label"),
                    "'label' (Wang et al.; FedGMT) | 'balanced' (Hsu et al.; FedGloSS)"),
    long_tail=(False, ON_OFF, "FedGMT's long-tail Dirichlet setting"),
    imbalance_factor=(2.0, ">= 1", "long tail: n_most / n_least class"),
    shards_per_client=(2, ">= 1", "'pathological': shards of one class per client"),
    examples_per_client=(0, ">= 0", "'balanced' Dirichlet: 0 = N // num_clients (FedGloSS: "
                         "500)"),
    num_classes=(0, ">= 0", "npz files: the class count if the file does not declare it"),
    feed=("auto", ("auto", "device", "host"),
          "'device' (all examples on the device once) | 'host' (each round's examples gathered "
          "on the host, prefetched) | 'auto'"),
    device_budget_mb=(2048, "> 0", "'auto' feeds from the host above this training-set size"),
    augment=("none", ("crop_flip", "none"), "'none' | 'crop_flip' (pad, random crop, h-flip)"),
    augment_per_example=(True, ON_OFF, "crop_flip: a random crop per example (False: one per "
                         "batch)"),
    augment_pad=(4, ">= 0", "zero padding of the random crop (FedGMT's text: 2; its code: 4)"),
    max_train_examples=(0, ">= 0", "0 = all (a seeded, class-stratified subset otherwise)"),
    max_test_examples=(0, ">= 0", "0 = all (the first N test examples otherwise)"),
    validation_examples=(0, ">= 0", "> 0: hold out this many training examples (never trained "
                         "on) and evaluate on them instead of the test split"),
    validation_seed=(0, ">= 0", "seed of the held-out validation examples"),
    max_length=(200, ">= 1", "text: tokens per example"),
    vocabulary_path=("", None, "'' = build it (saved as <workdir>/vocabulary.json)"),
    vocab_min_count=(2, ">= 0", "text: minimum token count of the vocabulary"),
    vocab_max_size=(0, ">= 0", "text: 0 = no limit"),
    image_size=(0, ">= 0", "imagefolder / landmarks_csv: resize to this (0 = keep / 64)"),
    invert_pixels=(True, ON_OFF, "federated_h5/sqlite: TFF white-background -> MNIST style"))
for _name, _loader in BUILT_IN.items():
  register_source(_name, _loader)


def _count(data_cfg, field: str) -> int:
  value = getattr(data_cfg, field)
  if isinstance(value, bool) or int(value) != value or value < 0:
    raise ValueError(f"data.{field} must be an integer >= 0 (0 = none / all), got {value}")
  return int(value)


def load_dataset(data_cfg: Any, seed: int | None = None):
  """Loads the dataset the config's data section describes (`LOADERS[data_cfg.source]`).

  Then, for class-labelled datasets:
    validation_examples (0 = none): hold out a seeded (validation_seed), class-stratified
      subset of the training set and evaluate on it instead of the test split
      (hyperparameter tuning); applied before the max_*_examples subsets.
    max_train_examples, max_test_examples (0 = all): seeded, class-stratified subsets;
      their seed is `seed` (default 0).
  Each loader's docstring lists the fields it reads.
  """
  if data_cfg.source not in LOADERS:
    raise ValueError(f"data.source={data_cfg.source!r} is not one of {sorted(LOADERS)}")
  source = data_cfg.source
  declared = hyperparameters.fields(LOADERS[source])
  given = dict(data_cfg[source]) if declared and source in data_cfg else {}
  ds = LOADERS[source](data_cfg, **hyperparameters.block_values(f"data.{source}", given, declared))
  counts = {f: _count(data_cfg, f)
            for f in ("validation_examples", "max_train_examples", "max_test_examples")}
  if isinstance(ds, TokenDataset) and ds.label_mode == "token":
    for field, value in counts.items():
      if value:
        raise ValueError(f"data.{field}: class-stratified subsets need class labels; this "
                         f"dataset has per-token targets (next-token prediction): take fewer "
                         f"clients with data.num_clients instead")
  if counts["validation_examples"]:
    ds = hold_out_validation(ds, counts["validation_examples"], seed=data_cfg.validation_seed)
  if counts["max_train_examples"] or counts["max_test_examples"]:
    ds = subsample(ds, counts["max_train_examples"], counts["max_test_examples"],
                   seed=0 if seed is None else seed)
  return ds
