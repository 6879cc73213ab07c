# Two commands do all set-up on a fresh machine:
#   make demo   -> virtualenv, the package and what it needs (setup.py), build, TensorBoard on sample_traces/ (PORT=6006)
#   make test   -> the same plus the test and lint tools (requirements-dev.txt), build (and check the committed bundle), every test
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 6006
HOST ?= localhost
LOGDIR ?= sample_traces

.PHONY: install dev browser frontend frontend-check lint test test-fast demo bench clean

# The package and its own dependencies (setup.py's install_requires): all the demo needs.
$(VENV)/.installed: setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# What the tests and the linters need besides (pytest, hypothesis, ruff, mypy, torch, playwright,
# torch-tb-profiler): never installed by the demo.
$(VENV)/.dev-installed: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

# Debian's chromium for the browser test (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

frontend:
	@if [ -f frontend/package.json ]; then cd frontend && npm ci --no-audit --no-fund --silent && npm run build --silent; fi

# Rebuild the dashboard and fail if the committed bundle in tb_attention_plugin/static is stale.
frontend-check: frontend
	@if [ -f frontend/package.json ]; then \
	  git diff --quiet --exit-code -- tb_attention_plugin/static || { \
	    echo "error: tb_attention_plugin/static is stale: run 'make frontend' and commit it" >&2; \
	    git --no-pager diff --stat -- tb_attention_plugin/static >&2; exit 1; }; fi

# The code's own rules: ruff (lint rules and format, in pyproject.toml), mypy (strict on trace/,
# roofline/, attention/) and tsc on the dashboard (frontend/tsconfig.json).
lint: dev frontend
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@if [ -f frontend/package.json ]; then cd frontend && npm run -s typecheck; fi

test: dev browser frontend-check lint
	$(PY) -m pytest -q tests

test-fast: dev
	$(PY) -m pytest -q tests -m "not e2e"

demo: install frontend
	$(VENV)/bin/tensorboard --logdir $(LOGDIR) --port $(PORT) --host $(HOST)

bench: install
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) build dist *.egg-info frontend/node_modules tests/_artifacts
