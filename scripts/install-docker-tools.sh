#!/usr/bin/env bash
# System packages of the kind e2e (tests/e2e/repo/test_e2e_kind.py, `make e2e-kind`) from Debian's archive:
#   docker.io      dockerd 20.10 and its CLI (BuildKit built in), with containerd and runc
#   debootstrap    the Debian 12 base the images build on without a registry (scripts/debian-base.sh)
#   gcc, libc6-dev the static pause binary of the kind node image (scripts/kind-node-image.sh)
# Installs what is missing when it can (root + apt-get); otherwise one line says what to do.
set -euo pipefail

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v gcc >/dev/null || missing+=(gcc)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/$(uname -m)-linux-gnu/libc.a ]] || missing+=(libc6-dev)
[[ ${#missing[@]} -eq 0 ]] && { echo "docker tools present: $(dockerd --version)"; exit 0; }

if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "the kind e2e needs ${missing[*]}: install them (sudo apt-get install ${missing[*]}), then rerun make" >&2
  exit 1
fi
echo "installing ${missing[*]}"
log=/tmp/shardcdc-apt-docker-tools.log
# The package's own dockerd service start is refused in containers; scripts/dockerd.sh starts one.
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  apt-get update -q >>"$log" 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 ||
    { tail -5 "$log" >&2; echo "apt-get install ${missing[*]} failed (log: $log)" >&2; exit 1; }
fi
echo "installed: $(dockerd --version)"
