#!/usr/bin/env bash
# Run one set-up step quietly: its whole output goes to a log file under the cache, and the
# terminal gets one line with the step's name and time. On failure the log's tail is shown
# (and its path), so a newcomer's first `make demo` is a few lines, not hundreds of
# `go: downloading ...` lines, yet nothing is hidden when a step breaks.
# Usage: step.sh <name> <log-dir> <command> [args...]
set -uo pipefail
name=$1
logdir=$2
shift 2
mkdir -p "$logdir"
log="$logdir/$name.log"
start=$(date +%s)
"$@" >"$log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if (( rc != 0 )); then
  echo "set-up: $name FAILED after ${took}s (exit $rc); last lines of $log:" >&2
  tail -n 40 "$log" >&2
  exit "$rc"
fi
echo "set-up: $name done in ${took}s (log: $log)"
