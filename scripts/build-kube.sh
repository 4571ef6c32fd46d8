#!/usr/bin/env bash
# Build kube-apiserver, kubectl and etcd from pinned official sources through the Go module proxy.
# Usage: build-kube.sh <k8s-version> <out-dir> <go-cache-dir>
#   <k8s-version>   e.g. v1.33.13 (its go directive must be satisfied by the local Go)
#   <out-dir>       result: <out-dir>/bin/{kube-apiserver,kubectl,etcd} and <out-dir>/.complete
#   <go-cache-dir>  GOMODCACHE=<go-cache-dir>/mod, GOCACHE=<go-cache-dir>/build (shared across versions)
# Idempotent: exits at once when <out-dir>/.complete exists. ETCD_VERSION overrides the paired etcd.
# KUBE_CMDS (default "kube-apiserver kubectl") names the k8s.io/kubernetes/cmd/* binaries to build
# (scripts/kind-node-image.sh adds kubelet, kubeadm, kube-proxy, kube-controller-manager, kube-scheduler).
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod maps every staging module (k8s.io/api, ...)
# to ./staging/src at v0.0.0. A throwaway wrapper module requires k8s.io/kubernetes and replaces each
# staging module with its published v0.<minor>.<patch> twin; the list is read from upstream's go.mod
# so it follows the release. etcd's server module has ../api style replaces too, hence its own wrapper.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"

k8s=${1:?usage: build-kube.sh <k8s-version> <out-dir> <go-cache-dir>}
out=${2:?out-dir}
gocache=${3:?go-cache-dir}

go_once "$out"

go_env "$gocache" "build kube-apiserver (Go >= 1.24)" mod

minor=$(echo "$k8s" | cut -d. -f2)
staging=v0.${k8s#v1.}
if [[ -z "${ETCD_VERSION:-}" ]]; then
  # The pairs envtest ships (controller-tools hack/envtest/_matrix).
  case "$minor" in
    31) ETCD_VERSION=v3.5.15 ;;
    32) ETCD_VERSION=v3.5.16 ;;
    33) ETCD_VERSION=v3.5.21 ;;
    *) ETCD_VERSION=v3.6.4 ;;
  esac
fi

step() { go_step build-kube "$@"; }

src=$out/src
bin=$out/bin.tmp
mkdir -p "$src/k8s" "$src/etcd" "$bin"
step "kubernetes $k8s (staging $staging), etcd $ETCD_VERSION -> $out"

# --- kube-apiserver + kubectl -------------------------------------------------------------------
cd "$src/k8s"
rm -f go.mod go.sum
go mod init local/k8sbin >/dev/null 2>&1
step "downloading k8s.io/kubernetes@$k8s metadata"
upstream_mod=$(go_ mod download -json "k8s.io/kubernetes@$k8s" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error","no GoMod")))')
# Use the local Go when it satisfies upstream's go directive; otherwise let Go fetch that toolchain
# through the module proxy (GOTOOLCHAIN=auto) rather than failing.
need=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$upstream_mod")
have=$(go env GOVERSION | sed 's/^go//')
if [[ -z "${GOTOOLCHAIN:-}" ]]; then
  if [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | sed -n 1p)" == "$need" ]]; then
    export GOTOOLCHAIN=local
  else
    export GOTOOLCHAIN=auto
  fi
fi
step "upstream needs go $need; local go $have; GOTOOLCHAIN=$GOTOOLCHAIN"
mods=$(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*|\1|p' "$upstream_mod")
[[ -n "$mods" ]] || { echo "no staging replaces found in $upstream_mod" >&2; exit 1; }
args=()
for m in $mods; do args+=("-replace=$m=$m@$staging"); done
go mod edit "${args[@]}"
step "$(echo "$mods" | wc -w) staging modules replaced at $staging; resolving dependencies"
go_ get "k8s.io/kubernetes@$k8s"

ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$k8s -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
cmds=${KUBE_CMDS:-kube-apiserver kubectl}
pkgs=()
for c in $cmds; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
step "compiling $cmds"
go_ build -trimpath -ldflags "$ld" -o "$bin/" "${pkgs[@]}"

# --- etcd ---------------------------------------------------------------------------------------
cd "$src/etcd"
rm -f go.mod go.sum
go mod init local/etcdbin >/dev/null 2>&1
etcd_major=${ETCD_VERSION%%.*}      # v3
step "resolving go.etcd.io/etcd/server/$etcd_major@$ETCD_VERSION"
if go_ get "go.etcd.io/etcd/server/$etcd_major@$ETCD_VERSION" &&
   step "compiling etcd" &&
   go_ build -trimpath -ldflags "-s -w" -o "$bin/etcd" "go.etcd.io/etcd/server/$etcd_major"; then
  :
elif [[ -x /usr/bin/etcd ]]; then
  # Debian's etcd-server 3.4: below the documented floor for 1.31+, but kube-apiserver still runs on it.
  step "etcd build failed; falling back to /usr/bin/etcd ($(/usr/bin/etcd --version | sed -n 1p))"
  cp /usr/bin/etcd "$bin/etcd"
else
  echo "etcd build failed and no /usr/bin/etcd (apt-get install etcd-server) to fall back to" >&2
  exit 1
fi

# --- publish ------------------------------------------------------------------------------------
"$bin/kube-apiserver" --version
"$bin/kubectl" version --client=true 2>/dev/null | sed -n 1p
"$bin/etcd" --version | sed -n 1p
rm -rf "$out/bin"
mv "$bin" "$out/bin"
printf 'kubernetes=%s\netcd=%s\ngo=%s\n' "$k8s" "$ETCD_VERSION" "$(go env GOVERSION)" > "$out/.complete"
step "done: $(du -sh "$out/bin" | cut -f1) in $out/bin"
ls -l "$out/bin"
