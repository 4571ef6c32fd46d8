"""Reads the VStream on its own thread into a small bounded queue.

The bound is the back-pressure: while the processor is blocked on Kafka the queue fills, the
reader stops pulling, and gRPC flow control stops VTGate. The queue holds at most ``depth``
responses and, with ``max_bytes`` (``max.queue.size.in.bytes``), at most that many bytes of them
plus the one response the reader holds while it waits. The timed ``next`` lets the task flush
offsets while the source is idle.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Iterable
from typing import Any

IDLE = object()  # ``next`` timed out: nothing arrived
END = object()  # VTGate completed the stream


class ResponseReader:
    def __init__(self, call: Any, depth: int = 16, max_bytes: int = 0, items: Iterable[Any] | None = None) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """``items``: what the thread iterates, if not ``call`` itself (a wrapper of its responses)."""
        # A C SimpleQueue: a fraction of queue.Queue's per-item locking.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()  # Any: responses (bytes or vitessapi messages) and the reader's end and error markers
        # Its bound: room as tokens in a second SimpleQueue. The reader takes one per response and
        # waits when none is left; ``next`` gives them back half the depth at a time, so a reader
        # held by a full queue wakes once per half queue, not per response. A BoundedSemaphore
        # ran Python code under a Condition on both threads for every response.
        self._room: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(depth):
            self._room.put(None)
        self._owed = 0  # tokens taken by responses ``next`` returned, not given back yet
        self._give_back = max(1, depth // 2)
        self._max_bytes = max_bytes
        # Byte accounting only when bounded by bytes: a lock per response is not free.
        self._budget = threading.Condition()
        self._sizes: collections.deque[int] = collections.deque()  # of queued responses, in order
        self.queued_bytes = 0
        self.peak_bytes = 0
        self.waiting = threading.Event()  # set while the reader holds a response for lack of room
        self._closed = False
        self._call = call
        target = self._run_bounded if max_bytes > 0 else self._run
        self._thread = threading.Thread(target=target, args=(call if items is None else items,), name="vstream-reader", daemon=True)
        self._thread.start()

    def _run(self, responses: Iterable[Any]) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        put = self._queue.put
        room = self._room.get
        try:
            for response in responses:
                room()
                put(response)
            put(END)
        except BaseException as exc:  # handed to the processing thread, which decides
            put(exc)

    def _run_bounded(self, responses: Iterable[Any]) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        put = self._queue.put
        room = self._room.get
        budget = self._budget
        try:
            for response in responses:
                # Raw responses (the native path) are bytes; parsed ones are sized by upb.
                size = len(response) if type(response) is bytes else response.ByteSize()
                room()
                with budget:
                    if self.queued_bytes >= self._max_bytes and not self._closed:
                        self.waiting.set()
                        # After a cancel the next pull raises CANCELLED, which the processor reads.
                        budget.wait_for(lambda: self.queued_bytes < self._max_bytes or self._closed)
                        self.waiting.clear()
                    self.queued_bytes += size
                    self.peak_bytes = max(self.peak_bytes, self.queued_bytes)
                    self._sizes.append(size)
                put(response)
            put(END)
        except BaseException as exc:
            put(exc)

    def cancel(self) -> None:
        """Cancel the call and wake the reader if it waits for room.

        The channel runs unary-stream calls on their consuming thread (``open_channel``), so a
        cancelled call runs no callback of its own while that thread waits here.
        """
        self._call.cancel()
        self._close()

    def _close(self) -> None:
        with self._budget:
            self._closed = True
            self._budget.notify()

    def next(self, timeout: float) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return IDLE
        if item is not END and not isinstance(item, BaseException):
            # The reader waits for a token only when every one is taken: then the queue holds
            # the rest (depth - owed >= depth / 2 responses), so the owed ones come back before
            # the queue runs dry (no wait on a reader that waits on us).
            self._owed += 1
            if self._owed >= self._give_back:
                give = self._room.put
                for _ in range(self._owed):
                    give(None)
                self._owed = 0
            if self._max_bytes > 0:
                with self._budget:
                    self.queued_bytes -= self._sizes.popleft()
                    self._budget.notify()
        return item
