#!/usr/bin/env bash
# A kind node image assembled from Debian's packages and Go modules, for machines that reach no
# container registry (kind's kindest/node images cannot be pulled there).
# Usage: kind-node-image.sh <k8s-version> <kind-version> <image>   e.g. v1.33.13 v0.33.0 shardcdc-local/kind-node:v1.33.13
# Needs: a Docker engine (scripts/dockerd.sh start), debootstrap, Go, gcc; root.
# Cached under $SHARDCDC_CACHE (default ~/.cache/shardcdc):
#   kind-<kind-version>/bin/kind         go install sigs.k8s.io/kind
#   kind-node-<k8s-version>/kube/bin/    kubelet, kubeadm, kubectl, kube-* and etcd (scripts/build-kube.sh)
#   kind-node-<k8s-version>/tools/       crictl (sigs.k8s.io/cri-tools), coredns (github.com/coredns/coredns)
# What it makes, like kind's own `build node-image` but with nothing pulled:
#   1. the Debian 12 base (scripts/debian-base.sh), then node-base from images/kind-node/Dockerfile:
#      kind's node files from the kind module + Debian's containerd, runc and CNI plugins + crictl;
#   2. the control-plane, etcd, CoreDNS and pause images, tagged with the names kubeadm lists;
#   3. a container of node-base with the binaries in /usr/bin, /kind/version, and every image
#      imported into its containerd (as kind does: `ctr images import --no-unpack`), committed as <image>.
# Exits at once when <image> exists. Clusters made from it must set networking.disableDefaultCNI
# (the image carries a bridge CNI config instead of kindnetd: one node).
set -euo pipefail

