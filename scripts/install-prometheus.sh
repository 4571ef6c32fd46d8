#!/usr/bin/env bash
# Prometheus and promtool for the alert-rule unit tests and the observability integration test:
# Debian's `prometheus` package (2.42). Nothing to do when both binaries answer with that version;
# otherwise apt-get installs it (root), or one line says how to.
set -euo pipefail
want="$1"

has() {  # has <binary>: on PATH and reports version $want
  command -v "$1" >/dev/null && "$1" --version 2>&1 | grep -q "version ${want//./\\.}[.+]"
}
if has prometheus && has promtool; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "prometheus/promtool ${want} missing: install Debian's package as root (apt-get install prometheus)" >&2
  exit 1
fi
echo "installing Debian's prometheus package (prometheus and promtool ${want})"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends prometheus >/dev/null 2>&1 || {
  apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null
  apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends prometheus >/dev/null
}
# Tests and the demo start their own Prometheus on a free loopback port: where systemd runs, the
# service the package enables (on :9090) is not wanted, so it is stopped and disabled again.
if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
  systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
has prometheus && has promtool || {
  echo "prometheus/promtool ${want} missing after apt-get install prometheus: found $(promtool --version 2>&1 | head -1)" >&2
  exit 1
}
