"""Signals (signal table and Kafka topic) and ad-hoc snapshots over a second VStream copy."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from worker_fixtures import running_task, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcworker.signals import Signal, SignalDispatcher
from cdcworker.snapshot import SnapshotRequest
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))",
    "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))",
]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("commerce", ["-80", "80-"], ddl=DDL)
        for i in range(1, 7):
            s.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
        yield s


def _payloads(broker: KafkaBroker, topic: str) -> list[dict]:
    return [json.loads(r.value)["payload"] for r in consume_all(broker.bootstrap, topic) if r.value]


def test_signal_table_runs_an_ad_hoc_snapshot_next_to_the_live_stream(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"signal.data.collection": "commerce.dbz_signal"})
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        _wait_for(lambda: run.task.processor is not None and run.task.processor.stats.events_seen > 0, what="stream start")
        data = json.dumps({"data-collections": ["commerce.customer"], "type": "blocking"})
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{data}')", "commerce")
        sim.execute("INSERT INTO customer (id, email) VALUES (100, 'live@x.io')", "commerce")
        _wait_for(lambda: run.task.extras.engine.completed == ["1"], what="snapshot done")
        _wait_for(lambda: run.task.sink.records_sent >= 8, what="8 records")  # 6 reads, the live insert, the signal row
        result = run.stop()
    assert result.exit_code == 0
    payloads = _payloads(kafka_broker, topic)
    reads = [p for p in payloads if p["op"] == "r"]
    live = [p for p in payloads if p["op"] == "c"]
    assert [p["after"]["id"] for p in live] == [100]
    assert live[0]["source"]["snapshot"] == "false"
    # The copy starts when the signal commits; the live insert may land before it reads the
    # table (then row 100 is read too).
    read_ids = sorted(p["after"]["id"] for p in reads)
    assert read_ids in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 100])
    emails = {100: "live@x.io"}
    assert all(p["after"] == {"id": p["after"]["id"], "email": emails.get(p["after"]["id"], f"u{p['after']['id']}@x.io")} for p in reads)
    # Exactly one read, the last one produced, says "last" (the topic may have several partitions).
    assert sorted(p["source"]["snapshot"] for p in reads) == ["last"] + ["true"] * (len(reads) - 1)
    assert all(p["before"] is None for p in reads)
    # The live stream never stopped: its record is in the topic, its offsets moved on.
    signal_rows = _payloads(kafka_broker, f"{cfg.topic_prefix}.commerce.dbz_signal")
    assert [p["after"]["type"] for p in signal_rows] == ["execute-snapshot"]


def test_kafka_signal_with_additional_condition(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={"signal.enabled.channels": "source,kafka", "table.include.list": r"commerce\.customer"},
    )
    prefix = cfg.topic_prefix
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    value = {
        "type": "execute-snapshot",
        "data": {
            "data-collections": ["commerce.customer"],
            "type": "incremental",
            "additional-conditions": [{"data-collection": "commerce.customer", "filter": "id > 3"}],
        },
    }
    producer.produce(f"{prefix}-signal", json.dumps({"type": "log", "data": {"message": "other"}}).encode(), b"someone-else")
    producer.produce(f"{prefix}-signal", json.dumps(value).encode(), prefix.encode())
    producer.flush(30)
    with running_task(cfg) as run:
        _wait_for(lambda: run.task.extras is not None and run.task.extras.engine is not None, what="extras")
        _wait_for(lambda: run.task.extras.engine.completed == ["kafka-1"], what="snapshot done")
        _wait_for(lambda: run.task.sink.records_sent >= 3, what="3 records")
        handled = [s.type for s in run.task.extras.dispatcher.handled]
        result = run.stop()
    assert result.exit_code == 0
    assert handled == ["execute-snapshot"]  # the other connector's record is not ours
    reads = _payloads(kafka_broker, f"{prefix}.commerce.customer")
    assert {p["op"] for p in reads} == {"r"}
    assert sorted(p["after"]["id"] for p in reads) == [4, 5, 6]
    assert sorted(p["source"]["snapshot"] for p in reads) == ["last", "true", "true"]


class _Engine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def start(self, request: SnapshotRequest) -> None:
        self.calls.append(("start", request))

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        self.calls.append(("cancel", data_collections))


def test_dispatcher_parses_debezium_signal_formats() -> None:
    engine = _Engine()
    d = SignalDispatcher(engine)
    d.dispatch(Signal("a", "execute-snapshot", {"data-collections": ["ks.t1", "ks.t2"], "additional-condition": "x = 1"}))
    d.dispatch(Signal("b", "stop-snapshot", {"data-collections": ["ks.t1"]}))
    d.dispatch(Signal("c", "execute-snapshot", {"data-collections": ["ks.t1"], "additional-condition": "1; drop table t"}))
    d.dispatch(Signal("d", "pause-snapshot", {}))
    kinds = [c[0] for c in engine.calls]
    assert kinds == ["start", "cancel"]
    req = engine.calls[0][1]
    assert isinstance(req, SnapshotRequest)
    assert req.tables("ks") == ["t1", "t2"] and req.condition("ks", "t2") == "x = 1"
    assert engine.calls[1][1] == ("ks.t1",)
    assert [s.id for s in d.handled] == ["a", "b"]


def test_ad_hoc_snapshot_resumes_after_a_restart(kafka_broker: KafkaBroker) -> None:
    """Stop the task in the middle of a snapshot: the offset holds its state, a new run resumes it.

    The snapshot stream is made to stall after some events (deterministic: no race with the copy),
    the task is stopped, the stored offset is checked, and a second run finishes the copy while a
    live update touches a copied row. Every row ends up in the topic with its current value, and
    exactly one read across both runs carries ``"last"``.
    """
    from cdcworker.snapshot.vstream_copy import DEBEZIUM_COLLECTIONS_KEY, STATE_KEY
    from vtgatesim.faults import FaultPlan

    rows = 120
    with VTGateSim(packet_size=64) as sim:  # small copy batches: many VGTIDs with table_p_ks
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=DDL)
        for lo in range(1, rows + 1, 40):
            values = ", ".join(f"({i}, 'u{i}@x.io')" for i in range(lo, lo + 40))
            sim.execute(f"INSERT INTO customer (id, email) VALUES {values}", "commerce")
        cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"signal.data.collection": "commerce.dbz_signal"})
        topic = f"{cfg.topic_prefix}.commerce.customer"
        with running_task(cfg) as run:
            _wait_for(lambda: run.task.processor is not None and run.task.processor.stats.events_seen > 0, what="stream start")
            stall = sim.inject(FaultPlan(stall_after_events=40))  # the next VStream: the snapshot's copy
            data = json.dumps({"data-collections": ["commerce.customer"]})
            sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{data}')", "commerce")
            _wait_for(stall.stalled.is_set, what="the copy to stall")
            engine = run.task.extras.engine
            _wait_for(lambda: engine._run is not None and engine._run.queue.empty() and engine.records > 0,
                      what="the engine to drain the copied batches")
            first_run_records = engine.records
            assert engine.completed == []
            assert run.stop().exit_code == 0
        offsets = [json.loads(r.value) for r in consume_all(kafka_broker.bootstrap, cfg.kafka.offsets_topic) if r.value]
        state = json.loads(offsets[-1][STATE_KEY])["requests"]
        assert [(r["id"], r["data_collections"]) for r in state] == [("1", ["commerce.customer"])]
        assert '"table_p_ks":[{' in state[0]["vgtid"]  # the copy position, with the last copied key
        assert json.loads(offsets[-1][DEBEZIUM_COLLECTIONS_KEY]) == [{
            "incremental_snapshot_collections_id": "commerce.customer",
            "incremental_snapshot_collections_additional_condition": None,
            "incremental_snapshot_collections_surrogate_key": None,
        }]
        assert 0 < first_run_records < rows

        with running_task(cfg) as run:
            _wait_for(lambda: run.task.extras is not None and run.task.extras.engine is not None, what="extras")
            sim.execute("UPDATE customer SET email = 'changed@x.io' WHERE id = 7", "commerce")
            _wait_for(lambda: run.task.extras.engine.completed == ["1"], what="the resumed snapshot to complete")
            _wait_for(lambda: run.task.sink.pending == 0 and run.task.processor.stats.transactions > 0, what="acks")
            second_run_records = run.task.extras.engine.records
            assert run.stop().exit_code == 0
        # Resumed, not restarted: the second run re-reads at most the batch of the held row.
        assert rows - first_run_records - 1 <= second_run_records < rows - first_run_records + 10
        final = [json.loads(r.value) for r in consume_all(kafka_broker.bootstrap, cfg.kafka.offsets_topic) if r.value]
        assert STATE_KEY not in final[-1] and DEBEZIUM_COLLECTIONS_KEY not in final[-1]

    payloads = _payloads(kafka_broker, topic)
    materialised: dict[int, dict] = {}
    for p in payloads:  # one partition per key keeps each key's order
        if p["after"] is not None:
            materialised[p["after"]["id"]] = p["after"]
    expected = {i: {"id": i, "email": f"u{i}@x.io"} for i in range(1, rows + 1)}
    expected[7] = {"id": 7, "email": "changed@x.io"}
    assert materialised == expected
    reads = [p for p in payloads if p["op"] == "r"]
    assert {p["after"]["id"] for p in reads} >= set(range(1, rows + 1)) - {7}
    assert [p["source"]["snapshot"] for p in reads].count("last") == 1
    assert all(p["source"]["snapshot"] in ("true", "last") for p in reads)
