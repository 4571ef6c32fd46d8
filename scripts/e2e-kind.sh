#!/usr/bin/env bash
# End to end on kind: cluster, images, chart, Kafka + the VTGate test server as pods, a CdcConnector,
# a workload, a scale (2 -> 4 tasks), a worker pod and the operator pod killed, a reshard
# (2 -> 4 shards), the verifier, then a backfill through the sparkSubmit engine.
#
#   make e2e-kind                    # or: bash scripts/e2e-kind.sh [all]
#   bash scripts/e2e-kind.sh up      # dockerd (if none answers), node image, cluster, images, chart, Kafka, VTGate
#   bash scripts/e2e-kind.sh stream  # connector, workload, scale, kills, reshard, verify (needs `up`)
#   bash scripts/e2e-kind.sh spark   # a backfill through spark-submit --master k8s:// (needs `stream`)
#   bash scripts/e2e-kind.sh down    # delete the cluster; stop dockerd if `up` started it
#   KEEP_CLUSTER=1 make e2e-kind     # `all` leaves the cluster (and a dockerd it started) for inspection
#
# Needs Docker, kind, kubectl and helm (`make kind kube helm` build them into ~/.cache/shardcdc).
# When no Docker engine answers, Debian's dockerd is started (scripts/dockerd.sh, as root) and
# `down` stops it again (`all` runs `down` even on failure). KIND_NODE_IMAGE (set by `make e2e-kind`)
# names a node image assembled here from Debian's packages (scripts/kind-node-image.sh builds it when
# missing) and the cluster uses examples/kind/kind-cluster.yaml; without it kind's default node image is
# used. Images: `make images` (IMAGE_BASE=debian builds on a local debootstrap base) and the Kafka
# broker image from the Maven-assembled jars (scripts/kafka-image.sh), loaded with `kind load`.
# Nothing gets permissions beyond the chart's own RBAC; the test pods are non-root, read-only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER:-shardcdc-e2e}"
NS=shardcdc-e2e
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")"
REGISTRY="${IMAGE_REGISTRY:-ghcr.io/shardcdc}"
KAFKA_IMAGE="${KAFKA_IMAGE:-shardcdc-local/kafka:3.9.1}"
HELM="${SHARDCDC_HELM:-helm}"
KUBECTL="${KUBECTL:-kubectl}"
KIND="${SHARDCDC_KIND:-kind}"
TIMEOUT="${E2E_TIMEOUT:-600s}"
STATE="${SHARDCDC_CACHE:-$HOME/.cache/shardcdc}/e2e-kind"
started_marker="$STATE/$CLUSTER.started-dockerd"
t0=$SECONDS

