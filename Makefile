# `make demo` and `make test` work on a fresh machine with Python 3.11+ and a C compiler.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo up observe test test-unit test-integration test-slow drills lint format bench clean fuzz fuzz-production

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## run the platform's main job on real input, then stop everything
	$(BIN)/python -m devstack demo

up: $(STAMP)  ## web, worker, scheduler and flower with no workload (Ctrl-C stops)
	$(BIN)/python -m devstack up

observe: $(STAMP)  ## `up` plus Debian's prometheus and alertmanager with platform/'s rules (Ctrl-C stops)
	$(BIN)/python -m devstack observe

test: $(STAMP)  ## the whole suite: unit and integration (real Redis, PostgreSQL, workers)
	$(BIN)/python -m pytest

test-slow: $(STAMP)  ## the long integration tests kept out of `make test` for its time budget (~10 min)
	$(BIN)/python -m pytest -m slow

drills: $(STAMP)  ## the live outage drills: each outage fires the one alert named for its cause (~4 min)
	$(BIN)/python -m pytest -m drill

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

lint: $(STAMP)  ## ruff (rules and formatting) and mypy ([tool.mypy] in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)  ## the platform against stock Celery and hand-written baselines, P1-P5 and memory (≤ 20 min; appends to docs/benchmarks.md)
	$(BIN)/python -m bench

fuzz: $(STAMP)  ## 10,000 generated requests against a live API (bench/fuzz_api.py)
	$(BIN)/python -m bench.fuzz_api --requests 10000

fuzz-production: $(STAMP)  ## schemathesis over /api/schema/, 5,000 requests, production settings behind a proxy (bench/fuzz_production.py)
	$(BIN)/python -m bench.fuzz_production --requests 5000

clean:
	rm -rf var db.sqlite3 db.sqlite3-wal db.sqlite3-shm
