#!/usr/bin/env bash
# rdkafka.h of one librdkafka release, from the npm package that ships librdkafka's source
# (make rdkafka-header; tests/unit/worker/test_rdkafka_abi.py checks kafkaprod.c's hand declarations against it).
set -euo pipefail
npm_pkg=$1 version=$2 home=$3
command -v npm >/dev/null || { echo "make rdkafka-header: npm is missing (apt-get install npm)" >&2; exit 1; }
rm -rf "$home.tmp" && mkdir -p "$home.tmp"
cd "$home.tmp"
npm pack --silent "$npm_pkg" >/dev/null
tar xzf ./*.tgz package/deps/librdkafka/src/rdkafka.h
IFS=. read -r major minor patch <<<"$version"
v=$(printf '0x%02x%02x%02xff' "$major" "$minor" "$patch")
grep -q "define RD_KAFKA_VERSION *$v" package/deps/librdkafka/src/rdkafka.h || {
  echo "make rdkafka-header: $npm_pkg does not ship librdkafka $version's rdkafka.h" >&2; exit 1; }
mkdir -p "$home" && mv package/deps/librdkafka/src/rdkafka.h "$home/rdkafka.h"
cd / && rm -rf "$home.tmp"
