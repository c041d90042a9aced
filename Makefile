# Two commands do all the set-up on a fresh machine with Python >= 3.10:
#   make demo   # creates .venv, installs fedjax_sharp, runs FedAvg, FedDyn and FedGMT on embedded data
#   make test   # same install, then the test suite (what .ci/run runs)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: install demo test bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) experiments/demo.py

test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup tests

docs: $(STAMP)
	$(PY) docs/gen_algorithm_pages.py --check
	$(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/round_time.py

clean:
	rm -rf $(VENV) runs .pytest_cache
