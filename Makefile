# Every install step the project needs lives here; a fresh clone needs only python3 (3.11+) and make.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast test-faults bench demo clean

# The editable install: setuptools says "Editable installation." (an InformationOnly warning: mind
# folders named like the packages), nothing to act on, so it is not printed; any other warning is.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

## Everything CI runs (15-25 minutes on 2 cores, plus the first install).
test: $(STAMP)
	HYPOTHESIS_PROFILE=replay $(PY) -m pytest -n 2 -m "not faults" tests

## The fault matrix with real services (docs/operating.md, "When a service fails"): ~10 minutes, apart.
test-faults: $(STAMP)
	$(PY) -m pytest -m faults tests/bench/test_faults.py

## The fast part, for the edit-test loop (6-12 minutes on 2 cores).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" tests

bench: $(STAMP)
	$(PY) -m bench

demo: $(STAMP)
	$(VENV)/bin/tidelake demo

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
