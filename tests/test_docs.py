"""The documentation: a page for every registered algorithm, pages in sync with the registry,
and the site builds with warnings as errors."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_registered_algorithm_has_an_up_to_date_page():
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  from fedjax_sharp.minimax.algorithms import MINIMAX_ALGORITHMS
  pages = {f[:-3] for f in os.listdir(os.path.join(ROOT, "docs", "algorithms"))
           if f.endswith(".md")} - {"index"}
  assert pages == set(ALGORITHMS) | set(MINIMAX_ALGORITHMS)
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_algorithm_pages.py"),
                         "--check"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_docs_build_with_warnings_as_errors(tmp_path):
  mkdocs = shutil.which("mkdocs", path=os.path.dirname(sys.executable)) or shutil.which("mkdocs")
  if mkdocs is None:
    pytest.skip("mkdocs not installed (pip install -e '.[docs]')")
  proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.path.exists(tmp_path / "site" / "algorithms" / "fedgmt" / "index.html")
