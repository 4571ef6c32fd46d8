"""The Kafka side of the pipeline: produce records and learn which positions are durable.

Records are grouped into *segments*: everything produced between two commit points (the VGTID
that ends a Vitess transaction, DDL or OTHER). A segment's position becomes durable only when
Kafka has acknowledged every record of it and of all earlier segments, so an offset written from
``durable_position()`` never covers data Kafka does not hold (at-least-once). With
``exactly.once.support=required`` the sink instead wraps each batch of segments and its offset
record in one Kafka transaction.

One delivery callback object per segment (not per record) keeps the hot path allocation-free.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from cdcworker import kafkaclients
from cdcworker.allocator import tune_for_producing
from cdcworker.kafkaerrors import (
    FATAL,
    TIMED_OUT,
    KafkaAccessError,
    ProducerIdTimeout,
    SinkError,
    access_refusal,
)
from cdcworker.kafkaerrors import FENCED as LOCAL_FENCED

if TYPE_CHECKING:
    from cdcworker.topiccreator import TopicCreator

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Segment:
    """Records produced since the previous commit point, and the position they lead to."""

    produced: int = 0
    acked: int = 0
    # Any: the commit point the stream sealed (commit_point), handed back as given
    position: Any = None  # set when the segment is sealed at a commit point
    sealed: bool = False
    errors: list[KafkaError] = field(default_factory=list)
    # event.processing.failure.handling.mode for records Kafka refuses (KafkaSink.on_error)
    on_error: Callable[[KafkaError, object], bool] | None = None

    def on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            self.acked += 1
        elif self.on_error is not None and self.on_error(err, _msg):
            self.acked += 1  # dropped by the failure mode (warn/skip): counts as done
        else:
            self.errors.append(err)

    @property
    def complete(self) -> bool:
        return self.sealed and self.acked == self.produced


class KafkaSink:
    """Produces records with back-pressure and tracks the durable position."""

    def __init__(self, producer_config: dict[str, object], poll_every: int = 512) -> None:
        tune_for_producing()  # librdkafka's batch buffers reused, not faulted in per batch
        self._refused: KafkaAccessError | None = None  # the cluster refused the login or TLS (error_cb)
        self.producer = self._make_producer(producer_config)
        self._produce = self.producer.produce
        self._segments: collections.deque[Segment] = collections.deque()
        # The open segment's bound delivery callback, made once per segment (not per record);
        # None: no per-record delivery reports (exactly-once learns durability from the commit).
        self._dr: Callable[[KafkaError | None, object], None] | None = None
        self._open = self._new_segment()
        self._durable: Any = None  # Any: the commit point the stream sealed (commit_point), handed back as given
        self._poll_every = poll_every
        self.records_sent = 0
        self._interrupted = False

    def _make_producer(self, config: dict[str, object]) -> Any:  # Any: the native C producer or confluent-kafka's client (no common type)
        """confluent-kafka's producer; ``nativesink`` swaps in the C one."""
        chained = config.get("error_cb")

        def on_error(err: KafkaError) -> None:  # served by poll(), in the polling thread
            if self._refused is None:
                self._refused = access_refusal(err.code(), err.str())
            if callable(chained):
                chained(err)

        return kafkaclients.producer({**config, "error_cb": on_error}, "producer")

    def _refusal(self) -> KafkaAccessError | None:
        """The cluster's refusal of this client's credentials or TLS settings, once reported (a
        new exception per call: each raise gets its own traceback)."""
        refused = self._refused
        return None if refused is None else KafkaAccessError(*refused.args)

    def _check_access(self) -> None:
        """Stop on a refused login or certificate: librdkafka would retry it until every queued
        record timed out (``message.timeout.ms``), the stream looking healthy meanwhile."""
        refused = self._refusal()
        if refused is not None:
            raise refused

    # --- hot path -------------------------------------------------------------------------

    def _new_segment(self) -> Segment:
        seg = Segment(on_error=self._delivery_error)
        self._segments.append(seg)
        self._dr = seg.on_delivery if self._tracks_acks else None
        return seg

    _tracks_acks = True
    # Set by the task: True when a refused record is to be dropped (e.g. MSG_SIZE_TOO_LARGE under
    # event.processing.failure.handling.mode=warn/skip); False keeps it an error that stops the task.
    on_error: Callable[[KafkaError, object], bool] | None = None

    def _delivery_error(self, err: KafkaError, msg: object) -> bool:
        hook = self.on_error
        return hook is not None and hook(err, msg)

    _begin_needed = False  # TransactionalSink: the next record opens a Kafka transaction
    aborts = 0  # Kafka transactions aborted (TransactionalSink; the snapshot engine starts over after one)

    # Creates missing topics (topic.creation.*); None leaves them to the broker's auto-creation.
    topics: TopicCreator | None = None

    def ensure_topic(self, topic: str) -> None:
        """Called on the first use of a topic by whoever makes its records, never per record."""
        if self.topics is not None:
            self.topics.ensure(topic)

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
        # The per-record hot path: one produce call, two counters, a poll every _poll_every records.
        if self._begin_needed:
            self._begin()
        try:
            # Positional (topic, value, key, partition=UA, callback, on_delivery, timestamp=now,
            # headers): confluent-kafka parses these ~0.4 µs faster than keywords, per record.
            self._produce(topic, value, key, -1, self._dr, None, 0, headers)
        except BufferError:
            self._send_when_room(topic, key, value, headers)
        except KafkaException as exc:  # zero-cost until raised; MSG_SIZE_TOO_LARGE goes to the caller
            self._raise_if_fatal(exc)
            raise
        self._open.produced += 1
        self.records_sent = n = self.records_sent + 1
        if n % self._poll_every == 0:
            self.producer.poll(0)

    def _begin(self) -> None:
        raise NotImplementedError

    def interrupt(self) -> None:
        """From now on a send waiting for room in librdkafka's full queue raises InterruptedError
        (a stop must not wait for a broker that may never come back; thread-safe)."""
        self._interrupted = True
        native = getattr(self.producer, "interrupt", None)
        if native is not None:
            native()

    def _check_interrupt(self) -> None:
        if self._interrupted:
            raise InterruptedError("stopping: the task was asked to stop while Kafka's local queue was full "
                                   "(the record was not sent; offsets stay behind it)")

    def _send_when_room(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
        # librdkafka's queue is full: this is the back-pressure point. Serving callbacks frees
        # room; meanwhile we do not read from VStream, so gRPC flow control holds the source.
        kwargs: dict[str, object] = {"headers": headers}
        if self._dr is not None:
            kwargs["on_delivery"] = self._dr
        while True:
            self.producer.poll(0.05)
            self._advance()
            self._check_interrupt()
            try:
                self._produce(topic, value, key, **kwargs)
                return
            except BufferError:
                continue
            except KafkaException as exc:
                self._raise_if_fatal(exc)
                raise

    def send_to_partition(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None
    ) -> None:
        """``send`` to an explicit partition (Debezium sends heartbeats and schema changes to 0)."""
        self.ensure_topic(topic)  # rare records (a heartbeat, a DDL): a set lookup is nothing here
        seg = self._open
        kwargs: dict[str, object] = {"partition": partition, "headers": headers}
        if self._dr is not None:
            kwargs["on_delivery"] = self._dr
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)
                self._advance()
                self._check_interrupt()
            except KafkaException as exc:
                self._raise_if_fatal(exc)
                raise
        seg.produced += 1
        self.records_sent += 1

    def _raise_if_fatal(self, exc: KafkaException) -> None:
        """A fatal error leaves the producer unusable (a fenced transactional producer, a broken
        idempotent sequence): the task stops with the cause instead of a stack trace."""
        err: KafkaError = exc.args[0]
        # produce() in the fatal state raises _FATAL without the fatal flag (that is on the cause).
        if err.fatal() or err.code() == FATAL:
            raise SinkError(self._fatal_reason(err)) from exc

    def _fatal_reason(self, err: KafkaError) -> str:
        return f"fatal Kafka producer error, the producer cannot continue: {err.str()}"

    def send_many(self, records: Iterable[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]]) -> None:
        for topic, key, value, headers in records:
            self.send(topic, key, value, headers)

    def commit_point(self, position: object) -> None:
        """Seal the open segment: once all its records are acked, ``position`` is durable."""
        seg = self._open
        seg.position = position
        seg.sealed = True
        self._open = self._new_segment()
        # Serve delivery reports at every commit point: durability (and its latency) then
        # follows Kafka's acks instead of waiting for the next few hundred records.
        self.producer.poll(0)
        if self._refused is not None:
            self._check_access()

    # --- durability -----------------------------------------------------------------------

    def _advance(self) -> None:
        self._check_access()
        segs = self._segments
        while segs and segs[0].complete:
            seg = segs.popleft()
            if seg.errors:
                raise SinkError(_rejected(seg))
            self._durable = seg.position
        if segs and segs[0].errors:
            raise SinkError(_rejected(segs[0]))

    @property
    def durable(self) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """Read-only view of the last known durable position, safe from other threads."""
        return self._durable

    def set_durable(self, position: object) -> None:
        """Declare ``position`` durable without a record: the task's start (its stored offset), a
        restored state that is durable already, or a shard rewound to its catch-up start."""
        self._durable = position

    def durable_position(self) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """The newest commit-point position whose records (and all before) Kafka acknowledged."""
        self.producer.poll(0)
        self._advance()
        return self._durable

    @property
    def commit_pending(self) -> bool:
        """A commit point waits for ``on_idle`` (exactly-once); the task then waits for input briefly."""
        return False

    def on_idle(self) -> None:
        """The source has nothing queued: learn what became durable meanwhile."""
        self.durable_position()

    def flush(self, timeout: float = 30.0) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """Wait for every outstanding record; returns the durable position afterwards."""
        remaining = self.producer.flush(timeout)
        self._advance()
        if remaining:
            raise SinkError(f"{remaining} record(s) not acknowledged by Kafka within {timeout}s")
        return self._durable

    def rewind(self, handed_over: object) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """Where a reconnect resumes: everything up to ``handed_over`` is already with the producer."""
        return handed_over

    @property
    def pending(self) -> int:
        return sum(s.produced - s.acked for s in self._segments)

    def close(self, timeout: float = 30.0) -> None:
        self.producer.flush(timeout)


