"""The worker against the VTGate test server and a real broker: records, offsets, restart."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from worker_fixtures import CUSTOMER_DDL, running_task, wait_positioned, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcworker.offsets import OffsetPartition, OffsetValue, offset_record_key
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER_DDL])
        yield s


def test_streams_inserts_updates_deletes_as_debezium_records(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce")
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'alice@domain.com')", "commerce")
        sim.execute("UPDATE customer SET email = 'alice@new.com' WHERE id = 1", "commerce")
        sim.execute("DELETE FROM customer WHERE id = 1", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 4, what="4 records")
        result = run.stop()
    assert result.exit_code == 0
    records = consume_all(kafka_broker.bootstrap, topic)
    assert [r.key for r in records] == [b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"' + topic.encode() + b'.Key"},"payload":{"id":1}}'] * 4
    values = [json.loads(r.value) if r.value else None for r in records]
    assert [v["payload"]["op"] if v else None for v in values] == ["c", "u", "d", None]
    created = values[0]["payload"]
    assert created["before"] is None
    assert created["after"] == {"id": 1, "email": "alice@domain.com"}
    src = created["source"]
    assert (src["connector"], src["name"], src["keyspace"], src["table"], src["db"], src["snapshot"]) == (
        "vitess", cfg.topic_prefix, "commerce", "customer", "", "false"
    )
    shard = src["shard"]
    assert shard == "-80"  # hash(1) = 166b40b4... < 0x80
    vgtid = json.loads(src["vgtid"])
    assert [g["shard"] for g in vgtid] == ["-80", "80-"]
    # source.vgtid is the VGTID that ended each row's transaction (the DDL was GTID 1 on each shard).
    final = sim.positions("commerce")
    uuid80 = final["-80"].rsplit(":", 1)[0]
    assert final["-80"] == f"{uuid80}:1-4"
    assert [json.loads(v["payload"]["source"]["vgtid"])[0]["gtid"] for v in values[:3]] == [
        f"{uuid80}:1-2", f"{uuid80}:1-3", f"{uuid80}:1-4"
    ]
    assert vgtid[1]["gtid"] == final["80-"]
    assert values[1]["payload"]["before"] == {"id": 1, "email": "alice@domain.com"}
    assert values[1]["payload"]["after"] == {"id": 1, "email": "alice@new.com"}
    assert values[2]["payload"]["after"] is None


def test_offsets_are_written_in_connect_format_and_resume_without_loss(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce")
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        for i in range(1, 21):
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 20, what="20 records")
        run.stop()
    offsets = consume_all(kafka_broker.bootstrap, cfg.kafka.offsets_topic)
    key = offset_record_key(cfg.name, OffsetPartition(cfg.topic_prefix))
    latest = [r for r in offsets if r.key == key][-1]
    stored = OffsetValue.from_bytes(latest.value or b"")
    positions = {sg.shard: sg.gtid for sg in stored.vgtid}
    assert positions == sim.positions("commerce")

    # Changes while the worker is down are picked up from the stored position, none lost or repeated.
    for i in range(21, 31):
        sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
    with running_task(cfg) as run:
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 10, what="10 more records")
        run.stop()
    ids = [json.loads(r.value)["payload"]["after"]["id"] for r in consume_all(kafka_broker.bootstrap, topic)]
    assert sorted(ids) == list(range(1, 31))
    assert len(ids) == 30


def test_exactly_once_commits_records_and_offsets_in_one_transaction(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={"exactly.once.support": "required", "poll.interval.ms": "50"},
    )
    assert cfg.kafka.transactional
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        for i in range(1, 51):
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.durable is not None
                  and {sg.shard: sg.gtid for sg in run.task.sink.durable}
                  == {s: g for s, g in sim.positions("commerce").items()}, what="all committed")
        run.stop()
    committed = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in committed) == list(range(1, 51))
    offsets = consume_all(kafka_broker.bootstrap, cfg.kafka.offsets_topic, read_committed=True)
    stored = OffsetValue.from_bytes(offsets[-1].value or b"")
    assert {sg.shard: sg.gtid for sg in stored.vgtid} == sim.positions("commerce")
