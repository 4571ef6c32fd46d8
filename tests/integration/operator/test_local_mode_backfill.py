"""Local mode runs the ``local`` backfill engine: ``shardcdc run``'s reconcile creates a Job for a
``spec.backfills[]`` entry and for an ``execute-snapshot`` signal, its job controller runs
``shardcdc backfill`` as a child process, and ``status.backfills[]`` follows the run from the
progress topic (chunks, rows, times) to ``Succeeded``. The whole chain is real: worker processes
read the signal row from the VTGate test server and hand it over through the real broker.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import wait_for

from cdcoperator.local.jobs import JOBS
from cdcoperator.local.run import summary_line
from cdcoperator.local.runner import LocalRunner, RunnerThread
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim
from vtgatesim.workload import TABLE_DDL

STEP = 90.0
NAME = "lbf"
ROWS = 120
SIGNAL_DDL = "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"], ddl=[TABLE_DDL.format(t="items"), SIGNAL_DDL])
        vals = ", ".join(f"({i}, 'n{i}', {i % 7}, 1.50)" for i in range(1, ROWS + 1))
        s.execute(f"insert into items (id, name, qty, price) values {vals}", "shop")
        yield s


def test_local_engine_runs_spec_and_signal_backfills(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    prefix = f"lb{uuid.uuid4().hex[:6]}"
    body: dict[str, Any] = {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": NAME},
        "spec": {"source": {"vitess": {"vtgate": sim.address, "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix},
                 "snapshot": {"mode": "never", "backfill": {"engine": "local", "spark": {"chunkSize": 25}}},
                 "backfills": [{"id": "b1", "tables": ["items"]}],
                 "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200",
                            "signal.data.collection": "shop.dbz_signal"}},
    }
    runner = LocalRunner(body, tmp_path / "state", resync=0.5, restart_backoff=2.0, control=False)

    def entries() -> dict[str, dict[str, Any]]:
        status = (runner.cluster.connector("default", NAME) or {}).get("status") or {}
        return {e["id"]: e for e in status.get("backfills") or ()}

    def succeeded(bid: str) -> dict[str, Any] | None:
        e = entries().get(bid)
        return e if e and e["phase"] == "Succeeded" and e.get("chunksDone") == e.get("chunksTotal") else None

    with RunnerThread(runner):
        b1 = wait_for(lambda: succeeded("b1"), STEP, "b1 Succeeded")
        uid8 = runner.cluster.connector("default", NAME)["metadata"]["uid"][:8]  # type: ignore[index]
        job = next(j for j in runner.cluster.children(JOBS) if j["metadata"]["name"] == "lbf-bf-b1")
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
            "shardcdc", "backfill", "--engine", "local", "--no-view", "--config", "/etc/shardcdc/worker.properties",
            "--run-id", f"b1-{uid8}", "--table", "items", "--chunk-size", "25", "--await-holds"]
        # An execute-snapshot signal row: a worker hands it over, the runner launches its Job.
        def streaming() -> bool:
            status = (runner.cluster.connector("default", NAME) or {}).get("status") or {}
            return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ())

        wait_for(streaming, STEP, "the workers streaming")
        data = json.dumps({"data-collections": ["shop.items"], "additional-condition": "id > 100"})
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (7, 'execute-snapshot', '{data}')",
                    "shop")
        sig = wait_for(lambda: succeeded("sig-7"), STEP, "the signal's run Succeeded")
        line = summary_line(runner.cluster.connector("default", NAME) or {})
    # b1: every row once, in chunks of about 25 per shard; the signal's run: the rows matching its condition.
    assert (b1["rows"], b1["engine"], b1["runName"]) == (ROWS, "local", "lbf-bf-b1")
    assert b1["chunksTotal"] >= 4 and "startTime" in b1 and "completionTime" in b1
    assert (sig["rows"], sig["source"], sig["signalId"]) == (ROWS - 100, "signal", "7")
    assert f"backfill b1  Succeeded  {b1['chunksDone']}/{b1['chunksTotal']} chunks  {ROWS} rows" in line
    reads = []
    for r in consume_all(kafka_broker.bootstrap, f"{prefix}.shop.items"):
        payload = json.loads(r.value)["payload"] if r.value else None
        if payload and payload["op"] == "r":
            assert payload["source"]["snapshot"] == "incremental"
            reads.append(payload["after"]["id"])
    assert sorted(reads) == sorted([*range(1, ROWS + 1), *range(101, ROWS + 1)])
    reasons = [e["reason"] for e in runner.events]
    assert reasons.count("BackfillStarted") == 2 and reasons.count("BackfillCompleted") == 2


def test_removing_a_running_backfill_releases_the_workers(tmp_path: Path, kafka_broker: KafkaBroker,
                                                          sim: VTGateSim) -> None:
    """Cancellation end to end: the entry leaves the spec while its (throttled) job is reading; the Job
    is deleted, its process stops between chunks and abandons its attempt, the operator writes the
    run's final marker once the process (its Pod object) is gone, and the workers, released, emit
    every change made during the hold: the topic equals the source, and later changes flow."""
    from cdcworker.backfill.progress import RunAbandoned, parse_handoff, parse_record

    prefix = f"lc{uuid.uuid4().hex[:6]}"
    body: dict[str, Any] = {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": NAME},
        "spec": {"source": {"vitess": {"vtgate": sim.address, "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix},
                 "snapshot": {"mode": "never", "backfill": {"engine": "local", "spark": {
                     "chunkSize": 10, "maxConcurrentChunksPerShard": 1, "rowsPerSecondPerShard": 10}}},
                 "backfills": [{"id": "b1", "tables": ["items"]}],
                 "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200"}},
    }
    runner = LocalRunner(body, tmp_path / "state", resync=0.5, restart_backoff=2.0, control=False)
    topic = f"{prefix}.shop.items"

    def b1() -> dict[str, Any]:
        status = (runner.cluster.connector("default", NAME) or {}).get("status") or {}
        return next((e for e in status.get("backfills") or () if e["id"] == "b1"), {})

    def markers() -> tuple[list[tuple[int | None, str]], set[str]]:
        abandons, handoffs = [], set()
        for r in consume_all(kafka_broker.bootstrap, f"{prefix}.backfill-progress"):
            rec = parse_record(r.value) if r.value else None
            if isinstance(rec, RunAbandoned):
                abandons.append((rec.epoch, rec.by))
            elif r.value and (h := parse_handoff(r.value)) is not None:
                handoffs.add(h.shard)
        return abandons, handoffs

    with RunnerThread(runner):
        wait_for(lambda: 2 <= (b1().get("chunksDone") or 0) < (b1().get("chunksTotal") or 0), STEP, "b1 half-way")
        # Held: items' changes now wait for the catch-up (every row changes, read or not yet).
        sim.execute("update items set qty = qty + 1000", "shop")
        runner.cluster.patch_connector("default", NAME, {"spec": {"backfills": []}})
        wait_for(lambda: (m := markers()) and sorted(m[0], key=str) == [(0, "job"), (None, "operator")]
                 and m[1] == {"-80", "80-"}, STEP, "the run abandoned and both shards released")
        assert not runner.cluster.children(JOBS) and b1() == {}
        sim.execute("insert into items (id, name, qty, price) values (999, 'late', 1, 1.00)", "shop")
        wait_for(lambda: any(r.value and json.loads(r.value)["payload"]["after"]["id"] == 999
                             for r in consume_all(kafka_broker.bootstrap, topic)), STEP, "a later change, live")
    from shardcdc_cli.materialise import compare, materialise

    diff = compare(materialise(consume_all(kafka_broker.bootstrap, topic)), sim.source_truth("shop", "items"), "id")
    assert diff.empty, diff.summary()
    assert [e["reason"] for e in runner.events].count("BackfillCancelled") == 1
