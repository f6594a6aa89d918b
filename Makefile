# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_STORE := .demo/store

.PHONY: demo test lint typecheck pytest fixtures bench clean

$(VENV)/.installed: pyproject.toml setup.py rmqinspect/format/_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	rm -rf .demo
	$(VENV)/bin/rmqinspect synth $(DEMO_STORE) --messages 5000 --topics 3 --queues 4 --crash --seed 7 --damage zero-region
	$(VENV)/bin/rmqinspect info $(DEMO_STORE)
	# verify reports the zeroed block in the last data file at its offset (exit 1: findings)
	$(VENV)/bin/rmqinspect verify $(DEMO_STORE); test $$? -eq 1
	# a zeroed block in the last data file: the restart cuts there and discards the intact
	# messages after it, which recover names; its exit 1 ("data is lost") is what the demo shows
	$(VENV)/bin/rmqinspect recover $(DEMO_STORE); test $$? -eq 1
	$(VENV)/bin/rmqinspect export $(DEMO_STORE) .demo/export

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check rmqinspect tests benchmarks fixtures
	$(VENV)/bin/ruff format --check rmqinspect tests benchmarks fixtures

typecheck: $(VENV)/.installed-dev
	$(VENV)/bin/mypy

pytest: $(VENV)/.installed-dev
	$(VENV)/bin/pytest

test: lint typecheck pytest

fixtures: $(VENV)/.installed
	$(PY) fixtures/regenerate.py

bench: $(VENV)/.installed
	$(PY) benchmarks/synth_throughput.py
	$(PY) benchmarks/scan_commitlog.py
	$(PY) benchmarks/export.py
	$(PY) benchmarks/verify.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
