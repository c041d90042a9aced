"""The dataset downloader against a local HTTP server (127.0.0.1, started here): checksums,
retries, resume, trust on first use, atomic extraction (killed mid-way), refused members, and
the one-line errors. No network beyond the loopback."""
import hashlib
import http.server
import io
import logging
import lzma
import os
import signal
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile

import pytest

from fedjax_sharp.data import download
from fedjax_sharp.data import download_files
from fedjax_sharp.data.download import Resource
from fedjax_sharp.errors import DataError

PAYLOAD = bytes(range(256)) * 1200  # 307,200 bytes: several 1 MiB-chunk-free reads
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Behaviour:
  """What the server does; a test sets it before fetching."""

  def __init__(self):
    self.files = {}          # path -> bytes
    self.corrupt_first = 0   # serve flipped bytes for this many requests
    self.cut_after = None    # the first response stops after this many body bytes
    self.ignore_range = False
    self.requests = []       # (path, Range header or None)
    self.no_length = False   # send no Content-Length (the body ends when the connection does)
    self.endless = False     # announce 10**12 bytes and send until the client hangs up
    self.announce = None     # a Content-Length to announce instead of the body's own
    self.trickle_s = None    # send the body one byte per this many seconds


class Handler(http.server.BaseHTTPRequestHandler):

  def log_message(self, *args):
    pass

  def do_GET(self):  # pylint: disable=invalid-name
    b = self.server.behaviour
    rng = self.headers.get("Range")
    b.requests.append((self.path, rng))
    data = b.files.get(self.path)
    if data is None:
      self.send_error(404)
      return
    if b.corrupt_first > 0:
      b.corrupt_first -= 1
      data = bytes(x ^ 0xFF for x in data[:100]) + data[100:]
    start = 0
    if rng and not b.ignore_range:
      start = int(rng.removeprefix("bytes=").rstrip("-"))
      if start >= len(data):
        self.send_error(416)
        return
      self.send_response(206)
      self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
    else:
      self.send_response(200)
    body = data[start:]
    if b.endless:
      self.send_header("Content-Length", str(10**12))
      self.end_headers()
      try:
        while True:
          self.wfile.write(b"x" * 65536)
      except OSError:
        return
    if b.trickle_s is not None:
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      try:
        for i in range(len(body)):
          self.wfile.write(body[i:i + 1])
          self.wfile.flush()
          time.sleep(b.trickle_s)
      except OSError:
        pass
      return
    if b.no_length:
      self.close_connection = True
    elif b.announce is not None:   # a wrong header, then the body and a hang-up
      self.send_header("Content-Length", str(b.announce))
      self.close_connection = True
    else:
      self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    if b.cut_after is not None:
      body, b.cut_after = body[:b.cut_after], None
      self.close_connection = True
    self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
  """The test server; a downloader that hangs up mid-response (one of the faults under test)
  is not an error worth socketserver's traceback on the suite's output."""

  def handle_error(self, request, client_address):
    if not isinstance(sys.exc_info()[1], OSError):
      super().handle_error(request, client_address)


@pytest.fixture
def server():
  httpd = Server(("127.0.0.1", 0), Handler)
  httpd.behaviour = Behaviour()
  thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
  thread.start()
  httpd.url = lambda path: f"http://127.0.0.1:{httpd.server_address[1]}{path}"
  yield httpd
  httpd.shutdown()
  httpd.server_close()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
  monkeypatch.setattr(download, "_BACKOFF_S", 0.0)


def _serve(server, path, data):
  server.behaviour.files[path] = data
  return server.url(path)


def _tar_gz(members):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, data in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


def _read(path):
  with open(path, "rb") as f:
    return f.read()


