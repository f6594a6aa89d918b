# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_STORE := .demo/store

.PHONY: demo test lint typecheck pytest sanitize fixtures bytecode bench fuzz campaign clean

$(VENV)/.installed: pyproject.toml setup.py rmqinspect/format/_speedups.c rmqinspect/store/_mapguard.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(VENV)/.installed-fuzz: $(VENV)/.installed-dev
	$(PY) -m pip install --quiet -e '.[dev,fuzz]'
	touch $@

demo: $(VENV)/.installed bytecode
	rm -rf .demo
	# --fate: consumer groups with retry, delay and DLQ chains, transactions, committed offsets
	# (one past its queue's max), a crash while retries and delayed messages are in flight
	$(VENV)/bin/rmqinspect synth $(DEMO_STORE) --messages 5000 --topics 3 --queues 4 --crash --seed 7 --fate --damage zero-region
	$(VENV)/bin/rmqinspect info $(DEMO_STORE)
	# verify reports the zeroed block in the last data file at its offset (exit 1: findings)
	$(VENV)/bin/rmqinspect verify $(DEMO_STORE); test $$? -eq 1
	# a zeroed block in the last data file: the restart cuts there and discards the intact
	# messages after it, which recover names; its exit 1 ("data is lost") is what the demo shows
	$(VENV)/bin/rmqinspect recover $(DEMO_STORE); test $$? -eq 1
	# the restart cuts at the zeroed block: delayOffset.json is then past levels 2-5's queues,
	# which load clamps (exit 1: flagged); levels 17 and 18 still wait
	$(VENV)/bin/rmqinspect delays $(DEMO_STORE); test $$? -eq 1
	# committed, rolled back and pending transactions, read from the half, op and commit records
	$(VENV)/bin/rmqinspect transactions $(DEMO_STORE); test $$? -eq 0
	# every committed offset is past the queue the restart rebuilds: a 4.9.3 broker resets
	# such queues to 0 and replays them (exit 1: findings); README "Investigate duplicate consumption"
	$(VENV)/bin/rmqinspect groups $(DEMO_STORE) --after-restart --broker-version 4.9.3; test $$? -eq 1
	# one message's copies: groupRetry failed it 4 times; its last retry and its DLQ copy are cut
	$(VENV)/bin/rmqinspect trace $(DEMO_STORE) --key KA-830 --topic TopicA
	# the incident on one HTML page: verdict, map, queues, lost messages, findings (exit 1: the
	# restart loses data); README "report" shows its screenshot (docs/report-demo.png)
	$(VENV)/bin/rmqinspect report $(DEMO_STORE) --out .demo/report.html --broker-version 4.9.3; test $$? -eq 1
	$(VENV)/bin/rmqinspect export $(DEMO_STORE) .demo/export

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check rmqinspect tests benchmarks fixtures fuzz
	$(VENV)/bin/ruff format --check rmqinspect tests benchmarks fixtures fuzz

typecheck: $(VENV)/.installed-dev
	$(VENV)/bin/mypy

# The extension's tests run a second time with its portable paths forced (RMQINSPECT_SCALAR=1:
# no PCLMULQDQ, SSE4.2, SSSE3 or SSE2), the paths an ARM host runs, so CI on x86_64 tests them.
SCALAR_TESTS := tests/test_speedups.py tests/test_scan.py tests/test_columns.py tests/test_crc.py

# The suite runs in PYTEST_WORKERS processes (pytest-xdist), a test file to a worker (loadfile:
# a module's fixtures are built once, its tests run in their order); tests write only under their
# own tmp_path, which xdist makes per worker. 2: CI's cores, and no more Spark drivers at once.
PYTEST_WORKERS ?= 2

pytest: $(VENV)/.installed-dev bytecode
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile
	RMQINSPECT_SCALAR=1 $(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile $(SCALAR_TESTS)

test: lint typecheck pytest

# The extensions built with AddressSanitizer and UndefinedBehaviorSanitizer (gcc's libasan and
# libubsan; any error aborts) into a copy of the package under build/sanitize, where the
# scanner tests run, vector and portable paths (not part of make test: a few minutes). The
# interpreter is not instrumented: libasan is preloaded, and PYTHONMALLOC=malloc lets it see
# the buffers of Python objects. --capture=sys: a sanitizer writes its report to fd 2 and ends
# the process, which would lose what pytest captured at the fd level.
SANITIZE_DIR := build/sanitize
SANITIZE_CC ?= gcc
SANITIZE_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=all

sanitize: $(VENV)/.installed-dev
	rm -rf $(SANITIZE_DIR)
	mkdir -p $(SANITIZE_DIR)
	cp -r rmqinspect tests fixtures pyproject.toml $(SANITIZE_DIR)/
	suffix=$$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'); \
	include=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	for ext in format/_speedups store/_mapguard; do \
		$(SANITIZE_CC) $(SANITIZE_FLAGS) -shared -fPIC -I"$$include" rmqinspect/$$ext.c \
			-o $(SANITIZE_DIR)/rmqinspect/$$ext$$suffix || exit 1; \
	done
	cd $(SANITIZE_DIR) && for scalar in 0 1; do \
		RMQINSPECT_SCALAR=$$scalar LD_PRELOAD=$$($(SANITIZE_CC) -print-file-name=libasan.so) \
		ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 PYTHONMALLOC=malloc \
		PYTHONPATH=. $(abspath $(PY)) -m pytest --capture=sys -p no:cacheprovider $(SCALAR_TESTS) \
			|| exit 1; \
	done

fixtures: $(VENV)/.installed
	$(PY) fixtures/regenerate.py

# Bytecode for every module of the package, written even where PYTHONDONTWRITEBYTECODE is set:
# an editable install gets none, and every command would compile what it imports again
# (about half of a short command's start-up).
bytecode:
	$(PY) -m compileall -q rmqinspect > /dev/null

bench: $(VENV)/.installed bytecode
	$(PY) benchmarks/synth_throughput.py
	$(PY) benchmarks/scan_commitlog.py
	$(PY) benchmarks/messages_jsonl.py
	$(PY) benchmarks/recover.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/index_entries.py
	$(PY) benchmarks/memory.py
	$(PY) benchmarks/export.py
	$(PY) benchmarks/verify.py
	$(PY) benchmarks/tables.py
	$(PY) benchmarks/crc.py

# The long codec fuzz run (not part of make test): FUZZ_RUNS inputs per decoder under atheris.
FUZZ_RUNS ?= 100000
fuzz: $(VENV)/.installed-fuzz
	$(PY) fuzz/run_all.py --runs $(FUZZ_RUNS)

# The seeded mutation campaign over every command (not part of make test): CAMPAIGN_STORES stores.
CAMPAIGN_STORES ?= 300
CAMPAIGN_SEED ?= 1
campaign: $(VENV)/.installed
	$(PY) benchmarks/campaign.py --seed $(CAMPAIGN_SEED) --stores $(CAMPAIGN_STORES)

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
