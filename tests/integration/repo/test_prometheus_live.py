"""A real Prometheus scrapes a local-mode connector; the dashboard's queries and the alerts run on it.

``shardcdc run --metrics-port 0`` runs two tasks against the VTGate test server under a workload,
with a local-engine backfill, and writes target files; Prometheus (Debian's 2.42, on loopback, in a
temp dir) loads the copyable ``deploy/prometheus/scrape-configs.yaml`` rendered for those files
(``promlocal.local_scrape_config``: only the discovery changes) and the shipped rules. Then:

* every query of every panel of ``deploy/grafana/shardcdc-dashboard.json`` (and both template
  variables), with ``$namespace``/``$connector`` filled in and ``$__rate_interval`` as
  ``RATE_INTERVAL``, goes through Prometheus's HTTP API and returns at least one series with sane
  values (finite, lag >= 0, rates > 0 while the workload runs, the values this connector has);
* one worker is killed (SIGKILL; the restart back-off is longer than the test) and Prometheus's
  own rule evaluation takes ShardcdcStreamStopped and ShardcdcTaskFailed for that task to firing.

The rules are loaded with every ``for:`` shortened to ``FOR_SECONDS`` (``promlocal.shorten_for``:
the wait changes, never an expression); the real ``for:`` values are covered by promtool's unit
tests (tests/integration/repo/test_prometheus_rules.py).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from local_mode_fixtures import Run
from polling import wait_for

from localkafka import KafkaBroker
from promlocal import RULES_FILE, Prometheus, for_local_mode
from vtgatesim import VTGateSim
from vtgatesim.workload import TABLE_DDL, Workload

NAME = "obs"
NAMESPACE = "default"
INTERVAL = "1s"  # scrape and rule evaluation
RATE_INTERVAL = "30s"  # $__rate_interval: comfortably more than 4 scrapes on a busy machine
FOR_SECONDS = 2
STEP = 120.0
DASHBOARD = RULES_FILE.parents[1] / "grafana" / "shardcdc-dashboard.json"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"], ddl=[TABLE_DDL.format(t="items")])
        yield s


def manifest(sim: VTGateSim, kafka: KafkaBroker, prefix: str) -> str:
    return json.dumps({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": NAME},
        "spec": {"source": {"vitess": {"vtgate": sim.address, "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": kafka.bootstrap, "topicPrefix": prefix, "offsetsTopic": f"{prefix}-off"},
                 "tasks": 2,
                 "snapshot": {"mode": "never", "backfill": {"engine": "local", "spark": {"chunkSize": 20}}},
                 "backfills": [{"id": "b1", "tables": ["items"]}],
                 "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200",
                            "heartbeat.interval.ms": "1000"}},
    })


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) with the template variables as Grafana would fill them for this connector."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$namespace", NAMESPACE).replace("$connector", NAME)
                    .replace("$__rate_interval", RATE_INTERVAL))
            assert "$" not in expr, f"{panel['title']}: unfilled variable in {expr}"
            out.append((panel["title"], expr))
    return out


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(s["value"][1]) for s in result]


def check_panel(title: str, expr: str, result: list[dict[str, Any]]) -> None:
    """The values this connector must show in that panel (beyond: some series, all finite)."""
    vs = values(result)
    labels = [s["metric"] for s in result]
    assert vs and all(math.isfinite(v) for v in vs), f"{title}: {expr} -> {result}"
    checks: dict[str, Callable[[], bool]] = {
        "Connectors ready": lambda: vs == [1.0],
        "Generation": lambda: vs == [0.0],
        "Tasks (current / desired)": lambda: vs == [2.0],
        "Serving shards": lambda: vs == [2.0],
        "Events/s to Kafka": lambda: all(v > 0 for v in vs),
        "VStream events/s per task": lambda: len(vs) == 2 and all(v > 0 for v in vs),
        "Lag behind source per shard": lambda: {m["shard"] for m in labels} == {"-80", "80-"} and all(0 <= v < 60 for v in vs),
        "Low watermark lag": lambda: all(0 <= v < 60 for v in vs),
        "Low watermark": lambda: all(abs(v / 1000 - time.time()) < 600 for v in vs),
        "Commit to Kafka ack latency (p50 / p99)": lambda: all(0 <= v < 60 for v in vs),
        "Queue used (records)": lambda: all(v >= 0 for v in vs),
        "Queue size (bytes)": lambda: all(v >= 0 for v in vs),
        "Stream errors/s by gRPC code": lambda: {m["code"] for m in labels} == {"UNAVAILABLE"} and all(v >= 0 for v in vs),
        "Reconnects and erroneous events": lambda: all(v >= 0 for v in vs),
        "Task state": lambda: {(m["task"], m["state"]) for m in labels} == {("0", "streaming"), ("1", "streaming")},
        "Task generation and connection": lambda: all(v in (0.0, 1.0) for v in vs) and len(vs) == 2,
        "Backfill phase and progress": lambda: (all(m.get("phase") in (None, "Succeeded") for m in labels)
                                                and all(v == 1.0 for v in vs)),
        "Conditions": lambda: {m["type"] for m in labels} >= {"Ready"},
    }
    assert title in checks, f"no check for panel {title!r}"
    assert checks[title](), f"{title}: {expr} -> {[(m, v) for m, v in zip(labels, vs, strict=True)]}"


def worker_pids(state: Path, pod: str) -> list[int]:
    """Processes running the worker of ``pod`` (its config path is in their command line)."""
    marker = str(state / NAMESPACE / NAME / "pods" / NAMESPACE / pod).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and b"shardcdc_cli.cli\x00worker" in cmdline:
                pids.append(int(entry.name))
    return pids


def active(prom: Prometheus, alert: str, **labels: str) -> dict[str, Any] | None:
    return next((a for a in prom.alerts() if a["labels"].get("alertname") == alert
                 and labels.items() <= a["labels"].items()), None)


def firing(prom: Prometheus, alert: str, **labels: str) -> dict[str, Any] | None:
    a = active(prom, alert, **labels)
    return a if a is not None and a["state"] == "firing" else None


def test_dashboard_and_alerts_on_a_real_prometheus(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    prefix = f"pm{uuid.uuid4().hex[:6]}"
    state = tmp_path / "state"
    workload = Workload(sim, "shop", table="items", seed=9)
    workload.run(transactions=60)
    (tmp_path / "connector.yaml").write_text(manifest(sim, kafka_broker, prefix))
    # The killed worker must stay down: a restart back-off longer than the test.
    run = Run(tmp_path / "connector.yaml", state, tmp_path / "run.log",
              extra=("--metrics-port", "0", "--restart-backoff", "600"))
    targets_dir = state / NAMESPACE / NAME / "prometheus"
    writer = threading.Thread(target=workload.run, kwargs={"rate": 30.0}, daemon=True)
    try:
        wait_for(lambda: run.alive() or (targets_dir / "operator.json").exists(), STEP, "the target files")
        with for_local_mode(targets_dir, tmp_path / "prometheus", interval=INTERVAL, for_seconds=FOR_SECONDS) as prom:
            writer.start()
            observe_healthy(prom, run, sim)
            assert writer.is_alive(), "the workload ended before the rates were read"
            kill_task_0(prom, state)
    finally:
        workload.stop()
        run.stop()


def observe_healthy(prom: Prometheus, run: Run, sim: VTGateSim) -> None:
    """Streaming, backfilled, Ready, no stream alert; after a transport break every panel answers."""

    def healthy() -> bool:
        """True, or an AssertionError naming what is not yet so (shown if the wait times out)."""
        run.alive()  # raises if shardcdc run exited
        targets = prom.targets()
        up = {(t["labels"]["job"], t["labels"].get("task")): t["health"] for t in targets}
        errors = [f"{t['scrapeUrl']}: {t['lastError']}" for t in targets if t.get("lastError")]
        assert up == {("shardcdc-operator", None): "up", ("shardcdc-workers", "0"): "up",
                      ("shardcdc-workers", "1"): "up"}, (f"scrape targets: {up} {errors}; shardcdc run: "
                                                         f"{run.output()[-1500:]}\n{run.pod_logs()}")
        ready = prom.query(f'shardcdc_operator_connector_ready{{connector="{NAME}"}}')
        assert values(ready) == [1.0], f"connector ready: {ready}"
        phase = prom.query(f'shardcdc_operator_backfill_phase{{connector="{NAME}"}} == 1')
        assert [s["metric"].get("phase") for s in phase] == ["Succeeded"], f"backfill phase: {phase}"
        return True

    wait_for(healthy, STEP * 2, "both tasks scraped and streaming, the backfill done, the connector Ready")
    quiet = ("ShardcdcStreamStopped", "ShardcdcTaskFailed", "ShardcdcConnectorNotReady", "ShardcdcConnectorDegraded")
    wait_for(lambda: not [a for a in prom.alerts() if a["labels"]["alertname"] in quiet], STEP,
             "no stream alert while healthy")

    # One transport break under every stream: errors and reconnects by code, then streaming again.
    sim.restart()
    wait_for(lambda: prom.query(f'shardcdc_reconnects_total{{connector="{NAME}"}} > 0'), STEP, "the reconnects scraped")
    wait_for(healthy, STEP, "streaming again after the break")

    # Template variables, then every panel query, while the workload runs.
    assert NAMESPACE in prom.api("label/namespace/values", **{"match[]": "shardcdc_ready"})
    assert NAME in prom.api("label/connector/values", **{"match[]": f'shardcdc_ready{{namespace=~"{NAMESPACE}"}}'})
    queries = panel_queries()
    assert len(queries) >= 20

    def all_panels() -> bool:
        for title, expr in queries:
            check_panel(title, expr, prom.query(expr))
        return True

    wait_for(all_panels, STEP, "every panel query answered with sane values")


def kill_task_0(prom: Prometheus, state: Path) -> None:
    """SIGKILL task 0's worker: its target goes down and the operator sees CrashLoopBackOff."""
    pids = worker_pids(state, f"{NAME}-g0-t0-0")
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    for alert, summary in (("ShardcdcStreamStopped", "task 0 is not streaming"), ("ShardcdcTaskFailed", "task 0 failed")):
        a = wait_for(lambda alert=alert: firing(prom, alert, connector=NAME, task="0"), STEP, f"{alert} firing")
        assert a["labels"] == {"alertname": alert, "severity": "critical", "namespace": NAMESPACE,
                               "connector": NAME, "task": "0"}
        assert a["annotations"]["summary"] == f"{NAMESPACE}/{NAME} {summary}"
    # Task 1 streams on: no alert names it.
    assert active(prom, "ShardcdcStreamStopped", task="1") is None
    assert active(prom, "ShardcdcTaskFailed", task="1") is None
