"""Snapshot signals for connectors whose backfills run on an engine (Spark, or local mode's runner).

With ``shardcdc.signal.snapshot.engine=backfill`` (the operator sets it when
``spec.snapshot.backfill`` is configured) a task does not copy tables itself: it hands each
``execute-snapshot`` / ``stop-snapshot`` signal to the operator as a ``signal`` record in the
progress topic (``<topic.prefix>.backfill-progress``), and the operator launches or cancels the
backfill run exactly as for a ``spec.backfills[]`` entry.

Why the progress topic: it is durable and ordered (one partition), the operator reads it anyway
for the runs' progress, and it outlives worker and operator restarts. The record is written and
acknowledged before the signal counts as handled: a source-channel signal is acted on at its
COMMIT, before the task's offset passes it, and a Kafka-channel signal before the channel's
position in the offset passes it, so a crash in between replays the signal and writes the same
record again.
Its key is the signal id and its bytes depend only on the signal, so the several tasks that read
the same Kafka signal (or a task replaying after a restart) write the same record: compaction and
the operator's fold collapse them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from cdcworker import kafkaclients
from cdcworker.backfill.progress import SignalRecord
from cdcworker.snapshot import SnapshotRequest

if TYPE_CHECKING:
    from cdcworker.signals import Signal

log = logging.getLogger(__name__)

ENGINE_PROPERTY = "shardcdc.signal.snapshot.engine"
BACKFILL = "backfill"
WRITE_ATTEMPTS = 5
WRITE_TIMEOUT = 10.0  # seconds per attempt: a stop waits for at most one


def signal_record(signal_id: str, kind: str, keyspace: str, request: SnapshotRequest | None,
                  data_collections: tuple[str, ...] = (), channel: str = "source") -> SignalRecord:
    """The record for one signal (pure): bare table names of ``keyspace``, conditions per table."""
    if request is not None:
        tables = tuple(dict.fromkeys(request.tables(keyspace)))
        conds = {t: c for t in tables if (c := request.condition(keyspace, t))}
    else:
        tables = tuple(dict.fromkeys(SnapshotRequest("", data_collections).tables(keyspace)))
        conds = {}
    return SignalRecord(signal_id, kind, keyspace, tables, tuple(sorted(conds.items())), channel)


class TopicWriter:
    """Writes records to a one-partition topic and waits for Kafka to hold them (thread-safe),
    creating the topic on first use and retrying a failed write with a backoff."""

    def __init__(self, client_config: Mapping[str, object], topic: str, replication_factor: int = -1,
                 topic_config: Mapping[str, str] | None = None) -> None:
        from cdcworker.backfill.store import ProgressStore

        self.store = ProgressStore(dict(client_config), topic, replication_factor, topic_config)
        self._lock = threading.Lock()
        self._producer: Any = None  # Any: the native C producer or confluent-kafka's client (no common type)
        self._topic_ready = False
        self._interrupted = threading.Event()

    def ensure_topic(self) -> None:
        if not self._topic_ready:
            self.store.ensure_topic()
            self._topic_ready = True

    def interrupt(self) -> None:
        """A write in progress gives up at its next attempt (the task is stopping; thread-safe)."""
        self._interrupted.set()

    def _write(self, rec: object, what: str) -> None:
        from confluent_kafka import KafkaException

        with self._lock:
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    self.ensure_topic()
                    if self._producer is None:
                        self._producer = kafkaclients.producer(self.store.client_config, "signal forwarder")
                    self.store.write(self._producer, [rec], timeout=WRITE_TIMEOUT)
                    return
                except (KafkaException, TimeoutError) as exc:
                    if attempt + 1 == WRITE_ATTEMPTS:
                        raise
                    log.warning("writing %s to %s failed (%s); retrying", what, self.store.topic, exc)
                    # Backoff between retries of a failed write, cut short by a stop.
                    if self._interrupted.wait(min(2.0 ** attempt, 10.0)):
                        raise InterruptedError(f"stopping: {what} not written to {self.store.topic}") from exc

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)


class BackfillSignalForwarder(TopicWriter):
    """Writes snapshot signals to the progress topic (thread-safe; each call waits for Kafka)."""

    def __init__(self, client_config: Mapping[str, object], topic: str, keyspace: str,
                 replication_factor: int = -1) -> None:
        super().__init__(client_config, topic, replication_factor)
        self.keyspace = keyspace
        self.written: list[SignalRecord] = []  # for status and tests

    # SnapshotEngine, for callers that only know that contract
    def start(self, request: SnapshotRequest) -> None:
        self.forward(request.id, "execute-snapshot", request)

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        self.forward(request_id or f"stop-{int(time.time() * 1000)}", "stop-snapshot", None, data_collections)

    def forward(self, signal_id: str, kind: str, request: SnapshotRequest | None,
                data_collections: tuple[str, ...] = (), channel: str = "source") -> SignalRecord | None:
        rec = signal_record(signal_id, kind, self.keyspace, request, data_collections, channel)
        if kind == "execute-snapshot" and not rec.tables:
            log.warning("signal %s names no table of keyspace %s; ignored", signal_id, self.keyspace)
            return None
        self._write(cast(Any, rec), f"signal {rec.signal_id}")
        self.written.append(rec)
        log.info("signal %s (%s %s) handed to the operator via %s", signal_id, kind, list(rec.tables) or "all",
                 self.store.topic)
        return rec

    @property
    def active(self) -> bool:
        return False  # nothing runs in the task

    def pump(self, processor: object) -> None:
        """Nothing to pump: the operator runs the backfill."""

    def restore(self, offset_fields: object) -> None:
        """No state in the offsets: the progress topic holds it."""


RELAY_SUFFIX = ".signal-relay"


class SignalRelay(TopicWriter):
    """Hands signal-table signals to the connector's other tasks (multi-task mode).

    The signal row is on one shard, so only the task streaming that shard reads it. That task acts
    on it for its own shards and writes it here (``<topic.prefix>.signal-relay``, one partition,
    key ``topic.prefix``, value with ``origin`` = its task key) before sealing the commit point
    past the row; every other task reads the topic as a Kafka signal channel and acts on it for
    its shards. Debezium's connector acts on the signal in that one task only.
    """

    def __init__(self, client_config: Mapping[str, object], prefix: str, origin: str, replication_factor: int = -1) -> None:
        super().__init__(client_config, prefix + RELAY_SUFFIX, replication_factor,
                         topic_config={"cleanup.policy": "delete"})  # every signal kept (one key)
        self.prefix = prefix
        self.origin = origin
        self.relayed: list[str] = []  # signal ids, for status and tests

    def publish(self, signal: Signal) -> None:
        from cdcworker.signals import relay_value

        self._write(_Record(self.prefix.encode(), relay_value(signal, self.origin)), f"signal {signal.id}")
        self.relayed.append(signal.id)
        log.info("signal %s relayed to the connector's other tasks via %s", signal.id, self.store.topic)


class _Record:
    __slots__ = ("_key", "_value")

    def __init__(self, key: bytes, value: bytes) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value
