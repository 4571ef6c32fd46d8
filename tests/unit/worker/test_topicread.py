"""cdcworker.topicread: the one "read a topic to its end" (end-of-partition events are not errors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cdcworker.kafkaerrors import PARTITION_EOF, UNKNOWN_PARTITION
from cdcworker.topicread import TopicEndTimeout, TopicReader, TopicReadError


class _Msg:
    def __init__(self, partition: int, offset: int = 0, value: bytes | None = b"v", error: int | None = None) -> None:
        self._p, self._o, self._v = partition, offset, value
        self._e = KafkaError(error) if error is not None else None

    def error(self) -> KafkaError | None:
        return self._e

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v


class _Consumer:
    """Hands out the scripted batches, one per consume(); then empty batches. ``watermarks``:
    each partition's (low, high); without them the offsets query times out, as a broker that
    does not answer."""

    def __init__(self, batches: list[list[_Msg]], watermarks: dict[int, tuple[int, int]] | None = None) -> None:
        self.batches: Iterator[list[_Msg]] = iter(batches)
        self.assigned: list[Any] = []
        self.watermarks = watermarks
        self.positions: dict[int, int] = {}

    def assign(self, tps: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def consume(self, num_messages: int, timeout: float) -> list[_Msg]:
        batch = next(self.batches, [])
        for m in batch:
            if m.error() is None:
                self.positions[m.partition()] = m.offset() + 1
        return batch

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.watermarks is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return self.watermarks[tp.partition]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001)) for tp in tps]


def test_reads_every_record_until_each_partition_reported_its_end() -> None:
    consumer = _Consumer([
        [_Msg(0, 0, b"a"), _Msg(1, 0, b"b")],
        [_Msg(0, error=PARTITION_EOF), _Msg(1, 1, b"c")],
        [_Msg(1, error=PARTITION_EOF)],
        [_Msg(0, 1, b"never read: both ends were reached")],
    ])
    reader = TopicReader(consumer, "t")  # type: ignore[arg-type]
    reader.assign([0, 1])
    assert consumer.assigned == [("t", 0, 0), ("t", 1, 0)]
    assert [m.value() for m in reader.read_to_end(5.0)] == [b"a", b"b", b"c"]


def test_a_record_after_an_end_makes_the_partition_pending_again() -> None:
    consumer = _Consumer([[_Msg(0, error=PARTITION_EOF), _Msg(0, 3, b"late")], [_Msg(0, error=PARTITION_EOF)]])
    reader = TopicReader(consumer, "t")  # type: ignore[arg-type]
    reader.assign([0])
    assert [m.value() for m in reader.read_to_end(5.0)] == [b"late"]


def test_an_end_once_reached_counts_on_a_topic_written_meanwhile() -> None:
    """An offsets topic a running task flushes to: every fetch holds records after the end event;
    the read stops after the batch that reached the end instead of waiting for a quiet moment."""
    consumer = _Consumer([[_Msg(0, 0, b"a"), _Msg(0, error=PARTITION_EOF), _Msg(0, 1, b"b")]]
                         + [[_Msg(0, i, b"later"), _Msg(0, error=PARTITION_EOF), _Msg(0, i + 1, b"later")]
                            for i in range(2, 100, 2)])
    reader = TopicReader(consumer, "t")  # type: ignore[arg-type]
    reader.assign([0])
    assert [m.value() for m in reader.read_to_end(5.0)] == [b"a", b"b"]


def test_other_errors_raise_with_the_kafka_error_unless_skipped() -> None:
    reader = TopicReader(_Consumer([[_Msg(0, error=KafkaError.TOPIC_AUTHORIZATION_FAILED)]]), "t")  # type: ignore[arg-type]
    reader.assign([0])
    with pytest.raises(TopicReadError) as info:
        list(reader.read_to_end(5.0))
    assert info.value.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert str(info.value).startswith("reading t: ")
    skipping = TopicReader(_Consumer([[_Msg(0, error=UNKNOWN_PARTITION)], [_Msg(0, error=PARTITION_EOF)]]), "t",  # type: ignore[arg-type]
                           skip={UNKNOWN_PARTITION})
    skipping.assign([0])
    assert list(skipping.read_to_end(5.0)) == []


def test_a_partition_that_never_ends_times_out_naming_it() -> None:
    reader = TopicReader(_Consumer([[_Msg(0, error=PARTITION_EOF)]]), "t")  # type: ignore[arg-type]
    reader.assign([0, 2])
    with pytest.raises(TopicEndTimeout) as info:
        list(reader.read_to_end(0.05))  # the fake consumer returns at once: a short busy read
    assert info.value.pending == [2]
    assert str(info.value) == "reading t: partitions [2] did not reach their end within 0.05s"


def test_check_runs_before_each_fetch_and_its_error_ends_the_read() -> None:
    reader = TopicReader(_Consumer([[_Msg(0, 0, b"a")]]), "t")  # type: ignore[arg-type]
    reader.assign([0])

    def refused() -> None:
        raise RuntimeError("authentication refused")

    with pytest.raises(RuntimeError, match="authentication refused"):
        list(reader.read_to_end(5.0, refused))


def test_fetch_notes_which_partitions_reported_their_end_in_that_fetch() -> None:
    reader = TopicReader(_Consumer([[_Msg(0, error=PARTITION_EOF)], []]), "t")  # type: ignore[arg-type]
    reader.assign([0])
    assert reader.fetch(0.1) == [] and reader.reached == {0}
    assert reader.fetch(0.1) == [] and reader.reached == set() and reader.at_end == {0}


def test_a_partition_written_faster_than_a_fetch_ends_at_the_high_watermark_read_first() -> None:
    """librdkafka reports no end while every fetch finds new records: the read stops at the end it
    read when it began (the CI failure: an offsets read timed out beside a copying task)."""
    consumer = _Consumer([
        [_Msg(0, 0, b"a"), _Msg(0, 1, b"b")],
        [_Msg(0, 2, b"c"), _Msg(1, 0, b"x")],
        [_Msg(0, 3, b"written after the read began")],
    ], watermarks={0: (0, 3), 1: (0, 1)})
    reader = TopicReader(consumer, "t")  # type: ignore[arg-type]
    reader.assign([0, 1], ends_within=5.0)
    assert [m.value() for m in reader.read_to_end(5.0)] == [b"a", b"b", b"c", b"x"]


def test_an_empty_partition_has_reached_its_end_before_any_fetch() -> None:
    reader = TopicReader(_Consumer([[_Msg(0, 7, b"never read")]], watermarks={0: (7, 7)}), "t")  # type: ignore[arg-type]
    reader.assign([0], ends_within=5.0)
    assert list(reader.read_to_end(5.0)) == []


def test_a_partition_ending_in_a_transaction_marker_ends_at_its_end_event() -> None:
    """The last offset is a commit marker, never a record: the end-of-partition event ends it."""
    consumer = _Consumer([[_Msg(0, 0, b"a"), _Msg(0, 1, b"b")], [_Msg(0, error=PARTITION_EOF)]],
                         watermarks={0: (0, 3)})
    reader = TopicReader(consumer, "t")  # type: ignore[arg-type]
    reader.assign([0], ends_within=5.0)
    assert [m.value() for m in reader.read_to_end(5.0)] == [b"a", b"b"]
