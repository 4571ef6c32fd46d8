#!/usr/bin/env bash
# Build the helm CLI from its pinned official sources through the Go module proxy.
# Usage: fetch-helm.sh <helm-version> <out-dir> <go-cache-dir>
#   <helm-version>  e.g. v3.22.0 (its go directive must be satisfied by the local Go, or GOTOOLCHAIN=auto)
#   <out-dir>       result: <out-dir>/bin/helm and <out-dir>/.complete
#   <go-cache-dir>  GOMODCACHE=<go-cache-dir>/mod, GOCACHE=<go-cache-dir>/build (shared with `make kube`)
# Idempotent: exits at once when <out-dir>/.complete exists.
#
# helm.sh/helm/v3 has no replace directives, so `go install pkg@version` works; the -X flags are the
# ones helm's own Makefile sets, so `helm version` and the Kubernetes version that `helm lint` and
# `helm template` assume (.Capabilities.KubeVersion) match an official release binary.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"

ver=${1:?usage: fetch-helm.sh <helm-version> <out-dir> <go-cache-dir>}
out=${2:?out-dir}
gocache=${3:?go-cache-dir}

go_once "$out"

go_env "$gocache" "build helm (Go >= 1.24)" toolchain-auto
step() { go_step fetch-helm "$@"; }

major=${ver%%.*}   # v3
mod=helm.sh/helm/$major
step "resolving $mod@$ver"
gomod=$(go mod download -json "$mod@$ver" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error","no GoMod")))')
# The client-go the release was built against decides the default KubeVersion (v0.35.x -> 1.35).
k8s_minor=$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$gomod" | head -n1)
[[ -n "$k8s_minor" ]] || { echo "cannot find k8s.io/client-go in $gomod" >&2; exit 1; }

ld="-s -w -X $mod/internal/version.version=$ver -X $mod/internal/version.metadata="
ld="$ld -X $mod/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do
  ld="$ld -X $mod/$p.k8sVersionMajor=1 -X $mod/$p.k8sVersionMinor=$k8s_minor"
done

step "compiling $mod/cmd/helm@$ver (Kubernetes 1.$k8s_minor client libraries)"
tmp=$out/bin.tmp
rm -rf "$tmp" && mkdir -p "$tmp"
GOBIN=$tmp go_ install -trimpath -ldflags "$ld" "$mod/cmd/helm@$ver"

"$tmp/helm" version --short
rm -rf "$out/bin"
mv "$tmp" "$out/bin"
printf 'helm=%s\ngo=%s\nbuild_seconds=%s\n' "$ver" "$(go env GOVERSION)" \
  "$(( $(date +%s) - go_step_start ))" > "$out/.complete"
step "done: $out/bin/helm"
