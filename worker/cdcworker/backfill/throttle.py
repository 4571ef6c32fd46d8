"""Protecting production tablets: a rows-per-second budget per shard (token bucket, pure).

Each shard gets at most ``max_concurrent_chunks_per_shard`` lanes (see ``lanes.py``) and each lane
a ``rows_per_second / lanes`` share, so the shard's budget holds whatever Spark's parallelism is,
without coordination between executors.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RowThrottle:
    """``acquire(n)`` returns how long to wait before reading ``n`` more rows (0 = go)."""

    def __init__(self, rows_per_second: float, burst_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rows_per_second
        self.capacity = rows_per_second * burst_seconds
        self.clock = clock
        self.tokens = self.capacity
        self.last = clock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def acquire(self, rows: int) -> float:
        """Take ``rows`` tokens (the balance may go negative: a chunk is read whole); the delay is
        the time until the balance is back to zero."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= rows
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def wait(self, rows: int, sleep: Callable[[float], object] = time.sleep) -> float:
        delay = self.acquire(rows)
        if delay > 0:
            sleep(delay)  # pacing by design, not synchronisation
        return delay
