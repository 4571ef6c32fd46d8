"""The periodic (queued) offset write of an at-least-once task when the local queue is full."""

from __future__ import annotations

from typing import Any

from cdcworker.offsets import OffsetPartition, ShardGtid, Vgtid
from cdcworker.offsets.writes import TaskOffsets


class _Store:
    """Just what ``OffsetWrites`` uses of an ``OffsetStore``; the first produce finds the queue full."""

    def __init__(self) -> None:
        self.produced: list[Any] = []
        self.refuse = 1
        self.timeout = 1.0

    def own_producer(self) -> Any:
        class Producer:
            def poll(self, _t: float) -> int:
                return 0

            def flush(self, _t: float) -> int:
                return 0

        return Producer()

    def produce(self, _producer: Any, name: str, partition: Any, value: Any, on_delivery: Any) -> tuple[bytes, bytes]:
        if self.refuse:
            self.refuse -= 1
            raise BufferError("Local: Queue full")
        self.produced.append(value)
        return b"k", b"v"


def test_a_write_the_full_queue_refused_is_not_taken_as_written() -> None:
    # Before: the refused write still became "last written", so the same durable position was
    # never queued again and the stop skipped it too (a longer replay after a restart).
    offsets = TaskOffsets("conn", OffsetPartition("commerce"), lambda: ())
    store = _Store()
    position = Vgtid((ShardGtid("commerce", "0", "MySQL56/u:1-5"),))
    offsets.write(store, position, wait=False)  # type: ignore[arg-type]
    assert store.produced == [] and offsets.last_written is None
    offsets.write(store, position, wait=False)  # type: ignore[arg-type]
    assert len(store.produced) == 1 and offsets.last_written is position
    assert store.produced[0].to_bytes() == offsets.value(position).to_bytes()
