# Two commands on a fresh machine: `make run` and `make test`. Both bootstrap .venv when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Until the Dagster code location lands, the "main job" is the release scorer on the shipped layered
# example (frozen golden set, evidence registry, committed gates). Exit 1 (a blocked release) is a
# verdict, not a crash, so it is reported but does not fail `make run`.
EXAMPLE := examples/layered
run: $(STAMP)
	@$(BIN)/ragspine-eval golden verify --gold $(EXAMPLE)/gold.jsonl
	@$(BIN)/ragspine-eval score --gold $(EXAMPLE)/gold.jsonl --trace $(EXAMPLE)/traces.jsonl \
		--evidence $(EXAMPLE)/evidence.jsonl --config $(EXAMPLE)/gates.yaml --format markdown; rc=$$?; \
	if [ $$rc -eq 1 ]; then echo "(release blocked: exit 1)"; elif [ $$rc -ne 0 ]; then exit $$rc; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_score.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
