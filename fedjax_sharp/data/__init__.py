"""Data layer: sources, client partitions and augmentation.

TensorFlow, tensorflow_datasets, pillow and h5py are never imported here; loaders import
them lazily. JAX is imported with `augment`, on first use.

`load_dataset(data_cfg)` dispatches on `data_cfg.source` through the table
`sources.LOADERS` (one reader module per format); it returns an `ArrayDataset` (images) or a
`TokenDataset` (text, with its `vocabulary`).
`partition_dataset(dataset_or_labels, data_cfg, seed)` dispatches on `data_cfg.partition`
('iid' | 'dirichlet' | 'pathological' | 'file' | 'natural'); pass the dataset itself for
'natural' (its users / writers). Partition files: `save_partition` / `load_partition`
(format in `partition_files`).
"""
from fedjax_sharp.data import arrays
from fedjax_sharp.data import embedded
from fedjax_sharp.data import federated_files
from fedjax_sharp.data import hdf5
from fedjax_sharp.data import histograms
from fedjax_sharp.data import idx
from fedjax_sharp.data import image_files
from fedjax_sharp.data import leaf
from fedjax_sharp.data import natural
from fedjax_sharp.data import npz
from fedjax_sharp.data import partition
from fedjax_sharp.data import partition_draws
from fedjax_sharp.data import partition_files
from fedjax_sharp.data import sources
from fedjax_sharp.data import text
from fedjax_sharp.data import tff_sqlite
from fedjax_sharp.data import tfds_datasets
from fedjax_sharp.data import tfds_reader
from fedjax_sharp.data.arrays import DATASET_STATS
from fedjax_sharp.data.arrays import channel_stats
from fedjax_sharp.data.arrays import stratified_subset
from fedjax_sharp.data.arrays import subsample
from fedjax_sharp.data.embedded import load_embedded
from fedjax_sharp.data.hdf5 import load_federated_h5
from fedjax_sharp.data.histograms import format_histograms
from fedjax_sharp.data.histograms import label_histograms
from fedjax_sharp.data.idx import load_idx
from fedjax_sharp.data.idx import read_idx
from fedjax_sharp.data.image_files import load_imagefolder
from fedjax_sharp.data.image_files import load_landmarks_csv
from fedjax_sharp.data.leaf import load_leaf
from fedjax_sharp.data.npz import load_npz
from fedjax_sharp.data.partition import natural_client_ids
from fedjax_sharp.data.partition_draws import dirichlet_balanced
from fedjax_sharp.data.partition_draws import dirichlet_label
from fedjax_sharp.data.partition_draws import iid
from fedjax_sharp.data.partition_draws import long_tail
from fedjax_sharp.data.partition_draws import long_tail_counts
from fedjax_sharp.data.partition_draws import pathological
from fedjax_sharp.data.partition_files import load_partition
from fedjax_sharp.data.partition_files import save_partition
from fedjax_sharp.data.sources import LOADERS
from fedjax_sharp.data.sources import load_dataset
from fedjax_sharp.data.text import Vocabulary
from fedjax_sharp.data.text import load_vocabulary
from fedjax_sharp.data.text import save_vocabulary
from fedjax_sharp.data.tfds_datasets import TFDS_DATASETS
from fedjax_sharp.data.tfds_datasets import TFDS_TEXT_DATASETS
from fedjax_sharp.data.tfds_datasets import load_tfds
from fedjax_sharp.data.tfds_datasets import load_tfds_text
from fedjax_sharp.data.tfds_reader import DatasetNotPreparedError
from fedjax_sharp.data.tff_sqlite import load_federated_sqlite
from fedjax_sharp.data.tff_sqlite import load_tff_shakespeare
from fedjax_sharp.data.tff_sqlite import load_tff_stackoverflow
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset

partition_dataset = partition.partition  # The dispatching function under a plain name.


def __getattr__(name):
  """`augment` (and its `normalize`, `random_crop_flip`) imports JAX: it is loaded on first
  use, so that the readers and the downloader import without JAX."""
  if name in ("augment", "normalize", "random_crop_flip"):
    import importlib  # pylint: disable=g-import-not-at-top
    augment = importlib.import_module("fedjax_sharp.data.augment")
    return augment if name == "augment" else getattr(augment, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ArrayDataset",
    "arrays",
    "augment",
    "channel_stats",
    "DATASET_STATS",
    "DatasetNotPreparedError",
    "dirichlet_balanced",
    "dirichlet_label",
    "embedded",
    "federated_files",
    "format_histograms",
    "hdf5",
    "histograms",
    "idx",
    "iid",
    "image_files",
    "label_histograms",
    "leaf",
    "load_dataset",
    "load_embedded",
    "load_federated_h5",
    "load_federated_sqlite",
    "load_idx",
    "load_imagefolder",
    "load_landmarks_csv",
    "load_leaf",
    "load_npz",
    "load_partition",
    "load_tfds",
    "load_tfds_text",
    "load_tff_shakespeare",
    "load_tff_stackoverflow",
    "load_vocabulary",
    "LOADERS",
    "long_tail",
    "long_tail_counts",
    "natural",
    "natural_client_ids",
    "normalize",
    "npz",
    "partition",
    "partition_dataset",
    "partition_draws",
    "partition_files",
    "pathological",
    "random_crop_flip",
    "read_idx",
    "save_partition",
    "save_vocabulary",
    "sources",
    "stratified_subset",
    "subsample",
    "text",
    "TFDS_DATASETS",
    "tfds_datasets",
    "tfds_reader",
    "TFDS_TEXT_DATASETS",
    "tff_sqlite",
    "TokenDataset",
    "Vocabulary",
]
