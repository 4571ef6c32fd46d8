"""The worker task's side of the hand-off: which of its shards hold, catch up or rejoin (I/O at the
edges: the progress topic and the offset value; the rule itself is ``handoff.ShardHandoff``).

The task calls :meth:`TaskHandoff.start` once, :meth:`TaskHandoff.pending` at offset flushes and,
when it is true, :meth:`TaskHandoff.advance` once everything streamed so far is durable, then
stores the offset with the new state and calls :meth:`TaskHandoff.announce`. A run is followed by
a shard, per *epoch* (``progress.AttemptRecord``), when the progress topic has its plan for that
shard, the epoch is not abandoned, and there is no ``HandoffDone`` marker for (run, epoch, shard):

* no state -> ``held`` at the shard's position (``holds``: the run's tables on that shard;
  extended if more plans show up); once the offset carrying the state is stored, a ``HoldStarted``
  marker for (run, shard) goes to the progress topic: the job may read the shard's chunks from then
  on (every live record of those tables is in Kafka before any snapshot row);
* ``held`` and every chunk of those tables done -> ``catchup``: ``rejoin_at`` is the shard's
  position, the shard's gtid is rewound to the smallest chunk high watermark or hold, and the
  first pass (``scan``) finds each key's final change (and, for conditional runs, the keys no
  snapshot row covers);
* ``held`` and the epoch abandoned (``RunAbandoned``: the attempt failed, or the run was cancelled
  or failed for good) -> ``catchup`` as well, with the chunks the epoch did not finish marked at the
  hold position: their keys get every change after the hold, so nothing is lost;
* ``catchup`` and the position passed every high watermark and ``rejoin_at`` -> the marker is
  written to the progress topic, then the state is dropped.

Every change makes the task restart its stream from the returned position with a processor built
for the new states, after writing the offset with the new state (one record: position and state
move together). A table whose hold begins after some of its chunks are done (the job did not wait
for the marker, or the worker was behind) is held *late*: its live records may have landed after
snapshot rows, so the catch-up re-states each key's last change before its high watermark.

A new connector whose initial snapshot is a backfill (``start(initial_run=..., fresh=True)``) holds every
table from its first position until that run's plan names the tables (or shows the run does not
cover the shard, or is abandoned): no live record precedes the snapshot.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from confluent_kafka import KafkaException, Producer, TopicPartition

from cdcworker import kafkaclients
from cdcworker.backfill.gtid import covers, is_position
from cdcworker.backfill.handoff import (
    CATCHUP,
    HELD,
    OFFSET_FIELD,
    ShardHandoff,
    TableMarks,
    WindowScan,
    marks_for,
)
from cdcworker.backfill.progress import (
    AttemptRecord,
    ChunkDone,
    HandoffDone,
    HoldStarted,
    PlanRecord,
    RunAbandoned,
    RunState,
    parse_handoff,
    parse_hold,
    parse_record,
)
from cdcworker.backfill.store import ProgressStore
from cdcworker.jsontypes import JsonMapping, JsonObject, JsonValue
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.topicread import TopicReader, TopicReadError

log = logging.getLogger(__name__)

LOOKUP_INTERVAL = 2.0  # seconds between looks for a progress topic that does not exist yet
# Set by the operator on the workers of a connector whose initial snapshot is a backfill: that run's id.
INITIAL_RUN_PROPERTY = "shardcdc.backfill.initial.run"

__all__ = ["INITIAL_RUN_PROPERTY", "OFFSET_FIELD", "Handoff", "HoldStarted", "ProgressFeed", "TaskHandoff", "inherited_states", "parse_hold",
           "progress_topic_of"]

FAULT_DIR_ENV = "CDC_HANDOFF_FAULT_DIR"  # test hook (fault_point); not SHARDCDC_*: those are connector properties


def inherited_states(values: JsonMapping) -> JsonObject | None:
    """The hand-off states a task takes over with shards it did not stream itself (a new
    generation): each shard's entry in the offset value its position came from
    (``TaskStart.inherited``, shard -> ``OffsetValue``). Without them a rescale during a hold
    would start a new hold at the inherited position and lose the changes between the two."""
    states = {s: v.fields[OFFSET_FIELD][s] for s, v in values.items()
              if isinstance(v.fields.get(OFFSET_FIELD), Mapping) and s in v.fields[OFFSET_FIELD]}
    return {OFFSET_FIELD: states} if states else None


def progress_topic_of(topic_prefix: str) -> str:
    """The progress topic the backfill job writes by default (``job.progress_topic``)."""
    return f"{topic_prefix}.backfill-progress"


class ProgressFeed:
    """The progress topic, tailed: every run of the keyspace and the hand-off markers."""

    def __init__(self, client_config: Mapping[str, object], topic: str, keyspace: str) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.keyspace = keyspace
        self.runs: dict[str, RunState] = {}  # in order of first appearance
        self.handed_off: set[tuple[str, int, str]] = set()  # (run, epoch, shard)
        self._consumer: Any = None  # Any: the native C producer or confluent-kafka's client (no common type)
        self._assigned = False
        self._next_lookup = 0.0
        self._next = 0  # offset of the next record to read
        self._producer: Producer | None = None

    def _open(self, strict: bool = False) -> Any:  # Any: the native C producer or confluent-kafka's client (no common type)
        if self._consumer is None:
            self._consumer = kafkaclients.consumer({**self.client_config, "group.id": f"shardcdc-handoff-{uuid.uuid4()}",
                                       "enable.auto.commit": False, "enable.partition.eof": True,
                                       "auto.offset.reset": "earliest"}, "backfill hand-off consumer")
        if not self._assigned:
            now = time.monotonic()
            if now < self._next_lookup:
                return None
            self._next_lookup = now + LOOKUP_INTERVAL
            # All topics, not this one: naming it would auto-create it on brokers that allow that.
            try:
                meta = self._consumer.list_topics(timeout=10).topics.get(self.topic)
            except KafkaException as exc:
                if strict:
                    raise  # at start: "no backfill ever ran" must not be guessed from an outage
                # Kafka away mid-stream (a restart, a refused login): the stream's own sink decides
                # what that means for the task; the feed looks again at its next lookup.
                log.warning("cannot read the topics of the cluster to find %s: %s", self.topic, exc)
                return None
            if meta is None or meta.error is not None or not meta.partitions:
                return None  # no backfill ever ran: look again later
            self._consumer.assign([TopicPartition(self.topic, 0, 0)])
            self._assigned = True
        return self._consumer

    def poll(self, to_end: bool = False, timeout: float = 30.0) -> None:
        """Apply the records fetched so far (non-blocking: offset flushes call it), or with ``to_end``
        everything up to the topic's current end (at start)."""
        c = self._open(strict=to_end)
        if c is None:
            return
        end = c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout)[1] if to_end else 0
        reader = TopicReader(c, self.topic)
        deadline = time.monotonic() + timeout
        while not to_end or self._next < end:
            try:
                msgs = reader.fetch(0.5 if to_end else 0, max_records=500)
            except TopicReadError as exc:
                raise RuntimeError(str(exc)) from None
            for msg in msgs:
                self._next = (msg.offset() or 0) + 1
                value = msg.value()
                if value is not None:
                    self._apply(value)
            if not to_end and not msgs:
                return
            if to_end and not msgs and time.monotonic() > deadline:
                raise TimeoutError(f"reading {self.topic}: offset {end} not reached after {timeout}s")

    def _apply(self, value: bytes) -> None:
        marker = parse_handoff(value)
        if marker is not None:
            if marker.keyspace == self.keyspace:
                self.handed_off.add((marker.run_id, marker.epoch, marker.shard))
            return
        rec = parse_record(value)
        if isinstance(rec, ChunkDone):
            run_id, keyspace = rec.chunk.run_id, rec.chunk.keyspace
        elif isinstance(rec, PlanRecord | AttemptRecord | RunAbandoned):
            run_id, keyspace = rec.run_id, rec.keyspace
        else:
            return
        if keyspace == self.keyspace:
            self.runs.setdefault(run_id, RunState(run_id)).apply(rec)

    def _write(self, records: list[Any]) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        if self._producer is None:
            self._producer = kafkaclients.producer({**self.client_config, "enable.idempotence": True, "acks": "all"}, "backfill hand-off producer")
        ProgressStore(self.client_config, self.topic).write(self._producer, records)

    def mark_handed_off(self, h: ShardHandoff, position: str) -> None:
        self._write([HandoffDone(h.run_id, self.keyspace, h.shard, position, h.epoch)])
        self.handed_off.add((h.run_id, h.epoch, h.shard))

    def mark_held(self, h: ShardHandoff) -> None:
        self._write([HoldStarted(h.run_id, self.keyspace, h.shard, h.tables, h.holds, h.epoch)])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._assigned = False
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None


