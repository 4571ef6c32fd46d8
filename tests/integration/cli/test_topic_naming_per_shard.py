"""``topic.naming.strategy=io.debezium.schema.DefaultTopicNamingStrategy``: one topic per shard and table.

Debezium 3.5.0.Final names a data topic by ``TableId.databaseParts()``, and the Vitess TableId's
catalog is the shard: ``<prefix>.<shard>.<table>`` (byte-for-byte against Debezium in
``tests/test_conformance_debezium.py``, pair ``topicsdef``). Here: every path that names a topic
(the stream from the start, an ad-hoc snapshot) writes each row to its shard's topic, the
topics are created with ``topic.creation.*`` per shard, and ``shardcdc verify --per-shard``
materialises the table from the shards' topics.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from worker_fixtures import commerce_sim, running_task, worker_config
from worker_fixtures import wait_for as _wait_for

from localkafka import KafkaBroker, consume_all
from shardcdc_cli import cli

DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))",
    "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))",
]
SHARDS = ["-80", "80-"]


def test_rows_go_to_their_shards_topic_on_every_path(kafka_broker: KafkaBroker, capsys: pytest.CaptureFixture[str]) -> None:
    with commerce_sim(DDL, customers=8) as sim:
        cfg = worker_config(kafka_broker, sim.address, "commerce", extra={
            "topic.naming.strategy": "io.debezium.schema.DefaultTopicNamingStrategy",
            "snapshot.mode": "initial",
            "signal.data.collection": "commerce.dbz_signal",
            "topic.creation.default.partitions": "2",
            "topic.creation.default.replication.factor": "1",
        })
        prefix = cfg.topic_prefix
        with running_task(cfg) as run:
            _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 8, what="the seeded rows")
            sim.execute("INSERT INTO customer (id, email) VALUES (100, 'live@x.io'), (101, 'live2@x.io')", "commerce")
            sim.execute("UPDATE customer SET email = 'changed@x.io' WHERE id = 3", "commerce")
            sim.execute("DELETE FROM customer WHERE id = 4", "commerce")
            # the changes are streamed before the signal: a change the worker reads after the signal
            # (another shard's stream may lag) supersedes the snapshot's read of its row, and the
            # count below is of a snapshot that overlaps no live change
            _wait_for(lambda: run.task.sink.records_sent >= 8 + 2 + 1 + 2, what="the live changes (c, c, u, d, tombstone)")
            data = json.dumps({"data-collections": ["commerce.customer"], "type": "incremental"})
            sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{data}')", "commerce")
            _wait_for(lambda: run.task.extras.engine.completed == ["1"], what="the ad-hoc snapshot")
            result = run.stop()
        assert result.exit_code == 0

        topics = kafka_broker_topics(kafka_broker)
        ours = {t for t in topics if t.startswith(f"{prefix}.")}
        # customer rows on both shards; the one signal row on one shard: only that shard's topic exists
        signal_topics = {t for t in ours if t.endswith(".dbz_signal")}
        assert ours - signal_topics == {f"{prefix}.{s}.customer" for s in SHARDS}
        assert len(signal_topics) == 1 and signal_topics <= {f"{prefix}.{s}.dbz_signal" for s in SHARDS}
        assert {len(topics[t].partitions) for t in ours} == {2}  # topic.creation.default.partitions, per shard
        placed: dict[str, list[str]] = {}
        for shard in SHARDS:
            for rec in consume_all(kafka_broker.bootstrap, f"{prefix}.{shard}.customer"):
                if rec.value is None:
                    continue
                payload = json.loads(rec.value)["payload"]
                assert payload["source"]["shard"] == shard, rec.topic
                placed.setdefault(payload["op"], []).append(shard)
        # the stream (c, u, d) and the ad-hoc snapshot (r) wrote to both shards' topics
        assert set(placed) == {"r", "c", "u", "d"} and set(placed["r"]) == set(placed["c"]) == set(SHARDS)
        assert len(placed["c"]) == 8 + 2 and len(placed["r"]) == 9  # the table's 9 rows at the signal

        base = ["verify", "--vtgate", sim.address, "--keyspace", "commerce", "--table", "customer",
                "--bootstrap-servers", kafka_broker.bootstrap, "--prefix", prefix]
        assert cli.main([*base, "--per-shard"]) == 0
        out = capsys.readouterr().out
        assert f"{prefix}.-80.customer, {prefix}.80-.customer" in out and "the 9 rows of commerce.customer" in out
        # the schema-strategy topic does not exist: verify says so instead of comparing nothing
        assert cli.main(base) == 2
        assert "not found" in capsys.readouterr().out


def kafka_broker_topics(broker: KafkaBroker) -> dict[str, Any]:
    return AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics


def test_backfill_chunks_name_their_shards_topic() -> None:
    """A backfill chunk reads one shard: its records go to that shard's topic (pure: the plan's topic)."""
    from cdcworker.backfill.job import _field_event
    from cdcworker.backfill.spec import Chunk
    from cdcworker.events import EncoderConfig, TablePlan, TopicNaming
    from vitessapi import query_pb2

    naming = TopicNaming.from_strategy("srv", "io.debezium.schema.DefaultTopicNamingStrategy")
    fields = [query_pb2.Field(name="id", type=query_pb2.INT64, flags=0x4002),  # NOT NULL | PRI_KEY
              query_pb2.Field(name="email", type=query_pb2.VARCHAR)]
    for shard in SHARDS:
        chunk = Chunk("run", "commerce", shard, "customer", 0, ("id",), None, None)
        plan = TablePlan.compile(_field_event(chunk, fields), EncoderConfig("srv", naming))
        assert plan.topic == f"srv.{shard}.customer"
