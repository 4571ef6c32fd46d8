#!/usr/bin/env bash
# Local base images made from Debian's packages, for machines that reach Debian's archive but no
# container registry. Usage: debian-base.sh <image-prefix>    (needs root, debootstrap and a Docker engine)
# Makes, when missing:
#   <prefix>/debian:bookworm         debootstrap --variant=minbase bookworm, + ca-certificates and this
#                                    machine's local CAs (/usr/local/share/ca-certificates)
#   <prefix>/python:3.11-bookworm    + Debian's python3.11, venv and headers, shaped like python:3.11-slim
#                                    (`python` on PATH), for images/Dockerfile's PYTHON_IMAGE
#   <prefix>/jre:17-bookworm         + Debian's OpenJDK 17 JRE copied to /opt/java/openjdk (the path
#                                    the Temurin image has), for images/Dockerfile's JRE_IMAGE
# The root filesystem tarball is cached in $SHARDCDC_CACHE/debian-bookworm (reused across engines).
set -euo pipefail

prefix=${1:?usage: debian-base.sh <image-prefix>}
cache=${SHARDCDC_CACHE:-$HOME/.cache/shardcdc}/debian-bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
die() { echo "debian-base.sh: $*" >&2; exit 1; }
have() { "${DOCKER:-docker}" image inspect "$1" >/dev/null 2>&1; }

command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9

if ! have "$prefix/debian:bookworm"; then
  if [[ ! -f $cache/rootfs.tar ]]; then
    rm -rf "$cache/rootfs"
    echo "debootstrap --variant=minbase bookworm -> $cache/rootfs"
    nice -n 15 debootstrap --variant=minbase bookworm "$cache/rootfs" "$mirror" > "$cache/debootstrap.log" 2>&1 ||
      { tail -5 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
    # Leave no package lists or caches in the image; the sources list stays for later apt-get.
    rm -rf "$cache/rootfs/var/lib/apt/lists/"* "$cache/rootfs/var/cache/apt/"*.bin "$cache/rootfs/var/cache/apt/archives/"*.deb
    tar -C "$cache/rootfs" --numeric-owner -cf "$cache/rootfs.tar.tmp" .
    mv "$cache/rootfs.tar.tmp" "$cache/rootfs.tar"
    rm -rf "$cache/rootfs"
  fi
  "${DOCKER:-docker}" import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' "$cache/rootfs.tar" "$prefix/debian:bookworm-minbase" >/dev/null
  echo "imported $prefix/debian:bookworm-minbase"
  # The base trusts what this machine trusts: Debian's CA bundle plus the machine's own local CAs
  # (/usr/local/share/ca-certificates: where a network reaches registries through a TLS-inspecting
  # proxy, pip inside a build needs its CA). These are local test bases, never published.
  ctx=$(mktemp -d)
  mkdir "$ctx/ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
  printf '%s\n' "FROM $prefix/debian:bookworm-minbase" \
    'RUN apt-get update && apt-get install --yes --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*' \
    'COPY ca/ /usr/local/share/ca-certificates/' \
    'RUN update-ca-certificates' > "$ctx/Dockerfile"
  nice -n 15 "${DOCKER:-docker}" build --quiet -t "$prefix/debian:bookworm" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "built $prefix/debian:bookworm ($(ls /usr/local/share/ca-certificates/*.crt 2>/dev/null | wc -l) local CAs)"
fi

build() {  # build <tag> <Dockerfile text>: a one-off image from the Debian base, no build context
  have "$1" && return 0
  echo "building $1"
  DOCKER_BUILDKIT=1 nice -n 15 "${DOCKER:-docker}" build --quiet --build-arg "BASE=$prefix/debian:bookworm" -t "$1" - <<<"$2" >/dev/null
}

build "$prefix/python:3.11-bookworm" '
ARG BASE
FROM $BASE
RUN apt-get update \
 && apt-get install --yes --no-install-recommends python3.11 python3.11-venv python3.11-dev \
 && ln -s /usr/bin/python3.11 /usr/local/bin/python \
 && printf "[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n" > /etc/pip.conf \
 && rm -rf /var/lib/apt/lists/*
'

build "$prefix/jre:17-bookworm" '
ARG BASE
FROM $BASE
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install --yes --no-install-recommends openjdk-17-jre-headless \
 && mkdir -p /opt/java \
 && cp -aL "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /opt/java/openjdk \
 && /opt/java/openjdk/bin/java -version \
 && rm -rf /var/lib/apt/lists/*
'
"${DOCKER:-docker}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$prefix/*"
