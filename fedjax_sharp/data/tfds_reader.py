"""Reading prepared TFDS datasets into memory, and preparing them once (`data.download`).

`read_tfds` tries `tfds.data_source` first (array_record: no TensorFlow, pillow decodes the
images), then `tfds.load(batch_size=-1)` (needs TensorFlow, reads any file format); when
neither can read the data it raises `DatasetNotPreparedError` with one line of instructions,
or with data.download=True prepares the dataset once in the array_record format. TFDS is
imported lazily. The datasets `load_dataset` accepts are in `tfds_datasets`.
"""
from __future__ import annotations

import logging
from typing import Sequence

from fedjax_sharp.errors import DataError


class DatasetNotPreparedError(DataError, RuntimeError):
  """A TFDS dataset is not prepared in the data directory (and cannot be downloaded). The
  message is one line (the CLI prints it as is); `details` holds the readers' own errors."""

  def __init__(self, message: str, details: str = ""):
    super().__init__(message)
    self.details = details


class ExampleFormatError(ValueError):
  """The examples were read but do not have the expected keys (not a preparation issue)."""


def _build_command(name: str, data_dir) -> str:
  where = f" --data_dir={data_dir}" if data_dir else ""
  return f"tfds build {name} --file_format=array_record{where}"


def _prepare_hint(name: str, data_dir) -> str:
  return (f"prepare it once on a machine with network access: `pip install "
          f"'fedjax_sharp[prepare]' && {_build_command(name, data_dir)}` "
          f"(array_record is read without TensorFlow), then pass data.path=<data_dir> (or set "
          f"TFDS_DATA_DIR); offline alternatives: data.source='idx' (e.g. Debian's "
          f"dataset-fashion-mnist), data.source='npz' or data.source='embedded' "
          f"(--verbose shows the readers' errors)")


# Where TFDS's builders download each dataset from (host, port): probed before preparing, so
# that a machine without network fails in seconds with one line instead of after TFDS's ten
# retries with backoff, minutes later (docs/datasets.md). Unlisted names probe TFDS's GCS mirror.
DOWNLOAD_HOSTS: dict[str, tuple[str, int]] = {
    "cifar10": ("www.cs.toronto.edu", 443),
    "cifar100": ("www.cs.toronto.edu", 443),
    "mnist": ("storage.googleapis.com", 443),
    "fashion_mnist": ("fashion-mnist.s3-website.eu-central-1.amazonaws.com", 80),
    "emnist": ("biometrics.nist.gov", 443),
    "ag_news_subset": ("drive.google.com", 443),
}
PROBE_TIMEOUT_S = 10.0


def _download_host(name: str) -> tuple[str, int]:
  return DOWNLOAD_HOSTS.get(name, DOWNLOAD_HOSTS.get(name.split("/")[0],
                                                     ("storage.googleapis.com", 443)))


def _tensorflow_available() -> bool:
  import importlib.util  # pylint: disable=g-import-not-at-top
  return importlib.util.find_spec("tensorflow") is not None


def _probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
  """None if a TCP connection to host:port opens within `timeout`, else the reason."""
  import socket  # pylint: disable=g-import-not-at-top
  try:
    with socket.create_connection((host, port), timeout=timeout):
      return None
  except OSError as e:
    return " ".join(str(e).split()) or type(e).__name__


def _download_and_prepare(tfds, name: str, data_dir) -> None:
  """data.download=True for an unprepared TFDS dataset: checks what preparing needs (TFDS's
  stock builders decode the publishers' archives with TensorFlow; the network), then lets
  TFDS download and prepare it ONCE in the array_record format that `tfds.data_source` reads
  without TensorFlow. Each missing requirement is one line naming the dataset, the directory
  and the way out."""
  where = data_dir or "(TFDS default: TFDS_DATA_DIR or ~/tensorflow_datasets)"
  if not _tensorflow_available():
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset is not prepared in data.path={where}, and "
        f"preparing it (data.download=True) needs TensorFlow: `pip install "
        f"'fedjax_sharp[prepare]'` and rerun (it downloads and prepares once, then reads "
        f"without TensorFlow); or run `{_build_command(name, data_dir)}` where TensorFlow is "
        f"installed and copy the result into data.path; offline alternatives: "
        f"data.source='idx' / 'npz' / 'embedded'")
  host, port = _download_host(name)
  reason = _probe(host, port)
  if reason is not None:
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset is not prepared in data.path={where} and "
        f"cannot be downloaded (no connection to {host}:{port}: {reason}); offline: run "
        f"`{_build_command(name, data_dir)}` on a machine with network access and copy "
        f"the prepared directory into data.path, or use data.source='idx' / 'npz' / "
        f"'embedded'")
  logging.getLogger(__name__).info("data.download: downloading and preparing %r into %s "
                                   "(array_record; once)", name, where)
  tfds.builder(name, data_dir=data_dir).download_and_prepare(file_format="array_record")


