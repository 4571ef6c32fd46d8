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
# `make test` runs the suite in this many pytest-xdist workers, one test file (every real-Vitess file:
# one group) at a time each: a serial run leaves ~45 % of 2 cores idle, waiting on JVMs, brokers and pods.
# 0 runs it serially.
TEST_WORKERS ?= 2

# Set-up steps print one line each (name, time); their whole output goes to $(LOGS)/<step>.log,
# whose tail is shown when a step fails (scripts/step.sh).
LOGS         := $(CACHE)/logs
STEP         := @bash scripts/step.sh

export PIP_CACHE_DIR := $(CACHE)/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export SHARDCDC_CACHE := $(CACHE)
export SHARDCDC_KAFKA_HOME := $(KAFKA_HOME)
export SHARDCDC_KUBE_HOME := $(KUBE_HOME)

.PHONY: all setup demo-setup venv proto kafka kube test pytest lint docs demo lock clean distclean

all: test

## Everything the whole suite needs (`make test`).
setup: venv native proto kafka kube debezium helm prometheus fuzz-tools rdkafka-header vitess spark-crd docker-tools kind

## Only what `make demo` needs: no kube-apiserver/etcd, Debezium or helm (minutes of builds it never uses).
demo-setup: venv-demo native proto kafka

## Python environment: pinned by constraints.txt, rebuilt only when the pins or pyproject change.
## venv-demo: the runtime and the proto generator (what `make demo` needs); venv adds the dev tools.
## --no-compile: Python compiles a module when it is first imported, so byte-compiling all of
## kubernetes & co. up front only made a first run ~40 % slower; --no-build-isolation builds the
## editable package with the setuptools just installed instead of fetching another copy.
.PHONY: venv-demo
venv-demo: $(STAMPS)/venv-demo
$(STAMPS)/venv-demo: pyproject.toml constraints.txt
	@mkdir -p $(STAMPS) $(GEN)/vitessapi $(CACHE)
	@test -f $(GEN)/vitessapi/__init__.py || echo '"""Generated Vitess protobuf/gRPC code (do not edit; made by make proto)."""' > $(GEN)/vitessapi/__init__.py
	$(STEP) venv $(LOGS) bash -c '{ test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
	  $(PY) -m pip install -c constraints.txt setuptools wheel && \
	  $(PY) -m pip install -c constraints.txt --no-compile --no-build-isolation -e ".[demo]"'
	@touch $@
venv: $(STAMPS)/venv
$(STAMPS)/venv: $(STAMPS)/venv-demo
	$(STEP) venv-dev $(LOGS) $(PY) -m pip install -c constraints.txt -e ".[dev]"
	@touch $@

