#!/usr/bin/env bash
# The kind e2e's Kafka broker image, from the jars `make kafka` assembled from Maven Central
# (scripts/fetch-kafka.sh) and images/kafka/. Nothing is pulled: the JRE base is a build argument
# (IMAGE_BASE=debian: shardcdc-local/jre:17-bookworm, from scripts/debian-base.sh).
# Usage: kafka-image.sh <kafka-home> <image> [docker build args...]   e.g.
#   kafka-image.sh ~/.cache/shardcdc/kafka-3.9.1 shardcdc-local/kafka:3.9.1 --build-arg JRE_IMAGE=...
set -euo pipefail

home=${1:?usage: kafka-image.sh <kafka-home> <image> [build args]}
image=${2:?image}
shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "kafka-image.sh: $*" >&2; exit 1; }
[[ -f $home/.complete ]] || die "no Kafka jars in $home: run 'make kafka' first"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r "$home/libs" "$ctx/libs"
cp "$ROOT/images/kafka/Dockerfile" "$ROOT/images/kafka/run.sh" "$ctx/"
DOCKER_BUILDKIT=1 nice -n 15 "${DOCKER:-docker}" build --quiet -t "$image" --label "org.opencontainers.image.version=$(cat "$home/.complete")" \
  "$@" "$ctx" >/dev/null
echo "built $image (Kafka $(cat "$home/.complete"))"
