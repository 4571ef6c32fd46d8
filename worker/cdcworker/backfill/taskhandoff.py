"""The worker task's side of the hand-off: which of its shards hold, catch up or rejoin (I/O at the
edges: the progress topic and the offset value; the rule itself is ``handoff.ShardHandoff``).

The task calls :meth:`TaskHandoff.start` once, :meth:`TaskHandoff.pending` at offset flushes and,
when it is true, :meth:`TaskHandoff.advance` once everything streamed so far is durable. A run is
followed by a shard when the progress topic has its plan for that shard and no ``HandoffDone``
marker for (run, shard):

* no state -> ``held`` at the shard's position (``holds``: the run's tables on that shard;
  extended if more plans show up); once the offset carrying the state is stored, a ``HoldStarted``
  marker for (run, shard) goes to the progress topic: the job may read the shard's chunks from then
  on (every live record of those tables is in Kafka before any snapshot row);
* ``held`` and every chunk of those tables done -> ``catchup``: ``rejoin_at`` is the shard's
  position, the shard's gtid is rewound to the smallest chunk high watermark or hold, and the
  first pass (``scan``) finds each key's final change;
* ``catchup`` and the position passed every high watermark and ``rejoin_at`` -> the marker is
  written to the progress topic, then the state is dropped.

Every change makes the task restart its stream from the returned position with a processor built
for the new states, after writing the offset with the new state (one record: position and state
move together). A table whose hold begins after some of its chunks are done (the job did not wait
for the marker, or the worker was behind) is held *late*: its live records may have landed after
snapshot rows, so the catch-up re-states each key's last change before its high watermark.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from cdcworker.backfill.gtid import covers
from cdcworker.backfill.handoff import CATCHUP, HELD, OFFSET_FIELD, Finals, ShardHandoff, marks_from_run
from cdcworker.backfill.progress import (
    ChunkDone,
    HandoffDone,
    PlanRecord,
    RunState,
    parse_handoff,
    parse_record,
)
from cdcworker.backfill.store import ProgressStore
from cdcworker.offsets import ShardGtid, Vgtid

log = logging.getLogger(__name__)

LOOKUP_INTERVAL = 2.0  # seconds between looks for a progress topic that does not exist yet

__all__ = ["OFFSET_FIELD", "HoldStarted", "ProgressFeed", "TaskHandoff", "parse_hold", "progress_topic_of"]

HOLD = "held"


@dataclass(frozen=True, slots=True)
class HoldStarted:
    """Written by the worker once the offset holding (run, shard) back is stored: from here on
    none of ``tables``' change events on the shard is emitted live until the catch-up. A job that
    waits for it before reading the shard's chunks gets, per key, no live record after its
    snapshot row (see docs/backfill.md)."""

    run_id: str
    keyspace: str
    shard: str
    tables: tuple[str, ...]
    hold_from: Mapping[str, str]

    def key(self) -> bytes:
        return orjson.dumps([self.run_id, self.keyspace, self.shard, HOLD])

    def value(self) -> bytes:
        return orjson.dumps({"type": HOLD, "run": self.run_id, "keyspace": self.keyspace, "shard": self.shard,
                             "tables": list(self.tables), "hold_from": dict(self.hold_from)})


def parse_hold(value: bytes) -> HoldStarted | None:
    d = orjson.loads(value)
    if d.get("type") != HOLD:
        return None
    return HoldStarted(d["run"], d["keyspace"], d["shard"], tuple(d["tables"]), dict(d.get("hold_from") or {}))


def progress_topic_of(topic_prefix: str) -> str:
    """The progress topic the backfill job writes by default (``job.progress_topic``)."""
    return f"{topic_prefix}.backfill-progress"


class ProgressFeed:
    """The progress topic, tailed: every run of the keyspace and the hand-off markers."""

    def __init__(self, client_config: Mapping[str, Any], topic: str, keyspace: str) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.keyspace = keyspace
        self.runs: dict[str, RunState] = {}  # in order of first appearance
        self.handed_off: set[tuple[str, str]] = set()  # (run, shard)
        self._consumer: Any = None
        self._assigned = False
        self._next_lookup = 0.0
        self._next = 0  # offset of the next record to read
        self._producer: Producer | None = None

    def _open(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer({**self.client_config, "group.id": f"shardcdc-handoff-{uuid.uuid4()}",
                                       "enable.auto.commit": False, "enable.partition.eof": True,
                                       "auto.offset.reset": "earliest"})
        if not self._assigned:
            now = time.monotonic()
            if now < self._next_lookup:
                return None
            self._next_lookup = now + LOOKUP_INTERVAL
            # All topics, not this one: naming it would auto-create it on brokers that allow that.
            meta = self._consumer.list_topics(timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return None  # no backfill ever ran: look again later
            self._consumer.assign([TopicPartition(self.topic, 0, 0)])
            self._assigned = True
        return self._consumer

    def poll(self, to_end: bool = False, timeout: float = 30.0) -> None:
        """Apply the records fetched so far (non-blocking: offset flushes call it), or with ``to_end``
        everything up to the topic's current end (at start)."""
        c = self._open()
        if c is None:
            return
        end = c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout)[1] if to_end else 0
        deadline = time.monotonic() + timeout
        while not to_end or self._next < end:
            msg = c.poll(0.5 if to_end else 0)
            if msg is None:
                if not to_end:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {self.topic}: offset {end} not reached after {timeout}s")
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"reading {self.topic}: {err}")
            self._next = msg.offset() + 1
            value = msg.value()
            if value is not None:
                self._apply(value)

    def _apply(self, value: bytes) -> None:
        marker = parse_handoff(value)
        if marker is not None:
            if marker.keyspace == self.keyspace:
                self.handed_off.add((marker.run_id, marker.shard))
            return
        rec = parse_record(value)
        if isinstance(rec, PlanRecord):
            run_id, keyspace = rec.run_id, rec.keyspace
        elif isinstance(rec, ChunkDone):
            run_id, keyspace = rec.chunk.run_id, rec.chunk.keyspace
        else:
            return
        if keyspace == self.keyspace:
            self.runs.setdefault(run_id, RunState(run_id)).apply(rec)

    def _write(self, records: list[Any]) -> None:
        if self._producer is None:
            self._producer = Producer({**self.client_config, "enable.idempotence": True, "acks": "all"})
        ProgressStore(self.client_config, self.topic).write(self._producer, records)

    def mark_handed_off(self, run_id: str, shard: str, position: str) -> None:
        self._write([HandoffDone(run_id, self.keyspace, shard, position)])
        self.handed_off.add((run_id, shard))

    def mark_held(self, h: ShardHandoff) -> None:
        self._write([cast(Any, HoldStarted(h.run_id, self.keyspace, h.shard, h.tables, h.holds))])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._assigned = False
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None


