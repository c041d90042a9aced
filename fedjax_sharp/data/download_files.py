"""The two halves of `download.fetch` that touch bytes: one HTTP transfer, resumable and
bounded (`download_to`), and the unpacking of a verified download into a directory
(`unpack`), which reads every archive to its end and refuses members landing outside it.

Only the standard library and `fedjax_sharp.errors` are imported, so that `download` stays
loadable on its own (its tests run it in a fresh interpreter without JAX).
"""
from __future__ import annotations

import bz2
import gzip
import http.client
import logging
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib

from fedjax_sharp.errors import DataError

_log = logging.getLogger("fedjax_sharp.data.download")   # one logger for the downloader

PAUSE_ENV = "FEDJAX_SHARP_TEST_EXTRACT_PAUSE"  # tests: touch this path, sleep mid-extraction
_SINGLE = {"lzma": lzma.open, "xz": lzma.open, "bz2": bz2.open, "gz": gzip.open}
CHUNK = 1 << 20
_PROGRESS_EVERY_S = 10.0
_MIN_RATE = 1024            # bytes/s: a transfer slower than this over `timeout` seconds stops
_TAR_OPEN = {"tar": open, "tar.gz": gzip.open, "tgz": gzip.open, "tar.bz2": bz2.open,
             "tar.xz": lzma.open}


class ShortRead(Exception):
  pass


class BadArchive(Exception):
  """The downloaded file does not unpack: garbled, truncated or not an archive."""


class WriteError(Exception):
  """Unpacking failed on the writing side (disk full, file too large, read-only)."""


def one_line_reason(e: BaseException) -> str:
  """One line: 'HTTP 404 Not Found', '[Errno 111] Connection refused', 'timed out'..."""
  text = (f"HTTP {e.code} {e.reason}" if isinstance(e, urllib.error.HTTPError) else
          str(e.reason) if isinstance(e, urllib.error.URLError) else str(e) or type(e).__name__)
  return " ".join(text.split())


def download_to(url: str, part: str, timeout: float, name: str, size: int | None) -> None:
  """Appends the rest of `url` to `part` (resuming at its length); raises ShortRead if the
  connection ends before the file is whole, if more arrives than the pinned size (or, with no
  pinned size, the Content-Length), or if fewer than `_MIN_RATE * timeout` bytes arrive in
  `timeout` seconds.

  With a pinned size the Content-Length header is not trusted either way: at most the pinned
  size plus one byte is read (one byte more proves the body too long), and the caller judges
  the file by its size and hash. A server announcing 10^12 bytes for the right body is then
  accepted, and one sending forever is cut off after a byte too many."""
  have = os.path.getsize(part) if os.path.exists(part) else 0
  headers = {"User-Agent": "fedjax_sharp-download/1"}
  if have:
    headers["Range"] = f"bytes={have}-"
  try:
    response = urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                      timeout=timeout)
  except urllib.error.HTTPError as e:
    if e.code == 416 and have:  # nothing after byte `have`: the .part is whole (or stale)
      return
    raise
  with response:
    content_range = response.headers.get("Content-Range", "")
    if have and response.status == 206 and not content_range.startswith(f"bytes {have}-"):
      os.remove(part)
      raise ShortRead(f"asked for bytes {have}-, got the range {content_range!r}")
    if have and response.status != 206:
      _log.info("%s: %s ignored the range request; restarting from byte 0", name, url)
      have = 0
    length = response.headers.get("Content-Length", "")
    remaining = int(length) if length.isdigit() else None
    announced = ""
    if size is not None and remaining is not None and have + remaining != size:
      announced = f" (the server announces {have + remaining} bytes)"
      _log.info("%s: the server announces %d bytes, the pinned size is %d: reading at most "
                "one byte more than the pinned size and judging by size and hash", name,
                have + remaining, size)
    limit = size if size is not None else (have + remaining if remaining is not None else None)
    total = limit
    _log.info("%s: downloading %s (%s)%s", name, url, _mb(total),
              f", resuming at {_mb(have)}" if have else "")
    got, last = 0, time.monotonic()
    window_start, window_got = last, 0
    with open(part, "ab" if have else "wb") as f:
      while True:
        want = CHUNK if limit is None else min(CHUNK, limit + 1 - have - got)
        try:
          chunk = response.read1(want)
        except http.client.IncompleteRead as e:   # fewer bytes than announced: judged below
          chunk = e.partial
          if not chunk:
            break
        if not chunk:
          break
        try:
          f.write(chunk)
        except OSError as e:  # disk full, read-only: not worth a retry
          raise DataError(f"{name}: cannot write {part} ({e})") from None
        got += len(chunk)
        window_got += len(chunk)
        if limit is not None and have + got > limit:
          f.close()
          os.remove(part)
          raise ShortRead(f"more than the expected {limit} bytes arrived{announced}; "
                          f"stopped at {have + got}")
        now = time.monotonic()
        if now - window_start >= timeout:
          if window_got < _MIN_RATE * (now - window_start):
            raise ShortRead(f"too slow: {window_got} bytes in {now - window_start:.0f} s, "
                             f"under {_MIN_RATE} bytes/s (the partial file is kept and resumed)")
          window_start, window_got = now, 0
        if now - last >= _PROGRESS_EVERY_S:
          last = now
          pct = f" ({100 * (have + got) / total:.0f}%)" if total else ""
          _log.info("%s: %s of %s%s", name, _mb(have + got), _mb(total), pct)
  expected = size if size is not None else (have + remaining if remaining is not None else None)
  if expected is not None and have + got < expected:
    raise ShortRead(f"connection closed after {have + got} of {expected} bytes")


