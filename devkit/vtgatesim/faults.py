"""Fault injection for VStream calls, set for the whole server or for the next stream(s)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .executor import UNAVAILABLE, VTError

if TYPE_CHECKING:
    from .vstream import VStream


@dataclass
class FaultPlan:
    """What to do to a stream. Counts are VEvents delivered to the client on that stream."""

    fail_after_events: int | None = None
    fail_code: int = 14  # UNAVAILABLE
    fail_message: str = "vttablet: rpc error: code = Unavailable desc = injected fault"
    drop_after_events: int | None = None  # end the call as a broken transport would
    stall_after_events: int | None = None  # stop sending until release(), stall_timeout or the client cancels
    stall_timeout: float | None = None  # seconds; a stall ends by itself after this long
    delay_per_response: float = 0.0  # seconds, slows the stream down
    anonymise_columns: bool = False  # FIELD names @1, @2, ... (the vstreamer BEST_EFFORT bug)
    # Tablet-side faults, absorbed by vtgate's retry loop: in each shard of the stream, the first
    # `tablet_failures` tablet connections end with `tablet_fail_code` after `tablet_fail_after_events`
    # events of that connection. UNAVAILABLE / FAILED_PRECONDITION are retried from the last position
    # vtgate sent (three consecutive failures end the VStream); other codes end it at once.
    tablet_fail_after_events: int | None = None
    tablet_fail_code: int = 14  # UNAVAILABLE
    tablet_fail_message: str = "vttablet: rpc error: code = Unavailable desc = injected tablet fault"
    tablet_failures: int = 1
    # A lagging tablet: the tablet streams of these shards send nothing until release_lag() (or the
    # client cancels), the others stream on; what vtgate does with each shard's events (journals
    # included) is unchanged. `lagging` is set when one of them starts waiting.
    lag_shards: tuple[str, ...] = ()
    released: threading.Event = field(default_factory=threading.Event)
    stalled: threading.Event = field(default_factory=threading.Event)  # set when a stream starts stalling
    lag_released: threading.Event = field(default_factory=threading.Event)
    lagging: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()

    def release_lag(self) -> None:
        self.lag_released.set()

    def lag(self, vs: VStream, shard: str) -> None:
        """Hold a lagging shard's tablet stream (called before each binlog entry it would read)."""
        if shard not in self.lag_shards or self.lag_released.is_set():
            return
        self.lagging.set()
        while not self.lag_released.wait(0.05) and not vs.cancelled.is_set():
            pass

    def apply(self, vs: VStream, responses: list[bytes], counts: list[int]) -> list[bytes]:
        """Called under the stream lock before a group of responses is queued."""
        sent = vs.events_sent
        if self.fail_after_events is not None and sent >= self.fail_after_events:
            raise VTError(self.fail_code, self.fail_message)
        if self.drop_after_events is not None and sent >= self.drop_after_events:
            raise VTError(UNAVAILABLE, "Socket closed")
        if self.stall_after_events is not None and sent >= self.stall_after_events and not self.released.is_set():
            self.stalled.set()
            deadline = None if self.stall_timeout is None else time.monotonic() + self.stall_timeout
            while not self.released.wait(0.05):
                if vs.cancelled.is_set():
                    return []
                if deadline is not None and time.monotonic() >= deadline:
                    self.released.set()  # the stall is over for good
                    break
        if self.delay_per_response > 0:
            vs.cancelled.wait(self.delay_per_response * len(responses))
        return responses


class Faults:
    """Server-wide plan plus a queue of one-shot plans for the next VStream calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: FaultPlan | None = None
        self.pending: list[FaultPlan] = []

    def set_server(self, plan: FaultPlan | None) -> None:
        with self.lock:
            self.server = plan

    def next_stream(self, plan: FaultPlan) -> None:
        with self.lock:
            self.pending.append(plan)

    def clear(self) -> None:
        with self.lock:
            self.server = None
            self.pending.clear()

    def take(self) -> FaultPlan | None:
        with self.lock:
            if self.pending:
                return self.pending.pop(0)
            return self.server
