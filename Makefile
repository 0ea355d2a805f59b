# finishline: one command runs the service, one runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
# LangGraph's server (the service benchmark's peer) in a venv of its own: langgraph-api pins
# structlog<26, finishline needs 26 (requirements/langgraph-server.in)
LANGGRAPH_VENV := .venv-langgraph
LANGGRAPH_STAMP := $(LANGGRAPH_VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000
# The lock: every package of the tree pinned with its hashes (requirements/*.txt), compiled
# from pyproject.toml by `make lock`. Installs take exactly those files, hashes checked.
LOCK   := requirements
PIP_LOCKED := $(BIN)/python -m pip install --quiet --require-hashes --no-deps
PIP_CHECK  := $(BIN)/python -m pip check || { echo "the lock misses a dependency: run make lock"; exit 1; }

.PHONY: run test lint format bench clean image chromium redis-server postgresql lock lock-check agui-client \
  docs docs-build docs-gen docs-screenshot report-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# pip, setuptools and uv at their locked versions, then the locked tree, then finishline
# itself (editable, nothing resolved). `pip check` fails when the lock misses a dependency.
$(STAMP): pyproject.toml $(LOCK)/build.txt $(LOCK)/dev.txt | $(BIN)/python
	$(PIP_LOCKED) -r $(LOCK)/build.txt
	$(PIP_LOCKED) -r $(LOCK)/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PIP_CHECK)
	touch $(STAMP)

# the bench extra (LangGraph, profilers) on top of dev; `make test` never needs it
$(BENCH_STAMP): $(STAMP) $(LOCK)/bench.txt
	$(PIP_LOCKED) -r $(LOCK)/bench.txt
	$(PIP_CHECK)
	touch $(BENCH_STAMP)

$(LANGGRAPH_STAMP): $(LOCK)/langgraph-server.txt
	$(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)/langgraph-server.txt
	$(LANGGRAPH_VENV)/bin/python -m pip check
	touch $(LANGGRAPH_STAMP)

# uv compiles the lock: universal (every platform's markers), for the oldest Python
# pyproject.toml allows, keeping the pins the files already hold. UPGRADE=1 moves every pin
# to the newest release pyproject.toml allows; UPGRADE=name moves that package alone.
UV_COMPILE = $(UV) pip compile --quiet --universal --python-version 3.11 --generate-hashes \
  --custom-compile-command 'make lock' $(if $(UPGRADE),$(if $(filter 1,$(UPGRADE)),--upgrade,--upgrade-package $(UPGRADE)))
UV ?= $(CURDIR)/$(BIN)/uv

$(CURDIR)/$(BIN)/uv: | $(BIN)/python
	$(PIP_LOCKED) -r $(LOCK)/build.txt

## lock: recompile requirements/*.txt from pyproject.toml (after changing a dependency)
lock: $(UV)
	$(UV_COMPILE) $(LOCK)/build.in -o $(LOCK)/build.txt
	$(UV_COMPILE) pyproject.toml -o $(LOCK)/main.txt
	$(UV_COMPILE) pyproject.toml --extra dev -c $(LOCK)/main.txt -o $(LOCK)/dev.txt
	$(UV_COMPILE) pyproject.toml --extra dev --extra bench -c $(LOCK)/dev.txt -o $(LOCK)/bench.txt
	$(UV_COMPILE) $(LOCK)/langgraph-server.in -o $(LOCK)/langgraph-server.txt

## lock-check: fail when the lock is out of date with pyproject.toml (CI runs it)
# It recompiles the lock in a scratch copy and compares the pins (name==version; markers),
# not the hashes: a wheel uploaded later to an already pinned release changes no version.
lock-check: $(UV)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  cp -r pyproject.toml $(LOCK) "$$tmp/" && \
	  $(MAKE) --no-print-directory -s -C "$$tmp" -f $(CURDIR)/Makefile lock UV=$(UV) && \
	  stale=0 && for lock in build main dev bench langgraph-server; do \
	    grep -E '^[^ #]' $(LOCK)/$$lock.txt >"$$tmp/$$lock.pins"; \
	    grep -E '^[^ #]' "$$tmp/$(LOCK)/$$lock.txt" >"$$tmp/$$lock.fresh"; \
	    diff -u --label $(LOCK)/$$lock.txt --label "make lock" "$$tmp/$$lock.pins" "$$tmp/$$lock.fresh" || stale=1; \
	  done && \
	  if [ $$stale = 0 ]; then echo "lock: in sync with pyproject.toml"; \
	  else echo "lock: out of date with pyproject.toml: run make lock, commit requirements/"; exit 1; fi

