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

A loader takes the config's data section and returns an `ArrayDataset` (uint8 `[N, H, W, C]`
images, int32 labels) or a `TokenDataset` (int32 token ids + the vocabulary); it reads the
fields it needs as `data_cfg.<field>` (every field is declared in the base config). Adding a
source is one module with a loader and one entry here (docs/adding_a_data_source.md).

With an empty data.path and data.download=True, the published files of federated EMNIST,
Shakespeare, Stack Overflow (TFF's SQLite) and CINIC-10 are fetched once (`data.download`).
Nothing here imports TensorFlow, tensorflow_datasets, pillow or h5py at module import time.
"""
from __future__ import annotations

from typing import Any, Callable

from fedjax_sharp.data import embedded
from fedjax_sharp.data import hdf5
from fedjax_sharp.data import idx
from fedjax_sharp.data import image_files
from fedjax_sharp.data import leaf
from fedjax_sharp.data import npz
from fedjax_sharp.data import tff_sqlite
from fedjax_sharp.data import tfds_datasets
from fedjax_sharp.data.arrays import hold_out_validation, subsample
from fedjax_sharp.data.types import TokenDataset

# data.source -> loader(data_cfg) -> ArrayDataset | TokenDataset.
LOADERS: dict[str, Callable[[Any], Any]] = {
    "embedded": embedded.from_config,
    "idx": idx.from_config,
    "npz": npz.from_config,
    "tfds": tfds_datasets.from_config,
    "imagefolder": image_files.imagefolder_from_config,
    "landmarks_csv": image_files.landmarks_from_config,
    "federated_h5": hdf5.from_config,
    "federated_sqlite": tff_sqlite.from_config,
    "leaf": leaf.from_config,
}
ALL_SOURCES = LOADERS   # the allowed data.source values (config validation reads the keys)


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
  ds = LOADERS[data_cfg.source](data_cfg)
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
