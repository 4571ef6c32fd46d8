"""Read a Kafka topic: one home for "read to its end" and for tailing it.

librdkafka reports a partition's end as an error event (``_PARTITION_EOF``, with
``enable.partition.eof=True``); every reader used to tell it apart from real errors in a loop of
its own. ``TopicReader.fetch`` returns the records only and notes which partitions reached their
end; ``read_to_end`` yields every record until each assigned partition reached its end or the
deadline passed (``TopicEndTimeout``). Other errors raise ``TopicReadError`` (with the
``KafkaError``), which each caller turns into its own message.

"Its end" is the high watermark read at ``assign(..., ends_within=...)`` (as Kafka Connect's
KafkaBasedLog reads its end offsets first), or an end-of-partition event, whichever comes first. librdkafka reports a
partition's end only on a fetch that starts at the end and finds nothing new: a partition written
faster than one fetch round trip (a copying task's offsets, on a loaded machine) may never report
it, and the read used to time out (CI, a 30 s offsets read). End-of-partition still ends a
partition whose last offsets hold no record (transaction markers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from cdcworker.kafkaerrors import PARTITION_EOF, UNKNOWN_PARTITION, TopicLister

# A topic that was just created can be listed with a leader before that broker has taken the
# partition's leadership: its offsets answer NOT_LEADER for a moment (seen on a loaded machine,
# right after creating a progress topic). The leadership settles by itself, so these are retried.
_LEADER_SETTLING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
# At most this long for one partition's end: a broker that does not answer it leaves the read to
# the end-of-partition events (and the read's own deadline), not to a long offsets query first.
_ENDS_QUERY_SECONDS = 2.0


# What a broker answers for a topic created a moment ago, until its metadata has spread and its
# partitions have leaders: each settles by itself.
NOT_YET_VISIBLE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


class TopicNotVisible(RuntimeError):
    """The topic did not show with its partitions: a refusal, or ``NOT_YET_VISIBLE`` past the deadline."""

    def __init__(self, topic: str, error: KafkaError | None, timed_out: bool) -> None:
        super().__init__(f"{topic}: {error or 'no partitions'}")
        self.error, self.timed_out = error, timed_out


def visible_topic(client: TopicLister, topic: str, timeout: float) -> Any:  # Any: TopicMetadata (untyped in confluent-kafka's stubs)
    """The metadata of a topic just created (by this process or another), once the broker that
    answers lists it with its partitions; ``TopicNotVisible`` at once for any other error, or when
    it is still not visible after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        meta = client.list_topics(topic, timeout=timeout).topics.get(topic)
        error = None if meta is None else meta.error
        if meta is not None and error is None and meta.partitions:
            return meta
        settling = error is None or error.code() in NOT_YET_VISIBLE  # None: absent, or no partitions yet
        if not settling or time.monotonic() > deadline:
            raise TopicNotVisible(topic, error, settling)
        time.sleep(delay)  # metadata propagation: retry with backoff until the deadline
        delay = min(delay * 2, 1.0)


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
        self.end_offsets: dict[int, int] = {}  # high watermarks read at assign(ends_within=...)

    def assign(self, partitions: Iterable[int], offset: int = 0, *, ends_within: float | None = None,
               check: Callable[[], None] | None = None) -> None:
        """Start fetching ``partitions`` from ``offset``. ``ends_within``: first read each one's
        high watermark (the end ``read_to_end`` stops at), within that many seconds: before any
        fetch is in flight, since an offsets request waits behind a fetch's long poll on the same
        connection (~0.5 s a partition, measured). ``check`` as in ``read_to_end``."""
        self.assigned = set(partitions)
        self.at_end.clear()
        self.end_offsets = {} if ends_within is None else self._ends(time.monotonic() + ends_within, check)
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
        ends = self.end_offsets
        reached = self.at_end | {p for p, end in ends.items() if end <= 0}
        while not self.assigned <= reached:
            if check is not None:
                check()
            if time.monotonic() > deadline:
                raise TopicEndTimeout(self.topic, self.assigned - reached, timeout)
            msgs = self.fetch(min(0.5, max(0.0, deadline - time.monotonic())))
            reached |= self.reached | self._passed(ends, self.assigned - reached)
            yield from msgs

    def _ends(self, deadline: float, check: Callable[[], None] | None) -> dict[int, int]:
        """Each assigned partition's high watermark now, 0 for an empty one. Partitions whose
        offsets cannot be read now are left out: their end-of-partition events end them."""
        out: dict[int, int] = {}
        for p in sorted(self.assigned):
            if check is not None:
                check()  # a refused login shows here, not as a timed-out offsets query
            wait = min(_ENDS_QUERY_SECONDS, deadline - time.monotonic())
            try:
                low, high = watermarks(self.consumer, TopicPartition(self.topic, p), wait)
            except KafkaException:
                break  # the broker does not answer now: the rest would wait as long
            out[p] = 0 if high <= low else high
        return out

    def _passed(self, ends: dict[int, int], pending: set[int]) -> set[int]:
        """The pending partitions whose position reached the end read at the start."""
        tps = [TopicPartition(self.topic, p) for p in sorted(pending) if p in ends]
        if not tps:
            return set()
        return {tp.partition for tp in self.consumer.position(tps) if tp.offset >= ends[tp.partition]}


def watermarks(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    """``tp``'s low and high watermarks, retried while its leadership settles."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_SETTLING or time.monotonic() > deadline:
                raise
        time.sleep(0.1)  # back-off while the partition's leadership settles
