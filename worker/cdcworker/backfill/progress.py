"""Run progress: the progress topic's records (what is done) and rates/ETA for the views.

The topic is compacted with one record per chunk, keyed by (run, keyspace, shard, table, chunk):
a rerun, a retried Spark task or a restarted driver reads it and skips finished chunks. A chunk's
record is written only after Kafka acknowledged all of its rows, and it carries the chunk's high
watermark, which the streaming hand-off needs. Plan records (one per shard and table) say how
many chunks there are, so "all chunks of the shard are done" is decidable from the topic alone.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcworker.backfill.spec import Chunk, Key

PLAN = "plan"


def plan_key(run_id: str, keyspace: str, shard: str, table: str) -> bytes:
    return orjson.dumps([run_id, keyspace, shard, table, PLAN])


@dataclass(frozen=True, slots=True)
class PlanRecord:
    run_id: str
    keyspace: str
    shard: str
    table: str
    pk: tuple[str, ...]
    chunks: int
    estimated_rows: int
    method: str  # "even" | "query"
    points: tuple[Key, ...] = ()  # split points: a rerun rebuilds exactly the same chunks
    condition: str | None = None

    def key(self) -> bytes:
        return plan_key(self.run_id, self.keyspace, self.shard, self.table)

    def value(self) -> bytes:
        return orjson.dumps(
            {
                "type": PLAN,
                "run": self.run_id,
                "keyspace": self.keyspace,
                "shard": self.shard,
                "table": self.table,
                "pk": list(self.pk),
                "chunks": self.chunks,
                "estimated_rows": self.estimated_rows,
                "method": self.method,
                "points": [list(p) for p in self.points],
                "condition": self.condition,
            }
        )


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """A finished chunk: its range, how many rows it emitted and its watermarks."""

    chunk: Chunk
    rows: int
    low: str
    high: str
    window_changes: int = 0
    finished_ms: int = 0

    def key(self) -> bytes:
        return self.chunk.progress_key()

    def value(self) -> bytes:
        return orjson.dumps(
            {
                "type": "chunk",
                **self.chunk.to_dict(),
                "rows": self.rows,
                "low": self.low,
                "high": self.high,
                "window_changes": self.window_changes,
                "finished_ms": self.finished_ms,
            }
        )


HANDOFF = "handoff"


@dataclass(frozen=True, slots=True)
class HandoffDone:
    """Written by the worker once a shard rejoined its live stream after the run's catch-up: the
    hand-off of (run, shard) is done and is never started again (a restart, a new generation)."""

    run_id: str
    keyspace: str
    shard: str
    position: str

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, self.keyspace, self.shard, HANDOFF])

    def value(self) -> bytes:
        return orjson.dumps({"type": HANDOFF, "run": self.run_id, "keyspace": self.keyspace, "shard": self.shard,
                             "position": self.position})


def parse_handoff(value: bytes) -> HandoffDone | None:
    d = orjson.loads(value)
    if d.get("type") != HANDOFF:
        return None
    return HandoffDone(d["run"], d["keyspace"], d["shard"], d.get("position", ""))


def parse_record(value: bytes) -> PlanRecord | ChunkDone | None:
    """A plan or chunk record (None for other types: hand-off markers, future kinds)."""
    d = orjson.loads(value)
    if d.get("type") == PLAN:
        return PlanRecord(
            d["run"], d["keyspace"], d["shard"], d["table"], tuple(d["pk"]), int(d["chunks"]),
            int(d["estimated_rows"]), d.get("method", ""), tuple(tuple(p) for p in d.get("points", ())),
            d.get("condition"),
        )
    if d.get("type") == "chunk":
        return ChunkDone(
            Chunk.from_dict(d), int(d["rows"]), d["low"], d["high"], int(d.get("window_changes", 0)),
            int(d.get("finished_ms", 0)),
        )
    return None


@dataclass
class RunState:
    """What the progress topic says about one run."""

    run_id: str
    plans: dict[tuple[str, str], PlanRecord] = field(default_factory=dict)  # (shard, table)
    done: dict[tuple[str, str, int], ChunkDone] = field(default_factory=dict)  # (shard, table, index)

    def apply(self, rec: PlanRecord | ChunkDone | None) -> None:
        if isinstance(rec, PlanRecord) and rec.run_id == self.run_id:
            self.plans[(rec.shard, rec.table)] = rec
        elif isinstance(rec, ChunkDone) and rec.chunk.run_id == self.run_id:
            c = rec.chunk
            self.done[(c.shard, c.table, c.index)] = rec

    def is_done(self, chunk: Chunk) -> bool:
        return (chunk.shard, chunk.table, chunk.index) in self.done

    def table_complete(self, shard: str, table: str) -> bool:
        plan = self.plans.get((shard, table))
        if plan is None:
            return False
        return all((shard, table, i) in self.done for i in range(plan.chunks))

    def shard_complete(self, shard: str) -> bool:
        tables = [t for s, t in self.plans if s == shard]
        return bool(tables) and all(self.table_complete(shard, t) for t in tables)

    @property
    def complete(self) -> bool:
        return bool(self.plans) and all(self.table_complete(s, t) for s, t in self.plans)

    def watermarks(self, shard: str, table: str) -> list[tuple[Key | None, Key | None, str]]:
        """(lo, hi, high watermark) of every finished chunk of a shard's table, by chunk index."""
        out = [(d.chunk.index, d) for (s, t, _), d in self.done.items() if s == shard and t == table]
        return [(d.chunk.lo, d.chunk.hi, d.high) for _, d in sorted(out, key=lambda x: x[0])]


