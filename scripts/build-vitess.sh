#!/usr/bin/env bash
# Build the Vitess binaries shardcdc's real-Vitess tier runs, from the pinned Go module, with the
# project's MariaDB patch set (scripts/vitess/mariadb.patch) applied to Vitess's config templates.
# Usage: build-vitess.sh <module-version> <out-dir> <go-cache-dir> <patch>
#   <module-version> e.g. v0.24.4 (the Go module vitess.io/vitess; = Vitess v24.0.4)
#   <out-dir>        result: <out-dir>/bin/{vtcombo,...}, <out-dir>/config (patched), <out-dir>/.complete.
#                    It is the VTROOT the fixtures pass: vttestserver looks for $VTROOT/bin/mysqlctl
#                    and $VTROOT/config.
#   <go-cache-dir>   GOMODCACHE=<go-cache-dir>/mod, GOCACHE=<go-cache-dir>/build (shared with build-kube.sh)
# Idempotent: exits at once when <out-dir>/.complete exists.
#
# `go install vitess.io/vitess/go/cmd/vtcombo@v0.24.4` is refused: the module's go.mod has an `exclude`
# directive, which `go install pkg@version` does not allow. So the downloaded module is copied to a
# writable folder and built there as the main module. config/init_db.sql is embedded into the binaries
# at build time (config/embed.go), which is why the patch is applied before `go build`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"

ver=${1:?usage: build-vitess.sh <module-version> <out-dir> <go-cache-dir> <patch>}
out=${2:?out-dir}
gocache=${3:?go-cache-dir}
patch=$(realpath "${4:?patch}")

go_once "$out"

go_env "$gocache" "build Vitess $ver (Go >= 1.26.8)" mod
step() { go_step build-vitess "$@"; }

step "vitess.io/vitess@$ver -> $out"
dir=$(cd /tmp && go_ mod download -json "vitess.io/vitess@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "$dir" ]] || { echo "go mod download gave no module directory for vitess.io/vitess@$ver" >&2; exit 1; }

src=$out/src
rm -rf "$src" "$out/bin.tmp"
mkdir -p "$src" "$out/bin.tmp"
cp -r "$dir/." "$src/"
chmod -R u+w "$src"
# git apply --check first: a clear failure when upstream's templates moved (tests/unit/repo/test_vitess_patch.py
# checks the same against the downloaded module).
(cd "$src" && git apply --check -p1 "$patch" && git apply -p1 "$patch")
step "patched config templates ($(basename "$patch"))"

cd "$src"
go_ build -trimpath -o "$out/bin.tmp/" \
  ./go/cmd/vtcombo ./go/cmd/vttestserver ./go/cmd/mysqlctl ./go/cmd/mysqlctld \
  ./go/cmd/vtgate ./go/cmd/vttablet ./go/cmd/vtctld ./go/cmd/vtctldclient
step "built $(ls "$out/bin.tmp" | tr '\n' ' ')"

rm -rf "$out/bin" "$out/config"
mv "$out/bin.tmp" "$out/bin"
cp -r "$src/config" "$out/config"
cd "$out"
rm -rf "$src"
touch "$out/.complete"
step "done"