def test_good_file_verified_and_cached(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  res = Resource("plain", url, sha256=SHA, size=len(PAYLOAD))
  out = download.fetch(res, str(tmp_path))
  assert out == str(tmp_path / "plain")
  assert _read(tmp_path / "plain" / "a.bin") == PAYLOAD
  assert (tmp_path / "plain" / ".complete").exists()
  assert not (tmp_path / "downloads" / "a.bin").exists()  # keep_archive=False
  assert len(server.behaviour.requests) == 1
  # Never downloads twice: the second call makes no request at all.
  assert download.fetch(res, str(tmp_path)) == out
  assert len(server.behaviour.requests) == 1


def test_wrong_pinned_hash_fails_after_retries(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  wrong = "0" * 64
  with pytest.raises(DataError) as e:
    download.fetch(Resource("plain", url, sha256=wrong), str(tmp_path), retries=3)
  msg = str(e.value)
  assert url in msg and wrong in msg and SHA in msg and "\n" not in msg
  assert len(server.behaviour.requests) == 3
  assert not (tmp_path / "plain").exists()
  assert not (tmp_path / "downloads" / "a.bin.part").exists()
  assert not (tmp_path / "downloads" / "a.bin").exists()


def test_wrong_size_and_md5_are_refused(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  with pytest.raises(DataError, match=r"more than the expected 5 bytes arrived \(the server "
                     r"announces 307200 bytes\); stopped at 6"):
    download.fetch(Resource("s", url, size=5), str(tmp_path), retries=1)
  with pytest.raises(DataError, match=f"expected md5 {'a' * 32}"):
    download.fetch(Resource("m", url, md5="a" * 32), str(tmp_path), retries=1)
  good_md5 = hashlib.md5(PAYLOAD).hexdigest()
  out = download.fetch(Resource("m", url, md5=good_md5), str(tmp_path))
  assert _read(os.path.join(out, "a.bin")) == PAYLOAD


def test_corrupted_first_response_refused_then_retried(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.corrupt_first = 1
  out = download.fetch(Resource("plain", url, sha256=SHA), str(tmp_path))
  assert _read(os.path.join(out, "a.bin")) == PAYLOAD
  # The corrupted file was deleted, so the retry started from byte 0 (no Range).
  assert server.behaviour.requests == [("/a.bin", None), ("/a.bin", None)]


def test_interrupted_download_resumes_with_range(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.cut_after = 100_000
  out = download.fetch(Resource("plain", url, sha256=SHA), str(tmp_path))
  assert server.behaviour.requests == [("/a.bin", None), ("/a.bin", "bytes=100000-")]
  assert _read(os.path.join(out, "a.bin")) == PAYLOAD


def test_server_ignoring_range_still_ends_correct(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.cut_after = 100_000
  server.behaviour.ignore_range = True
  out = download.fetch(Resource("plain", url, sha256=SHA), str(tmp_path))
  assert server.behaviour.requests == [("/a.bin", None), ("/a.bin", "bytes=100000-")]
  assert _read(os.path.join(out, "a.bin")) == PAYLOAD  # not the first 100 kB twice


def test_part_file_that_is_already_whole_gets_416_and_is_used(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  (tmp_path / "downloads").mkdir()
  (tmp_path / "downloads" / "a.bin.part").write_bytes(PAYLOAD)
  out = download.fetch(Resource("plain", url, sha256=SHA), str(tmp_path))
  assert server.behaviour.requests == [("/a.bin", f"bytes={len(PAYLOAD)}-")]
  assert _read(os.path.join(out, "a.bin")) == PAYLOAD


def test_trust_on_first_use_recorded_then_enforced(server, tmp_path, caplog):
  url = _serve(server, "/a.bin", PAYLOAD)
  res = Resource("tofu", url)  # no published hash
  with caplog.at_level(logging.WARNING, logger=download.__name__):
    download.fetch(res, str(tmp_path))
  assert any("not pinned" in r.getMessage() and r.levelno == logging.WARNING
             for r in caplog.records)
  sidecar = tmp_path / "downloads" / "a.bin.sha256"
  assert sidecar.read_text().strip() == SHA
  # Later the server's file changes; a re-download (dataset removed) must be refused.
  changed = PAYLOAD[::-1]
  server.behaviour.files["/a.bin"] = changed
  shutil.rmtree(tmp_path / "tofu")
  with pytest.raises(DataError) as e:
    download.fetch(res, str(tmp_path), retries=2)
  msg = str(e.value)
  assert SHA in msg and hashlib.sha256(changed).hexdigest() in msg and str(sidecar) in msg
  assert not (tmp_path / "tofu").exists()


def _load_module_snippet():
  # Loads download.py in a fresh interpreter (fedjax_sharp.data imports no JAX until `augment`).
  path = download.__file__
  return ("import importlib.util, sys; "
          f"spec = importlib.util.spec_from_file_location('dl', {path!r}); "
          "dl = sys.modules['dl'] = importlib.util.module_from_spec(spec); "
          "spec.loader.exec_module(dl); ")


def test_extraction_killed_midway_leaves_no_dataset_and_is_redone(server, tmp_path):
  members = {f"d/f{i}.txt": (f"member {i} " * 50).encode() for i in range(5)}
  url = _serve(server, "/set.tar.gz", _tar_gz(members))
  flag = tmp_path / "paused"
  cache = tmp_path / "cache"
  code = _load_module_snippet() + (
      f"dl.fetch(dl.Resource('set', {url!r}, kind='tar.gz'), {str(cache)!r})")
  env = dict(os.environ, **{download_files.PAUSE_ENV: str(flag)})
  proc = subprocess.Popen([sys.executable, "-c", code], env=env)
  try:
    deadline = time.monotonic() + 30
    while not flag.exists():
      assert proc.poll() is None, "the extraction finished or failed before the pause"
      assert time.monotonic() < deadline
      time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
  finally:
    if proc.poll() is None:
      proc.kill()
  # Killed after the first member: only a temporary directory holds a part of it.
  assert not (cache / "set").exists()
  temps = [p for p in os.listdir(cache) if p.startswith(".set.tmp-")]
  assert len(temps) == 1 and os.listdir(cache / temps[0] / "d") == ["f0.txt"]
  assert len(server.behaviour.requests) == 1
  # The next call redoes the extraction from the kept download, without a new request.
  out = download.fetch(Resource("set", url, kind="tar.gz"), str(cache))
  assert sorted(os.listdir(os.path.join(out, "d"))) == sorted(n[2:] for n in members)
  for member, data in members.items():
    assert _read(os.path.join(out, member)) == data
  assert len(server.behaviour.requests) == 1
  assert not [p for p in os.listdir(cache) if p.startswith(".set.tmp-")]


def _evil_tar(kind):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tar:
    good = tarfile.TarInfo("ok.txt")
    good.size = 2
    tar.addfile(good, io.BytesIO(b"ok"))
    if kind == "dotdot":
      info = tarfile.TarInfo("sub/../../evil.txt")
    elif kind == "absolute":
      info = tarfile.TarInfo("/tmp/evil.txt")
    else:
      info = tarfile.TarInfo("link")
      info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
      info.linkname = "../../evil.txt" if kind == "symlink" else "../evil.txt"
    if info.isfile():
      info.size = 4
      tar.addfile(info, io.BytesIO(b"evil"))
    else:
      tar.addfile(info)
  return buf.getvalue()


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink"])
def test_member_outside_the_directory_is_refused(server, tmp_path, kind):
  url = _serve(server, "/evil.tar", _evil_tar(kind))
  cache = tmp_path / "cache"
  with pytest.raises(DataError, match="outside the dataset directory"):
    download.fetch(Resource("evil", url, kind="tar"), str(cache))
  assert not (cache / "evil").exists()
  assert not (tmp_path / "evil.txt").exists() and not (cache / "evil.txt").exists()
  assert not [p for p in os.listdir(cache) if p.startswith(".evil.tmp-")]


def test_zip_member_outside_is_refused(server, tmp_path):
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr("../evil.txt", b"evil")
  url = _serve(server, "/evil.zip", buf.getvalue())
  with pytest.raises(DataError, match="outside the dataset directory"):
    download.fetch(Resource("evil", url, kind="zip"), str(tmp_path))
  assert not (tmp_path / "evil").exists()


def test_lzma_single_file(server, tmp_path):
  url = _serve(server, "/db.sqlite.lzma", lzma.compress(PAYLOAD))
  out = download.fetch(Resource("db", url, kind="lzma"), str(tmp_path), keep_archive=True)
  assert sorted(os.listdir(out)) == [".complete", "db.sqlite"]
  assert _read(os.path.join(out, "db.sqlite")) == PAYLOAD
  assert (tmp_path / "downloads" / "db.sqlite.lzma").exists()  # keep_archive=True


def test_zip_archive(server, tmp_path):
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr("split/federated_train.csv", b"user_id,image_id,class\n0,a,1\n")
    zf.writestr("split/test.csv", b"image_id,class\nb,2\n")
  url = _serve(server, "/split.zip", buf.getvalue())
  out = download.fetch(Resource("split", url, kind="zip"), str(tmp_path))
  assert _read(os.path.join(out, "split", "test.csv")) == b"image_id,class\nb,2\n"
  assert _read(os.path.join(out, "split", "federated_train.csv")).startswith(b"user_id,")


def test_several_files_in_one_dataset(server, tmp_path):
  a, b = _serve(server, "/train.csv", b"t\n"), _serve(server, "/test.csv", b"e\n")
  out = download.fetch((Resource("x_train", a), Resource("x_test", b)), str(tmp_path), name="x")
  assert out == str(tmp_path / "x")
  assert _read(os.path.join(out, "train.csv")) == b"t\n"
  assert _read(os.path.join(out, "test.csv")) == b"e\n"


def _closed_port_url():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  return f"http://127.0.0.1:{port}/emnist_all.sqlite.lzma"


def test_no_network_gives_one_line_error_with_offline_alternative(tmp_path):
  url = _closed_port_url()
  with pytest.raises(DataError) as e:
    download.fetch(Resource("federated_emnist", url, kind="lzma"), str(tmp_path))
  msg = str(e.value)
  assert "\n" not in msg
  assert msg.startswith("federated_emnist: cannot download " + url)
  assert f"looked in {tmp_path}" in msg
  assert f"put emnist_all.sqlite.lzma in {tmp_path / 'downloads'}" in msg


def test_offline_file_placed_by_hand_is_used(server, tmp_path):
  url = _closed_port_url()
  res = Resource("federated_emnist", url, kind="lzma",
                 sha256=hashlib.sha256(lzma.compress(PAYLOAD)).hexdigest())
  with pytest.raises(DataError, match="data.download=False.*put emnist_all.sqlite.lzma in"):
    download.fetch(res, str(tmp_path), download=False)
  (tmp_path / "downloads" / "emnist_all.sqlite.lzma").write_bytes(lzma.compress(PAYLOAD))
  out = download.fetch(res, str(tmp_path), download=False)
  assert _read(os.path.join(out, "emnist_all.sqlite")) == PAYLOAD
  # A wrong file placed by hand is refused, not used and not deleted.
  (tmp_path / "downloads" / "emnist_all.sqlite.lzma").write_bytes(b"junk")
  shutil.rmtree(out)
  with pytest.raises(DataError) as e:
    download.fetch(res, str(tmp_path), download=False)
  assert str(e.value).endswith(f"delete {tmp_path / 'downloads' / 'emnist_all.sqlite.lzma'} "
                               "to download it again")
  assert (tmp_path / "downloads" / "emnist_all.sqlite.lzma").exists()


def test_marker_is_checked_against_the_pin(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  download.fetch(Resource("plain", url), str(tmp_path), keep_archive=True)
  download.fetch(Resource("plain", url, sha256=SHA), str(tmp_path))  # same hash: complete
  assert len(server.behaviour.requests) == 1
  # A pin that differs from what the dataset was made from: not complete, and the kept file
  # no longer verifies.
  with pytest.raises(DataError, match=f"expected {'1' * 64}"):
    download.fetch(Resource("plain", url, sha256="1" * 64), str(tmp_path))
  assert len(server.behaviour.requests) == 1


def test_unknown_name_lists_known_names():
  with pytest.raises(DataError) as e:
    download.fetch_dataset("cifar11")
  msg = str(e.value)
  assert msg == "unknown dataset 'cifar11'; known: " + ", ".join(sorted(download.RESOURCES))
  for name in ("cinic10", "gld160k", "federated_emnist", "shakespeare", "stackoverflow"):
    assert name in msg


def test_default_cache_dir(monkeypatch):
  monkeypatch.setenv(download.CACHE_ENV, "/data/here")
  assert download.default_cache_dir() == "/data/here"
  monkeypatch.delenv(download.CACHE_ENV)
  assert download.default_cache_dir() == os.path.expanduser("~/.cache/fedjax_sharp")


def test_registry_entries_are_well_formed():
  for name, resources in download.RESOURCES.items():
    for r in resources:
      assert all(u.startswith("https://") for u in r.urls), name
      assert r.sha256 is None or (len(r.sha256) == 64 and int(r.sha256, 16) >= 0), name
      assert r.md5 is None or (len(r.md5) == 32 and int(r.md5, 16) >= 0), name
      assert r.file_name and "/" not in r.file_name, name
  assert download.RESOURCES["cinic10"][0].file_name == "CINIC-10.tar.gz"
  assert download.RESOURCES["federated_emnist"][0].kind == "lzma"


# The fault battery: what a captive portal, a broken or hostile server, a corrupt archive and
# a full disk do to a fetch.

@pytest.mark.parametrize("fault", ["captive_portal", "cut_short_without_length"])
def test_unpinned_file_is_trusted_only_after_it_unpacks(server, tmp_path, fault):
  good = lzma.compress(PAYLOAD)
  url = _serve(server, "/so.sqlite.lzma",
               b"<html>Sign in to the hotel Wi-Fi</html>" if fault == "captive_portal"
               else good)
  if fault == "cut_short_without_length":
    server.behaviour.no_length, server.behaviour.cut_after = True, len(good) // 2
  res = Resource("so", url, kind="lzma")   # no published hash, like Stack Overflow's file
  with pytest.raises(DataError) as e:
    download.fetch(res, str(tmp_path))
  msg = str(e.value)
  assert "cannot unpack" in msg and "it was deleted and its hash not recorded" in msg
  assert "\n" not in msg
  sidecar = tmp_path / "downloads" / "so.sqlite.lzma.sha256"
  assert not sidecar.exists() and not (tmp_path / "downloads" / "so.sqlite.lzma").exists()
  # The real file then downloads, unpacks and becomes the trusted one.
  server.behaviour.files["/so.sqlite.lzma"] = good
  server.behaviour.no_length = False
  out = download.fetch(res, str(tmp_path))
  assert _read(os.path.join(out, "so.sqlite")) == PAYLOAD
  assert sidecar.read_text().strip() == hashlib.sha256(good).hexdigest()


def test_refusal_against_a_recorded_hash_names_the_files_to_delete(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  downloads = tmp_path / "downloads"
  downloads.mkdir()
  (downloads / "a.bin.sha256").write_text("0" * 64 + "\n")   # recorded from a bad download
  (downloads / "a.bin").write_bytes(PAYLOAD)
  with pytest.raises(DataError) as e:
    download.fetch(Resource("tofu", url), str(tmp_path))
  msg = str(e.value)
  assert f"delete {downloads / 'a.bin'} to download it again" in msg
  assert f"or {downloads / 'a.bin.sha256'} if the hash recorded there" in msg
  (downloads / "a.bin").unlink()
  with pytest.raises(DataError) as e:
    download.fetch(Resource("tofu", url), str(tmp_path), retries=1)
  assert f"delete {downloads / 'a.bin.sha256'} and rerun" in str(e.value)


def test_endless_body_stops_one_byte_after_the_pinned_size(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.endless = True
  with pytest.raises(DataError, match=r"more than the expected 307200 bytes arrived \(the server "
                     r"announces 1000000000000 bytes\); stopped at 307201"):
    download.fetch(Resource("big", url, size=len(PAYLOAD)), str(tmp_path), retries=1)
  assert not (tmp_path / "downloads" / "a.bin.part").exists()


def test_a_pinned_file_is_judged_by_size_and_hash_not_by_its_content_length(server, tmp_path):
  """A server announcing a Content-Length of 10^12 bytes and then sending
  the right body: the file matches its pinned size and hash, so it is accepted at the first
  attempt. (The header alone used to refuse every attempt.)"""
  url = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.announce = 10**12
  path = download.fetch(Resource("pinned", url, sha256=SHA, size=len(PAYLOAD)), str(tmp_path),
                        retries=3)
  assert _read(os.path.join(path, "a.bin")) == PAYLOAD
  assert server.behaviour.requests == [("/a.bin", None)]     # accepted at the first attempt


def test_body_longer_than_the_pinned_size_without_length_stops_early(server, tmp_path):
  url = _serve(server, "/a.bin", PAYLOAD * 40)   # 12 MB with no Content-Length
  server.behaviour.no_length = True
  with pytest.raises(DataError, match=r"more than the expected 307200 bytes arrived"):
    download.fetch(Resource("big", url, size=len(PAYLOAD)), str(tmp_path), retries=1)
  assert not (tmp_path / "downloads" / "a.bin.part").exists()


def test_trickling_server_is_cut_off_by_the_minimum_rate(server, tmp_path, monkeypatch):
  # 40 bytes/s, far under the minimum rate: the transfer stops after the first window instead
  # of lasting 2,000 s (each read returns in time, so a socket timeout never fires).
  url = _serve(server, "/a.bin", PAYLOAD[:80_000])
  server.behaviour.trickle_s = 0.025
  with pytest.raises(DataError, match=r"too slow: \d+ bytes in \d+ s, under 1024 bytes/s"):
    download.fetch(Resource("slow", url), str(tmp_path), retries=1, timeout=0.5)
  kept = (tmp_path / "downloads" / "a.bin.part").read_bytes()
  assert 0 < len(kept) < 1000 and PAYLOAD.startswith(kept)   # kept for a resume


def _flip(data: bytes, at: int) -> bytes:
  return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def test_tar_gz_with_a_bad_crc_is_refused(server, tmp_path):
  members = {"d/a.txt": b"a" * 3000, "d/b.txt": b"b" * 3000}
  good = _tar_gz(members)
  # Flip a byte of the gzip trailer's CRC-32: every member decompresses, only the CRC differs.
  url = _serve(server, "/set.tar.gz", _flip(good, len(good) - 6))
  with pytest.raises(DataError) as e:
    download.fetch(Resource("set", url, kind="tar.gz"), str(tmp_path))
  assert "cannot unpack" in str(e.value) and "CRC" in str(e.value)
  assert not (tmp_path / "set").exists()


def test_tar_with_a_garbled_second_header_is_refused(server, tmp_path):
  raw = io.BytesIO()
  with tarfile.open(fileobj=raw, mode="w") as tar:
    for name in ("a.txt", "b.txt"):
      info = tarfile.TarInfo(name)
      info.size = 600
      tar.addfile(info, io.BytesIO(b"z" * 600))
  data = _flip(raw.getvalue(), 512 + 1024 + 3)   # inside b.txt's header: tarfile stops there
  url = _serve(server, "/set.tar", data)
  with pytest.raises(DataError, match="garbled or truncated header after 1 member"):
    download.fetch(Resource("set", url, kind="tar"), str(tmp_path))
  truncated = raw.getvalue()[:512 + 1024 + 100]
  url = _serve(server, "/cut.tar", truncated)
  with pytest.raises(DataError, match="garbled or truncated header after 1 member"):
    download.fetch(Resource("cut", url, kind="tar"), str(tmp_path))


def test_write_error_while_unpacking_keeps_the_good_archive(server, tmp_path, monkeypatch):
  import errno
  url = _serve(server, "/set.tar.gz", _tar_gz({"a.txt": b"a" * 100}))
  def too_large(*args, **kwargs):
    raise OSError(errno.EFBIG, "File too large")
  monkeypatch.setattr(tarfile.TarFile, "makefile", too_large)
  with pytest.raises(DataError) as e:
    download.fetch(Resource("set", url, kind="tar.gz"), str(tmp_path))
  msg = str(e.value)
  assert "cannot write the unpacked files" in msg and "File too large" in msg
  assert "is kept (it is not at fault)" in msg and "delete" not in msg
  assert (tmp_path / "downloads" / "set.tar.gz").exists()
  monkeypatch.undo()
  out = download.fetch(Resource("set", url, kind="tar.gz"), str(tmp_path))
  assert _read(os.path.join(out, "a.txt")) == b"a" * 100
  assert len(server.behaviour.requests) == 1   # the kept download was used


def test_no_network_is_not_retried(tmp_path, monkeypatch):
  import urllib.error
  import urllib.request
  calls = []
  def offline(*args, **kwargs):
    calls.append(args)
    raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))
  monkeypatch.setattr(urllib.request, "urlopen", offline)
  with pytest.raises(DataError) as e:
    download.fetch_dataset("stackoverflow", str(tmp_path), retries=3)
  msg = str(e.value)
  assert len(calls) == 1 and "name resolution" in msg
  # Offline, the message names every file Stack Overflow needs, not only the SQLite one.
  assert "put stackoverflow.sqlite.lzma and stackoverflow.word_count.tar.bz2 in" in msg


def test_a_lone_failure_is_one_line_and_retries_are_announced(server, tmp_path, caplog):
  url = _closed_port_url()
  with caplog.at_level(logging.WARNING, logger=download.__name__):
    with pytest.raises(DataError):
      download.fetch(Resource("x", url), str(tmp_path), retries=1)
  assert not caplog.records                      # the error itself is the one line
  good = _serve(server, "/a.bin", PAYLOAD)
  server.behaviour.corrupt_first = 1
  with caplog.at_level(logging.WARNING, logger=download.__name__):
    download.fetch(Resource("y", good, sha256=SHA), str(tmp_path))
  (record,) = caplog.records
  assert "attempt 1 of 3 failed" in record.getMessage() and "retrying" in record.getMessage()
