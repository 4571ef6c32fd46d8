#!/usr/bin/env bash
# The Kubeflow spark-operator's own SparkApplication CRD, from its pinned Go module through the Go
# module proxy (the module holds the chart's CRDs), so the API-server tests validate the operator's
# SparkApplications against the real schema instead of a permissive stand-in.
# Usage: fetch-spark-crd.sh <module-version> <out-dir> <go-cache-dir>
#   <module-version>  e.g. v2.3.0 of github.com/kubeflow/spark-operator/v2
#   <out-dir>         result: <out-dir>/sparkapplications.yaml and <out-dir>/.complete
#   <go-cache-dir>    GOMODCACHE=<go-cache-dir>/mod (shared with `make kube` and `make helm`)
# Idempotent: exits at once when <out-dir>/.complete exists.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"

ver=${1:?usage: fetch-spark-crd.sh <module-version> <out-dir> <go-cache-dir>}
out=${2:?out-dir}
gocache=${3:?go-cache-dir}

go_once "$out"

go_env "$gocache" "fetch the spark-operator module" toolchain-auto

mod=github.com/kubeflow/spark-operator/v2
# `go mod download` checks the module's hash against the Go checksum database.
dir=$(go mod download -json "$mod@$ver" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error","no Dir")))')
crd=$dir/charts/spark-operator-chart/crds/sparkoperator.k8s.io_sparkapplications.yaml
[[ -f "$crd" ]] || { echo "no SparkApplication CRD at $crd in $mod@$ver" >&2; exit 1; }
mkdir -p "$out"
cp "$crd" "$out/sparkapplications.yaml"
echo "$mod@$ver" > "$out/MODULE"
touch "$out/.complete"
