"""Every metric the Grafana dashboard and the Prometheus rules query exists where it should.

Worker metrics are scraped from a live worker: a task streaming from the VTGate test server into the
real broker, with a workload, its ``/metrics`` served by the worker's own endpoint. Operator metrics
(``shardcdc_operator_*``) come from the operator's collector (``cdcoperator.metrics``) fed with the
status the operator writes, including a backfill. A query naming any other metric fails the test.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from observability_fixtures import running
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from worker_fixtures import CUSTOMER_DDL, running_task, wait_positioned, worker_config

from cdcoperator.metrics import ConnectorMetrics
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "shardcdc-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "shardcdc-rules.yaml"

# Series Prometheus makes itself for every target (the alerts use `up` to see a worker that is down).
PROMETHEUS_SERIES = {"up"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (strings, label matchers, ranges and groupings removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        if word.lower() in PROMQL_WORDS or text[m.end():].lstrip().startswith("("):
            continue
        if re.fullmatch(r"[0-9.e]+", word) or word.startswith("$"):
            continue
        names.add(word)
    return names


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", q["query"])
            assert inner is not None, q
            exprs.append(inner.group(1))
    return exprs


def rule_queries() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    return [r["expr"] for g in doc["spec"]["groups"] for r in g["rules"]]


def test_metric_name_extraction() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le, connector) (rate(x_bucket{a="b"}[5m])))') == {"x_bucket"}
    assert metric_names("(a == 0) or (b{c=~\"d|e\"} == 0) and on (x) c") == {"a", "b", "c"}
    assert metric_names("max by (ns) (m) / 1000 > 3e5") == {"m"}


def test_panels_cover_the_issue_list() -> None:
    dash = json.loads(DASHBOARD.read_text())
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("events/s", "lag", "low watermark", "queue", "errors", "generation", "backfill"):
        assert topic in titles, topic
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["spec"]["groups"] for r in g["rules"]}
    assert {"ShardcdcLagHigh", "ShardcdcStreamStopped", "ShardcdcBackfillFailed"} <= alerts


def _samples(text: str) -> set[str]:
    """Series names on the endpoint, including declared families without samples yet (e.g. errors)."""
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.update(s.name for s in fam.samples)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(fam.type, ("",))
        names.update(fam.name + suffix for suffix in suffixes)
    return names


@pytest.fixture(scope="module")
def worker_exposition(kafka_broker: KafkaBroker) -> Iterator[str]:
    """/metrics of a live worker that streamed a workload (all shards, transactions, acks)."""
    with VTGateSim() as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER_DDL])
        cfg = worker_config(kafka_broker, sim.address, "commerce")
        with running_task(cfg) as run:
            wait_positioned(sim, run)
            deadline = time.monotonic() + 30
            for i in range(1, 41):
                sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
            with running(run.task.metrics) as url:
                text = ""
                while True:
                    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
                        text = resp.read().decode()
                    names = _samples(text)
                    sent = sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                               if s.name == "shardcdc_records_sent_total")
                    # the scraped text itself must show every record (not the live counter after it)
                    if {"shardcdc_low_watermark_seconds", "shardcdc_commit_to_ack_seconds_bucket"} <= names and sent >= 40:
                        break
                    assert time.monotonic() < deadline, f"worker metrics incomplete: {sorted(names)}"
                    time.sleep(0.1)
            run.stop()
    yield text


def operator_exposition() -> str:
    store = ConnectorMetrics()
    t = "2026-01-01T00:00:00Z"
    store.observe("ADDED", {
        "metadata": {"namespace": "shop", "name": "orders", "generation": 2},
        "spec": {"tasks": 2, "state": "running"},
        "status": {"observedGeneration": 2, "lag": "3s",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "AllTasksStreaming",
                                   "lastTransitionTime": t, "message": ""},
                                  {"type": "Degraded", "status": "False", "reason": "AsExpected",
                                   "lastTransitionTime": t, "message": ""}],
                   "shards": {"serving": ["-80", "80-"], "servingCount": 2},
                   "assignment": {"generation": 1, "tasks": 2, "previousTasks": 1, "phase": "Running",
                                  "taskStates": [{"id": 0, "shards": ["-80"], "lag": "3s", "phase": "Streaming"},
                                                 {"id": 1, "shards": ["80-"], "lag": "1s", "phase": "Failed"}]},
                   "backfills": [{"id": "bf-1", "phase": "Failed", "message": "executor lost",
                                  "chunksDone": 7, "chunksTotal": 20, "rows": 7000}]},
    })
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(store)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_operator_metrics_reflect_status() -> None:
    text = operator_exposition()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    lv = (("connector", "orders"), ("namespace", "shop"))
    assert samples[("shardcdc_operator_connector_ready", lv)] == 1.0
    assert samples[("shardcdc_operator_connector_generation", lv)] == 1.0
    assert samples[("shardcdc_operator_connector_lag_seconds", lv)] == 3.0
    assert samples[("shardcdc_operator_connector_task_lag_seconds", (*lv, ("task", "1")))] == 1.0
    assert samples[("shardcdc_operator_backfill_phase", (("backfill", "bf-1"), *lv, ("phase", "Failed")))] == 1.0
    assert samples[("shardcdc_operator_backfill_phase", (("backfill", "bf-1"), *lv, ("phase", "Running")))] == 0.0
    bf = (("backfill", "bf-1"), *lv)
    assert samples[("shardcdc_operator_backfill_chunks_done", bf)] == 7.0
    assert samples[("shardcdc_operator_backfill_chunks_total", bf)] == 20.0
    assert samples[("shardcdc_operator_backfill_rows", bf)] == 7000.0
    assert samples[("shardcdc_operator_watch_events_total", ())] == 1.0
    phase = {(dict(k[1])["task"], dict(k[1])["phase"]): v for k, v in samples.items()
             if k[0] == "shardcdc_operator_task_phase"}
    assert phase[("0", "Streaming")] == 1.0 and phase[("0", "Failed")] == 0.0
    assert phase[("1", "Failed")] == 1.0 and sum(v for (t, _), v in phase.items() if t == "1") == 1.0


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_queried_metric_exists(source: str, worker_exposition: str) -> None:
    exprs = dashboard_queries() if source == "dashboard" else rule_queries()
    assert exprs
    worker = _samples(worker_exposition)
    operator = _samples(operator_exposition())
    missing: dict[str, list[str]] = {}
    used: set[str] = set()
    for expr in exprs:
        for name in metric_names(expr) - PROMETHEUS_SERIES:
            used.add(name)
            where = operator if name.startswith("shardcdc_operator_") else worker
            if name not in where:
                missing.setdefault(name, []).append(expr)
    assert missing == {}, f"queried but not exported: {missing}"
    assert used  # the extraction found something to check


def test_worker_exports_what_the_dashboard_is_about(worker_exposition: str) -> None:
    samples: dict[str, Any] = {}
    for fam in text_string_to_metric_families(worker_exposition):
        for s in fam.samples:
            samples.setdefault(s.name, []).append(s)
    assert sum(s.value for s in samples["shardcdc_records_sent_total"]) >= 40
    shards = {s.labels["shard"] for s in samples["shardcdc_milliseconds_behind_source"]}
    assert shards == {"-80", "80-"}
    assert {s.labels["state"] for s in samples["shardcdc_state"] if s.value == 1} == {"streaming"}
    assert "shardcdc_stream_errors" in {f.name for f in text_string_to_metric_families(worker_exposition)}
