"""Read a Kafka topic: one home for "read to its end" and for tailing it.

librdkafka reports a partition's end as an error event (``_PARTITION_EOF``, with
``enable.partition.eof=True``); every reader used to tell it apart from real errors in a loop of
its own. ``TopicReader.fetch`` returns the records only and notes which partitions reached their
end; ``read_to_end`` yields every record until each assigned partition reached its end or the
deadline passed (``TopicEndTimeout``). Other errors raise ``TopicReadError`` (with the
``KafkaError``), which each caller turns into its own message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from cdcworker.kafkaerrors import PARTITION_EOF


class TopicReadError(RuntimeError):
    """The consumer reported an error other than a partition's end."""

    def __init__(self, topic: str, error: KafkaError) -> None:
        super().__init__(f"reading {topic}: {error}")
        self.error = error


class TopicEndTimeout(TimeoutError):
    """Some partitions did not reach their end within the time given."""

    def __init__(self, topic: str, pending: Iterable[int], timeout: float) -> None:
        self.pending = sorted(pending)
        super().__init__(f"reading {topic}: partitions {self.pending} did not reach their end within {timeout}s")


class TopicReader:
    """A consumer of one topic, its records with the end-of-partition events taken out."""

    def __init__(self, consumer: Consumer, topic: str, *, skip: Iterable[int] = ()) -> None:
        self.consumer = consumer
        self.topic = topic
        self.skip = frozenset(skip)  # error codes to pass over (e.g. a topic created a moment ago)
        self.assigned: set[int] = set()
        self.at_end: set[int] = set()  # partitions whose end was reached since the last record on them
        self.reached: set[int] = set()  # partitions that reported their end in the last fetch

    def assign(self, partitions: Iterable[int], offset: int = 0) -> None:
        self.assigned = set(partitions)
        self.at_end.clear()
        self.consumer.assign([TopicPartition(self.topic, p, offset) for p in sorted(self.assigned)])

    def fetch(self, timeout: float, max_records: int = 1000) -> list[Message]:
        """The records fetched within ``timeout`` seconds (none is no error)."""
        out: list[Message] = []
        self.reached = set()
        for msg in self._consume(max_records, timeout):
            err = msg.error()
            if err is None:
                self.at_end.discard(msg.partition() or 0)
                out.append(msg)
            elif err.code() == PARTITION_EOF:
                self.at_end.add(msg.partition() or 0)
                self.reached.add(msg.partition() or 0)
            elif err.code() not in self.skip:
                raise TopicReadError(self.topic, err)
        return out

    def _consume(self, max_records: int, timeout: float) -> list[Message]:
        """What is there now, else the first record within ``timeout`` and what came with it.
        librdkafka's consume(n, timeout) waits the whole timeout unless n records are there, which
        made every fetch of a slow topic (the operator's progress feed) half a second late."""
        msgs = self.consumer.consume(num_messages=max_records, timeout=0)
        if msgs or timeout <= 0:
            return msgs
        msgs = self.consumer.consume(num_messages=1, timeout=timeout)
        if msgs and max_records > 1:
            msgs += self.consumer.consume(num_messages=max_records - 1, timeout=0)
        return msgs

    def read_to_end(self, timeout: float, check: Callable[[], None] | None = None) -> Iterator[Message]:
        """Every record from the assigned positions until each assigned partition reached its end.
        ``check`` runs before each fetch (e.g. to raise a refused login the client logged)."""
        deadline = time.monotonic() + timeout
        # An end once reached counts: on a topic written meanwhile (an offsets topic a running task
        # flushes to), a fetch often holds records after a partition's end event, and waiting for
        # a quiet moment at every partition at once may never end.
        reached = set(self.at_end)
        while not self.assigned <= reached:
            if check is not None:
                check()
            if time.monotonic() > deadline:
                raise TopicEndTimeout(self.topic, self.assigned - reached, timeout)
            msgs = self.fetch(min(0.5, max(0.0, deadline - time.monotonic())))
            reached |= self.reached
            yield from msgs
