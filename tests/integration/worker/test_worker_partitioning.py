"""Data records land on the partition Kafka's Java producer would choose (real broker).

The worker lets librdkafka partition in C (``partitioner=murmur2_random``); this proves, byte for
byte on Debezium-shaped keys, that the result equals ``offsets.javacompat``'s Java murmur2, and
that records without a key are still delivered (to some partition, as the Java client may).
"""

from __future__ import annotations

import uuid

from worker_fixtures import worker_config

from cdcworker.config.clients import encoder_config, producer_config
from cdcworker.events import SourceContext, TablePlan
from cdcworker.offsets import Vgtid
from cdcworker.offsets.javacompat import java_murmur2_partition
from cdcworker.sink import KafkaSink, TransactionalSink
from localkafka import KafkaBroker, consume_all, create_topics
from vitessapi import binlogdata_pb2, query_pb2

PARTITIONS = 12


def _plan(config: object) -> TablePlan:
    fields = [
        query_pb2.Field(name="id", type=query_pb2.INT64, column_type="bigint", flags=1 | 2),
        query_pb2.Field(name="name", type=query_pb2.VARCHAR, column_type="varchar(32)", flags=1 | 2),
        query_pb2.Field(name="qty", type=query_pb2.INT32, column_type="int"),
    ]
    fe = binlogdata_pb2.FieldEvent(table_name="ks.t", fields=fields, keyspace="ks", shard="-80")
    return TablePlan.compile(fe, encoder_config(config))  # type: ignore[arg-type]


def _rows(n: int) -> list[binlogdata_pb2.RowChange]:
    out = []
    for i in range(n):
        vals = [str(i * 7919).encode(), f"näme-{i}-\u00e9\U0001f600".encode(), str(i).encode()]
        row = query_pb2.Row(lengths=[len(v) for v in vals], values=b"".join(vals))
        # Every third row is a delete: a keyed record plus a keyed tombstone (null value).
        out.append(binlogdata_pb2.RowChange(before=row) if i % 3 == 0 else binlogdata_pb2.RowChange(after=row))
    return out


def test_keyed_records_use_java_murmur2_and_null_keys_are_delivered(kafka_broker: KafkaBroker) -> None:
    prefix = f"part{uuid.uuid4().hex[:8]}"
    cfg = worker_config(kafka_broker, "127.0.0.1:1", "ks", prefix=prefix)
    plan = _plan(cfg)
    create_topics(kafka_broker.bootstrap, [plan.topic], partitions=PARTITIONS)
    ctx = SourceContext("ks", "-80", 1714979289, '[{"keyspace":"ks","shard":"-80","gtid":"x"}]')
    sink = KafkaSink(producer_config(cfg))
    sent: list[tuple[bytes | None, bytes | None]] = []
    for rc in _rows(90):
        for rec in plan.encode_change(rc, ctx, 1):
            sink.send(rec.topic, rec.key, rec.value, rec.headers)
            sent.append((rec.key, rec.value))
    for i in range(10):  # keyless tables produce null keys
        sink.send(plan.topic, None, f"nokey-{i}".encode(), None)
        sent.append((None, f"nokey-{i}".encode()))
    position = Vgtid.of("ks", {"-80": "MySQL56/x:1-5"})
    sink.commit_point(position)
    assert sink.flush(30) is position

    got = consume_all(kafka_broker.bootstrap, plan.topic)
    assert sorted(((r.key or b""), (r.value or b"")) for r in got) == sorted(((k or b""), (v or b"")) for k, v in sent)
    keyed = [r for r in got if r.key is not None]
    assert len(keyed) == 120  # 60 creates, 30 deletes, 30 tombstones
    assert all(r.partition == java_murmur2_partition(r.key, PARTITIONS) for r in keyed)
    assert len({r.partition for r in keyed}) > 6  # the keys really spread over the partitions
    assert all(0 <= r.partition < PARTITIONS for r in got if r.key is None)
    # Per-key order survives: a delete's tombstone follows its delete on the same partition.
    by_key: dict[bytes, list[bytes | None]] = {}
    for r in keyed:
        by_key.setdefault(r.key, []).append(r.value)  # type: ignore[arg-type]
    assert all(vals[-1] is None and vals[0] is not None for vals in by_key.values() if len(vals) == 2)


def test_exactly_once_sink_needs_no_delivery_reports(kafka_broker: KafkaBroker) -> None:
    # The transactional sink produces without per-record callbacks; the commit makes it durable.
    prefix = f"eos{uuid.uuid4().hex[:8]}"
    cfg = worker_config(kafka_broker, "127.0.0.1:1", "ks", prefix=prefix)
    topic = f"{prefix}.data"
    create_topics(kafka_broker.bootstrap, [topic], partitions=3)
    written: list[object] = []
    conf = {**producer_config(cfg), "transactional.id": f"tx-{prefix}"}
    sink = TransactionalSink(conf, lambda producer, pos: written.append(pos), max_batch_records=10**9, max_batch_seconds=3600)
    for i in range(50):
        sink.send(topic, str(i).encode(), b"v", None)
    assert sink._dr is None and sink.pending == 50
    position = Vgtid.of("ks", {"-80": "MySQL56/x:1-9"})
    sink.commit_point(position)
    assert sink.durable is not position  # batched: not committed yet
    assert sink.flush(30) is position and written == [position] and sink.pending == 0
    got = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert sorted(int(r.key) for r in got if r.key) == list(range(50))
    assert all(r.partition == java_murmur2_partition(r.key, 3) for r in got if r.key)
