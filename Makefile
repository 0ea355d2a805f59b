# finishline: one command runs the service, one runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint format bench clean image

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# the bench extra (LangGraph, profilers) on top of dev; `make test` never needs it
$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

## run: serve on $(HOST):$(PORT) with SQLite under ./data and the demo model unless an LLM is configured
run: $(STAMP)
	$(BIN)/uvicorn --factory app.main:create_app --host $(HOST) --port $(PORT) --timeout-graceful-shutdown 35

## test: lint, format check, then the whole test suite
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

## bench: engine, event log and service benchmarks into bench/results/ (QUICK=1: a faster pass)
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(if $(QUICK),--quick)

## image: build the container image (Dockerfile); `docker compose up` builds and runs it
image:
	docker build -t finishline .

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