k8s=${1:?usage: kind-node-image.sh <k8s-version> <kind-version> <image>}
kindv=${2:?kind-version}
image=${3:?image}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache=${SHARDCDC_CACHE:-$HOME/.cache/shardcdc}
crictl_version=${CRICTL_VERSION:-v1.37.0}
prefix=${image%%/*}
node=$cache/kind-node-$k8s
start=$(date +%s)
step() { echo "[kind-node-image $(( $(date +%s) - start ))s] $*"; }
die() { echo "kind-node-image.sh: $*" >&2; exit 1; }

docker image inspect "$image" >/dev/null 2>&1 && { echo "$image exists"; exit 0; }
for tool in go gcc debootstrap docker; do command -v $tool >/dev/null || die "$tool is required"; done
mkdir -p "$node/tools"
exec 9>"$node.lock"
flock 9

source "$ROOT/scripts/lib/go-env.sh"  # GO_NO_DWARF
export GOFLAGS="-modcacherw $GO_NO_DWARF" GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOPROXY=${GOPROXY_OVERRIDE:-https://proxy.golang.org}
go_install() {  # go_install <dir> <module/cmd@version> [ldflags]: a static binary into <dir>
  (cd /tmp && GOBIN=$1 nice -n 15 go install -trimpath -ldflags "-s -w ${3:-}" "$2")
}

# --- binaries -------------------------------------------------------------------------------------
kind=$cache/kind-$kindv/bin/kind
[[ -x $kind ]] || { step "go install sigs.k8s.io/kind@$kindv"; go_install "$cache/kind-$kindv/bin" "sigs.k8s.io/kind@$kindv"; }
kind_files=$GOMODCACHE/sigs.k8s.io/kind@$kindv/images/base/files
[[ -d $kind_files ]] || die "kind's node files are missing from the module cache: $kind_files"
step "Kubernetes $k8s node binaries (scripts/build-kube.sh)"
KUBE_CMDS="kube-apiserver kubectl kubelet kubeadm kube-proxy kube-controller-manager kube-scheduler" \
  bash "$ROOT/scripts/build-kube.sh" "$k8s" "$node/kube" "$cache/go" > "$node/build-kube.log" 2>&1 ||
  { tail -20 "$node/build-kube.log" >&2; die "building Kubernetes failed (log: $node/build-kube.log)"; }
kubeadm=$node/kube/bin/kubeadm
mapfile -t wanted < <("$kubeadm" config images list --kubernetes-version "$k8s")
ref() { printf '%s\n' "${wanted[@]}" | grep "/$1:" || die "kubeadm lists no $1 image"; }
coredns_ref=$(ref coredns); pause_ref=$(ref pause); etcd_ref=$(ref etcd)
# The etcd image is tagged with the etcd that build-kube.sh built (the pair envtest uses), which may
# be older than kubeadm's default: the cluster config names it (examples/kind/kind-cluster.yaml).
etcd_ref="${etcd_ref%:*}:$("$node/kube/bin/etcd" --version | sed -n 's/^etcd Version: //p')-0"
[[ -x $node/tools/crictl ]] || { step "crictl $crictl_version"; go_install "$node/tools" "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version" \
  "-X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version"; }
[[ -x $node/tools/coredns ]] || { step "coredns ${coredns_ref##*:}"; go_install "$node/tools" "github.com/coredns/coredns@${coredns_ref##*:}"; }
[[ -x $node/tools/pause ]] || gcc -static -O2 -o "$node/tools/pause" "$ROOT/images/kind-node/pause.c"

# --- images ---------------------------------------------------------------------------------------
step "Debian base images (scripts/debian-base.sh)"
DOCKER=$(bash "$ROOT/scripts/dockerd.sh" cli) bash "$ROOT/scripts/debian-base.sh" "$prefix" >/dev/null
ctx=$(mktemp -d)
node_id=""
trap 'rm -rf "$ctx"; [[ -z $node_id ]] || docker rm -f "$node_id" >/dev/null' EXIT
cp "$ROOT/images/kind-node/Dockerfile" "$ROOT/images/kind-node/10-bridge.conflist" "$ROOT/images/kind-node/runc-bounded" "$ctx/"
cp -r "$kind_files" "$ctx/kind-files"
chmod -R u+w "$ctx/kind-files"  # the module cache may be read-only
rm -rf "$ctx/kind-files/LICENSES"
# kind's containerd config names its own pause tag; the sandbox image is the one kubeadm lists.
sed -i "s|^\(\s*sandbox_image = \).*|\1\"$pause_ref\"|" "$ctx/kind-files/etc/containerd/config.toml"
mkdir "$ctx/bin"
cp "$node/kube/bin/"* "$node/tools/"* "$ctx/bin/"
builder=$(bash "$ROOT/scripts/dockerd.sh" cli)
build() {
  DOCKER_BUILDKIT=1 nice -n 15 "$builder" build --quiet --build-arg "BASE=$prefix/debian:bookworm" \
    --target "$1" -t "$2" "$ctx" >/dev/null
}
step "node-base"
build node-base "$prefix/kind-node-base:$k8s"
tars=()
for component in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
  build "$component" "registry.k8s.io/$component:$k8s"
  tars+=("registry.k8s.io/$component:$k8s")
done
build etcd "$etcd_ref"; build coredns "$coredns_ref"; build pause "$pause_ref"
tars+=("$etcd_ref" "$coredns_ref" "$pause_ref")
step "images for the node: ${tars[*]}"
docker save "${tars[@]}" > "$ctx/images.tar"

# --- the node image -------------------------------------------------------------------------------
node_id=$(docker run -d --entrypoint=sleep --security-opt seccomp=unconfined "$prefix/kind-node-base:$k8s" infinity)
for b in kubeadm kubelet kubectl; do docker cp "$node/kube/bin/$b" "$node_id:/usr/bin/$b"; done
docker exec "$node_id" bash -c "echo '$k8s' > /kind/version"
docker cp "$ctx/images.tar" "$node_id:/tmp/images.tar"
step "importing images into the node's containerd"
docker exec "$node_id" bash -euc '
  containerd > /tmp/containerd.log 2>&1 &
  for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack /tmp/images.tar
  ctr --namespace=k8s.io images list -q
  kill %1; wait || true
  rm -f /tmp/images.tar /tmp/containerd.log'
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$node_id" "$image" >/dev/null
step "done: $image ($(docker image inspect --format '{{.Size}}' "$image" | numfmt --to=iec))"