def _mb(n: int | None) -> str:
  return "size unknown" if n is None else f"{n / 1e6:.1f} MB"


def _pause_for_tests() -> None:
  flag = os.environ.get(PAUSE_ENV)
  if flag:
    open(flag, "w").close()
    time.sleep(60)


class _LastBlock:
  """A read-only file wrapper that keeps the last header-sized read: tarfile stops silently
  at a garbled or truncated header after the first member, so the caller checks that the
  archive ended on a zero block."""

  def __init__(self, f):
    self.f, self.last = f, None

  def read(self, n=-1):
    data = self.f.read(n)
    if n == tarfile.BLOCKSIZE:
      self.last = data
    return data

  def seek(self, *args):
    return self.f.seek(*args)

  def tell(self):
    return self.f.tell()


def unpack(r, src: str, dest: str, name: str) -> None:
  """Unpacks `src`, the download of `r` (a `download.Resource`), into `dest`; raises
  BadArchive or WriteError (or DataError for a refused member)."""
  try:
    if r.kind is None:
      try:
        os.link(src, os.path.join(dest, r.file_name))  # no copy; the download may be removed
      except OSError:
        shutil.copyfile(src, os.path.join(dest, r.file_name))
    elif r.kind in _SINGLE:
      out = os.path.join(dest, os.path.splitext(r.file_name)[0])
      with _SINGLE[r.kind](src, "rb") as fin, open(out, "wb") as fout:
        shutil.copyfileobj(fin, fout, CHUNK)
    elif r.kind == "zip":
      with zipfile.ZipFile(src) as zf:
        for i, info in enumerate(zf.infolist()):
          _check_member(info.filename, src, name)
          if stat.S_ISLNK(info.external_attr >> 16):
            raise DataError(f"{name}: {src} holds a link {info.filename!r}; refusing to extract")
          zf.extract(info, dest)
          if i == 0:
            _pause_for_tests()
    else:
      with _TAR_OPEN[r.kind](src, "rb") as raw:
        stream = _LastBlock(raw)
        count = 0
        with tarfile.open(fileobj=stream, mode="r:") as tar:
          for i, member in enumerate(tar):
            _check_member(member.name, src, name)
            if member.issym() or member.islnk():
              base = posixpath.dirname(member.name) if member.issym() else ""
              _check_member(posixpath.join(base, member.linkname), src, name, member.name)
            elif not (member.isfile() or member.isdir()):
              raise DataError(f"{name}: {src} member {member.name!r} is a device or pipe; "
                              "refusing to extract it")
            tar.extract(member, dest, filter="data")
            count += 1
            if i == 0:
              _pause_for_tests()
        if stream.last != bytes(tarfile.BLOCKSIZE):
          raise BadArchive(f"the tar ends in a garbled or truncated header after {count} "
                            f"member(s)")
        while chunk := raw.read(CHUNK):   # to the end: the gzip/bzip2/xz checksum is checked
          if chunk.count(0) != len(chunk):
            raise BadArchive("data after the end of the tar")
  except (EOFError, lzma.LZMAError, tarfile.TarError, zipfile.BadZipFile, zlib.error) as e:
    raise BadArchive(one_line_reason(e)) from None
  except OSError as e:
    if e.errno is None:   # gzip.BadGzipFile, bz2's 'Invalid data stream', CRC failures
      raise BadArchive(one_line_reason(e)) from None
    raise WriteError(one_line_reason(e)) from None


def _check_member(path: str, archive: str, name: str, member: str | None = None) -> None:
  """Refuses a member (or a link target) that would resolve outside the extraction root."""
  norm = posixpath.normpath(path.replace("\\", "/"))
  if path.startswith(("/", "\\")) or os.path.isabs(path) or norm == ".." or \
     norm.startswith("../") or (len(norm) > 1 and norm[1] == ":"):
    what = f"member {member!r} links to" if member else "member"
    raise DataError(f"{name}: {archive} {what} {path!r} outside the dataset directory; "
                    "refusing to extract it")
