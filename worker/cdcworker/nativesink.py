"""The sink on the native producer (``cdcworker._rowenc.Producer``, ``_native/kafkaprod.c``).

Same contract as ``sink.KafkaSink`` / ``sink.TransactionalSink`` (the durable position never passes
a record Kafka did not acknowledge; exactly-once commits records and offset together), with the
per-record work in C: produce without converting headers in Python, delivery reports that only
count (no ``Message`` object and no Python call per record), and ``send_rows``, which encodes and
produces a ROW event's inserts and same-key updates in one call. Segment numbers from the C side
map to positions here; refused records come back from ``take_errors`` and go through the same
failure-handling hook as the confluent-kafka path.

It drives the librdkafka that confluent-kafka loaded (same build, same settings), found in the
process's memory map, so nothing is linked at build time. ``native_sinks()`` says whether it is
in use: the extension is built, ``SHARDCDC_NATIVE`` is not ``0`` or ``encoder`` (the A/B switch
that keeps the native encoder on confluent-kafka's producer), and the library is found.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from cdcworker.events import native
from cdcworker.kafkaerrors import ClientLog, KafkaAccessError, access_refusal, syslog_level
from cdcworker.sink import KafkaSink, SinkError, TransactionalSink

log = logging.getLogger(__name__)


@functools.cache
def librdkafka_path() -> str | None:
    """The librdkafka shared object confluent-kafka's extension loaded, from /proc/self/maps."""
    import confluent_kafka.cimpl  # noqa: F401  - loads the library

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "librdkafka" in os.path.basename(path) and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def _kafka_error(code: int, reason: str, fatal: int, retriable: int, abortable: int) -> KafkaException:
    return KafkaException(KafkaError(code, reason, fatal=bool(fatal), retriable=bool(retriable),
                                     txn_requires_abort=bool(abortable)))


def native_sinks() -> bool:
    """The worker's sinks run on the native producer."""
    return (native.enabled() and os.environ.get(native.ENV) != "encoder"
            and hasattr(native.rowenc, "Producer") and librdkafka_path() is not None)


class _Refused:
    """What the failure-handling hook reads of a refused record (confluent-kafka's Message API)."""

    __slots__ = ("_key", "_partition", "_topic", "_value")

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> None:
        self._topic, self._partition, self._key, self._value = topic, partition, key, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class _NativeSends:
    """The record-producing methods of both native sinks (first in their MRO)."""

    producer: Any  # Any: the native C producer or confluent-kafka's client (no common type)
    _begin_needed: bool
    _on_fatal: Callable[[KafkaError], None] | None = None

    _client_log: ClientLog | None = None

    def _drain_logs(self) -> None:
        """librdkafka's lines (kept in C by its threads) through the project's logger, rate-limited,
        as confluent-kafka's ``logger`` setting does for the Python clients (kafkaclients)."""
        lines, dropped = self.producer.take_logs()
        if not lines:
            return
        log = self._client_log = self._client_log or ClientLog("producer")
        for level, facility, text in lines:
            log.log(syslog_level(level), "%s [%s] %s", facility, "native", text)
        if dropped:
            log.log(logging.WARNING, "%s [%s] %s", "DROPPED", "native", f"{dropped} more lines in a burst")

    def _make_producer(self, config: dict[str, object]) -> Any:  # Any: the native C producer or confluent-kafka's client (no common type)
        # librdkafka takes strings; Python callbacks (error_cb, logger...) stay on this side.
        plain = {k: v for k, v in config.items() if not callable(v)}
        hook = config.get("error_cb")
        self._on_fatal = hook if callable(hook) else None
        return native.rowenc.Producer(librdkafka_path(), plain, _kafka_error)

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
        if self._begin_needed:
            self._begin()  # type: ignore[attr-defined]
        try:
            self.producer.send(topic, key, value, headers)
        except KafkaException as exc:  # MSG_SIZE_TOO_LARGE goes to the caller; a fatal one stops
            self._raise_if_fatal(exc)  # type: ignore[attr-defined]
            self._check_access()  # type: ignore[attr-defined]  # a full queue behind a refused login
            raise

    def send_to_partition(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None
    ) -> None:
        self.ensure_topic(topic)  # type: ignore[attr-defined]  # rare records: a set lookup
        if self._begin_needed:
            self._begin()  # type: ignore[attr-defined]
        try:
            self.producer.send(topic, key, value, headers, partition)
        except KafkaException as exc:
            self._raise_if_fatal(exc)  # type: ignore[attr-defined]
            self._check_access()  # type: ignore[attr-defined]
            raise

    def rows_sender(self) -> Any:  # Any: the native C producer or confluent-kafka's client (no common type)
        """The producer for ``TablePlan.send_rows``'s native loop, with a transaction open."""
        if self._begin_needed:
            self._begin()  # type: ignore[attr-defined]
        return self.producer

    @property
    def records_sent(self) -> int:
        return int(self.producer.records_sent) - self._records_base

    @records_sent.setter
    def records_sent(self, n: int) -> None:  # KafkaSink.__init__ sets 0
        self._records_base = int(self.producer.records_sent) - n

    _records_base = 0

    def _refusal(self) -> KafkaAccessError | None:
        self._drain_logs()  # called wherever the sink checks access: at least every offset flush
        refused = self.producer.access_error()
        return None if refused is None else access_refusal(*refused)

    def _check_fatal(self) -> None:
        fatal = self.producer.fatal_error()
        if fatal is not None:
            code, reason = fatal
            if self._on_fatal is not None:
                self._on_fatal(KafkaError(code, reason, fatal=True))
            raise SinkError(f"fatal Kafka producer error: {reason}")


