# `make demo` and `make test` work on a fresh machine with Python 3.11+ and a C compiler.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo up test test-unit test-integration lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## run the platform's main job on real input, then stop everything
	$(BIN)/python -m devstack demo

up: $(STAMP)  ## web, worker, scheduler and flower with no workload (Ctrl-C stops)
	$(BIN)/python -m devstack up

test: $(STAMP)  ## the whole suite: unit and integration (real Redis, PostgreSQL, workers)
	$(BIN)/python -m pytest

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var db.sqlite3 db.sqlite3-wal db.sqlite3-shm