die() { echo "e2e-kind: $*" >&2; exit 1; }
step() { echo; echo "=== [$((SECONDS - t0))s] $*"; }
kc() { "$KUBECTL" --context "kind-$CLUSTER" "$@"; }
wait_job() { kc -n "$NS" wait --for=condition=complete "job/$1" --timeout="$TIMEOUT"; }
wait_ready() {  # wait until the connector is Ready for its current spec (and optionally a generation)
  local want_gen="${1:-}" deadline=$((SECONDS + ${TIMEOUT%s}))
  while :; do
    local ready gen obs cur
    ready=$(kc -n "$NS" get cdc e2e -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    gen=$(kc -n "$NS" get cdc e2e -o jsonpath='{.status.assignment.generation}' 2>/dev/null || true)
    obs=$(kc -n "$NS" get cdc e2e -o jsonpath='{.status.observedGeneration}' 2>/dev/null || true)
    cur=$(kc -n "$NS" get cdc e2e -o jsonpath='{.metadata.generation}' 2>/dev/null || true)
    if [ "$ready" = True ] && [ "$obs" = "$cur" ] && { [ -z "$want_gen" ] || [ "${gen:-0}" -ge "$want_gen" ]; }; then
      echo "connector e2e Ready in generation $gen"; return 0
    fi
    [ $SECONDS -lt $deadline ] || die "connector e2e not Ready (generation >= ${want_gen:-any}) within $TIMEOUT"
    sleep 3
  done
}
diagnose() {
  "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER" || return 0
  echo "e2e-kind: state of namespace $NS:" >&2
  kc -n "$NS" get cdc,deploy,pods,jobs -o wide >&2 || true
  kc -n "$NS" describe cdc e2e >&2 || true
  kc -n shardcdc-system logs deploy/shardcdc --tail=40 >&2 || true
  kc -n "$NS" logs job/verify --tail=50 >&2 || true
  kc -n "$NS" logs -l shardcdc.io/connector=e2e --tail=15 --prefix >&2 || true
  kc -n "$NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 25 >&2 || true
}

preflight() {
  command -v docker >/dev/null 2>&1 || die "docker is not installed; kind runs Kubernetes nodes as Docker containers (Debian: apt-get install docker.io)"
  command -v "$KIND" >/dev/null 2>&1 || die "kind not found; run 'make kind' (go install sigs.k8s.io/kind) or set SHARDCDC_KIND"
  command -v "$KUBECTL" >/dev/null 2>&1 || die "kubectl is not installed (or set KUBECTL=/path/to/kubectl; 'make kube' builds one)"
  command -v "$HELM" >/dev/null 2>&1 || [ -x "$HELM" ] || die "helm not found; run 'make helm' or set SHARDCDC_HELM"
}

up() {
  preflight
  mkdir -p "$STATE"
  if ! docker info >/dev/null 2>&1; then
    bash "$ROOT/scripts/dockerd.sh" start
    touch "$started_marker"  # `down` stops only an engine this run started
  fi
  local builder
  builder=$(bash "$ROOT/scripts/dockerd.sh" cli)
  step "kind cluster $CLUSTER"
  local create=(--name "$CLUSTER" --wait 300s)
  if [ -n "${KIND_NODE_IMAGE:-}" ]; then
    bash "$ROOT/scripts/kind-node-image.sh" "${KUBE_VERSION:?KUBE_VERSION (the Kubernetes of the node image)}" \
      "$("$KIND" version | awk '{print $2}')" "$KIND_NODE_IMAGE"
    create+=(--image "$KIND_NODE_IMAGE" --config "$ROOT/examples/kind/kind-cluster.yaml")
  fi
  "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER" || "$KIND" create cluster "${create[@]}"

  step "images $REGISTRY/*:$VERSION (base ${IMAGE_BASE:-public}) and $KAFKA_IMAGE"
  make -s -C "$ROOT" images IMAGE_REGISTRY="$REGISTRY" IMAGE_TAG="$VERSION" IMAGE_BASE="${IMAGE_BASE:-public}" DOCKER="$builder"
  make -s -C "$ROOT" kafka-image IMAGE_BASE="${IMAGE_BASE:-public}" KAFKA_IMAGE="$KAFKA_IMAGE" DOCKER="$builder"
  # One load for all: one archive, the layers the images share sent once.
  "$KIND" load docker-image --name "$CLUSTER" "$REGISTRY/shardcdc:$VERSION" "$REGISTRY/shardcdc-operator:$VERSION" \
    "$REGISTRY/shardcdc-spark:$VERSION" "$KAFKA_IMAGE"

  step "chart (CRD, RBAC, webhook, NetworkPolicy, operator)"
  kc apply -f "$ROOT/examples/kind/00-namespace.yaml"
  "$HELM" --kube-context "kind-$CLUSTER" upgrade --install shardcdc "$ROOT/charts/shardcdc" \
    --namespace shardcdc-system --create-namespace --wait --timeout "$TIMEOUT" \
    --set "image.repository=$REGISTRY/shardcdc-operator" --set "image.tag=$VERSION" \
    --set "image.pullPolicy=IfNotPresent" --set "watchNamespaces={$NS}" \
    --set "policy.imageRepositories={$REGISTRY/shardcdc-spark}" --set "policy.serviceAccounts={spark}"

  step "Kafka and the VTGate test server"
  kc apply -f "$ROOT/examples/kind/10-kafka.yaml" -f "$ROOT/examples/kind/20-vtgate-sim.yaml"
  kc -n "$NS" rollout status deploy/kafka --timeout="$TIMEOUT"
  kc -n "$NS" rollout status deploy/vtgate --timeout="$TIMEOUT"
}

kill_one() {  # kill_one <namespace> <selector> <what>: delete one pod now (no grace), as a crash would
  local pod
  pod=$(kc -n "$1" get pods -l "$2" -o jsonpath='{.items[0].metadata.name}')
  [ -n "$pod" ] || die "no $3 pod to kill ($2 in $1)"
  kc -n "$1" delete pod "$pod" --grace-period=0 --force --wait=false
  echo "killed $3 pod $pod"
}

workload() {  # workload <table> <transactions>: a workload Job (40-workload-job.yaml) on another table
  sed -e "s/name: workload\$/name: workload-$1/" -e "s/\"--table\", \"items\"/\"--table\", \"$1\"/" \
      -e "s/\"--transactions\", \"[0-9]*\"/\"--transactions\", \"$2\"/" "$ROOT/examples/kind/40-workload-job.yaml" | kc apply -f -
}

stream() {
  step "CdcConnector e2e (2 tasks over 2 shards)"
  kc apply -f "$ROOT/examples/kind/30-connector.yaml"
  wait_ready 0

  step "workload on items; reshard commerce 2 -> 4 shards while it runs"
  workload items 6000
  kc apply -f "$ROOT/examples/kind/50-reshard-job.yaml"
  wait_job reshard
  wait_ready 1

  # Tasks never outnumber shards (min(spec.tasks, shards)): 4 tasks take one shard each.
  step "scale to 4 tasks"
  kc -n "$NS" scale cdc/e2e --replicas=4
  wait_ready 2
  wait_job workload-items

  step "workload on a new table, orders; kill a worker pod, then the operator pod, while it runs"
  workload orders 3000
  kill_one "$NS" shardcdc.io/connector=e2e worker
  kill_one shardcdc-system app.kubernetes.io/component=operator operator
  kc -n shardcdc-system rollout status deploy/shardcdc --timeout="$TIMEOUT"
  wait_job workload-orders
  wait_ready 2

  step "verify: each topic, materialised, equals its source table"
  kc apply -f "$ROOT/examples/kind/60-verify-job.yaml"
  wait_job verify
  kc -n "$NS" logs job/verify --all-containers --prefix
  kc -n "$NS" get cdc e2e
}

backfill_phase() {  # the phase of backfill $1 in the connector's status
  kc -n "$NS" get cdc e2e -o jsonpath="{.status.backfills[?(@.id==\"$1\")].phase}" 2>/dev/null || true
}

spark() {
  step "backfill items through the sparkSubmit engine: spark-submit --master k8s://, driver and executors as pods"
  kc apply -f "$ROOT/examples/kind/70-spark-rbac.yaml"
  kc -n "$NS" patch cdc e2e --type merge --patch-file "$ROOT/examples/kind/75-spark-backfill.patch.yaml"
  local deadline=$((SECONDS + ${TIMEOUT%s})) phase executors=""
  while phase=$(backfill_phase initial); [ "$phase" != Succeeded ]; do
    [ "$phase" != Failed ] || die "backfill initial failed: $(kc -n "$NS" get cdc e2e -o jsonpath='{.status.backfills}')"
    [ $SECONDS -lt $deadline ] || die "backfill initial not Succeeded within $TIMEOUT (phase ${phase:-none})"
    sleep 3
  done
  # The patch keeps executor pods after the application ends (deleteOnTermination false).
  executors=$(kc -n "$NS" get pods -l shardcdc.io/backfill=initial,spark-role=executor -o name 2>/dev/null)
  kc -n "$NS" get pods -l shardcdc.io/backfill=initial -o wide
  kc -n "$NS" get cdc e2e -o jsonpath='{.status.backfills}'; echo
  [ -n "$executors" ] || die "backfill initial succeeded but no executor pod was seen (spark-role=executor)"
  echo "executor pods seen: $executors" | tr '\n' ' '; echo
  [ "$(kc -n "$NS" get pods -l shardcdc.io/backfill=initial,spark-role=driver -o jsonpath='{.items[0].status.phase}')" = Succeeded ] ||
    die "the Spark driver pod did not succeed"

  step "verify again: the topics, with the backfill's reads, equal the source tables"
  kc -n "$NS" delete job verify --ignore-not-found --wait=true
  kc apply -f "$ROOT/examples/kind/60-verify-job.yaml"
  wait_job verify
  local out rows source
  out=$(kc -n "$NS" logs job/verify --all-containers --prefix)
  echo "$out"
  # Exact: the run read every row of both tables once (the workloads have ended).
  source=$(echo "$out" | sed -n 's/.*materialises to the \([0-9]*\) rows.*/\1/p' | awk '{s += $1} END {print s}')
  rows=$(kc -n "$NS" get cdc e2e -o jsonpath='{.status.backfills[?(@.id=="initial")].rows}')
  [ "$rows" = "$source" ] || die "backfill initial read $rows rows; the source tables hold $source"
  echo "backfill initial read $rows rows = the $source rows of the source tables"
}

down() {
  step "delete cluster $CLUSTER"
  "$KIND" delete cluster --name "$CLUSTER" || true
  if [ -f "$started_marker" ]; then
    bash "$ROOT/scripts/dockerd.sh" stop || true
    rm -f "$started_marker"
  fi
}

all() {
  preflight  # a missing tool fails here, before anything is made (or cleaned up)
  trap 'rc=$?; [ $rc -eq 0 ] || diagnose; [ -n "${KEEP_CLUSTER:-}" ] || down; exit $rc' EXIT
  up
  stream
  spark
  echo "e2e-kind: PASSED in $((SECONDS - t0)) s"
}

case "${1:-all}" in
  up|stream|spark|down|all|diagnose) "${1:-all}" ;;
  *) die "usage: e2e-kind.sh [all|up|stream|spark|down|diagnose]" ;;
esac