_GETITEMS_CHUNK = 4096


def _read_source(src) -> list:
  """Reads every example of a random-access TFDS data source, in order."""
  n = len(src)
  getitems = getattr(src, "__getitems__", None)
  if getitems is not None and n:
    try:
      first = getitems(list(range(min(_GETITEMS_CHUNK, n))))
    except TypeError:
      # tfds.testing.mock_data (4.9.10) installs an unbound `__getitems__` on its mock.
      first = None
    if first is not None:
      out = list(first)
      for start in range(len(out), n, _GETITEMS_CHUNK):
        out.extend(getitems(list(range(start, min(start + _GETITEMS_CHUNK, n)))))
      return out
  return [src[i] for i in range(n)]


def _columns(examples: Sequence[dict], keys: Sequence[str], what: str) -> dict[str, list]:
  """Examples (dicts) -> one list per key, in order."""
  if not examples:
    raise ExampleFormatError(f"{what}: the split is empty")
  for key in keys:
    if key not in examples[0]:
      raise ExampleFormatError(f"{what}: example has no key {key!r}; keys are "
                                f"{sorted(examples[0])}")
  try:
    return {key: [ex[key] for ex in examples] for key in keys}
  except KeyError as e:
    raise ExampleFormatError(f"{what}: an example has no key {e}") from None


def num_classes_from_info(info, label_key):
  try:
    return int(info.features[label_key].num_classes)
  except Exception:  # pylint: disable=broad-except
    return None


def _read_tfds_data_source(tfds, name, data_dir, splits, keys, download):
  columns, info = [], None
  for split in splits:
    src = tfds.data_source(name, split=split, data_dir=data_dir, download=download)
    if info is None:
      info = getattr(src, "dataset_info", None)
    columns.append(_columns(_read_source(src), keys, f"{name}[{split}]"))
  return columns, info


def _read_tfds_tf(tfds, name, data_dir, splits, keys, download):
  """Fallback: `tfds.load(..., batch_size=-1)` (needs TensorFlow)."""
  loaded, info = tfds.load(name, split=list(splits), data_dir=data_dir, batch_size=-1,
                           download=download, with_info=True)
  columns = []
  for split, ds in zip(splits, loaded):
    batch = tfds.as_numpy(ds)
    missing = [k for k in keys if k not in batch]
    if missing:
      raise ExampleFormatError(f"{name}[{split}]: keys are {sorted(batch)}, need "
                                f"{', '.join(repr(k) for k in keys)}")
    columns.append({k: batch[k] for k in keys})
  return columns, info


def read_tfds(name: str, data_dir, splits: Sequence[str], keys: Sequence[str],
               download: bool):
  """Reads `keys` of every example of `splits`: (one dict of columns per split, DatasetInfo).

  `tfds.data_source` first (array_record, no TensorFlow), then `tfds.load(batch_size=-1)`;
  raises `DatasetNotPreparedError` with instructions when neither can read the data.
  """
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("data.source='tfds' needs tensorflow-datasets (pip install "
                      "tensorflow-datasets pillow importlib_resources)") from e
  errors = []
  result = None
  try:
    result = _read_tfds_data_source(tfds, name, data_dir, splits, keys, False)
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f"TFDS has no dataset named {name!r}: {str(e).splitlines()[0]}") from None
  except ExampleFormatError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    errors.append(f"tfds.data_source: {type(e).__name__}: {e}")
    logging.getLogger(__name__).debug("tfds.data_source(%r) failed (%s); trying tfds.load",
                                     name, " ".join(str(e).split()))
  if result is None:
    try:
      result = _read_tfds_tf(tfds, name, data_dir, splits, keys, False)
    except ExampleFormatError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      errors.append(f"tfds.load: {type(e).__name__}: {e}")
  if result is None:
    prepared = None
    try:
      prepared = tfds.builder(name, data_dir=data_dir).is_prepared()
    except Exception:  # pylint: disable=broad-except
      pass
    details = "\n".join("  " + err.splitlines()[0] for err in errors)
    if prepared is False and download:
      _download_and_prepare(tfds, name, data_dir)
      return read_tfds(name, data_dir, splits, keys, download=False)
    if prepared is False:
      raise DatasetNotPreparedError(
          f"data.name={name!r}: the TFDS dataset is not prepared in data.path="
          f"{data_dir or '(TFDS default)'}; {_prepare_hint(name, data_dir)}", details)
    raise DatasetNotPreparedError(
        f"data.name={name!r}: the TFDS dataset could not be read from data.path="
        f"{data_dir or '(TFDS default)'} (tfds.data_source needs the array_record format; "
        f"tfds.load needs TensorFlow); {_prepare_hint(name, data_dir)}", details)
  columns, info = result
  if info is None:  # e.g. a data source without `dataset_info`: ask the builder.
    try:
      info = tfds.builder(name, data_dir=data_dir).info
    except Exception:  # pylint: disable=broad-except
      info = None
  return columns, info

