#!/usr/bin/env bash
# rdkafka.h of one librdkafka release, from the npm package that ships librdkafka's source
# (make rdkafka-header; tests/unit/worker/test_rdkafka_abi.py checks kafkaprod.c's hand declarations against it).
set -euo pipefail
npm_pkg=$1 version=$2 home=$3
command -v npm >/dev/null || { echo "make rdkafka-header: npm is missing (apt-get install npm)" >&2; exit 1; }
if [[ -f "$home/rdkafka.h" ]]; then touch "$home/rdkafka.h"; exit 0; fi
# Several worktrees' `make` may run this at once: one fetch at a time, each in its own temp dir.
mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9
if [[ -f "$home/rdkafka.h" ]]; then touch "$home/rdkafka.h"; exit 0; fi
tmp=$(mktemp -d "$home.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "$npm_pkg" >/dev/null
tar xzf ./*.tgz package/deps/librdkafka/src/rdkafka.h
IFS=. read -r major minor patch <<<"$version"
v=$(printf '0x%02x%02x%02xff' "$major" "$minor" "$patch")
grep -q "define RD_KAFKA_VERSION *$v" package/deps/librdkafka/src/rdkafka.h || {
  echo "make rdkafka-header: $npm_pkg does not ship librdkafka $version's rdkafka.h" >&2; exit 1; }
# touch: the tarball's 1985 mtime would leave the target older than this script, so make re-ran it.
mkdir -p "$home" && mv package/deps/librdkafka/src/rdkafka.h "$home/rdkafka.h" && touch "$home/rdkafka.h"
