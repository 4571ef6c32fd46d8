"""Reconciles of one connector run one at a time, and a request a later reconcile served is dropped.

kopf's handlers, the resync timer and the pod index's kicks (``handlers``) all ask for a reconcile of
a connector; one lock per connector serialises them. The timer and kicks may ``coalesce``: their
pass is skipped when a reconcile that began after they asked has completed meanwhile, since
reconcile is level-based and reads everything afresh (issue 30: at 1,024 shards each pass takes
seconds, and timer passes queued behind kicked ones doubled the work of a scale).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Served"]

T = TypeVar("T")
Key = tuple[str, str]  # (namespace, connector)


class Served:
    """When each connector's last completed reconcile began (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._began: dict[Key, float] = {}
        self._clock = clock

    async def run(self, key: Key, lock: asyncio.Lock, reconcile: Callable[[], Awaitable[T]], *,
                  coalesce: bool = False, stopped: Callable[[], bool] = lambda: False,
                  starting: Callable[[], None] = lambda: None) -> tuple[bool, T | None]:
        """(whether it ran, its result): ``reconcile`` under ``lock``, unless ``stopped()`` says so
        once the lock is held, or (``coalesce``) a reconcile begun since this call has completed.
        ``starting`` is called just before it runs; a raising ``reconcile`` records nothing."""
        asked = self._clock()
        async with lock:
            if stopped() or (coalesce and self._began.get(key, -math.inf) >= asked):
                return False, None
            starting()
            began = self._clock()
            result = await reconcile()
            self._began[key] = began
            return True, result