def load_run(records: Iterable[tuple[bytes | None, bytes | None]], run_id: str) -> RunState:
    """Fold progress-topic records (key, value) into the run's state (tombstones ignored)."""
    state = RunState(run_id)
    for _key, value in records:
        if value is not None:
            state.apply(parse_record(value))
    return state


# --- rates and ETA (pure) --------------------------------------------------------------------


@dataclass
class Totals:
    chunks: int = 0
    rows: int = 0  # estimated from the plan
    chunks_done: int = 0
    rows_done: int = 0


class ProgressTracker:
    """Per (shard, table) totals and done counts; overall rate over a sliding window and ETA."""

    def __init__(self, window_seconds: float = 10.0, clock: Any = time.monotonic) -> None:
        self.items: dict[tuple[str, str], Totals] = {}
        self.window = window_seconds
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()
        self.started = clock()
        self._seen: set[tuple[str, str, int]] = set()

    def plan(self, plans: Iterable[PlanRecord]) -> None:
        for p in plans:
            t = self.items.setdefault((p.shard, p.table), Totals())
            t.chunks, t.rows = p.chunks, p.estimated_rows

    def done(self, rec: ChunkDone) -> None:
        c = rec.chunk
        ident = (c.shard, c.table, c.index)
        if ident in self._seen:
            return
        self._seen.add(ident)
        t = self.items.setdefault((c.shard, c.table), Totals())
        t.chunks_done += 1
        t.rows_done += rec.rows
        self.samples.append((self.clock(), self.rows_done))

    @property
    def rows_done(self) -> int:
        return sum(t.rows_done for t in self.items.values())

    @property
    def rows_total(self) -> int:
        # A table that grew during the run reports more rows than estimated: never below done.
        return sum(max(t.rows, t.rows_done) for t in self.items.values())

    @property
    def chunks_done(self) -> int:
        return sum(t.chunks_done for t in self.items.values())

    @property
    def chunks_total(self) -> int:
        return sum(t.chunks for t in self.items.values())

    def rate(self) -> float:
        """Rows per second over the last ``window`` seconds (since the start before that)."""
        now = self.clock()
        while len(self.samples) > 1 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        if not self.samples:
            return 0.0
        t0, r0 = (self.started, 0) if now - self.started <= self.window else self.samples[0]
        dt = now - t0
        return (self.rows_done - r0) / dt if dt > 0 else 0.0

    def eta_seconds(self) -> float | None:
        rate = self.rate()
        remaining = self.rows_total - self.rows_done
        if remaining <= 0:
            return 0.0
        return remaining / rate if rate > 0 else None

    def snapshot(self) -> Mapping[tuple[str, str], Totals]:
        return dict(self.items)
