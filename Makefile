# pykraft: `make test` and `make run` are the contract with a new user.
# Both create (or refresh) .venv from requirements.lock first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1
export PYTHONHASHSEED := 0

.PHONY: all venv test run sim-demo soak bench clean prereqs kafka playground pyodide checker-standalone

all: test

prereqs:
	@tools/prereqs.sh "$(PYTHON)" --java

$(STAMP): requirements.lock pyproject.toml | prereqs
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

# The whole suite; kept under 15 minutes on 2 cores. It runs on
# $(TEST_WORKERS) pytest-xdist workers: about half of a serial run's time is
# spent waiting on processes, disks and timers, so two workers on two cores
# take about 11 minutes where one takes about 17. `make test TEST_WORKERS=0`
# runs it in this process, one test after another.
TEST_WORKERS ?= 2
test: $(STAMP)
	@tools/net-tools.sh
	@tools/browser-tools.sh
	@tools/prometheus-tools.sh
	@tools/kafka-fetch.sh
	@tools/playground-fetch.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not long" --durations=15 \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

# The project's main job: a fault-injection campaign against real processes
# (partitions, kill -9, pauses), its history checked by the Spark checker.
# `make run PROMETHEUS=1`: Debian's Prometheus scrapes every node during the
# run (installed by tools/prometheus-tools.sh); the report links its queries.
run: $(STAMP)
	@$(if $(PROMETHEUS),tools/prometheus-tools.sh)
	$(BIN)/jepsen-like campaign --scenario chaos --time-limit 60 --tls $(if $(PROMETHEUS),--prometheus)

# The zombie-leader teaching story (KAFKA-15489) in the simulator, with check
# quorum off (stale reads found) and on.
sim-demo: $(STAMP)
	$(BIN)/jepsen-like sim --scenario zombie-leader --seed 7 --no-check-quorum; \
	  echo "(exit $$? expected non-zero: with check quorum off the zombie leader serves stale reads)"
	$(BIN)/jepsen-like sim --scenario zombie-leader --seed 7

# Long seed sweeps and the long hypothesis profile.
soak: $(STAMP)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest -q -p no:cacheprovider -m "not processes" tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -m long tests
	$(BIN)/jepsen-like sweep --seeds 10000
	$(BIN)/jepsen-like sweep --seeds 10000 --reconfigure
	$(BIN)/jepsen-like campaign --scenario chaos --duration 30m --tls --plain

# The checker on a Spark standalone cluster started from the pyspark
# distribution in .venv: a master and two one-core workers on 127.0.0.1, logs
# and scratch space in a temporary directory, stopped by pid afterwards
# (bench/spark_standalone.py). `make checker-standalone HISTORY=path` checks
# that history; by default a synthetic one of $(STANDALONE_OPS) operations.
# STANDALONE_ARGS: more options, and after `--` options for jepsen-like check.
STANDALONE_OPS ?= 100000
checker-standalone: $(STAMP)
	$(BIN)/python -m bench.spark_standalone $(if $(HISTORY),$(HISTORY),--ops $(STANDALONE_OPS)) $(STANDALONE_ARGS)

# Apache Kafka 4.4.0's jars (tools/kafka/pom.xml), fetched from Maven Central
# into $${PYKRAFT_CACHE:-~/.cache/pykraft}/kafka-4.4.0, outside the tree; a
# no-op once there. Used by the metadata benchmark and the Kafka test.
kafka:
	@tools/kafka-fetch.sh

# Pyodide 0.29.5 from the npm registry (sha256-pinned) into
# $${PYKRAFT_CACHE:-~/.cache/pykraft}/pyodide-0.29.5, outside the tree.
pyodide:
	@tools/playground-fetch.sh

# The browser playground (docs/learn-raft.md): one self-contained folder,
# build/playground, that opens from disk or any static host; served here on
# http://127.0.0.1:$(PLAYGROUND_PORT)/ until Ctrl-C.
PLAYGROUND_PORT ?= 8022
playground: $(STAMP) pyodide
	$(BIN)/python tools/build_playground.py --out build/playground
	@echo "serving on http://127.0.0.1:$(PLAYGROUND_PORT)/ (or open build/playground/index.html from disk); Ctrl-C to stop"
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory build/playground $(PLAYGROUND_PORT)

# make bench installs the quorum benchmark's peers first (tools/bench-peers.sh:
# etcd and ZooKeeper from Debian when root, the bench extra's clients).
bench: $(STAMP) kafka pyodide
	@tools/bench-peers.sh $(BIN)/python
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis store
