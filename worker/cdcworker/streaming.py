"""VStream responses → Kafka records and commit points (the decoder and dispatcher stages).

Rows are not encoded the moment they arrive: Debezium stamps every row of a transaction with the
transaction's COMMIT timestamp and its ending VGTID (``source.ts_ms``, ``source.vgtid``), which
only arrive after the rows. VTGate normally sends a whole transaction in one response, so the
processor holds references to a transaction's row changes (no copies) until its COMMIT and then
encodes them with the exact context Debezium would use. A transaction larger than
``lookahead_rows`` is streamed instead of buffered (memory stays bounded, unlike Debezium): its
rows are encoded with the position and timestamp known at that point, a documented difference.

Positions: the VGTID that precedes COMMIT (or DDL / OTHER) is a *commit point*; the sink makes it
durable once Kafka has acknowledged everything before it. Nothing else moves the position.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdcworker.events import EncoderConfig, SourceContext, TablePlan
from cdcworker.offsets import Vgtid
from cdcworker.sink import KafkaSink
from vitessapi import binlogdata_pb2

log = logging.getLogger(__name__)

_T = binlogdata_pb2.VEventType
ROW, FIELD, BEGIN, COMMIT, VGTID = _T.ROW, _T.FIELD, _T.BEGIN, _T.COMMIT, _T.VGTID
DDL, OTHER, HEARTBEAT, JOURNAL = _T.DDL, _T.OTHER, _T.HEARTBEAT, _T.JOURNAL
COPY_COMPLETED, ROLLBACK = _T.COPY_COMPLETED, _T.ROLLBACK


class ProtocolError(RuntimeError):
    """The event sequence violates VStream's contract (e.g. a ROW before its table's FIELD)."""


class ReassignmentNeeded(Exception):
    """A reshard journal names shards outside this stream: the next positions are in ``vgtid``."""

    def __init__(self, vgtid: Vgtid, journal: binlogdata_pb2.Journal) -> None:
        participants = ", ".join(f"{p.keyspace}/{p.shard}" for p in journal.participants)
        targets = ", ".join(f"{g.keyspace}/{g.shard}" for g in journal.shard_gtids)
        super().__init__(f"reshard journal {journal.id}: shards [{participants}] were replaced by [{targets}]")
        self.vgtid = vgtid
        self.journal = journal


@dataclass(slots=True)
class StreamStats:
    events_seen: int = 0
    rows_seen: int = 0
    records_sent: int = 0
    transactions: int = 0
    last_event_time: float = 0.0
    last_commit_ts: int = 0  # source commit time (s) of the newest transaction
    copy_completed_shards: set[str] = field(default_factory=set)


class StreamProcessor:
    """Stateful translation of one VStream into records; one instance per stream attempt."""

    def __init__(
        self,
        encoder: EncoderConfig,
        sink: KafkaSink,
        start: Vgtid,
        lookahead_rows: int = 8192,
        journal_stops: bool = False,
        on_heartbeat: Callable[[binlogdata_pb2.VEvent], None] | None = None,
        metrics: Any = None,
    ) -> None:
        self.encoder = encoder
        self.sink = sink
        self.lookahead_rows = lookahead_rows
        self.journal_stops = journal_stops
        self.on_heartbeat = on_heartbeat
        self.plans: dict[tuple[str, str], TablePlan] = {}
        self.stats = StreamStats()
        # Position of the last commit point handed to the sink (the resume point of a reconnect).
        self.position = start
        self._pending_vgtid: binlogdata_pb2.VGtid | None = None
        self._deferred: list[tuple[TablePlan, Any]] = []
        self._streaming_txn = False  # this transaction outgrew the lookahead and is streamed
        self._begin_ts = 0
        self._pending_shard = ""
        self._txn_records_before = 0
        self.metrics = metrics  # observability.TaskMetrics or None
        self._rows_reported = 0

    # --- the loop body ----------------------------------------------------------------------

    def process(self, response: Any) -> None:
        stats = self.stats
        deferred = self._deferred
        for ev in response.events:
            t = ev.type
            if t == ROW:
                re = ev.row_event
                plan = self.plans.get((re.shard or ev.shard, re.table_name))
                if plan is None:
                    if re.is_internal_table:
                        continue  # _vt sidecar rows we did not ask to publish (DBZ-4667)
                    raise ProtocolError(f"ROW for {re.keyspace}/{re.shard} {re.table_name} before its FIELD event")
                for rc in re.row_changes:
                    deferred.append((plan, rc))
                stats.rows_seen += len(re.row_changes)
                if len(deferred) >= self.lookahead_rows:
                    self._stream_out()
            elif t == VGTID:
                self._pending_vgtid = ev.vgtid
                self._pending_shard = ev.shard
            elif t == COMMIT:
                self._commit(ev.timestamp)
            elif t == BEGIN:
                self._begin_ts = ev.timestamp
                self._streaming_txn = False
            elif t == FIELD:
                fe = ev.field_event
                if fe.is_internal_table:
                    continue
                self.plans[(fe.shard or ev.shard, fe.table_name)] = TablePlan.compile(fe, self.encoder)
            elif t in (DDL, OTHER):
                # The VGTID in front of them moved the position even though no row changed.
                self._commit(ev.timestamp)
            elif t == HEARTBEAT:
                if self.on_heartbeat is not None:
                    self.on_heartbeat(ev)
            elif t == JOURNAL:
                self._journal(ev.journal)
            elif t == COPY_COMPLETED:
                if ev.shard:
                    stats.copy_completed_shards.add(ev.shard)
            elif t == ROLLBACK:
                deferred.clear()
        stats.events_seen += len(response.events)
        stats.last_event_time = now = time.time()
        if self.metrics is not None:
            self.metrics.on_response(len(response.events), stats.rows_seen - self._rows_reported, 0, now)
            self._rows_reported = stats.rows_seen

    # --- transaction boundaries -------------------------------------------------------------

    def _context(self, plan: TablePlan, commit_seconds: int, vgtid_json: str) -> SourceContext:
        return SourceContext(plan.keyspace, plan.shard, commit_seconds, vgtid_json)

    def _emit(self, commit_seconds: int, vgtid_json: str) -> None:
        deferred = self._deferred
        if not deferred:
            return
        send = self.sink.send
        now = time.time_ns()
        ctx: SourceContext | None = None
        ctx_shard = None
        for plan, rc in deferred:
            if ctx is None or plan.shard != ctx_shard:
                ctx = self._context(plan, commit_seconds, vgtid_json)
                ctx_shard = plan.shard
            for rec in plan.encode_change(rc, ctx, now):
                send(rec.topic, rec.key, rec.value, rec.headers)
        self.stats.records_sent = self.sink.records_sent
        deferred.clear()

    def _stream_out(self) -> None:
        """A transaction too large to hold: encode what we have with the context known now."""
        if not self._streaming_txn:
            log.info("transaction exceeds %d buffered rows; streaming it without waiting for COMMIT", self.lookahead_rows)
            self._streaming_txn = True
        self._emit(self._begin_ts, self.position.to_json())

    def _commit(self, timestamp: int) -> None:
        pending = self._pending_vgtid
        if pending is None:
            # Debezium uses the previous VGTID when a response carries none; so do we.
            vgtid = self.position
        else:
            vgtid = Vgtid.from_proto(pending)
            self._pending_vgtid = None
        self._emit(timestamp, vgtid.to_json())
        self.position = vgtid
        self.sink.commit_point(vgtid)
        self.stats.transactions += 1
        self.stats.last_commit_ts = timestamp
        if self.metrics is not None and self._pending_shard and timestamp:
            sent = self.sink.records_sent
            now = time.time()
            self.metrics.on_commit(self._pending_shard, timestamp, now, now, sent - self._txn_records_before)
            self._txn_records_before = sent

    def _journal(self, journal: binlogdata_pb2.Journal) -> None:
        if not self.journal_stops or journal.migration_type != binlogdata_pb2.MigrationType.SHARDS:
            return
        gone = {(p.keyspace, p.shard) for p in journal.participants}
        kept = tuple(sg for sg in self.position if (sg.keyspace, sg.shard) not in gone)
        targets = Vgtid.from_proto(binlogdata_pb2.VGtid(shard_gtids=list(journal.shard_gtids)))
        raise ReassignmentNeeded(Vgtid(kept).update(targets), journal)

    def abandon_transaction(self) -> None:
        """Forget a partly received transaction (the stream broke); it is replayed on reconnect."""
        self._deferred.clear()
        self._pending_vgtid = None
