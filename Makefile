# Two commands on a fresh machine: `make run` (the service) and `make test` (every check).
# Both create .venv and install the project into it first; nothing else needs to be there.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Separate stamps: `make run` installs only the service, and must not make a later
# `make test` believe the dev and benchmark extras are installed too.
VENV_STAMP := $(VENV)/.venv-stamp
SERVICE_STAMP := $(VENV)/.service-stamp
DOCS_STAMP := $(VENV)/.docs-stamp
STAMP := $(VENV)/.installed-stamp
# pytest processes for `make test`, files kept whole on one (their module fixtures are shared).
# Four on two cores: most of a test's time is spent waiting on the processes it started.
TEST_PROCESSES ?= 4

.PHONY: install install-service precompile run test lint typecheck unit bench bench-replay bench-vw-daemon bench-scale bench-acks bench-explain bench-lean bench-quarter chaos chaos-cluster fuzz-api abuse docs compose-test clean

$(VENV_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	touch $@

$(SERVICE_STAMP): pyproject.toml $(VENV_STAMP)
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml $(VENV_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@ $(SERVICE_STAMP) $(DOCS_STAMP)

# The service and the docs extra (MkDocs Material) only: what `make docs` needs.
$(DOCS_STAMP): pyproject.toml $(VENV_STAMP)
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $@ $(SERVICE_STAMP)

## Everything: the service, the dev tools and the benchmark extras.
install: $(STAMP)
	@$(MAKE) --no-print-directory precompile

## The kernels of a default replay compiled ahead of time, so that a replay starts without
## numba (online_ctr/learning/precompile.py); again only once a source of the package changed.
precompile: $(SERVICE_STAMP)
	$(BIN)/python -m online_ctr.learning.precompile --if-stale

## Only the service (no dev or benchmark extras).
install-service: $(SERVICE_STAMP)

## The service on an embedded Redis (set OCTR_REDIS_URL to use your own), API on :8000.
run: install-service
	$(BIN)/online-ctr serve

## Lint, types and the whole test suite (starts its own Redis, API, workers, Prometheus).
test: install
	bash deploy/ci-install.sh
	@# numba compiles each kernel once, beside the lint, rather than once in each test process
	@# at the same time (a fresh clone's cache is empty): testkit/warm_kernels.py, in two parts
	@# (numba compiles on one core; the lint needs one for a third of the time).
	@# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (these machines set it):
	@# else each test process and every API, worker and command the tests start compiles the
	@# same sources again (pytest's collection alone: 13.7 CPU-s against 7.6 with it).
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j 0 online_ctr service workers testkit loadtests tools
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m testkit.warm_kernels --part 1/2 & first=$$!; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m testkit.warm_kernels --part 2/2 & second=$$!; \
	$(BIN)/ruff format --check . && $(BIN)/ruff check . && $(BIN)/mypy; linted=$$?; \
	wait $$first && wait $$second && exit $$linted
	@# One OpenBLAS thread in each test process and each process it starts: at numpy's import
	@# OpenBLAS starts a thread per core that spins for work none of them gives it (import
	@# numpy: ~0.05 CPU-s against 0.08-0.12), and four test processes share two cores anyway.
	OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_PROCESSES) --dist loadfile --durations=15

## Every benchmark in one run, each headline figure next to its baseline from the same run and
## its target (quality, quality on every click log, learning, serving, freshness, memory,
## explanations) -> docs/benchmarks.md.
## Needs wrk.
bench: install
	$(BIN)/python -m loadtests.bench

## Throughput of the in-process replay next to River and Vowpal Wabbit.
bench-replay: install
	$(BIN)/python -m loadtests.bench.bench_replay

## online-ctr serve next to Vowpal Wabbit's own server (vw --daemon), same Criteo rows: learning,
## single and batch predictions, A B B A rounds, CPU per process -> docs/benchmarks-vw-daemon.md.
bench-vw-daemon: install
	$(BIN)/python -m loadtests.bench.vw_daemon

## Cost against model size (100k, 1M, 10M features tracked) -> docs/benchmarks-scale.md.
bench-scale: install
	$(BIN)/python -m loadtests.bench.bench_scale

## Every attack on the service's bounds (issue 33) for 60 s each, beside a keyed client:
## peak memory against the configured bound, what each store holds, the client's p99.
abuse: install
	$(BIN)/python -m loadtests.chaos.abuse

## What OCTR_REPLICA_ACKS costs on a local Redis Cluster: /learn ingest and the worker's drain,
## acknowledgements off and on, paired A B B A -> docs/benchmarks-acks.md. Needs wrk.
bench-acks: install
	$(BIN)/python -m loadtests.bench.replica_acks_cost

## What "explain": true costs a 1,000-example /predict: plain, "explain": false and true bodies,
## A B C C B A per round, medians printed.
bench-explain: install
	$(BIN)/python -m loadtests.bench.explain_cost

## Lean models: admission on every click log, negative sampling offline and end to end through
## /learn (rates 1, 0.3, 0.1, A B C C B A) -> docs/benchmarks-lean.md.
bench-lean: install
	$(BIN)/python -m loadtests.bench.lean

## Redis bytes per model over a churning stream of 5M examples, with and without expiry and
## admission (issue 34): docs/benchmarks-quarter.md.
bench-quarter: install
	$(BIN)/python -m loadtests.bench.quarter

## Worker SIGKILLs, a Redis stall and two Redis restarts under feeding: nothing doubled or lost.
chaos: install
	$(BIN)/python -m loadtests.chaos.chaos

## On a local Redis Cluster (3 masters + 3 replicas), under feeding, each with OCTR_REPLICA_ACKS
## 0 and 1: masters killed (replica lagging or not), stopped, left down; lease-holder kills.
chaos-cluster: install
	$(BIN)/python -m loadtests.chaos.chaos_cluster

## Schemathesis, all checks, against the real API on a real Redis: over 2,000 cases.
fuzz-api: install
	$(BIN)/python -m loadtests.chaos.fuzz_api

## The documentation site into site/ (MkDocs Material), its reference pages regenerated first.
docs: $(DOCS_STAMP)
	$(BIN)/python -m tools.docs_reference
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## The production stack for real: images built with no registry (deploy/images/build.sh), then
## docker compose up of Redis, the API, two workers and Prometheus; learn and predict, scrapes,
## the learner SIGKILLed, down -v. As root: installs docker.io and starts dockerd if need be.
compose-test: install
	bash deploy/ci-install.sh
	bash deploy/images/engine.sh
	bash deploy/images/build.sh
	COMPOSE_TEST_REQUIRED=1 $(BIN)/pytest tests/deploy/test_compose_stack.py -v -s --durations=0

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
