#!/usr/bin/env bash
# End to end on kind: cluster, images, chart, Kafka + the VTGate test server, a CdcConnector, a
# workload, a scale (2 -> 4 tasks), a reshard (2 -> 4 shards) and the verifier.
#
#   make e2e-kind                 # or: bash scripts/e2e-kind.sh
#   KEEP_CLUSTER=1 make e2e-kind  # leave the cluster (and a dockerd this started) for inspection
#
# Needs Docker, kind, kubectl and helm (`make kind kube helm` build them into ~/.cache/shardcdc).
# When no Docker engine answers, Debian's dockerd is started (scripts/dockerd.sh, as root) and
# stopped again at the end, even on failure. KIND_NODE_IMAGE (set by `make e2e-kind`) names a node
# image assembled here from Debian's packages (scripts/kind-node-image.sh builds it when missing)
# and the cluster uses tests/e2e/kind-cluster.yaml; without it kind's default node image is used.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER:-shardcdc-e2e}"
NS=shardcdc-e2e
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")"
REGISTRY="${IMAGE_REGISTRY:-ghcr.io/shardcdc}"
HELM="${SHARDCDC_HELM:-helm}"
KUBECTL="${KUBECTL:-kubectl}"
KIND="${SHARDCDC_KIND:-kind}"
TIMEOUT="${E2E_TIMEOUT:-600s}"

die() { echo "e2e-kind: $*" >&2; exit 1; }
step() { echo; echo "=== $*"; }

# --- preflight: fail before creating anything -------------------------------------------------
command -v docker >/dev/null 2>&1 || die "docker is not installed; kind runs Kubernetes nodes as Docker containers (Debian: apt-get install docker.io)"
command -v "$KIND" >/dev/null 2>&1 || die "kind not found; run 'make kind' (go install sigs.k8s.io/kind) or set SHARDCDC_KIND"
command -v "$KUBECTL" >/dev/null 2>&1 || die "kubectl is not installed (or set KUBECTL=/path/to/kubectl; 'make kube' builds one)"
command -v "$HELM" >/dev/null 2>&1 || [ -x "$HELM" ] || die "helm not found; run 'make helm' or set SHARDCDC_HELM"
started_docker=""
if ! docker info >/dev/null 2>&1; then
  bash "$ROOT/scripts/dockerd.sh" start
  started_docker=1
fi

cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "e2e-kind: FAILED (exit $rc); state of namespace $NS:" >&2
    "$KUBECTL" -n "$NS" get cdc,deploy,pods,jobs -o wide >&2 || true
    "$KUBECTL" -n "$NS" describe cdc e2e >&2 || true
    "$KUBECTL" -n "$NS" logs job/verify --tail=50 >&2 || true
  fi
  if [ -z "${KEEP_CLUSTER:-}" ]; then
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    if [ -n "$started_docker" ]; then bash "$ROOT/scripts/dockerd.sh" stop || true; fi
  fi
  exit $rc
}
trap cleanup EXIT

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

step "kind cluster $CLUSTER"
create=(--name "$CLUSTER" --wait 300s)
if [ -n "${KIND_NODE_IMAGE:-}" ]; then
  bash "$ROOT/scripts/kind-node-image.sh" "${KUBE_VERSION:?KUBE_VERSION (the Kubernetes of the node image)}" \
    "$("$KIND" version | awk '{print $2}')" "$KIND_NODE_IMAGE"
  create+=(--image "$KIND_NODE_IMAGE" --config "$ROOT/tests/e2e/kind-cluster.yaml")
fi
"$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER" || "$KIND" create cluster "${create[@]}"

step "images $REGISTRY/*:$VERSION"
make -C "$ROOT" images IMAGE_REGISTRY="$REGISTRY" IMAGE_TAG="$VERSION" IMAGE_BASE="${IMAGE_BASE:-public}" \
  DOCKER="$(bash "$ROOT/scripts/dockerd.sh" cli)"
for image in shardcdc shardcdc-operator; do
  "$KIND" load docker-image --name "$CLUSTER" "$REGISTRY/$image:$VERSION"
done
docker pull apache/kafka:3.9.1 >/dev/null && kind load docker-image --name "$CLUSTER" apache/kafka:3.9.1

step "chart (CRD, RBAC, operator)"
kc apply -f "$ROOT/tests/e2e/00-namespace.yaml"
"$HELM" --kube-context "kind-$CLUSTER" upgrade --install shardcdc "$ROOT/charts/shardcdc" \
  --namespace shardcdc-system --create-namespace --wait --timeout "$TIMEOUT" \
  --set "image.repository=$REGISTRY/shardcdc-operator" --set "image.tag=$VERSION" \
  --set "image.pullPolicy=IfNotPresent" --set "watchNamespaces={$NS}"

step "Kafka and the VTGate test server"
kc apply -f "$ROOT/tests/e2e/10-kafka.yaml" -f "$ROOT/tests/e2e/20-vtgate-sim.yaml"
kc -n "$NS" rollout status deploy/kafka --timeout="$TIMEOUT"
kc -n "$NS" rollout status deploy/vtgate --timeout="$TIMEOUT"

step "CdcConnector e2e (2 tasks over 2 shards)"
kc apply -f "$ROOT/tests/e2e/30-connector.yaml"
wait_ready 0

step "workload, then scale to 4 tasks while it runs"
kc apply -f "$ROOT/tests/e2e/40-workload-job.yaml"
sleep 10  # let the workload run for a while before the scale (not synchronisation: any moment works)
kc -n "$NS" scale cdc/e2e --replicas=4
wait_ready 1

step "reshard commerce 2 -> 4 shards while the workload runs"
kc apply -f "$ROOT/tests/e2e/50-reshard-job.yaml"
wait_job reshard
wait_ready 2
wait_job workload

step "verify: the topic equals the source table"
kc apply -f "$ROOT/tests/e2e/60-verify-job.yaml"
wait_job verify
kc -n "$NS" logs job/verify
kc -n "$NS" get cdc e2e
echo "e2e-kind: PASSED"
