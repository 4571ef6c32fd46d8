"""OffsetStore against a real broker: topic layout, latest value per key, tombstones, partitioning, transactions."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from cdcworker.offsets import (
    OffsetPartition,
    OffsetValue,
    ShardGtid,
    Vgtid,
    java_murmur2_partition,
    offset_record_key,
)
from cdcworker.offsets.migration import resolve_task_start
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker, await_markers, consume_all, create_topics, produce

NAME = "vitess-conn"


def _topic() -> str:
    return f"offsets-{uuid.uuid4().hex[:8]}"


def _value(gtid: str, shard: str = "-80") -> OffsetValue:
    return OffsetValue.build(Vgtid((ShardGtid("ks", shard, gtid),)))


def test_topic_created_compacted_with_connect_defaults(kafka_broker: KafkaBroker) -> None:
    topic = _topic()
    store = OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, topic)
    assert store.ensure_topic() == 25
    assert store.ensure_topic() == 25  # idempotent
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    assert store.load() == {}


def test_refuses_a_topic_that_is_not_compacted(kafka_broker: KafkaBroker) -> None:
    topic = _topic()
    create_topics(kafka_broker.bootstrap, [topic], partitions=1, config={"cleanup.policy": "delete"})
    store = OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, topic)
    try:
        store.ensure_topic()
    except RuntimeError as exc:
        assert "cleanup.policy='delete'" in str(exc)
    else:
        raise AssertionError("a delete-policy offsets topic was accepted")


def test_write_read_latest_per_key_and_tombstones(kafka_broker: KafkaBroker) -> None:
    topic = _topic()
    config = {"bootstrap.servers": kafka_broker.bootstrap}
    p0 = OffsetPartition.for_task("prefix", 0, 2, 1)
    p1 = OffsetPartition.for_task("prefix", 1, 2, 1)
    plain = OffsetPartition("prefix")
    with OffsetStore(config, topic) as store:
        store.ensure_topic()
        store.write(NAME, p0, _value("g1"))
        store.write(NAME, p1, _value("h1", "80-"))
        store.write(NAME, p0, _value("g2"))
        store.write(NAME, plain, _value("old"))
        store.write(NAME, plain, None)  # tombstone: offset deleted
        assert store.get(NAME, p0) == _value("g2")
    # A fresh store sees the same state from the topic alone.
    fresh = OffsetStore(config, topic)
    records = fresh.load()
    assert records == {
        offset_record_key(NAME, p0): _value("g2").to_bytes(),
        offset_record_key(NAME, p1): _value("h1", "80-").to_bytes(),
    }
    assert fresh.get(NAME, plain) is None
    start = resolve_task_start(
        fresh.lookup(NAME), server="prefix", keyspace="ks", shards=["-80"], task_id=0, task_count=2, gen=1
    )
    assert start.vgtid == Vgtid((ShardGtid("ks", "-80", "g2"),))
    # The raw topic: each record on the Java partitioner's partition, tombstone included.
    raw = consume_all(kafka_broker.bootstrap, topic)
    assert [
        (r.key, r.value)
        for r in sorted(raw, key=lambda r: r.offset)
        if r.key == offset_record_key(NAME, plain)
    ] == [
        (offset_record_key(NAME, plain), _value("old").to_bytes()),
        (offset_record_key(NAME, plain), None),
    ]
    for r in raw:
        assert r.key is not None and r.partition == java_murmur2_partition(r.key, 25)


def test_partition_matches_java_client_partitioner(kafka_broker: KafkaBroker) -> None:
    # librdkafka's murmur2_random is the Java default partitioner for keyed records: records produced
    # without an explicit partition land where our computation (and Kafka Connect) puts them.
    topic = _topic()
    create_topics(kafka_broker.bootstrap, [topic], partitions=25, config={"cleanup.policy": "compact"})
    keys = [offset_record_key(NAME, OffsetPartition.for_task(f"p{i}", i % 7, 7, i % 3)) for i in range(60)]
    produce(
        kafka_broker.bootstrap, topic, [(k, b"{}") for k in keys], config={"partitioner": "murmur2_random"}
    )
    got = {r.key: r.partition for r in consume_all(kafka_broker.bootstrap, topic) if r.key is not None}
    assert got == {k: java_murmur2_partition(k, 25) for k in keys}
    assert len(set(got.values())) > 10
    store = OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, topic)
    assert all(store.partition_for(k) == p for k, p in got.items())


def test_reads_offsets_written_by_debezium_and_skips_aborted_transactions(kafka_broker: KafkaBroker) -> None:
    topic = _topic()
    config = {"bootstrap.servers": kafka_broker.bootstrap}
    store = OffsetStore(config, topic)
    store.ensure_topic()
    # Bytes exactly as Kafka Connect + Debezium write them, on the partition Connect picks.
    key = b'["vitess-conn",{"server":"prefix"}]'
    value = b'{"vgtid":"[{\\"keyspace\\":\\"ks\\",\\"shard\\":\\"0\\",\\"gtid\\":\\"MySQL56/u:1-9\\",\\"table_p_ks\\":[]}]"}'
    produce(kafka_broker.bootstrap, topic, [(key, value)], partition=java_murmur2_partition(key, 25))
    # A committed and an aborted transactional write of the same key.
    producer = Producer({**config, "transactional.id": f"shardcdc-test-{uuid.uuid4()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    committed = store.produce(producer, NAME, OffsetPartition("prefix"), _value("MySQL56/u:1-10", "0"))
    producer.commit_transaction(30)
    producer.begin_transaction()
    store.produce(producer, NAME, OffsetPartition("prefix"), _value("MySQL56/u:1-99", "0"))
    producer.abort_transaction(30)
    await_markers(kafka_broker.bootstrap, topic)  # markers land after commit/abort return
    assert committed[0] == key
    assert store.load() == {key: _value("MySQL56/u:1-10", "0").to_bytes()}
    offset = store.get(NAME, OffsetPartition("prefix"))
    assert offset is not None and offset.vgtid == Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-10"),))
    # Debezium's own record parses and re-serializes byte for byte.
    assert OffsetValue.from_bytes(value).to_bytes() == value
