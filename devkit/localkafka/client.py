"""Small synchronous helpers over confluent-kafka for tests, the demo and benchmarks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcworker.topicread import watermarks  # retried while a new topic's leadership settles


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create topics and wait until they exist; existing topics are left as they are."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(n, num_partitions=partitions, replication_factor=1, config=dict(config or {})) for n in names]
    for _, fut in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            fut.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    partition: int | None = None,
    config: Mapping[str, str | int] | None = None,
) -> int:
    """Produce (key, value) pairs with acks=all and wait until all are acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **(config or {})})
    errors: list[KafkaError] = []
    count = 0

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for key, value in records:
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                else:
                    producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve delivery callbacks, then retry
        count += 1
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"produce to {topic}: {remaining} undelivered, errors: {errors[:3]}")
    return count


def consume_all(
    bootstrap: str,
    topics: str | Sequence[str],
    read_committed: bool = False,
    timeout: float = 60.0,
) -> list[ConsumedRecord]:
    """Read every record of the topics from the beginning to the current end, in partition order.

    The end is the high watermark, or the last stable offset with ``read_committed`` (records of
    open or aborted transactions are not returned). Ends on partition EOF events, not on a timer.
    """
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"shardcdc-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    try:
        assignment: list[TopicPartition] = []
        for topic in topic_list:
            meta = consumer.list_topics(topic, timeout=timeout).topics[topic]
            if meta.error is not None:
                raise KafkaException(meta.error)
            assignment += [TopicPartition(topic, p, 0) for p in sorted(meta.partitions)]
        consumer.assign(assignment)
        pending = {(tp.topic, tp.partition) for tp in assignment}
        out: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consume_all({topic_list}): partitions without EOF after {timeout}s: {sorted(pending)}")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((msg.topic(), msg.partition()))
                    continue
                raise KafkaException(err)
            out.append(
                ConsumedRecord(
                    topic=msg.topic() or "",
                    partition=msg.partition() or 0,
                    offset=msg.offset() or 0,
                    key=msg.key(),
                    value=msg.value(),
                    headers=_headers(msg.headers()),
                    timestamp_ms=msg.timestamp()[1],
                )
            )
        out.sort(key=lambda r: (r.topic, r.partition, r.offset))
        return out
    finally:
        consumer.close()


def await_markers(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Wait until no transaction on ``topic`` lacks its end marker: the last stable offset equals
    the high watermark on every partition.

    ``commit_transaction`` and ``abort_transaction`` return once the coordinator has logged the
    decision; the markers reach the partitions afterwards (about 50 ms later on this broker), and
    until then a read_committed reader ends before the transaction's records.
    """
    ends = {
        level: Consumer({"bootstrap.servers": bootstrap, "group.id": f"shardcdc-markers-{uuid.uuid4()}",
                         "isolation.level": level})
        for level in ("read_committed", "read_uncommitted")
    }
    try:
        meta = ends["read_uncommitted"].list_topics(topic, timeout=timeout).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        deadline = time.monotonic() + timeout

        def end(level: str, tp: TopicPartition) -> int:
            # Each query gets its own time: cut to what is left of ``timeout``, a query slowed by a
            # loaded machine failed as librdkafka's _TIMED_OUT instead of the answer (CI, 2026-11-30).
            return watermarks(ends[level], tp, 10.0)[1]

        for p in sorted(meta.partitions):
            tp = TopicPartition(topic, p)
            while (stable := end("read_committed", tp)) != (high := end("read_uncommitted", tp)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}[{p}]: last stable offset {stable} < high watermark {high} "
                                       f"after {timeout}s (a transaction still open?)")
                time.sleep(0.02)  # the markers are written by the broker, not by anything we can wait on
    finally:
        for consumer in ends.values():
            consumer.close()


def _headers(
    raw: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | tuple[()] | None,
) -> tuple[tuple[str, bytes | None], ...]:
    """Message headers as (name, bytes) pairs in wire order."""
    if not raw:
        return ()
    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw)
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in pairs)
