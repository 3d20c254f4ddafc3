# `make demo` and `make test` work on a fresh machine with Python 3.11+ and a C compiler.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo up observe test test-unit test-integration test-slow test-rabbitmq drills lint format bench clean fuzz fuzz-production test-django6

# Django 6.x needs Python 3.12+: the first of these that is one (pyenv's builds too).
VENV6 := .venv-dj6
STAMP6 := $(VENV6)/.installed-stamp
PYTHON312 ?= $(shell for p in python3.13 python3.12 $$HOME/.pyenv/versions/3.1[2-9]*/bin/python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && echo $$p && break; done)
# The Tasks backend's tests: unit (run in-process) and Django's documentation examples (real worker).
DJANGO6_TESTS := tests/unit/test_taskbackend.py tests/unit/test_kind_discovery.py tests/unit/test_client.py \
	tests/integration/test_tasks_docs.py

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(STAMP6): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "make test-django6: no Python 3.12+ found (set PYTHON312=...)"; exit 1; }
	test -x $(VENV6)/bin/python || $(PYTHON312) -m venv $(VENV6)
	$(VENV6)/bin/python -m pip install --quiet --upgrade pip
	$(VENV6)/bin/python -m pip install --quiet -e '.[dev]' 'Django>=6.0,<7'
	touch $(STAMP6)

test-django6: $(STAMP6)  ## the Tasks backend's tests on Python 3.12+ and Django 6.x (.venv-dj6)
	$(VENV6)/bin/python -c 'import django; assert django.VERSION >= (6,), django.VERSION'
	$(VENV6)/bin/python -m pytest $(DJANGO6_TESTS)

demo: $(STAMP)  ## run the platform's main job on real input, then stop everything
	$(BIN)/python -m devstack demo

up: $(STAMP)  ## web, worker, scheduler and flower with no workload (Ctrl-C stops)
	$(BIN)/python -m devstack up

observe: $(STAMP)  ## `up` plus Debian's prometheus and alertmanager with platform/'s rules (Ctrl-C stops)
	$(BIN)/python -m devstack observe

test: $(STAMP)  ## the whole suite: unit and integration (real Redis, PostgreSQL, workers)
	$(BIN)/python -m pytest --durations=25

test-slow: $(STAMP)  ## the long integration tests kept out of `make test` for its time budget (~10 min)
	$(BIN)/python -m pytest -m 'slow and not soak and not drill'

test-rabbitmq: $(STAMP)  ## the broker matrix on RabbitMQ (quorum queues, a vhost per test) (~3 min at load 2-5, ~4.5 min at load 5-9)
	$(BIN)/python -m pytest -m 'rabbitmq and not drill and not soak' tests/integration

drills: $(STAMP)  ## the live outage drills: each outage fires the one alert named for its cause; the multi-host drills on both brokers; a RabbitMQ node restart on a private node (~9 min)
	$(BIN)/python -m pytest -m drill

tiers: $(STAMP)  ## test-slow, test-rabbitmq and drills in one pytest session (what .ci/run runs; ~22 min), soak excluded
	$(BIN)/python -m pytest --durations=15 -m '(slow or rabbitmq or drill) and not soak'

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

bench: $(STAMP)  ## the platform against stock Celery and hand-written baselines, P1-P5 and memory (~21-33 min on 2 cores by the machine's speed, estimated in docs/benchmarks.md; appends to it)
	$(BIN)/python -m bench

fuzz: $(STAMP)  ## 10,000 generated requests against a live API (bench/fuzz_api.py)
	$(BIN)/python -m bench.fuzz_api --requests 10000

fuzz-production: $(STAMP)  ## schemathesis over /api/schema/, 5,000 requests, production settings behind a proxy (bench/fuzz_production.py)
	$(BIN)/python -m bench.fuzz_production --requests 5000

clean:
	rm -rf var db.sqlite3 db.sqlite3-wal db.sqlite3-shm
