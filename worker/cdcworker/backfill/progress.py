"""Run progress: the progress topic's records (what is done) and rates/ETA for the views.

The topic is compacted with one record per chunk, keyed by (run, keyspace, shard, table, chunk):
a rerun, a retried Spark task or a restarted driver reads it and skips finished chunks. A chunk's
record is written only after Kafka acknowledged all of its rows, and it carries the chunk's high
watermark, which the streaming hand-off needs. Plan records (one per shard and table) say how
many chunks there are, so "all chunks of the shard are done" is decidable from the topic alone.

The hand-off protocol with the workers adds markers (docs/backfill.md, "The protocol"): an
``attempt`` record per attempt of a run (its *epoch*), the workers' ``held`` and ``handoff``
markers, and ``abandon`` markers: an attempt that failed (written by the job, that epoch only) or
a run cancelled or failed for good (written by the operator, every epoch). Workers release their
holds on an abandon marker; a later attempt of the same run opens the next epoch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

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
    """A finished chunk: its range, how many rows it emitted, its watermarks and the epoch (attempt
    generation, see ``AttemptRecord``) it was done in."""

    chunk: Chunk
    rows: int
    low: str
    high: str
    window_changes: int = 0
    finished_ms: int = 0
    epoch: int = 0

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
                "epoch": self.epoch,
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
    epoch: int = 0

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, self.keyspace, self.shard, HANDOFF, self.epoch])

    def value(self) -> bytes:
        return orjson.dumps({"type": HANDOFF, "run": self.run_id, "keyspace": self.keyspace, "shard": self.shard,
                             "position": self.position, "epoch": self.epoch})


def parse_handoff(value: bytes) -> HandoffDone | None:
    d = orjson.loads(value)
    if d.get("type") != HANDOFF:
        return None
    return HandoffDone(d["run"], d["keyspace"], d["shard"], d.get("position", ""), int(d.get("epoch") or 0))


HOLD = "held"


@dataclass(frozen=True, slots=True)
class HoldStarted:
    """Written by the worker once the offset holding (run, shard) back is stored: from here on
    none of ``tables``' change events on the shard is emitted live until the catch-up. A job that
    waits for it before reading the shard's chunks (``--await-holds``) gets, per key, no live
    record after its snapshot row (see docs/backfill.md)."""

    run_id: str
    keyspace: str
    shard: str
    tables: tuple[str, ...]
    hold_from: Mapping[str, str]
    epoch: int = 0

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, self.keyspace, self.shard, HOLD])

    def value(self) -> bytes:
        return orjson.dumps({"type": HOLD, "run": self.run_id, "keyspace": self.keyspace, "shard": self.shard,
                             "tables": list(self.tables), "hold_from": dict(self.hold_from), "epoch": self.epoch})


def parse_hold(value: bytes) -> HoldStarted | None:
    d = orjson.loads(value)
    if d.get("type") != HOLD:
        return None
    return HoldStarted(d["run"], d["keyspace"], d["shard"], tuple(d["tables"]), dict(d.get("hold_from") or {}),
                       int(d.get("epoch") or 0))


ATTEMPT = "attempt"
ABANDON = "abandon"


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """Written by the job after the plan, at the start of each attempt of a run. ``epoch`` counts the
    attempts that were abandoned before it: workers hold a run per epoch, so an attempt after a
    failed one is held (and handed off) afresh; chunks done in earlier epochs are skipped."""

    run_id: str
    keyspace: str
    epoch: int

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, self.keyspace, ATTEMPT, self.epoch])

    def value(self) -> bytes:
        return orjson.dumps({"type": ATTEMPT, "run": self.run_id, "keyspace": self.keyspace, "epoch": self.epoch})


@dataclass(frozen=True, slots=True)
class RunAbandoned:
    """The run will read no more chunks (in ``epoch``; ``None``: in any epoch, the run is over).

    Written only once the writer knows no chunk of the run is being emitted any more (the job
    after its lanes stopped; the operator once the run's pods are gone): workers then release
    the run's holds and catch its tables up, so no change is lost."""

    run_id: str
    keyspace: str
    epoch: int | None = None
    reason: str = ""
    by: str = ""  # "job" | "operator"

    def key(self) -> bytes:
        tail = [] if self.epoch is None else [self.epoch]
        return orjson.dumps([self.run_id, self.keyspace, ABANDON, *tail])

    def value(self) -> bytes:
        return orjson.dumps({"type": ABANDON, "run": self.run_id, "keyspace": self.keyspace, "epoch": self.epoch,
                             "reason": self.reason, "by": self.by})


Record = PlanRecord | ChunkDone | AttemptRecord | RunAbandoned


def parse_record(value: bytes) -> Record | None:
    """A plan, chunk, attempt or abandon record: what a run's state is folded from (None for other
    types: the workers' markers, the operator's records, future kinds)."""
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
            int(d.get("finished_ms", 0)), int(d.get("epoch") or 0),
        )
    if d.get("type") == ATTEMPT:
        return AttemptRecord(d["run"], d["keyspace"], int(d["epoch"]))
    if d.get("type") == ABANDON:
        epoch = d.get("epoch")
        return RunAbandoned(d["run"], d["keyspace"], None if epoch is None else int(epoch), str(d.get("reason") or ""),
                            str(d.get("by") or ""))
    return None


