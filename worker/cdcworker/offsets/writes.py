"""A streaming task's offset writes: the periodic queued write, the synchronous one, and what was last written.

At-least-once only: an exactly-once task commits its offsets inside its Kafka transactions
(``TransactionalSink``), so ``TaskOffsets.write`` is a no-op there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

from cdcworker.offsets.keys import OffsetPartition
from cdcworker.offsets.store import OffsetStore, OffsetStoreError
from cdcworker.offsets.value import OffsetValue, offset_value_at
from cdcworker.offsets.vgtid import Vgtid

# Offset fields stored beside the position (the backfill hand-off's states): (name, JSON value).
OffsetExtra = tuple[tuple[str, Any], ...]  # Any: a JSON value of the offset document


class OffsetWrites:
    """Periodic at-least-once offset writes that do not hold up the stream while the broker acks.

    The value written is already durable (every record it covers was acknowledged), so the
    write only has to land eventually and in order: the store's producer is idempotent and the
    task's key always goes to one partition, so queued writes land in the order they were made.
    A synchronous write (stop, hand-off, reassignment) drains the queue first. A failed write
    fails the task at the next flush, as a synchronous one would have; the store's local view is
    updated once the broker acknowledged (``OffsetStore.remember``).
    """

    def __init__(self, store: OffsetStore) -> None:
        self.store = store
        self._producer: Producer | None = None
        self._errors: list[KafkaError] = []
        self.in_flight = 0

    def queue(self, name: str, partition: OffsetPartition, value: OffsetValue) -> bool:
        """Queue the offset record; False when the local queue had no room for it."""
        self.check()
        if self._producer is None:
            self._producer = self.store.own_producer()  # the producer of store.write: one order
        written: list[tuple[bytes, bytes | None]] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            self.in_flight -= 1
            if err is not None:
                self._errors.append(err)
            else:
                self.store.remember(*written[0])

        try:
            written.append(self.store.produce(self._producer, name, partition, value, on_delivery))
        except BufferError:
            return False  # not with one record per interval; the next flush writes it
        self.in_flight += 1
        return True

    def check(self) -> None:
        """Serve the acks of earlier writes; raise if one of them failed."""
        if self.in_flight and self._producer is not None:
            self._producer.poll(0)
        if self._errors:
            raise OffsetStoreError(f"offset not written: {self._errors[0]}")

    def drain(self, timeout: float | None = None) -> None:
        if self.in_flight and self._producer is not None:
            timeout = self.store.timeout if timeout is None else timeout
            if self._producer.flush(timeout):
                raise OffsetStoreError(f"offset not acknowledged within {timeout}s")
        self.check()


class TaskOffsets:
    """One task's offset record: its key, its value (position plus hand-off fields), what was last written."""

    def __init__(self, name: str, partition: OffsetPartition, extra: Callable[[], OffsetExtra]) -> None:
        self.name = name
        self.partition = partition
        self._extra = extra  # the backfill hand-off's offset fields, () without one
        self.last_written: Vgtid | None = None
        self.last_extra: OffsetExtra = ()
        self.transactional = False  # exactly-once: offsets travel in the Kafka transactions
        self._writes: OffsetWrites | None = None

    def value(self, position: Vgtid) -> OffsetValue:
        """``offset_value_at`` plus the backfill hand-off state while there is one (docs/backfill.md)."""
        extra = self._extra()
        value = offset_value_at(position)
        return value.with_fields(extra) if extra else value

    def forget(self) -> None:
        """The next write stores its position even when it equals the last one."""
        self.last_written = None

    def write(self, store: OffsetStore, position: Vgtid | None, wait: bool = True, timeout: float | None = None) -> None:
        """Store ``position`` (already durable in Kafka). ``wait=False``: the periodic flush queues
        the record and goes on streaming; every other write waits for the ack (at most ``timeout``
        seconds when given, else the store's timeout)."""
        if self.transactional:
            return  # offsets are committed inside the Kafka transactions
        writes = self._writes
        if writes is None or writes.store is not store:
            writes = self._writes = OffsetWrites(store)
        extra = self._extra()
        if position is None or self._unchanged(position, extra):
            if wait:
                writes.drain(timeout)  # a stop: the last queued write has landed before the task ends
            else:
                writes.check()
            return
        if wait:
            writes.drain(timeout)  # an older queued write must not land after this one
            store.write(self.name, self.partition, self.value(position), timeout)
        elif not writes.queue(self.name, self.partition, self.value(position)):
            return  # not queued (a full local queue): a later flush or the stop writes it
        self.last_written = position
        self.last_extra = extra

    def _unchanged(self, position: Vgtid, extra: OffsetExtra) -> bool:
        # Equal VGTIDs may still differ in offset fields (an ad-hoc snapshot's progress).
        last = self.last_written
        return (last is not None and position == last and offset_value_at(position) == offset_value_at(last)
                and extra == self.last_extra)
