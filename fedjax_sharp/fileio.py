"""Atomic file writes, shared by the data layer (vocabularies, partition files) and training
(config, summary, parameters).

A whole-file artefact is written to a temporary file in the same directory, flushed, fsync'ed
and renamed over the target, so a reader (or a crash) never sees half a file. Files get the
usual `0o666 & ~umask` mode (mkstemp would make them 0600). `disk_full` tells a full disk from
other write errors (checkpoints, a disk-backed client table).
"""
from __future__ import annotations

import errno
import io
import os
import tempfile


def _file_mode() -> int:
  umask = os.umask(0)
  os.umask(umask)
  return 0o666 & ~umask


FILE_MODE = _file_mode()


def atomic_write_bytes(path: str, data: bytes) -> None:
  """Writes `data` to `path` through a temporary file in the same directory + rename."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_", suffix=os.path.basename(path))
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_savefig(fig, path: str, **kwargs) -> None:
  """Saves a matplotlib figure atomically (rendered in memory, then `atomic_write_bytes`).

  Concurrent writers of the same figure (two workers refreshing one study's plots) each get
  their own temporary file, so neither can rename the other's away.
  """
  buffer = io.BytesIO()
  fig.savefig(buffer, format=os.path.splitext(path)[1].lstrip(".") or "png", **kwargs)
  atomic_write_bytes(path, buffer.getvalue())


def atomic_savez(path: str, **arrays) -> None:
  """`np.savez` through `atomic_write_bytes` (`path` should end in `.npz`)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  atomic_write_bytes(path, buffer.getvalue())


# The operating system's words first: tensorstore's messages start with its status code.
_DISK_FULL = ("No space left on device", "Disk quota exceeded", "File too large",
              "RESOURCE_EXHAUSTED")


def disk_full(e: BaseException) -> str | None:
  """What says the disk is full (ENOSPC, EDQUOT, EFBIG, or orbax/tensorstore's
  `RESOURCE_EXHAUSTED: Error writing ... in OCDBT database`, a hundred lines long) in the
  exception or its causes; None if nothing does."""
  for _ in range(8):            # the exception, its cause, its cause's cause...
    if e is None:
      return None
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
      return e.strerror or errno.errorcode[e.errno]
    mark = next((m for m in _DISK_FULL if m in str(e)), None)
    if mark:
      return mark
    e = e.__cause__ or e.__context__
  return None