class NativeKafkaSink(_NativeSends, KafkaSink):
    """At-least-once on the native producer: segments are numbered in C, positions kept here."""

    _tracks_acks = False  # no Python delivery callbacks: the C side counts

    def __init__(self, producer_config: dict[str, object], poll_every: int = 512) -> None:
        super().__init__(producer_config, poll_every)
        self._positions: collections.deque[tuple[int, Any]] = collections.deque()  # Any: the commit point the stream sealed (commit_point), handed back as given
        self._failed: dict[int, list[KafkaError]] = {}

    def commit_point(self, position: object) -> None:
        # One C call per transaction (seal, poll, done_through): the durable position (offsets,
        # heartbeats, the low watermark) follows Kafka's acks instead of the next offset flush.
        seq, through = self.producer.commit_point()
        self._positions.append((seq, position))
        if through < 0 or self._failed:  # failed records, a refused login, a fatal error
            self._advance()
        else:
            self._settle(through)

    def _advance(self) -> None:
        p = self.producer
        if p.access_error() is not None:  # one C call per commit point: a refused login stops at once
            self._check_access()
        errors = p.take_errors()
        for i, (seq, code, reason, topic, partition, key, value) in enumerate(errors):
            err = KafkaError(code, reason)
            try:
                accepted = self._delivery_error(err, _Refused(topic, partition, key, value))
            except BaseException:
                # Taken from C and not judged: they stay failures, or done_through would pass them.
                for later in errors[i:]:
                    self._failed.setdefault(later[0], []).append(KafkaError(later[1], later[2]))
                raise
            if not accepted:
                self._failed.setdefault(seq, []).append(err)
        if self._failed:
            seq = min(self._failed)
            errors = self._failed[seq]
            position: Any = next((pos for s, pos in self._positions if s == seq), None)  # Any: the commit point the stream sealed (commit_point), handed back as given
            where = f" (records before offset {position.to_json()})" if hasattr(position, "to_json") else ""
            raise SinkError(f"Kafka rejected {len(errors)} record(s){where}: {errors[0]}")
        self._check_fatal()
        self._settle(p.done_through())

    def _settle(self, through: int) -> None:
        """The commit points up to segment ``through`` are durable."""
        positions = self._positions
        while positions and positions[0][0] <= through:
            self._durable = positions.popleft()[1]

    @property
    def pending(self) -> int:
        return int(self.producer.pending)


class NativeTransactionalSink(_NativeSends, TransactionalSink):
    """Exactly-once on the native producer: TransactionalSink's batching and commit rules as they are."""

    def commit(self) -> None:
        self._check_fatal()
        super().commit()
        self.producer.forget()

    def _abort(self, timeout: float) -> None:
        super()._abort(timeout)
        # The aborted records' failed reports (purged from the queue) keep copies of each key and
        # value until taken; nothing reads them here (the stream replays those records), and a
        # reconnect mid-transaction would otherwise leave up to the whole buffer behind each time.
        self.producer.poll(0)
        self.producer.take_errors()


def sink_classes() -> tuple[type[KafkaSink], type[TransactionalSink]]:
    """(at-least-once, exactly-once) sink classes for this process."""
    if native_sinks():
        return NativeKafkaSink, NativeTransactionalSink
    return KafkaSink, TransactionalSink
