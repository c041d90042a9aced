"""Data layer: sources, client partitions and augmentation.

TensorFlow, tensorflow_datasets, pillow and h5py are never imported here; loaders import
them lazily.

`load_dataset(data_cfg)` dispatches on `data_cfg.source` (see `sources`); it returns an
`ArrayDataset` (images) or a `TokenDataset` (text, with its `vocabulary`).
`partition_dataset(dataset_or_labels, data_cfg, seed)` dispatches on `data_cfg.partition`
('iid' | 'dirichlet' | 'pathological' | 'file' | 'natural'); pass the dataset itself for
'natural' (its users / writers). Partition files: `save_partition` / `load_partition`
(format in `partition_files`).
"""
from fedjax_sharp.data import arrays
from fedjax_sharp.data import augment
from fedjax_sharp.data import federated_files
from fedjax_sharp.data import partition
from fedjax_sharp.data import partition_files
from fedjax_sharp.data import sources
from fedjax_sharp.data import text
from fedjax_sharp.data.augment import normalize
from fedjax_sharp.data.augment import random_crop_flip
from fedjax_sharp.data.partition import dirichlet_balanced
from fedjax_sharp.data.partition import dirichlet_label
from fedjax_sharp.data.partition import format_histograms
from fedjax_sharp.data.partition import iid
from fedjax_sharp.data.partition import label_histograms
from fedjax_sharp.data.partition import long_tail
from fedjax_sharp.data.partition import long_tail_counts
from fedjax_sharp.data.partition import natural_client_ids
from fedjax_sharp.data.partition import pathological
from fedjax_sharp.data.partition_files import load_partition
from fedjax_sharp.data.partition_files import save_partition
from fedjax_sharp.data.federated_files import load_federated_h5
from fedjax_sharp.data.federated_files import load_federated_sqlite
from fedjax_sharp.data.federated_files import load_imagefolder
from fedjax_sharp.data.federated_files import load_landmarks_csv
from fedjax_sharp.data.arrays import DATASET_STATS
from fedjax_sharp.data.sources import DatasetNotPreparedError
from fedjax_sharp.data.sources import TFDS_DATASETS
from fedjax_sharp.data.sources import TFDS_TEXT_DATASETS
from fedjax_sharp.data.arrays import channel_stats
from fedjax_sharp.data.sources import load_dataset
from fedjax_sharp.data.sources import load_embedded
from fedjax_sharp.data.sources import load_idx
from fedjax_sharp.data.sources import load_npz
from fedjax_sharp.data.sources import load_tfds
from fedjax_sharp.data.sources import load_tfds_text
from fedjax_sharp.data.sources import read_idx
from fedjax_sharp.data.arrays import stratified_subset
from fedjax_sharp.data.arrays import subsample
from fedjax_sharp.data.text import Vocabulary
from fedjax_sharp.data.text import load_vocabulary
from fedjax_sharp.data.text import save_vocabulary
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset

partition_dataset = partition.partition  # The dispatching function under a plain name.

__all__ = [
    "ArrayDataset",
    "DATASET_STATS",
    "DatasetNotPreparedError",
    "TFDS_DATASETS",
    "TFDS_TEXT_DATASETS",
    "TokenDataset",
    "Vocabulary",
    "arrays",
    "augment",
    "channel_stats",
    "dirichlet_balanced",
    "dirichlet_label",
    "federated_files",
    "format_histograms",
    "iid",
    "label_histograms",
    "load_dataset",
    "load_embedded",
    "load_federated_h5",
    "load_federated_sqlite",
    "load_idx",
    "load_imagefolder",
    "load_landmarks_csv",
    "load_npz",
    "load_partition",
    "load_tfds",
    "load_tfds_text",
    "load_vocabulary",
    "long_tail",
    "long_tail_counts",
    "natural_client_ids",
    "normalize",
    "partition",
    "partition_dataset",
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
]
