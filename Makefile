# Two commands on a fresh machine: `make run` and `make test`. Both bootstrap .venv when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run dev demo-regression demo-extraction-regression test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The project-local Dagster instance (SQLite under var/dagster; dagster.yaml is copied into it).
export DAGSTER_HOME := $(CURDIR)/var/dagster
DEMO := var/demo
INSTANCE := $(DAGSTER_HOME)/dagster.yaml

$(INSTANCE): dagster.yaml
	@mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $@

# The main job: write the embedded demo (idempotent), then materialise the whole graph in one run on
# the local instance and print the release decision (reports in var/reports/latest/).
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

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_score.py
	$(BIN)/python bench/bench_make_run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
