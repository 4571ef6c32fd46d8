#!/usr/bin/env bash
# System prerequisites of the real-Vitess tier: MariaDB 10.11's server binaries (Vitess starts its own
# mariadbd; MySQL 8 has no package reachable here) and an unprivileged user for mysqlctl, which
# refuses to run as root ("mysqlctl cannot be run as root").
# Usage: vitess-system.sh <user>
# Installs what is missing when it can (root + apt-get); otherwise one line says what to do.
set -euo pipefail
user=${1:?usage: vitess-system.sh <user>}

if ! command -v mariadbd >/dev/null && [[ ! -x /usr/sbin/mariadbd ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "installing mariadb-server (MariaDB 10.11, the database under the real-Vitess tests)"
    # The package's own service start is refused in containers; Vitess starts its own mariadbd.
    (apt-get install -y -q --no-install-recommends mariadb-server || true) >/tmp/shardcdc-apt-mariadb.log 2>&1
    if [[ ! -x /usr/sbin/mariadbd ]]; then
      apt-get update -q >/dev/null 2>&1 || true
      (apt-get install -y -q --no-install-recommends mariadb-server || true) >>/tmp/shardcdc-apt-mariadb.log 2>&1
    fi
  fi
  [[ -x /usr/sbin/mariadbd ]] || {
    echo "MariaDB 10.11 server is required for the real-Vitess tests: install it (sudo apt-get install mariadb-server), then rerun make" >&2
    exit 1
  }
fi

# Only root needs another user: a normal user runs mysqlctl as itself.
if [[ $(id -u) == 0 ]] && ! id "$user" >/dev/null 2>&1; then
  useradd --system --create-home --shell /usr/sbin/nologin "$user"
  echo "created user $user (mysqlctl refuses root)"
fi