class TaskHandoff:
    """The hand-off state of one task's shards (restored from its offset value)."""

    def __init__(self, feed: ProgressFeed, stored: Mapping[str, Any] | None = None,
                 scan: Callable[[ShardHandoff], Finals] | None = None) -> None:
        self.feed = feed
        self.scan = scan  # the catch-up's first pass (catchup.finals_scanner); None: no finals
        self.states: dict[str, ShardHandoff] = {}
        for shard, d in ((stored or {}).get(OFFSET_FIELD) or {}).items():
            self.states[shard] = ShardHandoff.from_offset_field(shard, d)
        self.transitions = 0
        self._announced: set[tuple[str, str, tuple[str, ...]]] = set()  # (run, shard, tables) marked held

    @property
    def active(self) -> bool:
        return bool(self.states)

    def offset_extra(self) -> tuple[tuple[str, Any], ...]:
        """The extra offset field while any shard has a state (none otherwise: a plain Debezium value)."""
        if not self.states:
            return ()
        return ((OFFSET_FIELD, {s: h.to_offset_field() for s, h in sorted(self.states.items())}),)

    def _tables(self, run: RunState, shard: str) -> tuple[str, ...]:
        return tuple(sorted(t for s, t in run.plans if s == shard))

    def _pending(self, shard: str) -> RunState | None:
        for run in self.feed.runs.values():
            if (run.run_id, shard) not in self.feed.handed_off and self._tables(run, shard):
                return run
        return None

    def _next(self, position: Vgtid) -> tuple[dict[str, ShardHandoff], dict[str, str], list[ShardHandoff]]:
        """The states after ``position`` (pure, given what the feed read): (states, rewound gtids,
        hand-offs finished at ``position``)."""
        states: dict[str, ShardHandoff] = {}
        gtids: dict[str, str] = {}
        done: list[ShardHandoff] = []
        for sg in position:
            shard, gtid = sg.shard, sg.gtid
            h = self.states.get(shard)
            known = gtid.startswith("MySQL56/")
            if h is None and known:  # a hold begins at a real position (not "current" or a copy)
                run = self._pending(shard)
                if run is not None:
                    h = ShardHandoff(shard, run.run_id, ())
            if h is not None and h.phase == HELD:
                run = self.feed.runs.get(h.run_id)
                tables = tuple(sorted(set(h.tables) | set(self._tables(run, shard) if run is not None else ())))
                if tables != h.tables:
                    # Tables join the hold here: their changes up to this position were emitted live.
                    new = [t for t in tables if t not in h.holds]
                    late = [t for t in new if run is not None and _any_done(run, shard, t)]
                    h = replace(h, tables=tables, holds={**h.holds, **dict.fromkeys(new, gtid)},
                                late=tuple(sorted({*h.late, *late})))
                if run is not None and known and all(run.table_complete(shard, t) for t in h.tables):
                    h = h.to_catchup({t: marks_from_run(run.watermarks(shard, t)) for t in h.tables}, rejoin_at=gtid)
                    start = h.catchup_start()
                    if start is not None and covers(gtid, start):
                        gtids[shard] = start
            elif h is not None and h.phase == CATCHUP and known and h.finished(gtid):
                done.append(h)
                h = None
            if h is not None:
                states[shard] = h
        return states, gtids, done

    def pending(self, position: Vgtid | None) -> bool:
        """Would :meth:`advance` change anything at ``position``? (reads what was fetched; no I/O wait).

        Called right after the offset was written at ``position``: states that were in it are
        announced (``HoldStarted``) if they were not yet."""
        self.feed.poll()
        if position is None:
            return False
        self._announce()
        return self._next(position)[0] != self.states

    def _announce(self) -> None:
        for h in self.states.values():
            ident = (h.run_id, h.shard, h.tables)
            if ident not in self._announced:
                self.feed.mark_held(h)
                self._announced.add(ident)
                log.info("shard %s: backfill %s: holding %s back since %s", h.shard, h.run_id, ", ".join(h.tables),
                         ", ".join(sorted(set(h.holds.values()))))

    def advance(self, position: Vgtid) -> tuple[Vgtid, bool]:
        """Move each shard on at ``position`` (durable: everything before it is in Kafka); returns
        (where to stream from, changed). Finished hand-offs are marked in the progress topic first,
        then dropped: a crash in between resumes the catch-up, which is finished at once."""
        states, gtids, done = self._next(position)
        for h in done:
            self.feed.mark_handed_off(h.run_id, h.shard, (position.get(h.shard) or ShardGtid("", h.shard, "")).gtid)
            log.info("shard %s: backfill %s handed off; %s rejoined the live stream", h.shard, h.run_id,
                     ", ".join(h.tables))
        for shard, h in states.items():
            old = self.states.get(shard)
            if old is None or old.phase != h.phase:
                where = f" from {gtids[shard]} (rejoining at {h.rejoin_at})" if shard in gtids else ""
                log.info("shard %s: backfill %s: %s %s%s", shard, h.run_id, h.phase, ", ".join(h.tables), where)
        for shard, h in states.items():
            if h.phase == CATCHUP and h.finals is None:
                states[shard] = h.with_finals(self._finals(h))
        changed = states != self.states
        self.states = states
        if changed:
            self.transitions += 1
        if gtids:
            position = Vgtid(tuple(ShardGtid(sg.keyspace, sg.shard, gtids.get(sg.shard, sg.gtid), sg.table_p_ks)
                                   for sg in position))
        return position, changed

    def start(self, position: Vgtid) -> Vgtid:
        """At task start: read the whole topic, reload the marks of a restored ``catchup`` state
        (they are not in the offset value), and advance from the stored position."""
        self.feed.poll(to_end=True)
        for shard, h in list(self.states.items()):
            if not h.holds:
                # A state without hold positions (written before holds were recorded): its tables
                # were emitted live, so they are held late from here.
                sg = position.get(shard)
                if sg is not None and sg.gtid.startswith("MySQL56/"):
                    h = replace(h, holds=dict.fromkeys(h.tables, sg.gtid), late=h.tables)
            if h.phase == CATCHUP and not h.marks:
                h = self._with_marks(h)
            self.states[shard] = h
        return self.advance(position)[0]

    def _finals(self, h: ShardHandoff) -> Finals:
        if self.scan is None:
            log.warning("shard %s: no catch-up scan configured: deletes before their chunk are not emitted", h.shard)
            return {}
        t0 = time.monotonic()
        finals = self.scan(h)
        log.info("shard %s: backfill %s: %d final change(s) before their chunks' high watermarks (scanned in %.1fs)",
                 h.shard, h.run_id, sum(len(f) for f in finals.values()), time.monotonic() - t0)
        return finals

    def _with_marks(self, h: ShardHandoff) -> ShardHandoff:
        run = self.feed.runs.get(h.run_id)
        if run is None:
            raise RuntimeError(f"backfill {h.run_id} is not in {self.feed.topic}: cannot resume its catch-up")
        marks = {t: marks_from_run(run.watermarks(h.shard, t)) for t in h.tables}
        return h.to_catchup(marks, h.rejoin_at)

    def close(self) -> None:
        self.feed.close()


def _any_done(run: RunState, shard: str, table: str) -> bool:
    return any(s == shard and t == table for s, t, _ in run.done)