## run: serve on $(HOST):$(PORT) with SQLite under ./data and the demo model unless an LLM is configured
run: $(STAMP)
	$(BIN)/uvicorn --factory app.main:create_app --host $(HOST) --port $(PORT) --timeout-graceful-shutdown 35 \
	  --http app.api.protocols:HeaderTimeoutProtocol

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

# the Postgres store's tests start a real server (initdb + pg_ctl, as the postgres user when
# root) on a free port, unless FINISHLINE_TEST_POSTGRES_URL names one
postgresql:
	@[ -n "$$FINISHLINE_TEST_POSTGRES_URL" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "The Postgres store tests need Debian's postgresql: installing it with apt-get."; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	  else echo "Install it (apt-get install postgresql), then run make test again."; exit 1; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql; }

# the AG-UI tests drive POST /ag-ui with the protocol's own client (@ag-ui/client's HttpAgent)
# under node, installed from its own lock (tests/agui_client/package-lock.json) by `npm ci`;
# npm ci's hidden lockfile marks an install that matches the lock (redone when the lock changes)
AGUI_CLIENT := tests/agui_client
AGUI_CLIENT_STAMP := $(AGUI_CLIENT)/node_modules/.package-lock.json

$(AGUI_CLIENT_STAMP): $(AGUI_CLIENT)/package.json $(AGUI_CLIENT)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  echo "The AG-UI client tests need node 20 and npm (apt-get install nodejs npm)."; exit 1; }
	cd $(AGUI_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## agui-client: install the AG-UI client the tests drive (npm ci in tests/agui_client)
agui-client: $(AGUI_CLIENT_STAMP)

## test: lint, format check, type check (mypy --strict on app/), then the whole test suite
test: $(STAMP) chromium redis-server postgresql $(AGUI_CLIENT_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

## bench: engine, event log, service (floors, LangGraph's server) and uvicorn-workers benchmarks into bench/results/ (QUICK=1: a faster pass)
bench: $(BENCH_STAMP) $(LANGGRAPH_STAMP) redis-server
	$(BIN)/python -m bench $(if $(QUICK),--quick)

## report-demo: fixed tasks through finishline against BASE_URL's MODEL (any OpenAI-compatible endpoint; SETTINGS: per-run settings as JSON), then the termination report (not part of `make test`)
report-demo: $(STAMP)
	$(BIN)/python -m bench.report_demo --base-url "$(BASE_URL)" --model "$(MODEL)" $(if $(SETTINGS),--settings '$(SETTINGS)')

# the docs site (mkdocs.yml, docs/): Material for MkDocs in strict mode, a broken link or anchor
# fails it; `make test` builds it too (tests/docs/). Its generated blocks come from the
# declarations (docgen/): `make docs-gen` rewrites them after a new setting, event or endpoint
DOCS_PORT ?= 8001
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

## docs: build the docs site (strict) and serve it on $(HOST):$(DOCS_PORT), rebuilt on each change
docs: $(STAMP)
	$(MKDOCS) serve --strict --dev-addr $(HOST):$(DOCS_PORT)

## docs-build: build the docs site into build/site (strict: any warning fails it)
docs-build: $(STAMP)
	$(MKDOCS) build --strict

## docs-gen: rewrite the docs' generated blocks (settings, events, API) from their declarations
docs-gen: $(STAMP)
	$(BIN)/python -m docgen

## docs-screenshot: take the README's picture of the viewer again (docs/img/viewer.png), in Chromium
docs-screenshot: $(STAMP) chromium
	DOCS_SCREENSHOT=docs/img/viewer.png $(BIN)/pytest -q tests/browser/test_screenshot.py

## image: build the container image (Dockerfile); `docker compose up` builds and runs it
image:
	docker build -t finishline .

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) $(LANGGRAPH_VENV) $(AGUI_CLIENT)/node_modules .pytest_cache .ruff_cache .mypy_cache .hypothesis build *.egg-info
