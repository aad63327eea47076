# hlogap: `make demo` and `make test` are the two set-up commands; both create .venv when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs: what running needs (demo), and that plus the dev extras (tests, lint, fixtures).
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench proto fixtures clean

# What an install builds from: a change to any of them installs again.
SOURCES := pyproject.toml hlogap/_protowire.h hlogap/trace/_xline.c hlogap/hlo/_hlodecode.c hlogap/trace/_windowsums.c

$(RUNTIME): $(SOURCES)
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	touch $(RUNTIME)

# The dev install holds the runtime one: from nothing, hlogap is built once, not twice (its
# C extensions compiled again: ~15 s of a clean clone's `make test`).
$(STAMP): $(SOURCES)
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(RUNTIME) $(STAMP)

demo: $(RUNTIME)
	$(BIN)/hlogap demo

# One worker per core, each test file on one worker (its module fixtures set up once: a Dask
# cluster, an S3 server). `$(BIN)/pytest` alone runs the suite in one process. hlogap's bytecode
# is written first, and the tests' as they run: where PYTHONDONTWRITEBYTECODE is set, each of
# the hundreds of `python -m hlogap` the tests start compiled its 27 k lines again (0.9 s a
# start, not 0.5 s), and each worker rewrote and compiled every test file (5.5 s to collect
# the suite, not 2.3 s).
test: $(STAMP)
	$(BIN)/python -m compileall -q hlogap
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n auto --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check hlogap tests scripts
	$(BIN)/ruff format --check hlogap tests scripts
	$(BIN)/mypy

# `make bench BENCH_ARGS="--against e31f4c2"` adds the head-to-head against that commit
# (docs/performance.md, issue 43's targets).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python scripts/bench.py --write-docs $(BENCH_ARGS)

# Regenerate the protobuf modules from our own .proto files (committed, so users need no protoc).
proto: $(STAMP)
	cd hlogap/proto && ../../$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. xplane.proto hlo.proto

# Profile small JAX programs on the CPU and write traces + cost_analysis() oracles to tests/fixtures.
fixtures: $(STAMP)
	$(BIN)/python scripts/make_fixtures.py

clean:
	rm -rf $(VENV) build dist *.egg-info
