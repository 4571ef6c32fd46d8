"""The progress topic over Kafka (I/O): create it, read a run's state, write records, tail it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from cdcworker import kafkaclients
from cdcworker.backfill.progress import ChunkDone, PlanRecord, RunState, parse_record
from cdcworker.kafkaerrors import TIMED_OUT, broker_count, creation_refusal
from cdcworker.offsets.store import offsets_sizing
from cdcworker.topicread import TopicEndTimeout, TopicNotVisible, TopicReader, TopicReadError, visible_topic

TOPIC_CONFIG = {"cleanup.policy": "compact"}


class ProgressStore:
    def __init__(self, client_config: Mapping[str, object], topic: str, replication_factor: int = -1,
                 topic_config: Mapping[str, str] | None = None) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.replication_factor = replication_factor
        self.topic_config = dict(TOPIC_CONFIG if topic_config is None else topic_config)

    def ensure_topic(self, timeout: float = 30.0) -> None:
        """One partition (a total order of a run's records), compacted unless the store was made
        with another ``topic_config``; existing topics are kept."""
        admin = kafkaclients.admin(self.client_config, "backfill progress admin client")
        new = NewTopic(self.topic, num_partitions=1, replication_factor=self.replication_factor,
                       config=self.topic_config)
        for fut in admin.create_topics([new], operation_timeout=timeout).values():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    sizing = offsets_sizing(1, self.replication_factor)
                    refusal = creation_refusal(err, self.topic, sizing, broker_count(admin))
                    if refusal is None:
                        raise
                    raise refusal from exc
        try:
            visible_topic(admin, self.topic, timeout)
        except TopicNotVisible as exc:
            if exc.timed_out:
                raise TimeoutError(f"progress topic {self.topic} not available after {timeout}s") from None
            raise KafkaException(exc.error) from None

    def records(self, timeout: float = 60.0) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every record from the beginning to the current end (the high watermark read first:
        ``TopicReader.read_to_end``), with short fetch waits for the end-of-partition event that
        ends a partition whose last offsets hold no record (transaction markers)."""
        consumer = kafkaclients.consumer(
            {
                **self.client_config,
                "group.id": f"shardcdc-backfill-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
            }
        , "backfill progress consumer")
        try:
            meta = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return  # no topic yet: nothing is done
            reader = TopicReader(consumer, self.topic)
            reader.assign([0], ends_within=timeout)
            for msg in reader.read_to_end(timeout):
                yield msg.key(), msg.value()
        except TopicReadError as exc:
            raise KafkaException(exc.error) from None
        except TopicEndTimeout:
            raise TimeoutError(f"reading {self.topic}: no end after {timeout}s") from None
        finally:
            consumer.close()

    def load(self, run_id: str) -> RunState:
        state = RunState(run_id)
        for _key, value in self.records():
            if value is not None:
                state.apply(parse_record(value))
        return state

    def watch(self, done: Callable[[bytes], bool], timeout: float) -> bool:
        """Read the topic from its beginning, passing each value to ``done``, until ``done`` returns
        True (True) or ``timeout`` seconds passed (False). Keeps reading as records arrive."""
        consumer = kafkaclients.consumer({**self.client_config, "group.id": f"shardcdc-backfill-watch-{uuid.uuid4()}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"}, "backfill progress consumer")
        deadline = time.monotonic() + timeout
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            while time.monotonic() < deadline:
                msg = consumer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
                if msg is None or msg.error() is not None or msg.value() is None:
                    continue
                if done(msg.value()):  # type: ignore[arg-type]
                    return True
            return False
        finally:
            consumer.close()

    def write(self, producer: Producer, records: Iterable[Any], timeout: float = 60.0) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """Produce and wait for the acknowledgements (a record counts only once Kafka holds it)."""
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        for rec in records:
            producer.produce(self.topic, rec.value(), rec.key(), on_delivery=on_delivery)
        if producer.flush(timeout) or errors:
            raise KafkaException(errors[0] if errors else KafkaError(TIMED_OUT))

    def follow(self, on_record: Callable[[PlanRecord | ChunkDone], None], stop: Callable[[], bool]) -> None:
        """Tail the topic from the beginning, calling ``on_record`` until ``stop()`` (for progress views)."""
        consumer = kafkaclients.consumer(
            {
                **self.client_config,
                "group.id": f"shardcdc-backfill-view-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        , "backfill progress consumer")
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            while not stop():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None or msg.value() is None:
                    continue
                rec = parse_record(msg.value())  # type: ignore[arg-type]
                if isinstance(rec, PlanRecord | ChunkDone):
                    on_record(rec)
        finally:
            consumer.close()