def _rejected(seg: Segment) -> str:
    """The error, named by the offset (commit point) the refused records lead to, when known."""
    where = f" (records before offset {seg.position.to_json()})" if seg.sealed and hasattr(seg.position, "to_json") else ""
    return f"Kafka rejected {len(seg.errors)} record(s){where}: {seg.errors[0]}"


__all__ = ["KafkaAccessError", "KafkaException", "KafkaSink", "Segment", "SinkError"]


# A newer producer with this transactional.id took over (librdkafka's local code, the broker's two).
_FENCED = frozenset({LOCAL_FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


OffsetWriter = Callable[[Producer, Any], None]


# One init_transactions call: short, so a stop is seen between calls (librdkafka retries inside).
_INIT_SLICE_SECONDS = 1.0


def _raise_if_refused(err: KafkaError) -> None:
    """A transactional call refused for the login or certificate: the access error the task stops
    with, as the error callback's report would have made it."""
    refused = access_refusal(err.code(), err.str())
    if refused is not None:
        raise refused


class TransactionalSink(KafkaSink):
    """Exactly-once: each batch of whole Vitess transactions and its offset record commit together.

    A Kafka transaction is committed only at a commit point, with the offset record for that
    position produced into the same transaction, so consumers reading ``read_committed`` see each
    change once across crashes. Records after the last commit point (a Vitess transaction still
    arriving) stay in the open Kafka transaction; on stop or stream failure the open Kafka
    transaction is aborted when it holds such records, and the stream resumes from the last
    committed position.
    """

    # No per-record delivery reports: a record that fails makes its Kafka transaction's commit
    # fail, and only a committed transaction moves the durable position.
    _tracks_acks = False

    def __init__(
        self,
        producer_config: dict[str, object],
        offset_writer: OffsetWriter,
        max_batch_records: int = 2048,
        max_batch_seconds: float = 0.1,
        timeout: float = 30.0,
        clock: Callable[[], float] | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(producer_config)
        import time

        self.transactional_id = producer_config.get("transactional.id")
        self._clock = clock or time.monotonic
        self._offset_writer = offset_writer
        self._max_records = max_batch_records
        self._max_seconds = max_batch_seconds
        self._timeout = timeout
        self._in_txn = False
        self._begin_needed = True
        self._txn_started = 0.0
        self._txn_base = 0  # records_sent when the open Kafka transaction began
        self._records_at_point = 0
        self._point: Any = None  # Any: the commit point the stream sealed (commit_point), handed back as given
        self._last_commit = self._clock()
        self.commits = 0
        # Wall time the stage spent blocked in commit_transaction (librdkafka flushes every batch
        # in flight, then ends the transaction): what exactly-once costs the stream per commit.
        self.commit_seconds = 0.0
        self._init_transactions(timeout, stopping)

    def _init_transactions(self, timeout: float, stopping: Callable[[], bool]) -> None:
        """Get the producer id, fencing an earlier producer of the same transactional id.

        The coordinator answers CONCURRENT_TRANSACTIONS until a killed predecessor's transaction has
        ended (its commit or abort markers written), which has taken tens of seconds on a loaded
        broker. librdkafka retries within each call; the calls are short so that a stop in the
        meantime is honoured at once (a pod deleted while it waits exits cleanly, having written
        nothing), and a timeout is one line naming what to check, not a traceback."""
        deadline = self._clock() + timeout
        while True:
            try:
                self.producer.init_transactions(max(min(_INIT_SLICE_SECONDS, deadline - self._clock()), 0.1))
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable():
                    raise
                if stopping():
                    raise InterruptedError("stopped before Kafka gave the transactional producer its id") from None
                if self._clock() >= deadline:
                    raise ProducerIdTimeout(
                        f"Kafka gave no producer id to transactional.id {self.transactional_id!r} within "
                        f"{timeout:.0f}s ({error.str()}): an earlier producer's transaction may still be "
                        "ending, or the transaction coordinator is unavailable; the task starts again "
                        "when restarted") from None

    def _begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:  # after a fence: the producer is in its fatal state
            self._raise_if_fatal(exc)
            raise
        self._in_txn = True
        self._begin_needed = False
        self._txn_started = self._clock()
        self._txn_base = self.records_sent
        self._records_at_point = 0

    @property
    def _txn_records(self) -> int:
        """Records produced into the open Kafka transaction."""
        return self.records_sent - self._txn_base if self._in_txn else 0

    def send_to_partition(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None
    ) -> None:
        if not self._in_txn:
            self._begin()
        super().send_to_partition(topic, partition, key, value, headers)

    def commit_point(self, position: object) -> None:
        self._point = position
        self._records_at_point = self._txn_records
        if self._txn_records >= self._max_records or (
            self._in_txn and self._clock() - self._txn_started >= self._max_seconds
        ):
            self.commit()

    def commit(self) -> None:
        """Commit the open Kafka transaction at the last commit point, with its offset record."""
        if self._point is None or self._point is self._durable:
            return
        if self._in_txn and self._records_at_point != self._txn_records:
            return  # records of an unfinished Vitess transaction are in it; wait for its end
        self._check_access()  # the commit would wait its whole timeout for a broker that refuses us
        if not self._in_txn:
            self._begin()
        try:
            deadline = self._clock() + self._timeout
            while True:
                try:
                    self._offset_writer(self.producer, self._point)
                    break
                except BufferError:  # confluent-kafka's full local queue (the native producer waits itself)
                    self._check_interrupt()  # a stop: handled below (abort, the flush fails)
                    self._check_access()  # a refused login: the queue never drains
                    if self._clock() > deadline:  # a broker away: the commit fails, the task stops
                        raise KafkaException(KafkaError(TIMED_OUT, "no room for the offset record")) from None
                    self.producer.poll(0.05)
            t0 = self._clock()
            self.producer.commit_transaction(self._timeout)
            self.commit_seconds += self._clock() - t0
        except InterruptedError as exc:  # a stop while the broker is away (no room for the offset record)
            with contextlib.suppress(KafkaException, KafkaAccessError):
                self._abort(5.0)
            # Given up either way: a later flush must not try to commit it again.
            self._in_txn = False
            self._point = self._durable
            raise SinkError(f"stopped before the Kafka transaction could commit ({exc}); the next start resumes "
                            "from the last committed offset") from exc
        except KafkaException as exc:
            self._raise_if_fatal(exc)  # fenced: the transaction is void and the task stops
            # Refused mid-commit: no abort either (it cannot reach the coordinator, which aborts
            # the transaction itself after transaction.timeout.ms); the task stops with the reason.
            # The commit's own error says so before librdkafka has served the error callback
            # that records the refusal (seen in CI: the abort after it was refused too, and raised).
            self.producer.poll(0)
            self._check_access()
            err = exc.args[0]
            _raise_if_refused(err)
            if err.txn_requires_abort():
                self._abort(self._timeout)
            raise SinkError(f"Kafka transaction commit failed: {err.str()}") from exc
        self._in_txn = False
        self._begin_needed = True
        self._durable = self._point
        self._last_commit = self._clock()
        self.commits += 1
        # Everything in the committed transaction is durable; the ack counters are moot.
        self._segments.clear()
        self._open = self._new_segment()

    def durable_position(self) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        self.producer.poll(0)
        self._check_access()
        if self._point is not None and self._point is not self._durable:
            # Also when no record is open: empty transactions, OTHER and DDL move the position,
            # and an idle shard must not force a long replay after a restart.
            since = self._txn_started if self._in_txn else self._last_commit
            if self._clock() - since >= self._max_seconds:
                self.commit()
        return self._durable

    @property
    def commit_pending(self) -> bool:
        return (
            self._point is not None
            and self._point is not self._durable
            and (not self._in_txn or self._records_at_point == self._txn_records)
        )

    def on_idle(self) -> None:
        """Nothing more is arriving now: commit at once rather than after ``max_batch_seconds``
        (batching only pays while records keep coming; an idle stream's last changes would
        otherwise wait up to poll.interval.ms to become visible)."""
        if self.commit_pending:
            self.commit()
        else:
            self.producer.poll(0)

    def flush(self, timeout: float = 30.0) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """Commit what ends at a commit point; abort a transaction that holds a partial one."""
        if self._in_txn:
            if self._records_at_point == self._txn_records:
                self.commit()
            else:
                self._abort(timeout)
        elif self.commit_pending:
            # Commit points with no records since the last commit (OTHER, empty transactions, a
            # table's or the copy's completion): their offset goes in a transaction of its own,
            # or a stop right after the copy would store a position that is still copying.
            self.commit()
        return self._durable

    def rewind(self, handed_over: object) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """A reconnect resumes from the last commit point in the open transaction, or, if that
        transaction holds part of a Vitess transaction (which the new stream replays), after
        aborting it, from the last committed position. A transaction that ends at its commit point
        is committed now: reconnect waits could otherwise outlast ``transaction.timeout.ms``, and the
        coordinator's abort would end the task as fenced."""
        if self._in_txn and self._records_at_point != self._txn_records:
            self._abort(self._timeout)
            return self._durable
        if self.commit_pending:
            self.commit()
        return handed_over

    def _abort(self, timeout: float) -> None:
        """Abort the open transaction. A fenced producer's was voided by the fence: its fatal error
        is raised by the next begin or commit (this may run while reconnecting, or stopping).

        Every commit point in it goes with it: the position falls back to the last committed one,
        or a later commit (the stop's flush after a failed commit) would store an offset-only
        transaction past the aborted records."""
        try:
            self.producer.abort_transaction(timeout)
        except KafkaException as exc:
            if not exc.args[0].fatal():
                _raise_if_refused(exc.args[0])
                raise
        self._in_txn = False
        self._begin_needed = True
        self._point = self._durable
        self._records_at_point = 0
        self.aborts += 1

    def _fatal_reason(self, err: KafkaError) -> str:
        if err.code() == FATAL:
            # produce() only says "Fatal error"; in the fatal state the transactional API returns
            # the cause at once, without a request.
            try:
                self.producer.abort_transaction(0)
            except KafkaException as exc:
                err = exc.args[0] if exc.args[0].fatal() else err
        if err.code() in _FENCED:
            return (
                f"fenced: another producer started with this task's transactional.id {self.transactional_id!r} "
                "(a second worker for the same task, such as a zombie); this worker stops without committing "
                f"and the newer one continues from the last committed offset. Kafka: {err.str()}"
            )
        return super()._fatal_reason(err)

    @property
    def pending(self) -> int:
        """Records in the open Kafka transaction (durable only once it commits)."""
        return self._txn_records if self._in_txn else 0

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
