"""The three notebooks execute end to end on tiny settings (FEDJAX_SHARP_NOTEBOOK_TINY=1), so a
notebook that breaks fails CI; the committed copies carry their outputs (plots visible without
running them)."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = ("quickstart.ipynb", "write_your_algorithm.ipynb", "minimax.ipynb")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_tiny_settings(name, monkeypatch):
  monkeypatch.setenv("FEDJAX_SHARP_NOTEBOOK_TINY", "1")
  monkeypatch.setenv("PYTHONPATH", ROOT)
  nb = nbformat.read(os.path.join(ROOT, "notebooks", name), as_version=4)
  nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": ROOT}}).execute()
  errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
  assert not errors


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_shows_its_plots(name):
  nb = nbformat.read(os.path.join(ROOT, "notebooks", name), as_version=4)
  images = [o for c in nb.cells for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
  assert images, f"{name} was committed without its figures (python notebooks/build_notebooks.py)"
  assert not any(o.output_type == "error" for c in nb.cells for o in c.get("outputs", []))
