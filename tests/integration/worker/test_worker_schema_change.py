"""Schema changes wired into the worker: DDL records on ``<prefix>`` (one per shard, partition 0)
and a FIELD change after ``ALTER TABLE ... ADD COLUMN`` reaching the value schema without a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from worker_fixtures import (
    caught_up,
    commerce_sim,
    running_task,
    wait_for,
    wait_positioned,
    worker_config,
)

from cdcworker.records.schema_change import schema_change_key_schema, schema_change_value_schema
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

ALTER = "ALTER TABLE customer ADD COLUMN age INT"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim() as s:
        yield s


def test_ddl_records_and_new_columns_without_restart(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"include.schema.changes": "true"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x.io')", "commerce")
        sim.execute(ALTER, "commerce")
        sim.execute("INSERT INTO customer (id, email, age) VALUES (2, 'b@x.io', 42)", "commerce")
        sim.execute("UPDATE customer SET age = 7 WHERE id = 1", "commerce")
        wait_for(lambda: caught_up(sim, run), what="all delivered")
        first_run = run.task.run_id
        assert run.stop().exit_code == 0
    assert first_run

    ddl = consume_all(kafka_broker.bootstrap, cfg.topic_prefix)
    assert sorted(json.loads(r.value or b"")["payload"]["source"]["shard"] for r in ddl) == ["-80", "80-"]
    assert {r.partition for r in ddl} == {0}
    for r in ddl:
        assert r.key == (
            b'{"schema":' + json.dumps(schema_change_key_schema(), separators=(",", ":")).encode()
            + b',"payload":{"databaseName":"commerce"}}'
        )
        doc = json.loads(r.value or b"")
        assert doc["schema"] == schema_change_value_schema()
        p = doc["payload"]
        assert (p["databaseName"], p["schemaName"], p["ddl"], p["tableChanges"]) == ("commerce", None, ALTER, [])
        src = p["source"]
        assert (src["connector"], src["name"], src["keyspace"], src["table"], src["db"]) == (
            "vitess", cfg.topic_prefix, "commerce", "customer", ""
        )
        # source.vgtid: the position the DDL moved to (both shards), its own timestamp
        vgtid = json.loads(src["vgtid"])
        gtid = next(g["gtid"] for g in vgtid if g["shard"] == src["shard"])
        assert gtid.endswith(":1-3" if src["shard"] == "-80" else ":1-2")  # CREATE, [INSERT,] ALTER
        assert src["ts_ms"] % 1000 == 0

    data = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    docs = [json.loads(r.value or b"") for r in data]
    # the __debezium.context.* headers of the data records, as Debezium writes them
    assert [r.headers for r in ddl] == [data[0].headers] * 2
    assert [k for k, _ in data[0].headers] == [
        f"__debezium.context.{k}" for k in ("connectorLogicalName", "taskId", "connectorName", "runId")
    ]
    assert [(d["payload"]["op"], d["payload"]["after"]) for d in docs] == [
        ("c", {"id": 1, "email": "a@x.io"}),
        ("c", {"id": 2, "email": "b@x.io", "age": 42}),
        ("u", {"id": 1, "email": "a@x.io", "age": 7}),
    ]

    def columns(doc: dict[str, object]) -> list[str]:
        after = next(f for f in doc["schema"]["fields"] if f["field"] == "after")  # type: ignore[index]
        return [f["field"] for f in after["fields"]]

    assert columns(docs[0]) == ["id", "email"]
    assert columns(docs[1]) == columns(docs[2]) == ["id", "email", "age"]
    age = next(f for f in next(f for f in docs[1]["schema"]["fields"] if f["field"] == "after")["fields"] if f["field"] == "age")
    assert age == {"type": "int32", "optional": True, "field": "age"}


def test_no_schema_change_records_by_default(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce")
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute(ALTER, "commerce")
        sim.execute("INSERT INTO customer (id, email, age) VALUES (2, 'b@x.io', 42)", "commerce")
        wait_for(lambda: caught_up(sim, run), what="all delivered")
        run.stop()
    from confluent_kafka.admin import AdminClient

    assert cfg.topic_prefix not in AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10).topics
    data = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    assert [json.loads(r.value or b"")["payload"]["after"] for r in data] == [{"id": 2, "email": "b@x.io", "age": 42}]
