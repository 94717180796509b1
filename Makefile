# One entry point per task; CI (.ci/run) calls `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,all

.PHONY: help venv node-deps demo test coverage-ratchet test-pythons unit integration lint format typecheck bench charts clean

help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP) ## Create .venv and install agentrt with its extras

demo: $(STAMP) ## Run the offline demo (scripted model, real tools)
	$(BIN)/agentrt demo

node-deps: ## npm packages the interop tests drive (MCP reference server, AG-UI client)
	bash scripts/install-node-deps.sh

test: $(STAMP) lint node-deps ## Lint, type-check, run the whole test suite with branch coverage, check the floor
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

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
