"""execute-snapshot / stop-snapshot signals on a connector whose backfills run on an engine.

The worker hands each signal to the operator as a ``signal`` record in the progress topic (real
worker task, VTGate test server, real broker); the operator's fold of that topic decides which
runs to launch and which a stop cancelled; ``reconcile_backfills`` against a real kube-apiserver
and the real broker creates the SparkApplication of a signal exactly like a ``spec.backfills[]``
entry, shows the chunk/row counts and times the job wrote, deletes it on stop-snapshot, records
the end (``signal-closed``) and never launches a closed request again, across operator restarts.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from operator_kube_fixtures import wait_for
from test_backfill_operator import install_spark_crd
from worker_fixtures import commerce_sim, running_task, wait_positioned, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcoperator import backfill as bf
from cdcoperator import backfillfeed
from cdcoperator.apply import KubeApi
from cdcoperator.model import ConnectorResource
from cdcworker.backfill.progress import ChunkDone, PlanRecord, RunStatus, SignalClosed, SignalRecord
from cdcworker.backfill.spec import Chunk
from cdcworker.signals.forward import BackfillSignalForwarder
from cdcworker.snapshot import SnapshotRequest
from kubetest import KubeControlPlane, kube_control_plane_fixture
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

NS = "bfsignals"
NOW = "2026-01-02T03:04:05Z"
DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))",
    "CREATE TABLE orders (id BIGINT NOT NULL, qty INT, PRIMARY KEY (id))",
    "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))",
]


def _exec(sid: str, tables: tuple[str, ...], conditions: dict[str, str] | None = None, ks: str = "commerce") -> SignalRecord:
    return SignalRecord(sid, "execute-snapshot", ks, tables, tuple(sorted((conditions or {}).items())))


def _stop(sid: str, tables: tuple[str, ...] = (), ks: str = "commerce") -> SignalRecord:
    return SignalRecord(sid, "stop-snapshot", ks, tables)


# --- the fold and the plan (pure) ---------------------------------------------------------------------


def test_fold_dedupes_by_signal_id_and_stops_only_earlier_requests() -> None:
    a, b, c = _exec("a", ("customer",)), _exec("b", ("orders",)), _exec("c", ("customer",))
    values = [a.value(), b.value(), a.value(),  # a replayed by a restarted task / read by a second task
              _stop("s1", ("customer",)).value(), c.value(), _stop("s1", ("customer", "orders")).value(),
              _exec("x", ("customer",), ks="other").value(),  # another keyspace's signal
              SignalClosed("b", "commerce", "Succeeded").value()]
    view = backfillfeed.fold(values, "commerce")
    assert [s.signal_id for s in view.signals] == ["a", "b", "c"]
    # s1 cancels a (customer, before it); not b (other table), not c (after it); the replayed s1 changes nothing.
    assert view.stopped == {"a": "s1"}
    assert set(view.closed) == {"b"}
    # A stop naming no table cancels every open request before it.
    view = backfillfeed.fold([a.value(), b.value(), _stop("s2").value(), c.value()], "commerce")
    assert view.stopped == {"a": "s2", "b": "s2"}


def test_signal_ids_runs_and_arguments() -> None:
    assert bf.signal_backfill_id("adhoc-1") == "sig-adhoc-1"
    uid = "4f2c1c9e-59a1-4a43-9d57-3c1c2fd0e0aa"
    long = bf.signal_backfill_id(uid)
    assert long.startswith("sig-4f2c1c9e-59a1-4a43") and len(long) <= 40 and long == bf.signal_backfill_id(uid)
    assert bf.signal_backfill_id("Ad Hoc!") != bf.signal_backfill_id("ad-hoc")  # not a DNS label: hashed
    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": "c", "namespace": NS, "uid": "0123456789abcdef"},
            "spec": {"source": {"vitess": {"vtgate": "v:1", "keyspace": "commerce"}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "c"},
                     "config": {"signal.data.collection": "commerce.dbz_signal"},
                     "snapshot": {"mode": "never", "backfill": {"engine": "sparkOperator"}},
                     "backfills": [{"id": "b1", "tables": ["orders"]}]}}
    cr = ConnectorResource.from_body(body)
    view = backfillfeed.fold([_exec("adhoc-1", ("customer", "orders"), {"customer": "id > 3"}).value(),
                              _exec("adhoc-2", ("orders",)).value(), _stop("st", ("orders",)).value(),
                              _exec("adhoc-3", ("orders",)).value(),
                              SignalClosed("adhoc-3", "commerce", "Succeeded").value()], "commerce")
    plan = bf.launches(cr, view, {})
    # Spec entries first; a closed run the status does not list any more is not shown (nor launched).
    assert [(x.req.id, x.active, x.cancelled_by) for x in plan] == [
        ("b1", True, None), ("sig-adhoc-1", False, "st"), ("sig-adhoc-2", False, "st")]
    launch = bf.launches(cr, backfillfeed.fold([_exec("adhoc-1", ("customer", "orders"), {"customer": "id > 3"})
                                                 .value()], "commerce"), {})[1]
    assert bf.job_arguments(cr, launch.req, launch.conditions) == [
        "--config", "/etc/shardcdc/worker.properties", "--run-id", "sig-adhoc-1-01234567",
        "--table", "customer", "--table", "orders", "--condition", "customer=id > 3", "--await-holds"]
    # With an engine the topic is read (signals, releases of cancelled runs); without one, only for runs.
    no_engine = {**body["spec"], "config": {}, "backfills": [], "snapshot": {"mode": "never"}}
    assert bf.feed_needed(cr, {}) and not bf.feed_needed(ConnectorResource.from_body({**body, "spec": no_engine}), {})
    # The workers forward signals when an engine is configured.
    from cdcoperator.objects import worker_properties
    from cdcoperator.planner import TaskPlan

    assert worker_properties(cr, TaskPlan(0, 0, 1, 0, (), True))["shardcdc.signal.snapshot.engine"] == "backfill"


# --- the worker hands signals over -------------------------------------------------------------------


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim(DDL, customers=6) as s:
        yield s


def _progress(broker: KafkaBroker, prefix: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in consume_all(broker.bootstrap, f"{prefix}.backfill-progress")]


def test_worker_forwards_table_and_kafka_signals_instead_of_copying(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={
        "signal.data.collection": "commerce.dbz_signal", "signal.enabled.channels": "source,kafka",
        "shardcdc.signal.snapshot.engine": "backfill"})
    prefix = cfg.topic_prefix
    data = json.dumps({"data-collections": ["commerce.customer", "other.t"], "type": "incremental",
                       "additional-conditions": [{"data-collection": "commerce.customer", "filter": "id > 3"}]})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (7, 'execute-snapshot', '{data}')",
                    "commerce")
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
        stop = {"id": "stop-1", "type": "stop-snapshot", "data": {"data-collections": ["commerce.customer"]}}
        producer.produce(f"{prefix}-signal", json.dumps(stop).encode(), prefix.encode())
        producer.flush(30)
        forwarder = run.task.extras.engine
        assert isinstance(forwarder, BackfillSignalForwarder)
        _wait_for(lambda: len(forwarder.written) == 2, what="both signals handed over")
        sim.execute("INSERT INTO customer (id, email) VALUES (100, 'live@x.io')", "commerce")
        _wait_for(lambda: run.task.sink.records_sent >= 2, what="the live insert and the signal row")
        result = run.stop()
    assert result.exit_code == 0
    want = [(orjson.dumps(["signal", "commerce", "7"]),
             orjson.dumps({"type": "signal", "signal": "execute-snapshot", "id": "7", "keyspace": "commerce",
                           "tables": ["customer"], "conditions": {"customer": "id > 3"}, "channel": "source"})),
            (orjson.dumps(["signal", "commerce", "stop-1"]),
             orjson.dumps({"type": "signal", "signal": "stop-snapshot", "id": "stop-1", "keyspace": "commerce",
                           "tables": ["customer"], "conditions": {}, "channel": "kafka"}))]
    got = _progress(kafka_broker, prefix)
    assert sorted(got) == sorted(want)  # two channels: their order is not defined
    # No VStream copy ran: the table topic holds the live insert only.
    payloads = [json.loads(r.value)["payload"] for r in consume_all(kafka_broker.bootstrap, f"{prefix}.commerce.customer")
                if r.value]
    assert [(p["op"], p["after"]["id"]) for p in payloads] == [("c", 100)]


def test_two_tasks_seeing_one_signal_write_the_same_record(kafka_broker: KafkaBroker) -> None:
    topic = f"sig{uuid.uuid4().hex[:8]}.backfill-progress"
    conf = {"bootstrap.servers": kafka_broker.bootstrap}
    req = SnapshotRequest("kafka-7", ("commerce.orders",), {"commerce.orders": "qty > 1"})
    for _ in range(2):
        f = BackfillSignalForwarder(conf, topic, "commerce", replication_factor=1)
        f.forward("kafka-7", "execute-snapshot", req, channel="kafka")
        f.close()
    records = consume_all(kafka_broker.bootstrap, topic)
    assert len(records) == 2 and records[0].key == records[1].key and records[0].value == records[1].value
    view = backfillfeed.fold([r.value for r in records if r.value], "commerce")
    assert [(s.signal_id, s.tables, s.conditions) for s in view.signals] == [("kafka-7", ("orders",), (("orders", "qty > 1"),))]


# --- the operator launches, tracks and cancels (real API server, real broker) -------------------------


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        p.ensure_namespace(NS)
        p.kubectl("apply", "-f", str(bf_crd()), check=True)
        install_spark_crd(p)
        p.wait_established("cdcconnectors.shardcdc.io", "sparkapplications.sparkoperator.k8s.io")
        yield p


def bf_crd() -> Any:
    from pathlib import Path

    return Path(__file__).resolve().parents[3] / "crds" / "shardcdc.io_cdcconnectors.yaml"


def _write(broker: KafkaBroker, topic: str, records: list[Any]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for r in records:
        p.produce(topic, r.value(), r.key())
    assert p.flush(30) == 0


def test_operator_launches_tracks_and_cancels_signal_runs(plane: KubeControlPlane, kafka_broker: KafkaBroker) -> None:
    prefix = f"op{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.backfill-progress"
    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": prefix, "namespace": NS},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "commerce"}},
                     "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix},
                     "config": {"signal.data.collection": "commerce.dbz_signal"},
                     "snapshot": {"mode": "never", "backfill": {"engine": "sparkOperator",
                                                                "spark": {"image": "shardcdc-spark:1"}}}}}
    out = plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
    assert out.returncode == 0, out.stderr
    cr = ConnectorResource.from_body(json.loads(out.stdout))
    uid8 = cr.uid[:8]
    # The real worker code writes the signals (what the worker test above checks end to end).
    worker = BackfillSignalForwarder({"bootstrap.servers": kafka_broker.bootstrap}, topic, "commerce", 1)
    worker.forward("adhoc-1", "execute-snapshot",
                   SnapshotRequest("adhoc-1", ("commerce.customer",), {"commerce.customer": "id > 3"}))
    worker.forward("adhoc-2", "execute-snapshot", SnapshotRequest("adhoc-2", ("commerce.orders",)))
    feeds = backfillfeed.ProgressFeeds(idle_seconds=60)
    status: dict[str, Any] = {}
    name1, name2 = bf.run_name(prefix, "sig-adhoc-1"), bf.run_name(prefix, "sig-adhoc-2")

    def get(kind: str, name: str) -> dict[str, Any] | None:
        r = plane.kubectl("get", kind, name, "-n", NS, "-o", "json")
        return json.loads(r.stdout) if r.returncode == 0 else None

    with plane.api_client() as client:
        kube = KubeApi(client)

        def step(f: backfillfeed.ProgressFeeds = feeds) -> dict[str, dict[str, Any]]:
            entries, _cond = asyncio.run(bf.reconcile_backfills(kube, cr, status, NOW, f))
            status["backfills"] = entries
            return {e["id"]: e for e in entries}

        try:
            entries = wait_for(lambda: (e := step()) and len(e) == 2 and e, 30, "both signal runs")
            app = get("sparkapplication", name1)
            assert app is not None and app["spec"]["arguments"] == [
                "--config", "/etc/shardcdc/worker.properties", "--run-id", f"sig-adhoc-1-{uid8}",
                "--table", "customer", "--condition", "customer=id > 3", "--await-holds"]
            assert app["metadata"]["labels"]["shardcdc.io/backfill"] == "sig-adhoc-1"
            # One run at a time per connector (the workers hold one run per shard): adhoc-2 waits.
            assert get("sparkapplication", name2) is None
            assert entries["sig-adhoc-2"]["message"].startswith("queued: starts when backfill sig-adhoc-1 has finished")
            assert entries["sig-adhoc-1"]["source"] == "signal" and entries["sig-adhoc-1"]["signalId"] == "adhoc-1"
            assert step() == entries  # idempotent: nothing created twice, same status
            # The job's records: counts, times and the error come from the topic.
            run1 = f"sig-adhoc-1-{uid8}"
            plan = PlanRecord(run1, "commerce", "-80", "customer", ("id",), 3, 300, "even")
            done = [ChunkDone(Chunk(run1, "commerce", "-80", "customer", i, ("id",), None, None), 100 + i, "l", "h",
                              0, 1767323045000 + i) for i in range(2)]
            _write(kafka_broker, topic, [RunStatus(run1, "running", 1767323040000), plan, *done])
            plane.kubectl("patch", "sparkapplication", name1, "--subresource=status", "-n", NS, "--type=merge", "-p",
                          json.dumps({"status": {"driverInfo": {}, "applicationState": {"state": "RUNNING"}}}), check=True)
            e1 = wait_for(lambda: (e := step()["sig-adhoc-1"]).get("chunksDone") == 2 and e, 30, "progress counts")
            assert (e1["phase"], e1["chunksTotal"], e1["rows"], e1["startTime"]) == (
                "Running", 3, 201, "2026-01-02T03:04:00Z")
            # stop-snapshot for customer: adhoc-1's application goes, its entry says Cancelled.
            worker.forward("stop-1", "stop-snapshot", None, ("commerce.customer",))
            wait_for(lambda: step()["sig-adhoc-1"]["phase"] == "Cancelled", 30, "adhoc-1 cancelled")
            assert get("sparkapplication", name1) is None and get("configmap", f"{name1}-config") is None
            assert step()["sig-adhoc-1"]["message"] == "stopped by signal stop-1"
            # adhoc-2 (orders) starts now, then fails in Spark: closed in the topic with its phase.
            wait_for(lambda: (step(), get("sparkapplication", name2))[1], 30, "adhoc-2 started after adhoc-1")
            plane.kubectl("patch", "sparkapplication", name2, "--subresource=status", "-n", NS, "--type=merge", "-p", json.dumps(
                {"status": {"driverInfo": {}, "applicationState": {"state": "FAILED", "errorMessage": "driver lost"},
                            "terminationTime": NOW}}), check=True)
            _write(kafka_broker, topic, [RunStatus(f"sig-adhoc-2-{uid8}", "failed", 1767323040000, 1767323046000,
                                                   "VTGate unavailable")])
            wait_for(lambda: step()["sig-adhoc-2"]["message"] == "VTGate unavailable", 30, "the job's error")
            assert status["backfills"][1]["phase"] == "Failed"

            def closed() -> dict[str, str]:
                return {json.loads(r.value)["id"]: json.loads(r.value)["phase"]
                        for r in consume_all(kafka_broker.bootstrap, topic)
                        if r.value and json.loads(r.value)["type"] == "signal-closed"}

            wait_for(lambda: (step(), closed() == {"adhoc-1": "Cancelled", "adhoc-2": "Failed"})[1], 30,
                     "signal-closed records")
            # Operator restart: a new tail, the status as stored. The same signal replayed by a
            # worker does not launch it again; nothing is recreated, the entries stay.
            worker.forward("adhoc-1", "execute-snapshot",
                           SnapshotRequest("adhoc-1", ("commerce.customer",), {"commerce.customer": "id > 3"}))
            kept = dict(status)
            fresh = backfillfeed.ProgressFeeds(idle_seconds=60)
            try:
                # Before the new tail has read the topic, the signal runs are kept from the status.
                first = asyncio.run(bf.reconcile_backfills(kube, cr, kept, NOW, fresh))[0]
                assert [e["id"] for e in first] == ["sig-adhoc-1", "sig-adhoc-2"]
                wait_for(lambda: fresh.view(cr).ready, 30, "the new tail read the topic")
                again = step(fresh)
                assert [(i, e["phase"]) for i, e in again.items()] == [("sig-adhoc-1", "Cancelled"),
                                                                        ("sig-adhoc-2", "Failed")]
                assert get("sparkapplication", name1) is None
            finally:
                fresh.close()
        finally:
            feeds.close()
            worker.close()
