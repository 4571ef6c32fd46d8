"""The progress topic's reader: every record from the beginning to the end read at the start, in
order, whether the last offset holds a record or a transaction marker, and nothing written after."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from cdcworker.backfill.store import ProgressStore
from cdcworker.topicread import watermarks
from localkafka import KafkaBroker, await_markers


def _store(broker: KafkaBroker) -> ProgressStore:
    store = ProgressStore({"bootstrap.servers": broker.bootstrap}, f"progress-{uuid.uuid4().hex[:8]}")
    store.ensure_topic()
    return store


def test_records_reads_to_the_end_in_order(kafka_broker: KafkaBroker) -> None:
    store = _store(kafka_broker)
    assert list(store.records()) == []  # an empty topic
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    sent = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(300)] + [(b"gone", None)]
    for key, value in sent:
        producer.produce(store.topic, value, key)
    assert producer.flush(30) == 0
    assert list(store.records()) == sent
    producer.produce(store.topic, b"later", b"k")
    assert producer.flush(30) == 0
    assert list(store.records()) == [*sent, (b"k", b"later")]


def test_records_ends_when_the_last_offset_is_a_transaction_marker(kafka_broker: KafkaBroker) -> None:
    """A committed transaction ends with a control record, which no consumer sees: the read ends
    at the partition's end instead of waiting for an offset that never comes."""
    store = _store(kafka_broker)
    tx = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"t-{uuid.uuid4()}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(store.topic, b"v%d" % i, b"k")
    tx.commit_transaction(30)
    await_markers(kafka_broker.bootstrap, store.topic)  # the commit marker lands after commit returns
    assert list(store.records()) == [(b"k", b"v%d" % i) for i in range(5)]


class _SettlingConsumer:
    """Answers the offsets query with ``errors`` first (as a broker that is not yet the leader)."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, _tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 8


def test_offsets_of_a_partition_whose_leadership_settles_are_retried() -> None:
    """Right after ensure_topic on a loaded broker the partition may answer NOT_LEADER for a moment
    (seen in bench/backfill_cluster.py): the reader waits for the leader; other errors are raised."""
    tp = TopicPartition("t", 0)
    settling = _SettlingConsumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert watermarks(cast(Any, settling), tp, 10) == (3, 8) and settling.calls == 3
    denied = _SettlingConsumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        watermarks(cast(Any, denied), tp, 10)
    assert denied.calls == 1
