# One entry point per task; CI (.ci/run) calls `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,all

.PHONY: help venv node-deps demo dist docs test coverage-ratchet test-pythons unit integration lint format typecheck bench charts bench-chart clean

help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP) ## Create .venv and install agentrt with its extras

# The demo needs agentrt's core dependencies only (scripted model, SQLite store, built-in tools): no
# extras. A .venv that `make venv` filled (and is up to date) already has them.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then \
	  echo "==> $(VENV) already has agentrt with its extras (make venv): nothing to install for the demo"; \
	else \
	  echo "==> Installing agentrt and its core dependencies only (no extras, about 40 MB) into $(VENV) for the demo"; \
	  { [ -x $(BIN)/python ] || $(PY) -m venv $(VENV); } && $(BIN)/python -m pip install -e .; \
	fi
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP) ## Run the offline demo (scripted model, real tools); installs only what it needs
	$(BIN)/agentrt demo

# scripts/check_dist.py: `make dist DIST_FLAGS=--extras` also installs each extra in its own venv.
dist: $(STAMP) ## Build wheel+sdist into dist/, twine check, install the wheel in a fresh venv, run agentrt demo
	$(BIN)/python scripts/check_dist.py --outdir dist $(DIST_FLAGS)

node-deps: ## npm packages the interop tests drive (MCP reference server, AG-UI client)
	bash scripts/install-node-deps.sh

# mkdocs.yml: --strict fails on a broken link or anchor and on a docstring mkdocstrings cannot render.
docs: $(STAMP) ## Build the documentation site (MkDocs Material, API reference from the docstrings) into site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: $(STAMP) lint node-deps docs ## Lint, type-check, build the docs, run the whole test suite with branch coverage, check the floor
	$(BIN)/python -m pytest -q --cov --cov-report=
	$(BIN)/python scripts/coverage_ratchet.py

coverage-ratchet: $(STAMP) ## Raise coverage-floor.txt to the coverage of the last `make test` (never lowers it)
	$(BIN)/python scripts/coverage_ratchet.py --update

# Interpreters: pythonX.Y on PATH, else pyenv's (installed on the project's machines; `uv python
# install` cannot download here). One venv per version; the coverage floor is checked by `make test` only.
PYTHONS ?= 3.11 3.12 3.13
test-pythons: node-deps ## The whole test suite on each Python of PYTHONS (.venv-X.Y each)
	@set -e; for v in $(PYTHONS); do \
	  py=python$$v; $$py -c '' 2>/dev/null || py=$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | tail -n 1); \
	  if [ -z "$$py" ]; then echo "python$$v not found (see CONTRIBUTING.md, 'Python versions')"; exit 1; fi; \
	  echo "== Python $$v: $$py"; \
	  $(MAKE) --no-print-directory venv PY=$$py VENV=.venv-$$v; \
	  .venv-$$v/bin/python -m pytest -q -p no:cacheprovider; \
	done

unit: $(STAMP) ## Unit tests only
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP) ## Integration tests (PostgreSQL, MariaDB, Redis)
	$(BIN)/python -m pytest -q tests/integration

# `mypy tests` leaves out the conftest.py files below tests/ (they share one module name; see
# [tool.mypy] in pyproject.toml): each is checked on its own.
lint: $(STAMP) ## ruff check, ruff format --check, mypy --strict on src/ and tests/
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy src
	$(BIN)/mypy tests
	@set -e; for f in $$(find tests -mindepth 2 -name conftest.py | sort); do echo "$(BIN)/mypy $$f"; $(BIN)/mypy $$f; done
	$(BIN)/lint-imports

format: $(STAMP) ## Apply ruff format and fixes
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

typecheck: $(STAMP) ## mypy --strict on src/
	$(BIN)/mypy src

# matplotlib for benchmarks/charts.py: the `bench` extra, installed once into .venv.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) ## Run the benchmarks (tables printed, JSON under benchmarks/results/), then draw the charts
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/state.py --per-call
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/charts.py

charts: $(BENCH_STAMP) ## Redraw docs/img/scaling-*.svg from the JSON in benchmarks/results/
	$(BIN)/python benchmarks/charts.py

bench-chart: $(BENCH_STAMP) ## Redraw docs/img/peers.svg (agentrt against its peers) from benchmarks/results/peers.json
	$(BIN)/python benchmarks/peers.py chart
	$(BIN)/python benchmarks/peers.py table

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
