"""TFDS datasets (`data.source='tfds'`): the image datasets of `TFDS_DATASETS` and the text
datasets of `TFDS_TEXT_DATASETS`, read in memory by `tfds_reader` (no TensorFlow needed for
prepared array_record data). EMNIST is turned upright (TFDS stores it transposed)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from fedjax_sharp.data import text as text_lib
from fedjax_sharp.data import tfds_reader
from fedjax_sharp.data.arrays import as_images, as_labels, make_dataset
from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.data.types import TokenDataset

# Datasets `load_dataset(data.source='tfds')` accepts: name -> (image key, label key,
# train split, test split). Anything else can still be loaded with `load_tfds` directly.
TFDS_DATASETS: dict[str, tuple[str, str, str, str]] = {
    "cifar10": ("image", "label", "train", "test"),
    "cifar100": ("image", "label", "train", "test"),  # 'label' = the 100 fine labels.
    "fashion_mnist": ("image", "label", "train", "test"),
    "mnist": ("image", "label", "train", "test"),
    # EMNIST: 'emnist' is TFDS's default config, byclass. Images are turned upright.
    "emnist": ("image", "label", "train", "test"),
    "emnist/balanced": ("image", "label", "train", "test"),
    "emnist/byclass": ("image", "label", "train", "test"),
    "emnist/bymerge": ("image", "label", "train", "test"),
    "emnist/digits": ("image", "label", "train", "test"),
    "emnist/letters": ("image", "label", "train", "test"),  # labels 1..26 (TFDS: 37 classes)
    "emnist/mnist": ("image", "label", "train", "test"),
}
_CLASSIC_TFDS = ("cifar10", "cifar100", "fashion_mnist", "mnist")

# TFDS datasets stored transposed (EMNIST: "inverted horizontally and rotated 90 degrees
# anti-clockwise", i.e. x_stored[i, j] = x_upright[j, i]): `load_tfds` transposes them back.
def _tfds_transposed(name: str) -> bool:
  return name.split("/")[0].split(":")[0] == "emnist"


# Text datasets `load_dataset(data.source='tfds')` accepts: name -> (text keys joined with a
# space, label key, train split, test split).
TFDS_TEXT_DATASETS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "ag_news_subset": (("title", "description"), "label", "train", "test"),
}


def load_tfds(name: str, data_dir: str | None = None, *, image_key: str | None = None,
              label_key: str | None = None, train_split: str | None = None,
              test_split: str | None = None, download: bool = False) -> ArrayDataset:
  """Loads a prepared TFDS image-classification dataset into memory.

  First tries `tfds.data_source` (array_record; no TensorFlow needed, pillow decodes the
  images); if that fails, falls back to `tfds.load(..., batch_size=-1)` + `tfds.as_numpy`
  (needs TensorFlow, reads any file format). Raises `DatasetNotPreparedError` with
  instructions when the dataset is not prepared in `data_dir`. EMNIST (any config) is
  transposed back to the upright MNIST orientation.

  Args:
    name: TFDS name, e.g. 'cifar10', 'cifar100' (fine labels), 'fashion_mnist', 'mnist',
      'emnist/byclass', 'emnist/letters'.
    data_dir: TFDS data directory (None: TFDS_DATA_DIR or ~/tensorflow_datasets).
    image_key, label_key, train_split, test_split: default from `TFDS_DATASETS`
      ('image', 'label', 'train', 'test').
    download: let TFDS download and prepare (needs network and TensorFlow).
  """
  defaults = TFDS_DATASETS.get(name, ("image", "label", "train", "test"))
  image_key = image_key or defaults[0]
  label_key = label_key or defaults[1]
  splits = (train_split or defaults[2], test_split or defaults[3])
  columns, info = tfds_reader.read_tfds(name, data_dir or None, splits, (image_key, label_key),
                                        download)
  arrays = []
  for split, cols in zip(splits, columns):
    try:
      x = np.stack([np.asarray(v) for v in cols[image_key]])
      y = np.asarray([int(v) for v in np.asarray(cols[label_key]).reshape(-1)], dtype=np.int64)
    except (ValueError, TypeError) as e:
      raise ValueError(f"{name}[{split}]: cannot stack {image_key!r}/{label_key!r} into "
                       f"arrays ({e})") from None
    if _tfds_transposed(name):
      x = as_images(x, f"{name}[{split}]").transpose(0, 2, 1, 3)
    arrays.extend([x, y])
  x_train, y_train, x_test, y_test = arrays
  return make_dataset(name, x_train, y_train, x_test, y_test,
                       num_classes=tfds_reader.num_classes_from_info(info, label_key))


def load_tfds_text(name: str, data_dir: str | None = None, *,
                   text_keys: Sequence[str] | None = None, label_key: str | None = None,
                   train_split: str | None = None, test_split: str | None = None,
                   max_length: int = 200, min_count: int = 2, max_size: int = 0,
                   vocabulary: "text_lib.Vocabulary | str | None" = None,
                   download: bool = False) -> TokenDataset:
  """Loads a prepared TFDS text-classification dataset as padded token ids.

  The texts of `text_keys` (default `TFDS_TEXT_DATASETS[name]`, for ag_news_subset the title
  and the description) are joined with a space, tokenised (`text.tokenize`) and encoded
  with `vocabulary` (a `text.Vocabulary` or the path of a saved one) or, if None, with a
  vocabulary built from the TRAINING split (`min_count`, `max_size`). Sequences are cut or
  zero-padded to `max_length`. The result carries the vocabulary: save it with the run
  (`text.save_vocabulary(path, ds.vocabulary)`) and pass it back to reproduce the encoding.
  """
  defaults = TFDS_TEXT_DATASETS.get(name, (("text",), "label", "train", "test"))
  text_keys = tuple(text_keys or defaults[0])
  label_key = label_key or defaults[1]
  splits = (train_split or defaults[2], test_split or defaults[3])
  columns, info = tfds_reader.read_tfds(name, data_dir or None, splits,
                                        text_keys + (label_key,), download)
  texts, labels = [], []
  for cols in columns:
    n = len(cols[label_key])
    texts.append([" ".join(text_lib._as_str(cols[k][i]) for k in text_keys)  # pylint: disable=protected-access
                  for i in range(n)])
    labels.append(as_labels(np.asarray([int(v) for v in np.asarray(cols[label_key]).reshape(-1)],
                                        dtype=np.int64), f"{name} labels"))
  if isinstance(vocabulary, str):
    vocabulary = text_lib.load_vocabulary(vocabulary)
  if vocabulary is None:
    vocabulary = text_lib.build_vocabulary(texts[0], min_count=min_count, max_size=max_size)
  x_train = text_lib.encode(texts[0], vocabulary, max_length)
  x_test = text_lib.encode(texts[1], vocabulary, max_length)
  num_classes = tfds_reader.num_classes_from_info(info, label_key)
  if num_classes is None:
    num_classes = int(max(labels[0].max(initial=-1), labels[1].max(initial=-1))) + 1
  names = None
  try:
    names = tuple(info.features[label_key].names)
    if len(names) != num_classes:
      names = None
  except Exception:  # pylint: disable=broad-except
    names = None
  return TokenDataset(name=name, x_train=x_train, y_train=labels[0], x_test=x_test,
                      y_test=labels[1], num_classes=num_classes, vocabulary=vocabulary,
                      class_names=names)



def _positive_int(value, field: str) -> int:
  if isinstance(value, bool) or int(value) != value or value < 1:
    raise ValueError(f"data.{field} must be a positive integer, got {value}")
  return int(value)


def from_config(data_cfg) -> ArrayDataset | TokenDataset:
  """data.name: one of `TFDS_DATASETS` or `TFDS_TEXT_DATASETS`; data.path: the TFDS data_dir
  ('' = TFDS_DATA_DIR or ~/tensorflow_datasets); data.download: prepare an unprepared
  dataset once. Text: data.max_length, vocab_min_count, vocab_max_size (0 = no limit),
  vocabulary_path ('' = built from the training split)."""
  name, download = data_cfg.name, data_cfg.download
  if not isinstance(download, bool):
    raise ValueError(f"data.download must be True or False, got {download!r}")
  if name in TFDS_TEXT_DATASETS:
    return load_tfds_text(
        name, data_dir=data_cfg.path or None,
        max_length=_positive_int(data_cfg.max_length, "max_length"),
        min_count=_positive_int(data_cfg.vocab_min_count, "vocab_min_count"),
        max_size=int(data_cfg.vocab_max_size), vocabulary=data_cfg.vocabulary_path or None,
        download=download)
  if name in TFDS_DATASETS:
    return load_tfds(name, data_dir=data_cfg.path or None, download=download)
  emnist = sorted(n for n in TFDS_DATASETS if _tfds_transposed(n))
  raise ValueError(f"data.name={name!r} is not one of {list(_CLASSIC_TFDS)}, {emnist} "
                   f"(turned upright) or the text datasets {sorted(TFDS_TEXT_DATASETS)} "
                   f"for data.source='tfds'")
