# finishline: one command runs the service, one runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint format bench clean image chromium redis-server

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

# the browser tests drive Debian's chromium (never `playwright install`, which downloads one)
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "The browser tests need Debian's chromium: installing it with apt-get."; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	  else echo "Install it (apt-get install chromium), then run make test again."; exit 1; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }

# the Redis store's tests start Debian's redis-server on a free port (never a mock of Redis)
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "The Redis store tests need Debian's redis-server: installing it with apt-get."; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	  else echo "Install it (apt-get install redis-server), then run make test again."; exit 1; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends redis-server; }

## test: lint, format check, then the whole test suite (browser tests included)
test: $(STAMP) chromium redis-server
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
