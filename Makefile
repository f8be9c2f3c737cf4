# Leasehold: the two commands are `make up` and `make test`; both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install up test lint typecheck format lock upgrade bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

## The dev and test install comes from requirements-dev.lock alone (every package pinned with
## its sha256 hashes, hatchling included so the editable build needs nothing unpinned): a new
## upstream release cannot turn a fresh clone red. `make upgrade` moves the lock on purpose.
$(STAMP): pyproject.toml requirements-dev.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
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

## The locks, compiled by uv from pyproject.toml with sha256 hashes from PyPI:
## - requirements-dev.lock: what `make install` puts in .venv (every extra the suite needs, and
##   the build backend), for any platform and Python 3.11+ (--universal);
## - deploy/requirements.lock: the runtime dependencies the container image installs with
##   --require-hashes; deploy/build-requirements.lock: [build-system] requires (hatchling),
##   which the image's build stage installs before building the wheel without isolation.
##   Both take the dev lock's versions: the image ships what the suite tested.
## `make lock` keeps every pin it can (run it after changing dependencies); `make upgrade` takes
## the newest releases pyproject.toml allows, then runs the whole suite as the gate.
LOCK_COMMON = --generate-hashes --custom-compile-command "make lock"
LOCK_IMAGE = $(LOCK_COMMON) --python-version 3.11 --python-platform linux
LOCK_DEV = $(LOCK_COMMON) --universal --python-version 3.11 --extra dev --extra embedded
BUILD_REQUIRES = $(BIN)/python -c 'import tomllib; \
	print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")'
UPGRADE ?=
lock: install
	@# editables: what hatchling's editable build (`pip install -e .`) imports
	{ $(BUILD_REQUIRES); echo editables; } > $(VENV)/build-requires.in
	$(BIN)/uv pip compile pyproject.toml $(VENV)/build-requires.in $(LOCK_DEV) $(UPGRADE) \
	  --output-file requirements-dev.lock
	$(BIN)/uv pip compile pyproject.toml $(LOCK_IMAGE) --upgrade --constraint requirements-dev.lock \
	  --output-file deploy/requirements.lock
	$(BUILD_REQUIRES) | $(BIN)/uv pip compile - $(LOCK_IMAGE) --upgrade \
	  --constraint requirements-dev.lock --output-file deploy/build-requirements.lock

upgrade: install
	$(MAKE) lock UPGRADE=--upgrade
	$(MAKE) test

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