## The native row encoder (cdcworker._rowenc, pyproject ext-modules) rebuilt in place when its C source
## changes. Optional: without a C compiler this warns and the pure-Python encoder is used.
.PHONY: native
NATIVE_SRC := $(wildcard worker/cdcworker/_native/*.c worker/cdcworker/_native/*.h)
native: $(STAMPS)/native
$(STAMPS)/native: $(STAMPS)/venv-demo $(NATIVE_SRC)
	-$(STEP) native $(LOGS) env PYTHONWARNINGS=ignore $(PY) -c "from setuptools import setup; setup()" build_ext --inplace
	@$(PY) -c "import cdcworker._rowenc" 2>/dev/null || echo "native row encoder: NOT built (pure-Python encoder in use)" >&2
	@touch $@

## Protobuf/gRPC code from proto/ into build/gen (never committed).
proto: $(STAMPS)/proto
$(STAMPS)/proto: $(STAMPS)/venv-demo $(PROTOS) scripts/gen-proto.sh
	$(STEP) proto $(LOGS) bash scripts/gen-proto.sh $(PY) $(GEN)
	@touch $@

## A pinned Apache Kafka broker assembled from Maven Central jars.
kafka: $(KAFKA_HOME)/.complete
$(KAFKA_HOME)/.complete: scripts/fetch-kafka.sh
	$(STEP) kafka $(LOGS) bash scripts/fetch-kafka.sh $(KAFKA_VERSION) $(KAFKA_HOME) $(CACHE)/m2
	@touch $@

## kube-apiserver, kubectl and etcd built from pinned sources via the Go module proxy (envtest style).
kube: $(KUBE_HOME)/.complete
$(KUBE_HOME)/.complete: scripts/build-kube.sh scripts/lib/go-env.sh
	$(STEP) kube $(LOGS) bash scripts/build-kube.sh $(KUBE_VERSION) $(KUBE_HOME) $(CACHE)/go
	@touch $@

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) scripts/check_layers.py

pytest: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

## The unit tier (tests/unit: no processes or servers, under a minute); `make test` runs every tier.
.PHONY: test-unit
test-unit: setup
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

test: setup
	@start=$$(date +%s); \
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy && $(PY) scripts/check_layers.py && \
	echo "lint+typecheck: $$(( $$(date +%s) - start ))s" && \
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## BENCHMARKS.md's summary table from the raw results in bench/results/*.json (tests/unit/repo/test_bench_report.py
## checks the committed page is the generator's output).
.PHONY: bench-report
bench-report: venv-demo
	$(PY) bench/report.py

## Generated reference pages (docs/configuration.md from the property catalogue and the CRD).
docs: setup
	$(PY) -m cdcworker.config.reference

## The set-up steps run two at a time (the Kafka jars download while pip installs).
demo:
	@$(MAKE) --no-print-directory -j2 demo-setup
	@$(PY) -m shardcdc_cli.cli demo

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
	$(STEP) debezium $(LOGS) bash scripts/fetch-debezium.sh $(DEBEZIUM_VERSION) $(DEBEZIUM_CONNECT_VERSION) $(DEBEZIUM_HOME) $(CACHE)/m2
	@touch $@

## helm built from pinned sources through the Go module proxy (charts/shardcdc lint/template tests).
.PHONY: helm images
HELM_VERSION := v3.22.0
HELM_HOME    := $(CACHE)/helm-$(HELM_VERSION)
export SHARDCDC_HELM := $(HELM_HOME)/bin/helm
helm: $(HELM_HOME)/.complete
$(HELM_HOME)/.complete: scripts/fetch-helm.sh scripts/lib/go-env.sh
	$(STEP) helm $(LOGS) bash scripts/fetch-helm.sh $(HELM_VERSION) $(HELM_HOME) $(CACHE)/go
	@touch $@

## The CRDs have one home, crds/; the charts carry byte-identical copies (tests/integration/repo/test_helm_chart.py checks).
.PHONY: chart-crds
chart-crds:
	cp crds/*.yaml charts/shardcdc/crds/
	cp crds/*.yaml charts/shardcdc-crds/files/
	cp crds/*.yaml operator/cdcoperator/crd/

## operator/rbac.yaml: the chart's ServiceAccount and RBAC rendered for `kubectl apply` users and tests.
.PHONY: rbac
rbac: helm
	{ echo "# GENERATED by \`make rbac\` from charts/shardcdc (templates/_helpers.tpl explains every rule); do not edit."; \
	  echo "# Plain-kubectl install of the operator's identity: ServiceAccount shardcdc-system/shardcdc-operator,"; \
	  echo "# ClusterRole and ClusterRoleBinding. tests/integration/repo/test_helm_chart.py checks it matches the chart."; \
	  $(SHARDCDC_HELM) template shardcdc charts/shardcdc --namespace shardcdc-system \
	    --set fullnameOverride=shardcdc-operator \
	    --show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml; } > operator/rbac.yaml.tmp
	mv operator/rbac.yaml.tmp operator/rbac.yaml

## Prometheus and promtool (Debian's prometheus package) for the alert-rule unit tests
## (deploy/prometheus/tests), the live observability test and `shardcdc demo --prometheus`.
## Checked by version on every run; apt-get installs it when missing (one clear line without root).
.PHONY: prometheus
PROMETHEUS_VERSION := 2.42
prometheus:
	$(STEP) prometheus $(LOGS) bash scripts/install-prometheus.sh $(PROMETHEUS_VERSION)

## Container images (images/Dockerfile): needs a Docker engine; fails fast with a clear message without one.
## IMAGE_BASE=public (default) builds on the public python:3.11-slim and Temurin JRE images;
## IMAGE_BASE=debian on local ones made from Debian's packages (scripts/debian-base.sh: debootstrap,
## `docker import`), for machines that reach no container registry. DOCKER names the docker CLI:
## the build uses BuildKit (`docker buildx`, or the builder built into Debian's docker.io 20.10 CLI).
IMAGE_REGISTRY ?= ghcr.io/shardcdc
IMAGE_TAG      ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_BASE     ?= public
LOCAL_IMAGES   := shardcdc-local
DOCKER         ?= docker
ifeq ($(IMAGE_BASE),debian)
IMAGE_BASE_ARGS := --build-arg PYTHON_IMAGE=$(LOCAL_IMAGES)/python:3.11-bookworm --build-arg JRE_IMAGE=$(LOCAL_IMAGES)/jre:17-bookworm
else ifneq ($(IMAGE_BASE),public)
$(error IMAGE_BASE=$(IMAGE_BASE): use IMAGE_BASE=public (python:3.11-slim, Temurin) or IMAGE_BASE=debian (local debootstrap base))
endif
IMAGE_TARGETS  ?= worker:shardcdc operator:shardcdc-operator spark:shardcdc-spark
images:
	@command -v $(DOCKER) >/dev/null || { echo "make images: docker is not installed (a Docker engine is needed to build images)" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make images: no Docker engine reachable (docker info failed); start Docker or set DOCKER_HOST" >&2; exit 1; }
	@if [ "$(IMAGE_BASE)" = debian ]; then DOCKER=$(DOCKER) bash scripts/debian-base.sh $(LOCAL_IMAGES); fi
	@for t in $(IMAGE_TARGETS); do \
	  target=$${t%%:*}; image=$(IMAGE_REGISTRY)/$${t#*:}:$(IMAGE_TAG); \
	  echo "building $$image (target $$target, base $(IMAGE_BASE))"; \
	  DOCKER_BUILDKIT=1 $(DOCKER) build -f images/Dockerfile --target $$target -t $$image $(IMAGE_BASE_ARGS) \
	    --build-arg VERSION=$(IMAGE_TAG) --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	    --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) . || exit 1; \
	done

## The kind e2e's Kafka broker image from the Maven-assembled jars (scripts/kafka-image.sh, images/kafka/),
## on the same JRE base as the other images (IMAGE_BASE): nothing pulled with IMAGE_BASE=debian.
KAFKA_IMAGE ?= $(LOCAL_IMAGES)/kafka:$(KAFKA_VERSION)
ifeq ($(IMAGE_BASE),debian)
KAFKA_IMAGE_ARGS := --build-arg JRE_IMAGE=$(LOCAL_IMAGES)/jre:17-bookworm
endif
.PHONY: kafka-image
kafka-image: kafka
	@if [ "$(IMAGE_BASE)" = debian ]; then DOCKER=$(DOCKER) bash scripts/debian-base.sh $(LOCAL_IMAGES) >/dev/null; fi
	@DOCKER=$(DOCKER) bash scripts/kafka-image.sh $(KAFKA_HOME) $(KAFKA_IMAGE) $(KAFKA_IMAGE_ARGS)

## System packages of the kind e2e (docker.io with containerd and runc, debootstrap, gcc + libc6-dev):
## installed by apt-get when missing (root), one clear line otherwise.
.PHONY: docker-tools
docker-tools:
	$(STEP) docker-tools $(LOGS) bash scripts/install-docker-tools.sh

## A Docker engine for images and kind: uses the running one, or starts Debian's dockerd (root) with
## its data under $(CACHE)/docker; `make dockerd-stop` stops only an engine this started.
.PHONY: dockerd dockerd-stop kind kind-node-image
dockerd:
	@bash scripts/dockerd.sh start
dockerd-stop:
	@bash scripts/dockerd.sh stop

## kind from the Go module proxy, and a kind node image assembled from Debian's packages and the
## Kubernetes binaries built from source (scripts/kind-node-image.sh; nothing pulled from a registry).
KIND_VERSION    := v0.33.0
KIND_HOME       := $(CACHE)/kind-$(KIND_VERSION)
KIND_NODE_IMAGE := $(LOCAL_IMAGES)/kind-node:$(KUBE_VERSION)
export SHARDCDC_KIND := $(KIND_HOME)/bin/kind
kind: $(KIND_HOME)/bin/kind
$(KIND_HOME)/bin/kind:
	$(STEP) kind $(LOGS) env GOBIN=$(KIND_HOME)/bin GOFLAGS=-modcacherw GOMODCACHE=$(CACHE)/go/mod GOCACHE=$(CACHE)/go/build \
	  CGO_ENABLED=0 nice -n 15 go install sigs.k8s.io/kind@$(KIND_VERSION)
kind-node-image: kind kube
	@bash scripts/dockerd.sh start
	$(STEP) kind-node-image $(LOGS) bash scripts/kind-node-image.sh $(KUBE_VERSION) $(KIND_VERSION) $(KIND_NODE_IMAGE)

## kind end to end (needs Docker + kind): images, chart, Kafka, the VTGate test server, a connector,
## workload, scale, reshard and the verifier. Fails fast with a clear message without Docker or kind.
.PHONY: e2e-kind
## On a machine without registry access: the node image is assembled here (make kind-node-image) and
## the images build on the Debian base (IMAGE_BASE=debian).
e2e-kind: docker-tools kind kube helm kafka
	KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) KUBE_VERSION=$(KUBE_VERSION) KUBECTL=$(KUBE_HOME)/bin/kubectl \
	  IMAGE_BASE=$(IMAGE_BASE) KAFKA_IMAGE=$(KAFKA_IMAGE) bash scripts/e2e-kind.sh $(E2E_KIND_PHASE)

## The native scanner/encoder fuzz target (fuzz/: libFuzzer + AddressSanitizer + UBSan, a differential
## oracle against upb and the pure-Python encoder). `make test` runs it briefly (tests/integration/worker/test_fuzz_native.py);
## `make fuzz` runs it for FUZZ_SECONDS. Needs clang and its sanitizer runtimes: Debian's, installed when
## missing (as root), else a one-line hint.
.PHONY: fuzz fuzz-tools
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 600
FUZZ_SEED    ?= 1
export FUZZ_CC
fuzz-tools:
	$(STEP) fuzz-tools $(LOGS) bash scripts/install-fuzz-tools.sh $(FUZZ_CC)

fuzz: venv native proto fuzz-tools
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)

## rdkafka.h of librdkafka's release, for the check of kafkaprod.c's hand declarations
## (tests/unit/worker/test_rdkafka_abi.py): from the npm package that ships librdkafka's source. confluent-kafka
## bundles librdkafka 2.16.0, whose rdkafka.h no registry reachable here has yet (Debian: 2.14.2,
## npm: 2.15.1): the newest is used, and the test names the pair it accepts, so an upgrade fails it.
.PHONY: rdkafka-header
RDKAFKA_H_NPM     := @confluentinc/kafka-javascript@1.10.1
RDKAFKA_H_VERSION := 2.15.1
RDKAFKA_H_HOME    := $(CACHE)/rdkafka-h-$(RDKAFKA_H_VERSION)
export SHARDCDC_RDKAFKA_H := $(RDKAFKA_H_HOME)/rdkafka.h
rdkafka-header: $(RDKAFKA_H_HOME)/rdkafka.h
$(RDKAFKA_H_HOME)/rdkafka.h: scripts/fetch-rdkafka-header.sh
	$(STEP) rdkafka-header $(LOGS) bash scripts/fetch-rdkafka-header.sh $(RDKAFKA_H_NPM) $(RDKAFKA_H_VERSION) $(RDKAFKA_H_HOME)

## The Kubeflow spark-operator's real SparkApplication CRD (its Go module holds the chart's CRDs): the
## API-server tests install it, so the operator's SparkApplications meet the schema users install.
.PHONY: spark-crd
SPARK_OPERATOR_VERSION := v2.3.0
SPARK_CRD_HOME := $(CACHE)/spark-operator-$(SPARK_OPERATOR_VERSION)
export SHARDCDC_SPARK_CRD := $(SPARK_CRD_HOME)/sparkapplications.yaml
spark-crd: $(SPARK_CRD_HOME)/.complete
$(SPARK_CRD_HOME)/.complete: scripts/fetch-spark-crd.sh scripts/lib/go-env.sh
	$(STEP) spark-crd $(LOGS) bash scripts/fetch-spark-crd.sh $(SPARK_OPERATOR_VERSION) $(SPARK_CRD_HOME) $(CACHE)/go

## Real Vitess (v24.0.4, the Go module vitess.io/vitess v0.24.4) over MariaDB 10.11 for the real-Vitess
## tier: binaries built with the project's MariaDB patch set over Vitess's config templates, MariaDB
## installed when missing, and the unprivileged user mysqlctl needs (it refuses root).
.PHONY: vitess vitess-system
VITESS_MODULE_VERSION := v0.24.4
VITESS_HOME  := $(CACHE)/vitess-v24.0.4
VITESS_USER  := vitess
VITESS_PATCH := scripts/vitess/mariadb.patch
export SHARDCDC_VITESS_HOME := $(VITESS_HOME)
export SHARDCDC_VITESS_USER := $(VITESS_USER)
vitess: $(VITESS_HOME)/.complete vitess-system
$(VITESS_HOME)/.complete: scripts/build-vitess.sh scripts/lib/go-env.sh $(VITESS_PATCH)
	$(STEP) vitess $(LOGS) bash scripts/build-vitess.sh $(VITESS_MODULE_VERSION) $(VITESS_HOME) $(CACHE)/go $(VITESS_PATCH)
	@touch $@
vitess-system:
	$(STEP) vitess-system $(LOGS) bash scripts/vitess-system.sh $(VITESS_USER)
