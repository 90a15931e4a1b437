# Two commands on a fresh machine: `make run` and `make test`. Both bootstrap .venv when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv installs the locked environment several times faster than pip resolves it (bench/bench_setup.py);
# it is pinned like everything else, and installed with pip, the one installer every Python has.
UV_VERSION := 0.13.9
UV := $(BIN)/uv

.PHONY: run dev demo-regression demo-extraction-regression test test-fast test-deep lint format bench lock clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# requirements.lock pins every package of the dev environment (the dev and deploy extras) with its
# hashes: every machine installs exactly what CI tested, and a tampered download is refused. The
# project itself is installed editable, without dependencies of its own (they are all in the lock).
# --compile-bytecode writes every package's .pyc at install time: uv does not by default, and where
# PYTHONDONTWRITEBYTECODE is set (as on the machines this is built on) every process compiles its
# imports from source again (1.3 s for pandas alone; a 1M-case `ragspine-eval score` took 8.2 s, not
# 5.1 s). The project's own modules are compiled too (a changed one is compiled in memory until the
# next install).
$(STAMP): pyproject.toml requirements.lock | $(UV)
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes --compile-bytecode -r requirements.lock
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q ragspine_pipeline >/dev/null
	touch $(STAMP)

# After a change to the dependencies in pyproject.toml: re-resolve the lock (any platform, Python 3.11+).
# requirements-runtime.lock: the image's environment (deploy and judge extras, no test tools), pinned to
# the same versions as requirements.lock (it is resolved with it as a constraint).
lock: | $(UV)
	$(UV) pip compile pyproject.toml --quiet --extra dev --universal --python-version 3.11 \
		--generate-hashes --output-file requirements.lock
	$(UV) pip compile pyproject.toml --quiet --extra deploy --extra judge --universal --python-version 3.11 \
		--generate-hashes -c requirements.lock --output-file requirements-runtime.lock

# The project-local Dagster instance (SQLite under var/dagster; dagster.yaml is copied into it).
export DAGSTER_HOME := $(CURDIR)/var/dagster
DEMO := var/demo
INSTANCE := $(DAGSTER_HOME)/dagster.yaml

$(INSTANCE): dagster.yaml
	@mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $@

# The main job: write the embedded demo (idempotent), score its production days (one run a day), then
# everything else in one `full_eval` run on the local instance, and print the release decision (reports
# in var/reports/latest/).
run: $(STAMP) $(INSTANCE)
	@$(BIN)/ragspine-eval demo init --root $(DEMO)
	@$(BIN)/python -m ragspine_pipeline.defs.local run

# The Dagster UI (dg dev) on the same instance and demo: http://127.0.0.1:$(DEV_PORT). Quiet; Ctrl-C or
# SIGTERM stops it and every process it started within seconds (ragspine_pipeline/defs/dev.py).
DEV_PORT ?= 3000
dev: $(STAMP) $(INSTANCE)
	@$(BIN)/ragspine-eval demo init --root $(DEMO)
	@$(BIN)/python -m ragspine_pipeline.defs.dev --port $(DEV_PORT)

# Publish a degraded demo index (a restricted chunk leaks into retrieval, fewer candidates kept), run
# exactly the re-evaluation index_rebuild_sensor requests for it, print the blocked decision, then
# publish a healthy index again so the next `make run` ships.
demo-regression: $(STAMP) $(INSTANCE)
	@$(BIN)/ragspine-eval demo init --root $(DEMO)
	@$(BIN)/ragspine-eval demo rebuild-index --root $(DEMO) --degraded
	@$(BIN)/python -m ragspine_pipeline.defs.local reeval --expect block
	@$(BIN)/ragspine-eval demo rebuild-index --root $(DEMO)

# The same for the document parser: the re-extracted demo workbook loses fills and merged spans, two
# extraction channels fall below their thresholds (the release itself ships), then a healthy rebuild.
demo-extraction-regression: $(STAMP) $(INSTANCE)
	@$(BIN)/ragspine-eval demo init --root $(DEMO)
	@$(BIN)/ragspine-eval demo rebuild-index --root $(DEMO) --degraded-parser
	@$(BIN)/python -m ragspine_pipeline.defs.local reeval --expect ship
	@$(BIN)/ragspine-eval demo rebuild-index --root $(DEMO)

# --no-cache: ruff caches a file's import order with the first-party modules that existed when it last
# looked; a module added since would pass here and fail on a fresh clone.
lint: $(STAMP) $(INSTANCE)
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --no-cache --check .
	$(BIN)/dg check defs

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The suite in two layers (tests/conftest.py). `make test-fast`, for a developer's minute: everything
# but the system tests (daemons, servers, `make dev`, a browser, Celery, PostgreSQL, many processes,
# kill -9), each Hypothesis property on at most 10 examples. `make test` (and .ci/run): everything, each
# property on at most 100 examples. `make test-deep`: everything, each property on the examples it asks
# for (up to 600), for a change to the readers or the scorers. All in several processes (pytest-xdist):
# the tests are independent (their own folders, ports, databases, vhosts, Redis databases), and what one
# waits for (a server, a retry's back-off, a subprocess) another fills with work.
# Where PYTHONDONTWRITEBYTECODE is set (as on the machines this is built on), each of them would compile
# every test module, and pytest rewrite its asserts, again on every run: 9.5 s of collection per
# process instead of 4.7 s. The tests keep their bytecode (in __pycache__, ignored by git).
# Three workers on two cores for the fast layer: it waits (servers, retries' back-offs, subprocesses)
# more than a third of its time; measured in a fresh clone on 2026-11-29, `make test-fast` took 83 s with
# three against 90 s with two.
# The whole suite in four workers, handed out a file at a time in the order collected (system tests
# first: tests/conftest.py): the longest tests (daemons, whole runs, Celery workers: one to three minutes
# each) start first instead of finishing last, alone, while the other workers are idle. Measured in a fresh clone on 2026-11-30: 676 s of pytest with three workers
# and the default scheduling, 568 s with four this way (565 s with six, at a load of 8 to 10).
TEST_WORKERS ?= 3
SUITE_WORKERS ?= 4
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q
SUITE := $(PYTEST) -n $(SUITE_WORKERS) --dist loadfile --no-loadscope-reorder

test-fast: lint
	HYPOTHESIS_PROFILE=quick $(PYTEST) -n $(TEST_WORKERS) -m "not system"

test: lint
	HYPOTHESIS_PROFILE=ci $(SUITE)

test-deep: lint
	HYPOTHESIS_PROFILE=deep $(SUITE)

bench: $(STAMP)
	$(BIN)/python bench/bench_score.py
	$(BIN)/python bench/bench_make_run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build
