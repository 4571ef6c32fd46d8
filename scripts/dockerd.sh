#!/usr/bin/env bash
# A Docker engine for the image builds and the kind e2e, started only when none is reachable.
#   dockerd.sh start   use the running engine, or start Debian's dockerd in the background
#   dockerd.sh stop    stop the engine only if `start` started it (a running engine is left alone)
#   dockerd.sh cli     print a docker CLI that builds with BuildKit (images/Dockerfile needs it):
#                      `docker` with the buildx plugin, else Debian's docker.io 20.10 CLI (BuildKit built in)
# State under $SHARDCDC_CACHE (default ~/.cache/shardcdc): docker/data (images, the data-root),
# docker/dockerd.pid (present only while an engine we started runs), logs/dockerd.log.
# Published ports bind to 127.0.0.1 only (--ip): nothing this engine runs listens beyond loopback.
set -euo pipefail

cache=${SHARDCDC_CACHE:-$HOME/.cache/shardcdc}
dir=$cache/docker
pidfile=$dir/dockerd.pid
log=$cache/logs/dockerd.log
die() { echo "dockerd.sh: $*" >&2; exit 1; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Every capability the kernel has is in this process's bounding set (else see runc-bounded).
full_bounding_set() {
  local last bnd
  last=$(cat /proc/sys/kernel/cap_last_cap)
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (( 16#$bnd == (1 << (last + 1)) - 1 ))
}

start() {
  if docker info >/dev/null 2>&1; then
    echo "docker: using the running engine ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    return 0
  fi
  command -v dockerd >/dev/null || die "dockerd is not installed (Debian: apt-get install docker.io)"
  [[ $(id -u) == 0 ]] || die "no Docker engine reachable and starting dockerd needs root; start Docker or set DOCKER_HOST"
  mkdir -p "$dir/data" "$(dirname "$log")"
  local runtime=()
  if ! full_bounding_set; then
    # `--privileged` (kind's nodes) would ask runc for capabilities this machine cannot grant.
    cp "$ROOT/images/kind-node/runc-bounded" "$dir/runc-bounded"
    runtime=(--add-runtime "runc-bounded=$dir/runc-bounded" --default-runtime runc-bounded)
    echo "docker: this machine's capability bounding set is incomplete; containers run through $dir/runc-bounded"
  fi
  # setsid: the engine outlives this script (stop ends it); its own process group, so Ctrl-C in
  # the caller's terminal does not kill it half-way through a build.
  setsid dockerd --data-root "$dir/data" --pidfile "$dir/dockerd.daemon.pid" --ip 127.0.0.1 "${runtime[@]}" \
    >>"$log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  local deadline=$((SECONDS + 60))
  until docker info >/dev/null 2>&1; do
    alive "$(cat "$pidfile")" || { rm -f "$pidfile"; tail -5 "$log" >&2; die "dockerd exited at start (log: $log)"; }
    (( SECONDS < deadline )) || die "dockerd did not answer within 60 s (log: $log)"
    sleep 0.5
  done
  echo "docker: started dockerd $(docker version --format '{{.Server.Version}}') (pid $(cat "$pidfile"), data $dir/data, log $log)"
}

# Running, and not a zombie: the engine outlives its starter, so its parent may be an init that
# does not reap.
alive() { kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

stop() {
  [[ -f $pidfile ]] || return 0
  local pid deadline=$((SECONDS + 60))
  pid=$(cat "$pidfile")
  if alive "$pid"; then
    kill -TERM "$pid"
    while alive "$pid"; do
      (( SECONDS < deadline )) || { kill -KILL "$pid"; break; }
      sleep 0.5
    done
  fi
  rm -f "$pidfile"
  echo "docker: stopped the dockerd this project started (pid $pid)"
}

cli() {
  if docker buildx version >/dev/null 2>&1; then echo docker; return 0; fi
  local c
  for c in /usr/bin/docker /usr/local/bin/docker; do
    [[ -x $c ]] && "$c" version --format '{{.Client.Version}}' 2>/dev/null | grep -q '^20\.10\.' && { echo "$c"; return 0; }
  done
  die "no docker CLI here builds with BuildKit: install the buildx plugin (Debian: docker.io 20.10 has it built in)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  cli) cli ;;
  *) die "usage: dockerd.sh start|stop|cli" ;;
esac
