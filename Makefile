# Every install step the project needs lives here; a fresh clone needs only python3 (3.11+) and make.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install bytecode test test-fast test-faults test-e2e test-bench bench demo clean

# The editable install: setuptools says "Editable installation." (an InformationOnly warning: mind
# folders named like the packages), nothing to act on, so it is not printed; any other warning is.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# tidelake's bytecode, as a wheel's install leaves it: an editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every job's driver and each of its
# Python workers compile the modules they import again (~0.15-0.2 s of the apply job's driver's
# imports, measured). Up to date in a fraction of a second; a module edited since is compiled
# again on import, as before.
bytecode: $(STAMP)
	@$(PY) -m compileall -q cdc_codecs spark bench

## Everything CI runs (17-30 minutes on 2 cores, by the machine, plus the first install). worksteal: a
## worker done early takes tests queued on the other, rather than idling beside its last long test.
test: bytecode
	HYPOTHESIS_PROFILE=replay $(PY) -m pytest -n 2 --dist worksteal -m "not faults and not mirror_e2e and not bench" tests

## The benchmark commands run end to end at a tiny size (what each prints, not its figures): ~6 minutes of
## Spark jobs, apart. The fast parts of tests/bench stay in make test.
test-bench: bytecode
	$(PY) -m pytest -n 2 -m bench tests/bench

## A real Airflow scheduler end to end: scheduled intervals then a backfill, and the change-feed mirror built from its Asset events through a catch-up (~10-15 minutes), apart.
test-e2e: bytecode
	$(PY) -m pytest -m mirror_e2e tests/dags/test_scheduler_e2e.py

## The fault matrix with real services (docs/operating.md, "When a service fails"): ~10 minutes, apart.
test-faults: bytecode
	$(PY) -m pytest -m faults tests/bench/test_faults.py

## The fast part, for the edit-test loop (under a minute: no module running whole intervals, Spark or services).
test-fast: bytecode
	$(PY) -m pytest -m "not slow" tests

bench: bytecode
	$(PY) -m bench

demo: bytecode
	$(VENV)/bin/tidelake demo

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
