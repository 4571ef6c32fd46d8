# shardcdc: two commands do all set-up on a fresh machine.
#   make demo   runs the main job on embedded defaults
#   make test   runs the whole suite (lint, type check, pytest)
# Heavy downloads and builds are cached under ~/.cache/shardcdc/.

SHELL        := /bin/bash
PYTHON       ?= python3.11
VENV         := .venv
PY           := $(VENV)/bin/python
CACHE        ?= $(HOME)/.cache/shardcdc
KAFKA_VERSION := 3.9.1
KAFKA_HOME   := $(CACHE)/kafka-$(KAFKA_VERSION)
KUBE_VERSION := v1.33.13
KUBE_HOME    := $(CACHE)/kube-$(KUBE_VERSION)
STAMPS       := .stamps
GEN          := build/gen
PROTOS       := $(wildcard proto/vitessapi/*.proto)
PYTEST_ARGS  ?=

export PIP_CACHE_DIR := $(CACHE)/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export SHARDCDC_CACHE := $(CACHE)
export SHARDCDC_KAFKA_HOME := $(KAFKA_HOME)
export SHARDCDC_KUBE_HOME := $(KUBE_HOME)

.PHONY: all setup venv proto kafka kube test pytest lint docs demo lock clean distclean

all: test

setup: venv proto kafka kube debezium

## Python environment: pinned by constraints.txt, rebuilt only when the pins or pyproject change.
venv: $(STAMPS)/venv
$(STAMPS)/venv: pyproject.toml constraints.txt
	@mkdir -p $(STAMPS) $(GEN)/vitessapi $(CACHE)
	@test -f $(GEN)/vitessapi/__init__.py || echo '"""Generated Vitess protobuf/gRPC code (do not edit; made by make proto)."""' > $(GEN)/vitessapi/__init__.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt setuptools wheel
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

## Protobuf/gRPC code from proto/ into build/gen (never committed).
proto: $(STAMPS)/proto
$(STAMPS)/proto: $(STAMPS)/venv $(PROTOS) scripts/gen-proto.sh
	bash scripts/gen-proto.sh $(PY) $(GEN)
	@touch $@

## A pinned Apache Kafka broker assembled from Maven Central jars.
kafka: $(KAFKA_HOME)/.complete
$(KAFKA_HOME)/.complete: scripts/fetch-kafka.sh
	bash scripts/fetch-kafka.sh $(KAFKA_VERSION) $(KAFKA_HOME) $(CACHE)/m2
	@touch $@

## kube-apiserver, kubectl and etcd built from pinned sources via the Go module proxy (envtest style).
kube: $(KUBE_HOME)/.complete
$(KUBE_HOME)/.complete: scripts/build-kube.sh
	bash scripts/build-kube.sh $(KUBE_VERSION) $(KUBE_HOME) $(CACHE)/go
	@touch $@

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

pytest: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: setup
	@start=$$(date +%s); \
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy && \
	echo "lint+typecheck: $$(( $$(date +%s) - start ))s" && \
	$(VENV)/bin/pytest $(PYTEST_ARGS)

## Generated reference pages (docs/configuration.md from the property catalogue and the CRD).
docs: setup
	$(PY) -m cdcworker.config.reference

demo: setup
	$(PY) -m cdcworker.cli demo

## Re-resolve the newest versions and write them to constraints.txt.
lock:
	rm -rf $(CACHE)/lockenv && $(PYTHON) -m venv $(CACHE)/lockenv
	$(CACHE)/lockenv/bin/pip install --quiet -e '.[dev]'
	{ echo "# Pinned versions for every Python package shardcdc installs (direct and transitive)."; \
	  echo "# Regenerate with: make lock"; \
	  $(CACHE)/lockenv/bin/pip freeze --exclude-editable | grep -v '^-e'; \
	  $(CACHE)/lockenv/bin/pip list --format=freeze | grep -E '^(setuptools|wheel)=='; } > constraints.txt

clean:
	rm -rf build $(STAMPS) .pytest_cache .mypy_cache .ruff_cache

distclean: clean
	rm -rf $(VENV)

## Kafka Connect + the Debezium Vitess connector from Maven Central (for the conformance test).
## The Connect version is the Kafka version this Debezium release is built against.
.PHONY: debezium
DEBEZIUM_VERSION         := 3.5.0.Final
DEBEZIUM_CONNECT_VERSION := 4.1.1
DEBEZIUM_HOME            := $(CACHE)/debezium-$(DEBEZIUM_VERSION)
export SHARDCDC_DEBEZIUM_HOME := $(DEBEZIUM_HOME)
debezium: $(DEBEZIUM_HOME)/.complete
$(DEBEZIUM_HOME)/.complete: scripts/fetch-debezium.sh
	bash scripts/fetch-debezium.sh $(DEBEZIUM_VERSION) $(DEBEZIUM_CONNECT_VERSION) $(DEBEZIUM_HOME) $(CACHE)/m2
	@touch $@
