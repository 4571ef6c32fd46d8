"""The kind end to end, for real: ``scripts/e2e-kind.sh``'s phases driven from pytest so ``make test``
runs them wherever Docker can run (Debian's dockerd is started when no engine answers, as root).

One kind cluster from the node image assembled here (scripts/kind-node-image.sh), the images built on
the Debian base and loaded with ``kind load`` (no registry), the chart installed with its own RBAC,
webhook, probes, security contexts and NetworkPolicy; Kafka (the Maven-assembled broker) and the VTGate
test server run as pods. ``stream``: a CdcConnector with 2 tasks over 2 shards, a workload, a reshard
2 -> 4 shards, a scale to 4 tasks, a worker pod and the operator pod killed during a second workload,
and ``shardcdc verify`` in a Job (each topic materialised equals its source table). ``spark``: a
backfill on the sparkSubmit engine (spark-submit --master k8s://, driver and executors as pods). The module fixture's finalizer runs ``down``: the cluster
is deleted and a dockerd this run started is stopped, pass or fail.

Select or leave out with ``-m kind`` / ``-m 'not kind'``.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.kind, pytest.mark.slow, pytest.mark.timeout(2400)]
TAIL_LINES = 40
DIAGNOSE_LINES = 80


def _docker_can_run() -> str:
    """Why Docker cannot run here ('' when it can: an engine answers, or dockerd can be started)."""
    if shutil.which("docker") is None:
        return "docker is not installed (make setup installs docker.io as root)"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0:
        return ""
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        return "no Docker engine answers and dockerd cannot be started here (needs docker.io and root)"
    return ""


def _phase(phase: str, timeout: float) -> float:
    """Run one phase of scripts/e2e-kind.sh through `make e2e-kind` (which passes the tool paths and
    the node image); its output streams to pytest's captured stdout, and a failure's message ends
    with its last lines (a CI report that shows only the assertion still says what broke).
    Returns the seconds it took."""
    start = time.monotonic()
    env = {**os.environ, "IMAGE_BASE": os.environ.get("IMAGE_BASE", "debian")}
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with subprocess.Popen(["make", "-s", "-C", str(ROOT), "e2e-kind", f"E2E_KIND_PHASE={phase}"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          start_new_session=True) as proc:
        timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                tail.append(line.rstrip("\n"))
            rc = proc.wait()
        finally:
            timer.cancel()
    took = time.monotonic() - start
    print(f"e2e-kind {phase}: rc {rc} in {took:.0f} s")
    if took >= timeout:
        raise subprocess.TimeoutExpired(proc.args, timeout, output="\n".join(tail))
    last = "\n".join(tail)
    assert rc == 0, f"scripts/e2e-kind.sh {phase} failed (exit {rc}); its last {len(tail)} lines:\n{last}"
    return took


@pytest.fixture(scope="module")
def kind_cluster() -> Iterator[None]:
    why = _docker_can_run()
    if why:  # a failure, not a skip: a suite that silently leaves the e2e out proves nothing
        pytest.fail(f"the kind e2e cannot run: {why}; install Docker, or leave it out with -m 'not kind'")
    try:
        _phase("up", 1800)
        yield
    finally:
        _phase("down", 300)


def _phase_or_diagnose(phase: str, timeout: float) -> None:
    """A failed phase's error carries the cluster's state too (the diagnose phase's last lines)."""
    try:
        _phase(phase, timeout)
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        d = subprocess.run(["make", "-s", "-C", str(ROOT), "e2e-kind", "E2E_KIND_PHASE=diagnose"], timeout=120,
                           check=False, capture_output=True, text=True, errors="replace")
        state = (d.stdout + d.stderr).splitlines()[-DIAGNOSE_LINES:]
        print("\n".join(state))
        raise AssertionError(f"{exc}\ne2e-kind diagnose (last {len(state)} lines):\n" + "\n".join(state)) from exc


def test_stream_reshard_scale_kills_verify(kind_cluster: None) -> None:
    _phase_or_diagnose("stream", 1200)


def test_spark_submit_backfill_in_pods_is_exact(kind_cluster: None) -> None:
    """After the stream test (its connector, its settled tables): the sparkSubmit engine's run
    `initial`, driver and executors as pods; the topics still equal the tables and the run read
    exactly their rows."""
    _phase_or_diagnose("spark", 1200)
