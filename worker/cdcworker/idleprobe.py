"""Proof that idle shards are caught up, so the low watermark moves while nothing changes there.

A shard's low watermark moves on its own acknowledged commits. An idle shard commits nothing, so
something else must show that it has no change the task has not made durable. VTGate's heartbeat
cannot: it only says VTGate sent nothing for a while, which is also what a shard whose tablet is
throttled, or lagging behind its primary, looks like. The probe asks instead: it reads each shard's
executed GTID set on its PRIMARY (a VStream started at ``current``: the position VTGate would start
a stream from) after noting the time ``t0``, then compares it with the task's durable position. A
shard whose durable position contains that set had every change committed before ``t0`` in Kafka,
so its watermark may move to ``t0``. The primary, not the stream's tablet type: a replica behind
its primary would "prove" changes durable that it has not applied yet.

The mark is ``floor(t0)`` less ``CLOCK_MARGIN_S``: commit timestamps are whole seconds of the
source's clock, so a change committed just after the probe, within ``t0``'s second or on a primary
whose clock is a little behind the worker's, still has a timestamp at or above the mark. (MySQL
stamps a transaction's events with its first statement's start: a transaction running longer than
the margin, open across a probe, can carry an older timestamp; this holds for every commit-time
watermark, the acknowledged-commit one included.)

The task asks for a probe on every VTGate heartbeat (sent only while the whole stream is idle) and
on its offset flushes (a quiet shard beside a busy one); a probe runs on its own thread, at most one
at a time and at most once per ``interval`` seconds, so the stream never waits for it. A shard whose
position cannot be read in time is skipped (no proof), the others are marked. Cost: one short
VStream per shard per interval.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from cdcworker.backfill.gtid import GtidError, covers
from cdcworker.offsets import Vgtid

log = logging.getLogger(__name__)

Positions = Callable[[Sequence[str]], Mapping[str, str]]  # shards -> those read (a failed one left out)
CLOCK_MARGIN_S = 1.0  # the source's clock may be this far behind the worker's


def caught_up(durable: Vgtid, current: Mapping[str, str]) -> list[str]:
    """The shards whose durable position contains their executed set ``current`` (pure)."""
    out = []
    for sg in durable:
        want = current.get(sg.shard)
        if want is None or sg.copying:
            continue
        try:
            if covers(sg.gtid, want):
                out.append(sg.shard)
        except GtidError:
            continue  # not a set we can compare (another flavor): no proof
    return out


class IdleProbe:
    """Marks shards idle (``mark(shard, t0)``) once their durable position covers the primary's."""

    def __init__(
        self,
        positions: Positions,
        durable: Callable[[], Vgtid | None],
        mark: Callable[[str, float], None],
        clock: Callable[[], float] = time.time,
        interval: float = 0.0,
    ) -> None:
        self._positions = positions
        self._durable = durable
        self._mark = mark
        self._clock = clock
        self._interval = interval
        self._next = 0.0  # monotonic time of the next probe allowed
        self._busy = threading.Lock()
        self._closed = threading.Event()
        self.probes = 0  # completed probes, for status and tests

    def probe(self) -> list[str]:
        """One probe, on the caller's thread: the shards marked idle."""
        t0 = math.floor(self._clock()) - CLOCK_MARGIN_S
        before = self._durable()
        if before is None:
            return []
        current = self._positions([sg.shard for sg in before])
        after = self._durable()  # durable positions only grow: a later one proves as much
        marked = caught_up(after, current) if after is not None else []
        for shard in marked:
            self._mark(shard, t0)
        self.probes += 1
        return marked

    def request(self) -> None:
        """Start a probe on a thread of its own unless one is running or the last one started less
        than ``interval`` seconds ago (never blocks)."""
        now = time.monotonic()
        if self._closed.is_set() or now < self._next or not self._busy.acquire(blocking=False):
            return
        self._next = now + self._interval
        threading.Thread(target=self._run, name="idle-probe", daemon=True).start()

    def _run(self) -> None:
        try:
            self.probe()
        except Exception as exc:  # a failed probe proves nothing; the next heartbeat tries again
            log.debug("idle probe failed: %s", exc)
        finally:
            self._busy.release()

    def close(self) -> None:
        self._closed.set()


class AckCheckpoints:
    """The low watermark of a busy shard, from the durable position (pure; one call per offset flush).

    A commit's acknowledgement reaches the watermark at once only when everything read is durable
    at a flush, which a stream under sustained load rarely is. So each flush notes, per shard, where
    the stream has read and the commit time of that last transaction. A later flush whose durable
    position contains the noted position makes that commit time the shard's acknowledged one.
    Under load the watermark then trails by about one flush interval instead of standing still.
    Cost per flush: two GTID-set parses per pending shard.
    """

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, float]] = {}  # shard -> (read position, its commit time)
        self._stale: dict[str, int] = {}  # shard -> transactions read when the stream went back

    def rewound(self, transactions: Mapping[str, int]) -> None:
        """The stream went back behind what it had read (an aborted Kafka transaction): forget the
        notes, and take no shard's last commit time until it has read a transaction since (its
        ``transactions`` counter moved), as that time belongs to a position after the new one."""
        self._pending.clear()
        self._stale = dict(transactions)

    def current(self, shard: str, transactions: int) -> bool:
        """Does the shard's last commit time belong to the position the stream is at?"""
        stale = self._stale.get(shard)
        if stale is None:
            return True
        if transactions > stale:
            del self._stale[shard]
            return True
        return False

    def flush(self, read: Vgtid, durable: Vgtid | None, commits: Mapping[str, tuple[float | None, int]]) -> dict[str, float]:
        """The shards whose noted commit is now durable, with its commit time; then note ``read``
        with each shard's last commit read (``commits``: shard -> (commit time, transactions read))
        for the shards not waiting already."""
        done: dict[str, float] = {}
        if self._pending and durable is not None:
            for shard in caught_up(durable, {s: gtid for s, (gtid, _) in self._pending.items()}):
                done[shard] = self._pending.pop(shard)[1]
        for sg in read:
            ts, transactions = commits.get(sg.shard, (None, 0))
            if ts is not None and not sg.copying and sg.shard not in self._pending and self.current(sg.shard, transactions):
                self._pending[sg.shard] = (sg.gtid, ts)
        return done


__all__ = ["AckCheckpoints", "IdleProbe", "caught_up"]
