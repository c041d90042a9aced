"""Downloads the published datasets that TFDS lacks: verified, resumable, atomic, cached once.

`fetch_dataset(name)` returns a directory under `default_cache_dir()` (`$FEDJAX_SHARP_DATA`,
else `~/.cache/fedjax_sharp`) holding (names are the keys of `RESOURCES`):

  cinic10                   {train,valid,test}/<class>/*.png            (CINIC-10)
  gld160k                   landmarks-user-160k/{federated_train,test}.csv
  gld23k                    mini_gld_train_split.csv, mini_gld_test.csv
  federated_emnist          emnist_all.sqlite                           (TFF's SQLite files)
  shakespeare               shakespeare.sqlite
  stackoverflow             stackoverflow.sqlite
  stackoverflow_word_count  stackoverflow.word_count  (and _tag_count: stackoverflow.tag_count)

The Landmarks entries are the federated split files (Hsu et al. 2020, as TFF uses them); the
GLDv2 images are 500 shards of the full dataset and are not fetched here. Use::

    root = download.fetch_dataset("cinic10")          # -> federated_files.load_imagefolder(root)
    db = os.path.join(download.fetch_dataset("federated_emnist"), "emnist_all.sqlite")

Why each step:
* A dataset directory counts only once its `.complete` (written last, holding the SHA-256 of the
  files it came from) exists; then `fetch` returns at once without network: never twice.
* A download goes to `<cache>/downloads/<file>.part`; a broken connection keeps it and the next
  attempt resumes with `Range: bytes=N-` (a server answering 200 restarts it from byte 0).
* The file is checked against its size, MD5 and SHA-256 where published (the registry says
  where each pin comes from); a mismatch deletes it and retries, then fails with one line naming
  the URL and both hashes. A file with no published SHA-256 is trusted on first use: its hash
  goes to `<file>.sha256` beside it, with a warning, and is enforced from then on; it is
  recorded only once the file has unpacked and been read to its end, so a captive portal's HTML
  page or a body cut short is never what later downloads are held to. A refusal names the
  exact files to delete.
* A transfer stops early when more than the pinned size arrives (at most one byte more is
  read: a Content-Length that disagrees with the pin is not trusted either way, the size and
  hash judge the file), or, with no pinned size, more than its Content-Length, and when it
  runs slower than `download_files._MIN_RATE` bytes/s over a `timeout` window (a server
  trickling a byte a second defeats a socket timeout). A download that fails because there
  is no network (no DNS, network unreachable) is not retried.
* Compressed archives are read to the end of the stream, so the gzip/bzip2/xz checksum is
  verified, and a tar that ends in a garbled or truncated header is refused (tarfile alone stops
  there silently). A write error while unpacking (disk full, file too large) is told apart from
  a bad archive: the download is kept.
* Archives are unpacked into a temporary sibling directory renamed into place, so a crash (even
  SIGKILL) never leaves a partial dataset: the next call removes the temporary directory and
  unpacks again from the kept download. Members landing outside the directory (`..`, absolute
  paths, links, devices) are refused. A lock file serialises processes sharing a cache.
* Offline: put the published file in `<cache>/downloads/`; `fetch` verifies and uses it. With
  no network the error says so, naming the dataset, the file and the directory.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import hashlib
import http.client
import json
import logging
import os
import posixpath
import shutil
import socket
import tempfile
import time
import urllib.error
from typing import Sequence

from fedjax_sharp.data.download_files import (CHUNK, BadArchive, ShortRead, WriteError,
                                              download_to, one_line_reason, unpack)
from fedjax_sharp.errors import DataError
from fedjax_sharp.fileio import atomic_write_bytes

try:
  import fcntl
except ImportError:  # not POSIX: no cross-process lock
  fcntl = None

_log = logging.getLogger(__name__)

CACHE_ENV = "FEDJAX_SHARP_DATA"
KINDS = (None, "tar", "tar.gz", "tgz", "tar.bz2", "tar.xz", "zip", "lzma", "xz", "bz2", "gz")
_BACKOFF_S = 1.0            # sleep before retry k: k * _BACKOFF_S
# Offline, a dataset's message also names the files that loading it needs next.
_NEEDS_ALSO = {"stackoverflow": ("stackoverflow_word_count",)}
_MARKER = ".complete"


@dataclasses.dataclass(frozen=True)
class Resource:
  """One published file. `urls` are mirrors, tried in turn; `kind` says how to unpack it (None:
  a plain file, copied as is; 'lzma'/'xz'/'bz2'/'gz': one compressed file, written without the
  extension; 'tar*'/'tgz'/'zip': an archive)."""
  name: str
  urls: tuple[str, ...]
  sha256: str | None = None
  md5: str | None = None
  size: int | None = None
  kind: str | None = None
  file_name: str = ""       # "" = the last path component of the first URL

  def __post_init__(self):
    urls = (self.urls,) if isinstance(self.urls, str) else tuple(self.urls)
    object.__setattr__(self, "urls", urls)
    if self.kind not in KINDS:
      raise ValueError(f"Resource {self.name}: kind={self.kind!r}; known: {KINDS}")
    if not self.file_name:
      object.__setattr__(self, "file_name", posixpath.basename(urls[0].split("?")[0]))


_TFF = "https://storage.googleapis.com/tff-datasets-public/"
_CINIC_MIRRORS = (
    "https://datashare.ed.ac.uk/server/api/core/bitstreams/"
    "e8e186cc-2688-48f1-aa5a-3fda1a43f8b6/content",
    "https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",
    "https://datashare.is.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz")
# Where the pins come from (none could be checked against the real files here):
# sha256 of emnist_all.sqlite.lzma and its size: a third-party provenance manifest whose
# downloader enforces them; shakespeare: google/fedjax downloads_test.py; word/tag counts:
# tensorflow/federated stackoverflow.py; CINIC-10 sha256: a third-party downloader that enforces
# it, md5 and size: many loaders (torchvision-style) agree. Landmarks md5s: tensorflow/federated
# gldv2.py. stackoverflow.sqlite.lzma: nothing published, trusted on first use.
RESOURCES: dict[str, tuple[Resource, ...]] = {
    "cinic10": (Resource(
        "cinic10", _CINIC_MIRRORS, kind="tar.gz", file_name="CINIC-10.tar.gz", size=687_544_992,
        sha256="31b095acf6d75e25a9e028bae82a07a0f94ff6b00671be2802d34ac4efa81a9e",
        md5="6ee4d0c996905fe93221de577967a372"),),
    "gld160k": (Resource(
        "gld160k", "https://storage.googleapis.com/gresearch/federated-vision-datasets/"
        "landmarks-user-160k.zip", kind="zip", md5="53c36bd7d5fc12f927af2820b7e4a57c"),),
    "gld23k": (
        Resource("gld23k_train", _TFF + "mini_gld_train_split.csv",
                 md5="9fd62cf79a67046fdd673d3a0ac52841"),
        Resource("gld23k_test", _TFF + "mini_gld_test.csv",
                 md5="298e9d19d66357236f66fe8e22920933")),
    "federated_emnist": (Resource(
        "federated_emnist", _TFF + "emnist_all.sqlite.lzma", kind="lzma", size=170_507_172,
        sha256="c3aaf91b4cf4e69d53d81627ad119eccdc878ff906f68e66063ff10f67faad48"),),
    "shakespeare": (Resource(
        "shakespeare", _TFF + "shakespeare.sqlite.lzma", kind="lzma", size=1_329_828,
        sha256="d3d11fceb9e105439ac6f4d52af6efafed5a2a1e1eb24c5bd2dd54ced242f5c4"),),
    "stackoverflow": (Resource("stackoverflow", _TFF + "stackoverflow.sqlite.lzma", kind="lzma"),),
    "stackoverflow_word_count": (Resource(
        "stackoverflow_word_count", _TFF + "stackoverflow.word_count.tar.bz2", kind="tar.bz2",
        sha256="1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c"),),
    "stackoverflow_tag_count": (Resource(
        "stackoverflow_tag_count", _TFF + "stackoverflow.tag_count.tar.bz2", kind="tar.bz2",
        sha256="6fe281cec490d9384a290d560072438e7e2b377bbb823876ce7bd6f82696772d"),),
}


def default_cache_dir() -> str:
  return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache",
                                                   "fedjax_sharp")


def fetch_dataset(name: str, cache_dir: str | None = None, **kwargs) -> str:
  """`fetch` of a known dataset by name (see the module docstring for what the path holds)."""
  if name not in RESOURCES:
    raise DataError(f"unknown dataset {name!r}; known: {', '.join(sorted(RESOURCES))}")
  also = tuple(r for other in _NEEDS_ALSO.get(name, ()) for r in RESOURCES[other])
  return fetch(RESOURCES[name], cache_dir, name=name, also=also, **kwargs)


def fetch(resource: Resource | Sequence[Resource], cache_dir: str | None = None, *,
          name: str | None = None, retries: int = 3, timeout: float = 60.0,
          keep_archive: bool = False, download: bool = True,
          also: Sequence[Resource] = ()) -> str:
  """Returns `<cache_dir>/<name>`, the complete unpacked resource(s), fetching what is missing.

  `name` defaults to the (first) resource's name. `download=False` never touches the network:
  the files must be complete or already in `<cache_dir>/downloads/`. `keep_archive` keeps the
  downloaded files after unpacking (their `.sha256` records are always kept). `also`: other
  resources that using this one needs (named in the offline message only).
  """
  resources = (resource,) if isinstance(resource, Resource) else tuple(resource)
  name = name or resources[0].name
  cache_dir = os.path.abspath(cache_dir or default_cache_dir())
  final = os.path.join(cache_dir, name)
  if _is_complete(final, resources):
    return final
  os.makedirs(cache_dir, exist_ok=True)
  with _locked(os.path.join(cache_dir, f".{name}.lock")):
    if _is_complete(final, resources):  # another process finished it while we waited
      return final
    for stale in glob.glob(os.path.join(cache_dir, f".{name}.tmp-*")):
      _log.info("%s: removing %s left by an interrupted extraction", name, stale)
      shutil.rmtree(stale, ignore_errors=True)
    files = [_obtain(r, name, cache_dir, retries, timeout, download, also) for r in resources]
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=cache_dir)
    try:
      for r, got in zip(resources, files):
        _log.info("%s: unpacking %s", name, got.path)
        try:
          unpack(r, got.path, tmp, name)
        except BadArchive as e:
          raise DataError(f"{name}: cannot unpack {got.path} ({e}); "
                          f"{_delete_advice(got)}") from None
        except WriteError as e:
          raise DataError(f"{name}: cannot write the unpacked files in {cache_dir} ({e}); "
                          f"the download {got.path} is kept (it is not at fault): free space "
                          f"there or set {CACHE_ENV} to another directory, and rerun") from None
      for got in files:   # unpacked and read to the end: now its hash may be trusted
        if got.pending:
          _trust(got, name)
      record = {r.file_name: got.sha for r, got in zip(resources, files)}
      atomic_write_bytes(os.path.join(tmp, _MARKER), json.dumps(record).encode())
      if os.path.lexists(final):  # incomplete, or made from files whose pin has changed
        shutil.rmtree(final)
      os.replace(tmp, final)
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
    if not keep_archive:
      for got in files:
        with contextlib.suppress(FileNotFoundError):
          os.remove(got.path)
  return final


@dataclasses.dataclass
class _Obtained:
  path: str
  sha: str
  sidecar: str
  pending: bool      # no published or recorded SHA-256 yet: record it once it unpacks
  recorded: bool     # checked against the hash in `sidecar` (recorded at a first download)
  downloaded: bool   # by this call (not found in downloads/)
  md5_ok: bool       # an md5 was published and matched


def _delete_advice(got: _Obtained) -> str:
  if got.pending and got.downloaded:   # never trusted: the next call downloads it afresh
    with contextlib.suppress(FileNotFoundError):
      os.remove(got.path)
    return "it was deleted and its hash not recorded; rerun to download it again"
  if got.recorded:
    return f"delete {got.path} and {got.sidecar} to download it again"
  return f"delete {got.path} to download it again"


def _is_complete(final: str, resources: Sequence[Resource]) -> bool:
  try:
    with open(os.path.join(final, _MARKER)) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return False
  return all(r.file_name in record and (r.sha256 is None or record[r.file_name] == r.sha256)
             for r in resources)


@contextlib.contextmanager
def _locked(path: str):
  with open(path, "a") as f:
    if fcntl is not None:
      fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
    yield


def _hashes(path: str) -> tuple[int, str, str]:
  sha, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
  with open(path, "rb") as f:
    while chunk := f.read(CHUNK):
      sha.update(chunk)
      md5.update(chunk)
      size += len(chunk)
  return size, sha.hexdigest(), md5.hexdigest()


def _problem(r: Resource, path: str, expected: str | None, sidecar: str) -> tuple[str, str | None]:
  """(sha256 of the file, None if it matches every pin, else what is wrong in one line)."""
  size, sha, md5 = _hashes(path)
  if r.size is not None and size != r.size:
    return sha, f"has {size} bytes (sha256 {sha}), expected {r.size} bytes"
  if r.md5 is not None and md5 != r.md5:
    return sha, f"has md5 {md5} (sha256 {sha}), expected md5 {r.md5}"
  if expected is not None and sha != expected:
    how = "" if r.sha256 else f" (recorded at its first download in {sidecar})"
    return sha, f"has sha256 {sha}, expected {expected}{how}"
  return sha, None


def _no_network(e: BaseException) -> bool:
  """No DNS or no route: retrying the same host at once will not help."""
  reason = e.reason if isinstance(e, urllib.error.URLError) else e
  return isinstance(reason, socket.gaierror) or (
      isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH))


def _obtain(r: Resource, name: str, cache_dir: str, retries: int, timeout: float,
            download: bool, also: Sequence[Resource] = ()) -> _Obtained:
  """The verified file in `<cache_dir>/downloads/`, downloading it if absent."""
  ddir = os.path.join(cache_dir, "downloads")
  os.makedirs(ddir, exist_ok=True)
  path = os.path.join(ddir, r.file_name)
  sidecar = path + ".sha256"
  expected = r.sha256
  if expected is None and os.path.exists(sidecar):
    with open(sidecar) as f:
      expected = f.read().strip()
  recorded = expected is not None and r.sha256 is None
  wanted = (r,) + tuple(also)
  offline = (f"download {' and '.join(x.urls[0] for x in wanted)} elsewhere and put "
             f"{' and '.join(x.file_name for x in wanted)} in {ddir}")
  if os.path.exists(path):
    sha, problem = _problem(r, path, expected, sidecar)
    if problem:
      advice = (f"delete {path} to download it again, or {sidecar} if the hash recorded "
                f"there came from a bad download" if recorded else
                f"delete {path} to download it again")
      raise DataError(f"{name}: {path} {problem}; {advice}")
    return _Obtained(path, sha, sidecar, pending=expected is None, recorded=recorded,
                     downloaded=False, md5_ok=r.md5 is not None)
  if not download:
    raise DataError(f"{name}: {r.file_name} is not in {cache_dir} and downloading is off "
                    f"(data.download=False); set data.download=True, or {offline}")
  part, failure, unreachable = path + ".part", "", set()
  for attempt in range(max(1, retries)):
    live = [u for u in r.urls if u not in unreachable]
    if not live:
      break
    url = live[attempt % len(live)]
    if attempt:   # said only when a retry follows: a lone failure is the error's one line
      _log.warning("%s: attempt %d of %d failed (%s); retrying", name, attempt, retries,
                   failure.split("; looked in")[0])
      if not unreachable:
        time.sleep(_BACKOFF_S * attempt)
    try:
      download_to(url, part, timeout, name, r.size)
    except (http.client.HTTPException, OSError, ShortRead) as e:  # OSError: URLError, sockets
      why = f"cannot download {url} ({one_line_reason(e)})"
      failure = f"{why}; looked in {cache_dir}; offline: {offline}"
      if _no_network(e):
        unreachable.add(url)
      continue
    sha, problem = _problem(r, part, expected, sidecar)
    if problem:
      failure = f"{url} gave a file that {problem}, after {attempt + 1} attempt(s)"
      if recorded:
        failure += f"; if the recorded hash is the wrong one, delete {sidecar} and rerun"
      os.remove(part)
      continue
    os.replace(part, path)
    return _Obtained(path, sha, sidecar, pending=expected is None, recorded=recorded,
                     downloaded=True, md5_ok=r.md5 is not None)
  raise DataError(f"{name}: {failure}")


def _trust(got: _Obtained, name: str) -> None:
  """Records the SHA-256 of a file that has no pinned one (trust on first use), once it has
  unpacked and been read to its end."""
  atomic_write_bytes(got.sidecar, (got.sha + "\n").encode())
  log = _log.info if got.md5_ok else _log.warning
  log("%s: the SHA-256 of %s is not pinned%s; recorded %s in %s (it unpacked and read "
      "cleanly) and will insist on it (trust on first use)", name, got.path,
      " (its md5 matched)" if got.md5_ok else "", got.sha, got.sidecar)