class Handoff(Protocol):
    """What a running task uses of its backfill hand-off (``TaskHandoff`` is the implementation):
    ``WorkerTask.handoff`` is typed with this so the task loop and its stages depend on these
    members, not on the progress topic and catch-up machinery behind them."""

    states: dict[str, ShardHandoff]

    @property
    def active(self) -> bool: ...

    def offset_extra(self) -> tuple[tuple[str, JsonValue], ...]: ...

    def keep_watermark_caps(self, caps: Mapping[str, float | None]) -> None: ...

    def fault_point(self) -> None: ...

    def pending(self, position: Vgtid | None) -> bool: ...

    def announce(self) -> None: ...

    def advance(self, position: Vgtid) -> tuple[Vgtid, bool]: ...

    def close(self) -> None: ...


class TaskHandoff:
    """The hand-off state of one task's shards (restored from its offset value)."""

    def __init__(self, feed: ProgressFeed, stored: JsonMapping | None = None,
                 scan: Callable[[ShardHandoff], WindowScan] | None = None) -> None:
        self.feed = feed
        self.scan = scan  # the catch-up's first pass (catchup.finals_scanner); None: no finals
        self.states: dict[str, ShardHandoff] = {}
        for shard, d in ((stored or {}).get(OFFSET_FIELD) or {}).items():
            self.states[shard] = ShardHandoff.from_offset_field(shard, d)
        self.transitions = 0
        self._unwanted: set[str] = set()  # runs held with hold_all_from that the configuration no longer names
        self._announced: set[tuple[str, str, int, tuple[str, ...]]] = set()  # (run, shard, epoch, tables) marked held

    @property
    def active(self) -> bool:
        return bool(self.states)

    def offset_extra(self) -> tuple[tuple[str, JsonValue], ...]:
        """The extra offset field while any shard has a state (none otherwise: a plain Debezium value)."""
        if not self.states:
            return ()
        return ((OFFSET_FIELD, {s: h.to_offset_field() for s, h in sorted(self.states.items())}),)

    def keep_watermark_caps(self, caps: Mapping[str, float | None]) -> None:
        """Record each held shard's low watermark cap (``TaskMetrics.set_held``) in its state, so
        the offset carries it; a state that has one keeps it."""
        for shard, h in self.states.items():
            cap = caps.get(shard)
            if h.watermark_cap is None and cap is not None:
                self.states[shard] = replace(h, watermark_cap=cap)

    def fault_point(self) -> None:
        """Test hook, called right after an offset with the current states is durable: with
        ``$CDC_HANDOFF_FAULT_DIR/armed`` present and a shard catching up, the process exits (status
        70) -- a worker killed during its catch-up, a moment a test cannot catch by watching the
        offsets (a catch-up can be over within a second). Fires once (``armed`` -> ``fired``)."""
        d = os.environ.get(FAULT_DIR_ENV)
        if not d or not any(h.phase == CATCHUP for h in self.states.values()):
            return
        try:
            os.rename(os.path.join(d, "armed"), os.path.join(d, "fired"))  # atomic: fires once
        except OSError:
            return
        os._exit(70)

    def _tables(self, run: RunState, shard: str) -> tuple[str, ...]:
        return tuple(sorted(t for s, t in run.plans if s == shard))

    def _open_epoch(self, run: RunState, shard: str) -> int | None:
        """The epoch of ``run`` this shard should hold, or None (abandoned, or handed off already)."""
        epoch = run.epoch
        if run.is_abandoned(epoch) or (run.run_id, epoch, shard) in self.feed.handed_off:
            return None
        return epoch

    def _pending(self, shard: str) -> tuple[RunState, int] | None:
        for run in self.feed.runs.values():
            epoch = self._open_epoch(run, shard)
            if epoch is not None and self._tables(run, shard):
                return run, epoch
        return None

    def _released(self, run: RunState | None, h: ShardHandoff) -> bool:
        """The hold ends without the run finishing its chunks: the epoch was abandoned, or a hold of
        every table finds that the run's attempt planned nothing on this shard (or that the
        configuration stopped asking for the run before it planned anything)."""
        if run is not None and run.is_abandoned(h.epoch):
            return True
        if h.hold_all_from is None or h.tables:
            return False
        if run is None or self._tables(run, h.shard):
            return run is None and h.run_id in self._unwanted
        return h.run_id in self._unwanted or h.epoch in run.attempts

    def _to_catchup(self, h: ShardHandoff, run: RunState | None, gtid: str) -> tuple[ShardHandoff, str | None]:
        """The catch-up of ``h`` from ``gtid``, and where the stream restarts (None: where it is)."""
        h = h.to_catchup(self._marks(h, run), rejoin_at=gtid)
        start = h.catchup_start()
        return h, (start if start is not None and covers(gtid, start) else None)

    def _marks(self, h: ShardHandoff, run: RunState | None) -> dict[str, TableMarks]:
        if run is None:
            return {}  # only a hold of every table before any plan: nothing to mark
        return {t: marks_for(run, h.shard, t, h.epoch, h.hold_of(t) or "") for t in h.tables}

    def _next(self, position: Vgtid) -> tuple[dict[str, ShardHandoff], dict[str, str], list[ShardHandoff]]:
        """The states after ``position`` (pure, given what the feed read): (states, rewound gtids,
        hand-offs finished at ``position``)."""
        states: dict[str, ShardHandoff] = {}
        gtids: dict[str, str] = {}
        done: list[ShardHandoff] = []
        for sg in position:
            shard, gtid = sg.shard, sg.gtid
            h = self.states.get(shard)
            known = is_position(gtid)
            if h is None and known:  # a hold begins at a real position (not "current" or a copy)
                pending = self._pending(shard)
                if pending is not None:
                    h = ShardHandoff(shard, pending[0].run_id, (), epoch=pending[1])
            if h is not None and h.phase == HELD:
                run = self.feed.runs.get(h.run_id)
                if known and self._released(run, h):
                    h, start = self._to_catchup(h, run, gtid)
                    if start is not None:
                        gtids[shard] = start
                elif run is not None:
                    tables = tuple(sorted(set(h.tables) | set(self._tables(run, shard))))
                    if tables != h.tables:
                        # Tables join the hold here: their changes up to this position were emitted
                        # live (unless everything was held already).
                        new = [t for t in tables if t not in h.holds]
                        late = [t for t in new if h.hold_all_from is None and _any_done(run, shard, t, h.epoch)]
                        h = replace(h, tables=tables, holds={**h.holds, **dict.fromkeys(new, h.hold_all_from or gtid)},
                                    late=tuple(sorted({*h.late, *late})))
                    if known and h.tables and all(run.table_complete(shard, t) for t in h.tables):
                        h, start = self._to_catchup(h, run, gtid)
                        if start is not None:
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
        self.announce()
        return self._next(position)[0] != self.states

    def announce(self) -> None:
        """Write a ``HoldStarted`` marker for each state not announced yet. Call only once the offset
        carrying the states is stored (a restart then holds from the same positions)."""
        for h in self.states.values():
            ident = (h.run_id, h.shard, h.epoch, h.tables)
            if ident not in self._announced:
                self.feed.mark_held(h)
                self._announced.add(ident)
                holds = sorted({*h.holds.values(), *([h.hold_all_from] if h.hold_all_from else [])})
                log.info("shard %s: backfill %s: holding %s back since %s", h.shard, h.run_id,
                         ", ".join(h.tables) or "every table", ", ".join(holds))

    def advance(self, position: Vgtid) -> tuple[Vgtid, bool]:
        """Move each shard on at ``position`` (durable: everything before it is in Kafka); returns
        (where to stream from, changed). Finished hand-offs are marked in the progress topic first,
        then dropped: a crash in between resumes the catch-up, which is finished at once."""
        states, gtids, done = self._next(position)
        for h in done:
            self.feed.mark_handed_off(h, (position.get(h.shard) or ShardGtid("", h.shard, "")).gtid)
            log.info("shard %s: backfill %s handed off; %s rejoined the live stream", h.shard, h.run_id,
                     ", ".join(h.tables) or "every table")
        for shard, h in states.items():
            old = self.states.get(shard)
            if old is None or old.phase != h.phase:
                where = f" from {gtids[shard]} (rejoining at {h.rejoin_at})" if shard in gtids else ""
                log.info("shard %s: backfill %s (epoch %d): %s %s%s", shard, h.run_id, h.epoch, h.phase,
                         ", ".join(h.tables) or "every table", where)
        for shard, h in states.items():
            if h.phase == CATCHUP and h.finals is None:
                states[shard] = h.with_scan(self._scan(h))
        changed = states != self.states
        self.states = states
        if changed:
            self.transitions += 1
        if gtids:
            position = Vgtid(tuple(ShardGtid(sg.keyspace, sg.shard, gtids.get(sg.shard, sg.gtid), sg.table_p_ks)
                                   for sg in position))
        return position, changed

    def start(self, position: Vgtid, initial_run: str | None = None, fresh: bool = False) -> Vgtid:
        """At task start: read the whole topic, reload the marks of a restored ``catchup`` state
        (they are not in the offset value), and advance from the stored position.

        ``initial_run``: the run of the connector's initial snapshot (configured by the operator).
        On a ``fresh`` start (no stored position) shards hold every table for it from ``position``
        until its plan says which; a stored hold of every table for a run the configuration no
        longer names is released."""
        self.feed.poll(to_end=True)
        for shard, h in list(self.states.items()):
            if not h.holds and h.hold_all_from is None:
                # A state without hold positions (written before holds were recorded): its tables
                # were emitted live, so they are held late from here.
                sg = position.get(shard)
                if sg is not None and is_position(sg.gtid):
                    h = replace(h, holds=dict.fromkeys(h.tables, sg.gtid), late=h.tables)
            if h.phase == CATCHUP and not h.marks:
                h = self._with_marks(h)
            if h.hold_all_from is not None and h.run_id != initial_run:
                self._unwanted.add(h.run_id)
            self.states[shard] = h
        if initial_run is not None and fresh:
            for sg in position:
                if sg.shard not in self.states and is_position(sg.gtid) and self._may_hold_all(
                        initial_run, sg.shard):
                    self.states[sg.shard] = ShardHandoff(sg.shard, initial_run, (), hold_all_from=sg.gtid,
                                                         epoch=self._epoch_of(initial_run))
        return self.advance(position)[0]

    def _epoch_of(self, run_id: str) -> int:
        run = self.feed.runs.get(run_id)
        return run.epoch if run is not None else 0

    def _may_hold_all(self, run_id: str, shard: str) -> bool:
        """Hold every table for ``run_id`` unless the topic says it is over or skips this shard."""
        run = self.feed.runs.get(run_id)
        if run is None:
            return True
        epoch = self._open_epoch(run, shard)
        return epoch is not None and (epoch not in run.attempts or bool(self._tables(run, shard)))

    def _scan(self, h: ShardHandoff) -> WindowScan:
        if self.scan is None:
            log.warning("shard %s: no catch-up scan configured: deletes before their chunk are not emitted", h.shard)
            return WindowScan({})
        t0 = time.monotonic()
        scan = self.scan(h)
        log.info("shard %s: backfill %s: %d final change(s) before their chunks' high watermarks, %d key(s) outside "
                 "the run's condition (scanned in %.1fs)", h.shard, h.run_id, sum(len(f) for f in scan.finals.values()),
                 sum(len(u) for u in scan.uncovered.values()), time.monotonic() - t0)
        return scan

    def _with_marks(self, h: ShardHandoff) -> ShardHandoff:
        run = self.feed.runs.get(h.run_id)
        if run is None and h.tables:
            raise RuntimeError(f"backfill {h.run_id} is not in {self.feed.topic}: cannot resume its catch-up")
        return h.to_catchup(self._marks(h, run), h.rejoin_at)

    def close(self) -> None:
        self.feed.close()


def _any_done(run: RunState, shard: str, table: str, epoch: int) -> bool:
    return any(s == shard and t == table and d.epoch == epoch for (s, t, _), d in run.done.items())
