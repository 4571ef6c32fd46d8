"""Offsets in a compacted Kafka topic, laid out exactly as Kafka Connect's ``KafkaOffsetBackingStore``.

* Topic: created when missing with ``cleanup.policy=compact`` and Connect's default of 25
  partitions (``offset.storage.partitions``); an existing topic must be compact-only, as Connect
  checks. Replication defaults to -1 (the broker's ``default.replication.factor``, which Connect
  also accepts); Connect's own default is 3.
* Records: key and value bytes from ``keys``/``value``; a null value (tombstone) deletes the
  offset. The partition is the Java producer's ``murmur2(key) % partitions`` (computed here, not
  left to librdkafka's configuration), so Connect and we put a key on the same partition and the
  latest record per key is well defined.
* Reading: every partition from the beginning to its end (read_committed, so offsets written in
  aborted transactions are ignored); the latest value per key wins.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cdcworker import kafkaclients
from cdcworker.jsontypes import JsonObject
from cdcworker.kafkaerrors import (
    KafkaAccessError,
    OffsetStoreError,
    TopicSizing,
    broker_count,
    creation_refusal,
    first_refusal,
)
from cdcworker.offsets.javacompat import java_murmur2_partition
from cdcworker.offsets.keys import OffsetPartition, offset_record_key
from cdcworker.offsets.migration import OffsetLookup, lookup_in
from cdcworker.offsets.value import OffsetValue
from cdcworker.topicread import (
    NOT_YET_VISIBLE,
    TopicEndTimeout,
    TopicNotVisible,
    TopicReader,
    TopicReadError,
    visible_topic,
)

__all__ = ["CONNECT_DEFAULT_PARTITIONS", "KafkaAccessError", "OffsetStore", "OffsetStoreError"]

CONNECT_DEFAULT_PARTITIONS = 25


def offsets_sizing(partitions: int, replication_factor: int) -> TopicSizing:
    """The offsets topic is sized by ``offset.storage.*`` (also the backfill progress topic's factor)."""
    return TopicSizing("offset.storage.partitions", partitions, "offset.storage.replication.factor", replication_factor)


class OffsetStore:
    """Read and write one offsets topic. Not thread-safe except ``write`` delivery callbacks.

    ``client_config`` holds librdkafka settings shared by the admin client, the reader and the
    built-in producer (``bootstrap.servers``, security settings ...).
    """

    def __init__(
        self,
        client_config: Mapping[str, object],
        topic: str,
        *,
        partitions: int = CONNECT_DEFAULT_PARTITIONS,
        replication_factor: int = -1,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self._config = dict(client_config)
        self._partitions_wanted = partitions
        self._replication_factor = replication_factor
        self._timeout = timeout
        self._num_partitions: int | None = None
        self._records: dict[bytes, bytes] = {}
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    # -- topic ---------------------------------------------------------------------------------

    def ensure_topic(self) -> int:
        """Create the topic if missing; check it is compact-only; return its partition count."""
        errors: list[KafkaError] = []
        admin = kafkaclients.admin(self._config, "offsets admin client", errors)
        new = NewTopic(
            self.topic,
            num_partitions=self._partitions_wanted,
            replication_factor=self._replication_factor,
            config={"cleanup.policy": "compact"},
        )
        future = admin.create_topics([new], operation_timeout=self._timeout)[self.topic]
        try:
            self._first_answer(admin, future, errors)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                refusal = creation_refusal(err, self.topic, offsets_sizing(self._partitions_wanted, self._replication_factor),
                                           broker_count(admin))
                raise refusal or OffsetStoreError(f"cannot create offsets topic {self.topic!r}: {exc}") from exc
        entries = self._describe_when_visible(admin)
        policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else None
        if policy != "compact":
            raise OffsetStoreError(
                f"offsets topic {self.topic!r} has cleanup.policy={policy!r}; it must be 'compact' only, "
                "or old offsets are deleted and connectors restart from their configured start"
            )
        # A topic created a moment ago (by this task or the one beside it) may still be unknown
        # or leaderless where it is asked: a worker that gave up there would wait out its restart
        # back-off with its stream down. (Elsewhere a missing topic is an answer: num_partitions.)
        try:
            meta = visible_topic(admin, self.topic, self._timeout)
        except TopicNotVisible as exc:
            raise OffsetStoreError(f"offsets topic {self.topic!r} not found: {exc.error or 'no partitions'}") from None
        self._num_partitions = len(meta.partitions)
        return self._num_partitions

    def _first_answer(self, admin: AdminClient, future: Any, errors: list[KafkaError]) -> None:  # Any: a confluent-kafka admin future (untyped in its stubs)
        """Wait for the cluster's first answer; stop at once if it refuses the credentials or TLS
        settings, and name the last connection error if it does not answer in time."""
        import concurrent.futures

        deadline = time.monotonic() + self._timeout
        while True:
            try:
                future.result(0.2)
                return
            except concurrent.futures.TimeoutError:
                admin.poll(0)  # serves error_cb
            refused = first_refusal(errors, "offsets admin client")
            if refused is not None:
                raise refused
            if time.monotonic() > deadline:
                last = f": {errors[-1].str()}" if errors else ""
                raise OffsetStoreError(f"Kafka ({self._config.get('bootstrap.servers')}) did not answer within "
                                       f"{self._timeout:.0f} s{last}")

    def _describe_when_visible(self, admin: AdminClient) -> JsonObject:
        """Topic configs; a topic created a moment ago may not be in every broker's metadata yet."""
        import time

        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        deadline = time.monotonic() + self._timeout
        delay = 0.05
        while True:
            try:
                result: JsonObject = admin.describe_configs([resource], request_timeout=self._timeout)[
                    resource
                ].result(self._timeout)
                return result
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                    raise OffsetStoreError(f"cannot describe offsets topic {self.topic!r}: {exc}") from exc
            time.sleep(delay)  # metadata propagation: retry with backoff until the deadline
            delay = min(delay * 2, 1.0)

    def num_partitions(self, admin: AdminClient | None = None) -> int:
        """The topic's partition count (cached after the first lookup)."""
        if self._num_partitions is None:
            client = admin or kafkaclients.admin(self._config, "offsets admin client")
            meta = client.list_topics(self.topic, timeout=self._timeout).topics.get(self.topic)
            if meta is None or meta.error is not None:
                raise OffsetStoreError(
                    f"offsets topic {self.topic!r} not found: {meta.error if meta else ''}"
                )
            self._num_partitions = len(meta.partitions)
        return self._num_partitions

    def partition_for(self, key: bytes) -> int:
        return java_murmur2_partition(key, self.num_partitions())

    # -- reading -------------------------------------------------------------------------------

    def load(self) -> dict[bytes, bytes]:
        """Read the whole topic; keep and return the latest value per key (tombstones delete).

        Read committed, to the last stable offset: a transaction committed in the last ~50 ms,
        whose markers the broker has not yet written, is not seen (Kafka Connect reads to the high
        watermark and waits for them). Every reader here starts after the writer stopped (a new
        process or pod), which takes far longer; tests that commit and read at once call
        ``localkafka.await_markers`` first.
        """
        errors: list[KafkaError] = []
        consumer = kafkaclients.consumer(
            {
                **self._config,
                "group.id": f"shardcdc-offsets-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            },
            "offsets consumer", errors,
        )
        records: dict[bytes, bytes] = {}

        def check() -> None:
            refused = first_refusal(errors, "offsets consumer")
            if refused is not None:
                raise refused

        try:
            reader = TopicReader(consumer, self.topic, skip=NOT_YET_VISIBLE)
            reader.assign(range(self.num_partitions()), ends_within=self._timeout, check=check)
            for msg in reader.read_to_end(self._timeout, check):
                key = msg.key()
                if key is None:
                    continue  # Connect ignores (and logs) records without a key
                value = msg.value()
                if value is None:
                    records.pop(key, None)
                else:
                    records[key] = value
        except TopicEndTimeout as exc:
            raise OffsetStoreError(f"reading offsets topic {self.topic!r}: partitions {exc.pending} did not reach "
                                   f"their end within {self._timeout}s") from None
        except TopicReadError as exc:
            raise OffsetStoreError(f"reading offsets topic {self.topic!r}: {exc.error}") from None
        finally:
            consumer.close()
        with self._lock:
            self._records = records
        return dict(records)

    @property
    def records(self) -> Mapping[bytes, bytes]:
        """Key bytes -> value bytes as last loaded, plus acknowledged writes (live view; do not mutate)."""
        return self._records

    def get(self, connector_name: str, partition: OffsetPartition) -> OffsetValue | None:
        data = self._records.get(offset_record_key(connector_name, partition))
        return None if data is None else OffsetValue.from_bytes(data)

    def lookup(self, connector_name: str) -> OffsetLookup:
        """An ``OffsetLookup`` (see ``migration``) over this store's records for one connector."""
        return lookup_in(self._records, connector_name)

    # -- writing -------------------------------------------------------------------------------

    @property
    def timeout(self) -> float:
        """Seconds a read to the topic's end or a synchronous write may take."""
        return self._timeout

    def own_producer(self) -> Producer:
        """The store's idempotent producer (``write`` uses it; queued writes share its order)."""
        if self._producer is None:
            self._producer = kafkaclients.producer(
                {**self._config, "acks": "all", "enable.idempotence": True, "linger.ms": 0}, "offsets producer")
        return self._producer

    def produce(
        self,
        producer: Producer,
        connector_name: str,
        partition: OffsetPartition,
        value: OffsetValue | None,
        on_delivery: object = None,
    ) -> tuple[bytes, bytes | None]:
        """Queue one offset record on ``producer`` (e.g. inside the caller's transaction).

        The local view is not updated: call ``remember`` once the record is durable (committed).
        Returns the (key, value) bytes written.
        """
        key = offset_record_key(connector_name, partition)
        data = None if value is None else value.to_bytes()
        kwargs: dict[str, Any] = {}  # Any: Producer.produce's keyword arguments, each of its own type
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        producer.produce(self.topic, key=key, value=data, partition=self.partition_for(key), **kwargs)
        return key, data

    def write(
        self,
        connector_name: str,
        partition: OffsetPartition,
        value: OffsetValue | None,
        timeout: float | None = None,
    ) -> None:
        """Write one offset (None = tombstone) and wait until Kafka acknowledged it (at-least-once)."""
        producer = self.own_producer()
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        key, data = self.produce(producer, connector_name, partition, value, on_delivery)
        remaining = producer.flush(self._timeout if timeout is None else timeout)
        if remaining:
            raise OffsetStoreError(f"offset for {partition} not acknowledged within the timeout")
        if errors:
            raise OffsetStoreError(f"offset for {partition} not written: {errors[0]}")
        self.remember(key, data)

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Record a durable write in the local view (None deletes)."""
        with self._lock:
            if value is None:
                self._records.pop(key, None)
            else:
                self._records[key] = value

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        if self._producer is not None:
            self._producer.flush(self._timeout if timeout is None else timeout)
            self._producer = None

    def __enter__(self) -> OffsetStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