@dataclass
class RunState:
    """What the progress topic says about one run."""

    run_id: str
    plans: dict[tuple[str, str], PlanRecord] = field(default_factory=dict)  # (shard, table)
    done: dict[tuple[str, str, int], ChunkDone] = field(default_factory=dict)  # (shard, table, index)
    attempts: set[int] = field(default_factory=set)  # epochs opened by AttemptRecords
    abandoned: set[int] = field(default_factory=set)  # epochs abandoned by the job
    cancelled: RunAbandoned | None = None  # the run is over (every epoch abandoned)

    def apply(self, rec: Record | None) -> None:
        if isinstance(rec, PlanRecord) and rec.run_id == self.run_id:
            self.plans[(rec.shard, rec.table)] = rec
        elif isinstance(rec, ChunkDone) and rec.chunk.run_id == self.run_id:
            c = rec.chunk
            self.done[(c.shard, c.table, c.index)] = rec
        elif isinstance(rec, AttemptRecord) and rec.run_id == self.run_id:
            self.attempts.add(rec.epoch)
        elif isinstance(rec, RunAbandoned) and rec.run_id == self.run_id:
            if rec.epoch is None:
                self.cancelled = rec
            else:
                self.abandoned.add(rec.epoch)

    @property
    def epoch(self) -> int:
        """The latest epoch (0 until an attempt after an abandoned one opened another)."""
        return max(self.attempts, default=0)

    def is_abandoned(self, epoch: int) -> bool:
        return self.cancelled is not None or epoch in self.abandoned

    def next_epoch(self) -> int:
        """The epoch a new attempt runs in: the latest one, unless it was abandoned (a crashed
        attempt that wrote no marker leaves its epoch open: the workers still hold it)."""
        return self.epoch + 1 if self.epoch in self.abandoned else self.epoch

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

    def __init__(self, window_seconds: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
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


# --- run status and launch requests (the operator's side of the topic) ------------------------
#
# Besides plans, chunks and hand-off markers the topic carries three small record kinds, so the
# operator can follow runs and signals from Kafka alone (durable, ordered, compacted):
#
# * ``run``: written by ``shardcdc backfill`` (local and Spark) when a run starts and ends, with
#   the error of a failed run: the status's started/finished/error come from here;
# * ``signal``: an ``execute-snapshot`` / ``stop-snapshot`` signal a worker read (signal table or
#   Kafka channel) on a connector whose backfills run on an engine. Keyed by the signal id: every
#   task that sees the same signal writes the same key and the same bytes, so duplicates collapse;
# * ``signal-closed``: written by the operator when a signal-started run ended (succeeded, failed,
#   cancelled); a closed request is never launched again, whatever the status says.

RUN = "run"
SIGNAL = "signal"
SIGNAL_CLOSED = "signal-closed"


@dataclass(frozen=True, slots=True)
class RunStatus:
    """A run's lifecycle as the job saw it (``state``: running, succeeded, failed)."""

    run_id: str
    state: str
    started_ms: int
    finished_ms: int = 0
    error: str = ""

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, RUN])

    def value(self) -> bytes:
        return orjson.dumps({"type": RUN, "run": self.run_id, "state": self.state, "started_ms": self.started_ms,
                             "finished_ms": self.finished_ms, "error": self.error})


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A snapshot signal handed to the operator. ``tables`` are bare table names of the connector's
    keyspace, ``conditions`` table -> additional condition; empty ``tables`` on a stop = every table."""

    signal_id: str
    signal: str  # "execute-snapshot" | "stop-snapshot"
    keyspace: str
    tables: tuple[str, ...] = ()
    conditions: tuple[tuple[str, str], ...] = ()  # sorted (table, condition)
    channel: str = "source"

    def key(self) -> bytes:
        return orjson.dumps([SIGNAL, self.keyspace, self.signal_id])

    def value(self) -> bytes:
        return orjson.dumps({"type": SIGNAL, "signal": self.signal, "id": self.signal_id, "keyspace": self.keyspace,
                             "tables": list(self.tables), "conditions": dict(self.conditions),
                             "channel": self.channel})


@dataclass(frozen=True, slots=True)
class SignalClosed:
    """The operator's note that a signal-started run is over (``phase``: Succeeded, Failed, Cancelled)."""

    signal_id: str
    keyspace: str
    phase: str
    message: str = ""

    def key(self) -> bytes:
        return orjson.dumps([SIGNAL_CLOSED, self.keyspace, self.signal_id])

    def value(self) -> bytes:
        return orjson.dumps({"type": SIGNAL_CLOSED, "id": self.signal_id, "keyspace": self.keyspace,
                             "phase": self.phase, "message": self.message})


def parse_control(value: bytes) -> RunStatus | SignalRecord | SignalClosed | None:
    """A run, signal or signal-closed record (None for every other kind)."""
    d = orjson.loads(value)
    kind = d.get("type")
    if kind == RUN:
        return RunStatus(d["run"], d["state"], int(d.get("started_ms") or 0), int(d.get("finished_ms") or 0),
                         str(d.get("error") or ""))
    if kind == SIGNAL:
        return SignalRecord(d["id"], d["signal"], d["keyspace"], tuple(d.get("tables") or ()),
                            tuple(sorted((d.get("conditions") or {}).items())), d.get("channel", "source"))
    if kind == SIGNAL_CLOSED:
        return SignalClosed(d["id"], d["keyspace"], d["phase"], d.get("message", ""))
    return None
