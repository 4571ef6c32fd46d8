"""VStream responses → Kafka records and commit points (the decoder and dispatcher stages).

Rows are not encoded the moment they arrive: Debezium stamps every row of a transaction with the
transaction's COMMIT timestamp and its ending VGTID (``source.ts_ms``, ``source.vgtid``), which
only arrive after the rows. VTGate normally sends a whole transaction in one response, so the
processor holds references to a transaction's row changes (no copies) until its COMMIT and then
encodes them with the exact context Debezium would use. A transaction larger than
``lookahead_rows`` (or, with ``max_queue_bytes``, in serialized row changes) is streamed instead
of buffered (memory stays bounded, unlike Debezium): its rows are encoded with the position and
timestamp known at that point, a documented difference.

Input: with the native extension (``events/native.py``) the task asks gRPC for the responses as
raw bytes; ``_rowenc.scan`` walks the wire format, ROW events reach the table's column program as
serialized RowChanges (no Python object per event or row), and ``TablePlan.send_rows`` produces
each record straight from the native images. The rare other events (BEGIN, VGTID, COMMIT, FIELD,
...) are parsed by upb from their slice of the response. Without the extension, or with
``SHARDCDC_NATIVE=0``, responses arrive parsed and take the same code from ``_rows``/``_event``
on; both give the same records and positions (tests/integration/worker/test_worker_native_scan.py).

Positions: the VGTID that precedes COMMIT (or DDL / OTHER) is a *commit point*; the sink makes it
durable once Kafka has acknowledged everything before it. Nothing else moves the position. While
the stream copies (``snapshot.mode=initial``) a commit point's position is VTGate's VGTID made safe
to resume the copy from (``offsets.copyresume``: a shard between two tables keeps copying, tables
it completed keep their last lastpk); a shard's COPY_COMPLETED seals its own commit point, at which
that shard's entry becomes VTGate's. Records keep VTGate's VGTID in ``source.vgtid``.

Optional outputs (``Features``) ride on the same boundaries: transaction metadata (BEGIN, the
``transaction`` block, END, and the offset fields stored with the commit point, see
``offsets.Checkpoint``), schema-change records at DDL, and throttled heartbeat records after
commits, on VTGate heartbeats and while idle (``tick``). Everything per transaction is prepared
once (the block template, the source context); per row only the counters move.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaException

from cdcworker.events import EncoderConfig, OutRecord, SourceContext, TablePlan, native
from cdcworker.events.encoder import _strip_keyspace
from cdcworker.events.jsonfmt import json_string_body
from cdcworker.filters.failure import (
    AnonymisedColumns,
    EventConversionError,
    EventLocation,
    FailureHandler,
    is_oversized,
)
from cdcworker.journals import JournalMismatch, JournalProgress, names, reassigned
from cdcworker.offsets import Vgtid
from cdcworker.offsets.copyresume import CopyResume
from cdcworker.offsets.value import Checkpoint
from cdcworker.offsets.vgtid import ShardGtid, entry_json
from cdcworker.records import (
    HEARTBEAT_PARTITION,
    SCHEMA_CHANGE_PARTITION,
    HeartbeatEmitter,
    SchemaChangeEmitter,
)
from cdcworker.sink import KafkaSink, TransactionalSink
from cdcworker.txmeta import TransactionMonitor
from cdcworker.txmeta.transforms import local_vgtid_json

if TYPE_CHECKING:
    from cdcworker.filters.columns import CaptureFilter
    from cdcworker.observability.metrics import StreamMetrics
from vitessapi import binlogdata_pb2

log = logging.getLogger(__name__)

_T = binlogdata_pb2.VEventType
ROW, FIELD, BEGIN, COMMIT, VGTID = _T.ROW, _T.FIELD, _T.BEGIN, _T.COMMIT, _T.VGTID
DDL, OTHER, HEARTBEAT, JOURNAL = _T.DDL, _T.OTHER, _T.HEARTBEAT, _T.JOURNAL
COPY_COMPLETED, ROLLBACK = _T.COPY_COMPLETED, _T.ROLLBACK


# The native VStreamResponse scanner (rowenc.c); absent: raw responses are parsed by upb.
_scan: Any = getattr(native.rowenc, "scan", None)  # Any: vitessapi protobuf messages (generated code: no types for mypy)
# Its VGTID reader (the entries of a VGTID event as bytes, and which changed since the last one).
_vgtid_entries: Any = getattr(native.rowenc, "vgtid_entries", None)  # Any: a C function (no stub)
_ShardGtidPb = binlogdata_pb2.ShardGtid.FromString

_RowChange = binlogdata_pb2.RowChange.FromString


def _joined(texts: list[str], escaped: list[bytes]) -> tuple[str, bytes]:
    """A VGTID's JSON from its entries' (``entry_json``) and that JSON as a JSON string body from
    theirs (escapes are per character; the array's brackets and commas need none)."""
    return "[" + ",".join(texts) + "]", b"[" + b",".join(escaped) + b"]"


def raw_responses() -> bool:
    """Ask gRPC for VStreamResponses as bytes: the native encoder is on (``SHARDCDC_NATIVE``)."""
    return _scan is not None and native.enabled()


def _row_event(src: object) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    if isinstance(src, tuple):
        data, s, e = src
        return binlogdata_pb2.VEvent.FromString(data[s:e]).row_event
    return src


def _row_change_bytes(rcs: Any) -> int:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    """Serialized size of a ROW event's row changes (max.queue.size.in.bytes), the same on every path:
    the scanner's RowChange bytes summed in C, or (parsed responses, the fallback) upb's sizes."""
    if type(rcs) is list:
        return sum(map(len, rcs))
    return sum(rc.ByteSize() for rc in rcs)


def _takes_bytes(plan: TablePlan) -> bool:
    """The plan encodes serialized RowChanges as they are. A subclass that reads the message
    itself (filters.FilteredTablePlan with skipped operations) gets parsed RowChanges."""
    return type(plan).encode_change is TablePlan.encode_change or not getattr(plan, "_skipped", True)


class ProtocolError(RuntimeError):
    """The event sequence violates VStream's contract (e.g. a ROW before its table's FIELD)."""


class ReassignmentNeeded(Exception):
    """A reshard journal names shards outside this stream: the next positions are in ``vgtid``."""

    def __init__(self, vgtid: Vgtid, journal: binlogdata_pb2.Journal) -> None:
        participants = names((p.keyspace, p.shard) for p in journal.participants)
        targets = names((g.keyspace, g.shard) for g in journal.shard_gtids)
        super().__init__(f"reshard journal {journal.id}: shards [{participants}] were replaced by [{targets}]")
        self.vgtid = vgtid
        self.journal = journal


class SignalChannel(Protocol):
    """The signal table read out of the change stream (``cdcworker.signals.SignalTap``)."""

    tables: frozenset[str]

    def field(self, key: tuple[str, str], fe: object) -> None: ...  # a FieldEvent (upb or raw): any message

    def row(self, key: tuple[str, str], re: object) -> None: ...  # a RowEvent (upb or raw): any message

    def commit(self, vgtid_json: str = "", vgtid: object = None, shard: str = "", before: object = None) -> None: ...

    def rollback(self) -> None: ...


class FailurePolicy(Protocol):
    """What an event that cannot be converted does (``filters.FailureHandler``: event.processing.failure.handling.mode)."""

    def handle(self, what: str, where: EventLocation, exc: BaseException,
               error: type[EventConversionError] = EventConversionError) -> None: ...


@dataclass(slots=True)
class Features:
    """What a stream emits besides row changes; the defaults are the core stream.

    ``txmeta`` and ``heartbeats`` keep state across reconnects: the task builds them once and
    hands the same objects to every ``StreamProcessor``.
    """

    txmeta: TransactionMonitor | None = None
    heartbeats: HeartbeatEmitter | None = None
    schema_changes: SchemaChangeEmitter | None = None
    local_vgtid: bool = False  # UseLocalVgtid: source.vgtid holds the event's shard only
    internal_tables: bool = False  # vitess.stream.keyspace.heartbeats: publish _vt.heartbeat rows
    low_watermark: Callable[[], float | None] | None = None  # seconds; on heartbeat records when set
    # Table filter + NumberOfEventsFiltered (cdcworker.filters.FilterPolicy), failure handling
    # mode (filters.FailureHandler; None = fail), the signal table tap (signals.SignalTap).
    policy: CaptureFilter | None = None
    failures: FailurePolicy | None = None
    signals: SignalChannel | None = None
    # Offset fields of state kept beside the position (ad-hoc snapshots, the Kafka signal
    # channel's read position: signals.runtime.TaskExtras.decorate), added to every commit point.
    decorate: Callable[[Vgtid], Vgtid] | None = None


@dataclass(slots=True)
class StreamStats:
    events_seen: int = 0
    rows_seen: int = 0
    records_sent: int = 0
    transactions: int = 0
    last_event_time: float = 0.0
    last_commit_ts: int = 0  # source commit time (s) of the newest transaction
    peak_queue_bytes: int = 0  # most row-change bytes held at once (with max.queue.size.in.bytes)
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
        journals: JournalProgress | None = None,
        on_heartbeat: Callable[[binlogdata_pb2.VEvent], None] | None = None,
        metrics: StreamMetrics | None = None,
        features: Features | None = None,
        max_queue_bytes: int = 0,
    ) -> None:
        self.encoder = encoder
        self.sink = sink
        self.lookahead_rows = lookahead_rows
        # max.queue.size.in.bytes: row-change bytes a transaction may hold before it is streamed.
        self.max_queue_bytes = max_queue_bytes
        self.journal_stops = journal_stops
        # A reshard journal some held source shards delivered (kept across reconnects), and the
        # done shard whose events after its journal, up to that transaction's COMMIT, are skipped.
        self.journals = journals
        self._journal_tail: str | None = None
        self.on_heartbeat = on_heartbeat
        self.plans: dict[tuple[str, str], TablePlan] = {}
        # Plans whose topic may not exist yet (topic.creation.*): moved to ``plans`` by the table's
        # first ROW, which creates the topic, so a lookup happens once per table, not per record.
        self._unready: dict[tuple[str, str], TablePlan] = {}
        self.stats = StreamStats()
        # Position of the last commit point handed to the sink (the resume point of a reconnect),
        # and VTGate's VGTID there (they differ while a copy runs: ``_copy``).
        self.position = start
        self._raw: Vgtid = start
        self._copy = CopyResume(start) if start.copying else None
        # A parsed VGtid, or a VGTID event's entries read by the native scanner (_vgtid_of_entries).
        self._pending_vgtid: binlogdata_pb2.VGtid | tuple[bytes, ...] | None = None
        # (plan, row changes of one ROW event): RowChange messages or serialized RowChanges.
        self._deferred: list[tuple[TablePlan, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        self._deferred_rows = 0
        self._deferred_bytes = 0  # counted only with max_queue_bytes, as Debezium's queue does
        self._plan_bytes: dict[tuple[str, str], bool] = {}  # plan takes serialized RowChanges
        self._shard_gtids: dict[tuple[str, str, str], tuple[ShardGtid, str, bytes]] = {}  # see _vgtid
        # The last VGTID event's entries (serialized ShardGtids) and, per entry, the parts of its
        # _shard_entry (ShardGtid, JSON, escaped JSON) in three lists: see _vgtid_of_entries.
        self._vg_entries: tuple[bytes, ...] = ()
        self._vg_sgs: list[ShardGtid] = []
        self._vg_texts: list[str] = []
        self._vg_escs: list[bytes] = []
        self._vg_changed: list[int] = []  # indices of the pending VGTID's entries that differ from _vg_entries
        self._streaming_txn = False  # this transaction outgrew the lookahead and is streamed
        self._begin_ts = 0
        self._pending_shard = ""
        self._txn_records_before = 0
        self.metrics = metrics
        self._rows_reported = 0
        f = self.features = features or Features()
        self._txmeta = f.txmeta
        self._tx_blocks = f.txmeta.on_event if f.txmeta is not None else None
        self._tx_bytes = f.txmeta.block_bytes if f.txmeta is not None else None
        self._in_txn = False  # between BEGIN and COMMIT
        self._boundary_topic_ready = False  # the transaction topic, made ready by its first record
        self._begin_shard = ""
        self._keeps_partial = not isinstance(sink, TransactionalSink)
        if metrics is not None:
            metrics.queue(lookahead_rows, lookahead_rows, 0, max_queue_bytes)  # what a transaction may buffer
        self._policy = f.policy
        self._failures = f.failures if f.failures is not None else FailureHandler("fail", metrics)
        self._signals = f.signals
        # Tables whose FIELD was filtered out ("filtered") or could not be planned ("failed").
        self._unplanned: dict[tuple[str, str], str] = {}
        self._filtered_reported = f.policy.stats.filtered if f.policy is not None else 0

    # --- the loop body ----------------------------------------------------------------------

    def process(self, response: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """One VStreamResponse: a parsed message, or its raw bytes (``raw_responses``)."""
        if type(response) is bytes:
            items = _scan(response) if _scan is not None else None
            if items is None:
                # No scanner, or bytes it does not understand: upb decides (and raises if malformed).
                self._process_events(binlogdata_pb2.VStreamResponse.FromString(response).events)
            else:
                self._process_scanned(response, items)
        else:
            self._process_events(response.events)

    def _process_events(self, events: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        for ev in events:
            if ev.type == ROW:
                re = ev.row_event
                self._rows(re.shard or ev.shard, re.table_name, re.is_internal_table, re.row_changes, re)
            else:
                self._event(ev)
        self._after_response(len(events))

    def _process_scanned(self, data: bytes, items: list[Any]) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """The native scanner's view of a response: ROW events arrive as (table, shard, internal,
        serialized RowChanges), which the native encoder takes as they are; the rare other events
        are parsed by upb from their slice of the response."""
        parse = binlogdata_pb2.VEvent.FromString
        for item in items:
            n = len(item)
            if n == 7:
                _, s, e, table, shard, internal, rcs = item
                self._rows(shard, table, internal, rcs, (data, s, e))
            elif n == 5 and self._journal_tail is None:  # BEGIN or COMMIT: (type, start, end, timestamp, shard)
                if item[0] == COMMIT:
                    self._commit(item[3])
                else:
                    self._begin(item[3], item[4])
            elif item[0] == VGTID and self._journal_tail is None and _vgtid_entries is not None and (
                got := _vgtid_entries(data, item[1], item[2], self._vg_entries)
            ) is not None:
                # One per commit: read without upb, only its changed entries parsed (_vgtid_of_entries);
                # a done shard's journal tail goes through _event, which skips it.
                self._pending_shard, self._pending_vgtid, changed = got
                self._vg_changed = changed
            else:
                ev = parse(data[item[1] : item[2]])
                if ev.type == ROW:  # a ROW event the scanner left to upb (unusual encoding)
                    re = ev.row_event
                    self._rows(re.shard or ev.shard, re.table_name, re.is_internal_table, re.row_changes, re)
                else:
                    self._event(ev)
        self._after_response(len(items))

    def _rows(self, shard: str, table: str, internal: bool, rcs: Any, src: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """A ROW event's changes, held until COMMIT. ``src``: the RowEvent, or (response bytes,
        start, end) of the event when it came from the scanner (parsed only when needed)."""
        key = (shard, table)
        plan = self.plans.get(key)
        signals = self._signals
        if signals is not None and table in signals.tables:
            signals.row(key, _row_event(src))
        if plan is None and self._unready:
            plan = self._first_use(key)
        if plan is None:
            if internal:
                return  # _vt sidecar rows we did not ask to publish (DBZ-4667)
            if self._skip_unplanned(key, len(rcs)):
                return
            re = _row_event(src)
            raise ProtocolError(f"ROW for {re.keyspace}/{re.shard} {re.table_name} before its FIELD event")
        if self.max_queue_bytes:
            self._deferred_bytes += _row_change_bytes(rcs)
        if type(rcs) is list and not self._plan_bytes.get(key, True):
            rcs = [_RowChange(rc) for rc in rcs]  # a plan that reads the message (skipped operations)
        self._deferred.append((plan, rcs))
        n = len(rcs)
        self.stats.rows_seen += n
        self._deferred_rows += n
        if self._deferred_rows >= self.lookahead_rows or (
            self.max_queue_bytes and self._deferred_bytes >= self.max_queue_bytes
        ):
            self._stream_out()

    def _event(self, ev: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """Every event but ROW: rare per transaction (a handful per commit)."""
        t = ev.type
        if self._journal_tail is not None and ev.shard == self._journal_tail:
            self._skip_journal_tail(t)
            return
        if t == VGTID:
            self._pending_vgtid = ev.vgtid
            self._pending_shard = ev.shard
        elif t == COMMIT:
            self._commit(ev.timestamp)
        elif t == BEGIN:
            self._begin(ev.timestamp, ev.shard)
        elif t == FIELD:
            fe = ev.field_event
            if fe.is_internal_table and not self.features.internal_tables:
                return
            self._plan(fe, ev.shard)
        elif t == DDL:
            # The VGTID in front of it moved the position even though no row changed.
            self._commit(ev.timestamp, ev)
        elif t == OTHER:
            self._commit(ev.timestamp)
        elif t == HEARTBEAT:
            if self.on_heartbeat is not None:
                self.on_heartbeat(ev)
            if self.features.heartbeats is not None:
                self.tick()
        elif t == JOURNAL:
            self._journal(ev)
        elif t == COPY_COMPLETED:
            if ev.shard:
                self.stats.copy_completed_shards.add(ev.shard)
                if self._copy is not None and self._copy.completed(ev.keyspace, ev.shard):
                    self._copy_completed()
        elif t == ROLLBACK:
            self._clear_deferred()
            if self._signals is not None:
                self._signals.rollback()
            self._in_txn = False

    def _begin(self, timestamp: int, shard: str) -> None:
        self._begin_ts = timestamp
        self._begin_shard = shard
        self._in_txn = True
        self._streaming_txn = False

    def _after_response(self, events: int) -> None:
        stats = self.stats
        stats.events_seen += events
        stats.last_event_time = now = time.time()
        if self.metrics is not None:
            filtered = 0
            if self._policy is not None:
                filtered = self._policy.stats.filtered - self._filtered_reported
                self._filtered_reported += filtered
            self.metrics.queue_remaining = self.lookahead_rows - self._deferred_rows
            self.metrics.queue_bytes = self._deferred_bytes
            self.metrics.on_response(events, stats.rows_seen - self._rows_reported, filtered, now)
            self._rows_reported = stats.rows_seen

    def _clear_deferred(self) -> None:
        self._deferred.clear()
        self._deferred_rows = 0
        if self._deferred_bytes:
            self.stats.peak_queue_bytes = max(self.stats.peak_queue_bytes, self._deferred_bytes)
            self._deferred_bytes = 0

    @property
    def between_transactions(self) -> bool:
        """No transaction is partly received: side streams (ad-hoc snapshots) may add records now."""
        return not self._deferred and not self._in_txn

    # --- planning, filtering, failure handling ----------------------------------------------

    def _plan(self, fe: Any, ev_shard: str) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """Plan a FIELD event, unless its table is filtered out or (warn/skip) cannot be planned."""
        key = (fe.shard or ev_shard, fe.table_name)
        if self._signals is not None and fe.table_name in self._signals.tables:
            self._signals.field(key, fe)
        self._unready.pop(key, None)
        if self._policy is not None and not self._policy.captures(fe.keyspace, _strip_keyspace(fe.table_name, fe.keyspace)):
            self.plans.pop(key, None)
            self._unplanned[key] = "filtered"
            return
        try:
            plan = self.plans[key] = TablePlan.compile(fe, self.encoder)
        except Exception as exc:
            self.plans.pop(key, None)
            self._unplanned[key] = "failed"
            where = EventLocation(fe.keyspace, key[0], _strip_keyspace(fe.table_name, fe.keyspace), self._raw.to_json())
            anonymised = any(f.name.startswith("@") for f in fe.fields)
            self._failures.handle("FIELD event cannot be planned", where, exc, AnonymisedColumns if anonymised else EventConversionError)
            return
        self._unplanned.pop(key, None)
        self._plan_bytes[key] = _takes_bytes(plan)
        topics = getattr(self.sink, "topics", None)  # a KafkaSink's TopicCreator, if it creates topics
        if topics is not None and plan.topic not in topics.known:
            self._unready[key] = self.plans.pop(key)

    def _first_use(self, key: tuple[str, str]) -> TablePlan | None:
        """The first ROW of a table whose topic may be missing: create the topic, then use the plan."""
        plan = self._unready.pop(key, None)
        if plan is not None:
            self.sink.ensure_topic(plan.topic)
            self.plans[key] = plan
        return plan

    def _skip_unplanned(self, key: tuple[str, str], rows: int) -> bool:
        """ROWs of a filtered table (counted) or of one whose FIELD failed (already reported)."""
        why = self._unplanned.get(key)
        if why is None:
            return False
        if why == "filtered":
            assert self._policy is not None
            self._policy.stats.filtered += rows
        elif self.metrics is not None:
            self.metrics.on_erroneous(rows)
        return True

    def _bad_row(self, plan: TablePlan, exc: Exception, vgtid_json: str) -> list[OutRecord]:
        where = EventLocation(plan.keyspace, plan.shard, plan.table, vgtid_json)
        self._failures.handle("ROW value cannot be converted", where, exc)
        return []

    def _bad_record(self, plan: TablePlan, rec: OutRecord, exc: Exception, vgtid_json: str) -> None:
        if not is_oversized(exc):
            raise exc
        where = EventLocation(plan.keyspace, plan.shard, plan.table, vgtid_json)
        size = len(rec.value or b"") + len(rec.key or b"")
        self._failures.handle(f"record of {size} bytes for {rec.topic} exceeds the producer's max.request.size", where, exc)

    # --- transaction boundaries -------------------------------------------------------------

    def _context(self, plan: TablePlan, commit_seconds: int, vgtid_json: str, body: bytes | None) -> SourceContext:
        if self.features.local_vgtid:
            return SourceContext(plan.keyspace, plan.shard, commit_seconds, local_vgtid_json(vgtid_json, plan.shard))
        return SourceContext(plan.keyspace, plan.shard, commit_seconds, vgtid_json, vgtid_escaped=body)

    def _emit(self, commit_seconds: int, vgtid_json: str, body: bytes | None = None) -> None:
        """The held rows' records, their source block at this commit time and VGTID (``body``:
        its JSON string body when the caller made it, ``_vgtid_of_entries``)."""
        deferred = self._deferred
        if not deferred:
            return
        send = self.sink.send
        rows_sender = getattr(self.sink, "rows_sender", None)  # the native sink's C loop
        now = time.time_ns()
        tx = self._tx_blocks
        tx_bytes = self._tx_bytes
        ctx: SourceContext | None = None
        ctx_shard = None
        for plan, rcs in deferred:
            if ctx is None or plan.shard != ctx_shard:
                ctx = self._context(plan, commit_seconds, vgtid_json, body)
                ctx_shard = plan.shard
            if plan.sends_natively:
                producer = rows_sender() if rows_sender is not None else None
                if producer is not None and tx is None:
                    i = plan.send_rows_native(producer, rcs, ctx, now, "c")
                    if i >= len(rcs):
                        continue
                    if i:
                        rcs = rcs[i:]  # a row for the Python path: send_rows from it on
                plan.send_rows(
                    rcs,
                    ctx.fragment(plan.version, plan.logical_name, plan.table, plan.unset_snapshot),
                    now,
                    "c",
                    tx,
                    tx_bytes,
                    send,
                    functools.partial(self._bad_row, plan, vgtid_json=vgtid_json),
                    functools.partial(self._bad_record, plan, vgtid_json=vgtid_json),
                    producer,
                    self._txmeta,
                )
                continue
            for rc in rcs:
                try:
                    recs = plan.encode_change(rc, ctx, now, "c", tx)
                except Exception as exc:  # zero-cost until raised; the mode decides
                    recs = self._bad_row(plan, exc, vgtid_json)
                for rec in recs:
                    try:
                        send(rec.topic, rec.key, rec.value, rec.headers)
                    except KafkaException as exc:
                        self._bad_record(plan, rec, exc, vgtid_json)
        self.stats.records_sent = self.sink.records_sent
        self._clear_deferred()

    def _stream_out(self) -> None:
        """A transaction too large to hold: encode what we have with the context known now."""
        vgtid_json = self._raw.to_json()
        if not self._streaming_txn:
            log.info(
                "transaction exceeds %d buffered rows or %d bytes (max.queue.size, max.queue.size.in.bytes); "
                "streaming it without waiting for COMMIT", self.lookahead_rows, self.max_queue_bytes,
            )
            self._streaming_txn = True
            if self._txmeta is not None and self._in_txn:
                # Its ending VGTID is not known yet: the transaction is identified (and ranked)
                # by the position before it, a documented difference from Debezium.
                begin = self._tx_begin(vgtid_json, Vgtid(self._raw.shard_gtids))
                if begin is not None:  # its rows start going out now: BEGIN first
                    self._send_boundaries(begin, None)
        self._emit(self._begin_ts, vgtid_json)

    def _tx_begin(self, txn_id: str, vgtid: Vgtid, id_json: bytes | None = None) -> bytes | None:
        """Start counting the transaction; its BEGIN record's value (None: filtered or resumed), unsent."""
        assert self._txmeta is not None
        return self._txmeta.begin_value(txn_id, self._begin_ts * 1000, self._begin_shard, vgtid, id_json)

    def _send_boundaries(self, begin: bytes | None, end: bytes | None) -> None:
        """The BEGIN and/or END record of the open transaction (values; the monitor has their
        topic, key and headers). The topic is made ready once per stream attempt."""
        txmeta = self._txmeta
        assert txmeta is not None
        topic, key, headers, send = txmeta.boundary_topic, txmeta.boundary_key, txmeta.boundary_headers, self.sink.send
        if not self._boundary_topic_ready:
            self.sink.ensure_topic(topic)
            self._boundary_topic_ready = True
        if begin is not None:
            send(topic, key, begin, headers)
        if end is not None:
            send(topic, key, end, headers)

    def _commit(self, timestamp: int, ddl: binlogdata_pb2.VEvent | None = None) -> None:
        pending = self._pending_vgtid
        body = None  # the VGTID's JSON as a JSON string body, when made entry by entry
        if pending is None:
            # Debezium uses the previous VGTID when a response carries none; so do we.
            vgtid = self._raw
            vgtid_json = vgtid.to_json()
        else:
            if isinstance(pending, tuple):
                vgtid, vgtid_json, body = self._vgtid_of_entries(pending, self._vg_changed)
            else:
                vgtid, vgtid_json, body = self._vgtid(pending)
            self._pending_vgtid = None
        before = self._raw  # the previous VGTID (after a reconnect: the resume position)
        self._raw = vgtid
        resume = self._copy.resumable(vgtid) if self._copy is not None else vgtid
        txmeta = self._txmeta
        if txmeta is None:
            self._emit(timestamp, vgtid_json, body)
            position: Vgtid = resume
        elif self._in_txn:
            id_json = None if body is None else b'"' + body + b'"'
            begin = None if self._streaming_txn else self._tx_begin(vgtid_json, vgtid, id_json)
            self._emit(timestamp, vgtid_json, body)
            end, transaction_id, counts, extra = txmeta.finish(timestamp * 1000)
            # BEGIN goes out next to END, after the rows: sent alone before the rows it found the
            # transaction topic's queue empty and woke librdkafka's sender, ~8 us; the pair now
            # costs ~5 us (BENCHMARKS.md, "BEGIN next to END"). Kafka orders no records across
            # topics, so consumers see no difference they could rely on;
            # both are in the same segment (at-least-once) or Kafka transaction (exactly-once) as
            # the rows, so a crash loses or keeps all of them together.
            if begin is not None or end is not None:
                self._send_boundaries(begin, end)
            # Debezium's offset after END still names the transaction and its counters.
            position = Checkpoint.at(resume.shard_gtids, transaction_id, counts, extra)
        else:
            self._emit(timestamp, vgtid_json, body)
            o = txmeta.offset_fields()
            position = Checkpoint(resume.shard_gtids, o.transaction_id, tuple(o.collection_counts.items()), o.extra)
        self._in_txn = False
        if ddl is not None and self.features.schema_changes is not None:
            shard = ddl.shard
            source_vgtid = local_vgtid_json(vgtid_json, shard) if self.features.local_vgtid else vgtid_json
            rec = self.features.schema_changes.record(shard, ddl.statement, ddl.timestamp, source_vgtid, time.time_ns() // 1_000_000)
            self.sink.send_to_partition(rec.topic, SCHEMA_CHANGE_PARTITION, rec.key, rec.value, list(self.encoder.headers))  # Debezium: context headers as on data records
        if self._signals is not None:
            # Acted on before the commit point is sealed: the position passes the signal row only
            # together with what the signal started (an ad-hoc snapshot in the offset, a backfill
            # signal written to the progress topic), so a crash in between replays the signal.
            self._signals.commit(vgtid_json, vgtid, self._pending_shard, before)
        self.seal(position)
        self.stats.transactions += 1
        self.stats.last_commit_ts = timestamp
        if self.metrics is not None and self._pending_shard and timestamp:
            sent = self.sink.records_sent
            now = time.time()
            self.metrics.on_commit(self._pending_shard, timestamp, now, now, sent - self._txn_records_before)
            self._txn_records_before = sent
            self.metrics.records_sent = sent
        if self.features.heartbeats is not None:
            self.tick()

    def _copy_completed(self) -> None:
        """A shard's copy is complete: a commit point at the same VGTID, with that shard's entry as
        VTGate reports it (a stream whose copy ended is resumed as streaming, and a task that only
        copies, snapshot.mode=initial_only, sees the end). Between transactions only; otherwise the
        transaction's own commit point follows."""
        if self._in_txn or self._deferred:
            return
        assert self._copy is not None
        resume = self._copy.resumable(self._raw)
        if resume.shard_gtids == self.position.shard_gtids:
            return
        self.seal(dataclasses.replace(self.position, shard_gtids=resume.shard_gtids))

    def seal(self, position: Vgtid) -> None:
        """``position`` becomes the current one and a commit point of the sink, with the task's
        offset fields (``Features.decorate``) as they are now."""
        journals = self.journals
        if journals is not None and journals.done:
            position = journals.pin(position)
        decorate = self.features.decorate
        if decorate is not None:
            position = decorate(position)
        self.position = position
        self.sink.commit_point(position)

    def _vgtid(self, pb: binlogdata_pb2.VGtid) -> tuple[Vgtid, str, bytes | None]:
        """A commit's VGTID, its JSON and that JSON as the body of a JSON string (the source
        block's ``vgtid``, the transaction id; None with copy progress). Between two commits
        only the committing shard's GTID moves: each shard's position (and its JSON, plain and
        escaped) is made once and reused from a small cache."""
        cache = self._shard_gtids
        sgs = []
        parts = []
        escaped = []
        for p in pb.shard_gtids:
            if p.table_p_ks:  # copy progress: rare, and not worth caching
                vgtid = Vgtid.from_proto(pb)
                return vgtid, vgtid.to_json(), None
            k = (p.keyspace, p.shard, p.gtid)
            hit = cache.get(k)
            if hit is None:
                if len(cache) > 4096:
                    cache.clear()
                hit = cache[k] = self._shard_entry(*k)
            sgs.append(hit[0])
            parts.append(hit[1])
            escaped.append(hit[2])
        return (Vgtid(tuple(sgs)), *_joined(parts, escaped))

    def _vgtid_of_entries(self, entries: tuple[bytes, ...], changed: list[int]) -> tuple[Vgtid, str, bytes | None]:
        """``_vgtid`` of a VGTID event the native scanner read (``vgtid_entries``): only the
        entries whose bytes changed since the previous event are parsed (one per commit; over 64
        shards, reading every entry per commit tripled the CPU per row), the JSON and its string
        body joined from each entry's, kept."""
        sgs, texts, escs = self._vg_sgs, self._vg_texts, self._vg_escs
        n = len(entries)
        same_shards = len(sgs) == n
        try:
            if not same_shards:  # entries past the previous ones are all in ``changed``
                for lst, fill in ((sgs, None), (texts, ""), (escs, b"")):
                    del lst[n:]
                    lst.extend([fill] * (n - len(lst)))  # type: ignore[list-item]  # all filled below
            for i in changed:
                pb = _ShardGtidPb(entries[i])
                if pb.table_p_ks:  # copy progress: rare, not kept (the next event is read whole)
                    self._forget_entries()
                    vgtid = Vgtid(tuple(ShardGtid.from_proto(_ShardGtidPb(e)) for e in entries))
                    return vgtid, vgtid.to_json(), None
                old = sgs[i]
                if old is None or old.shard != pb.shard or old.keyspace != pb.keyspace:
                    same_shards = False
                sgs[i], texts[i], escs[i] = self._shard_entry(pb.keyspace, pb.shard, pb.gtid)
            # The same (keyspace, shard) at each place as the last VGTID, already checked: no new check.
            vgtid = Vgtid.trusted(tuple(sgs)) if same_shards else Vgtid(tuple(sgs))
        except BaseException:
            # A duplicate shard: the next VGTID is read and checked whole, and so is this one if
            # its COMMIT comes again (``changed`` was relative to the entries forgotten here).
            self._forget_entries()
            self._vg_changed = list(range(n))
            raise
        self._vg_entries = entries
        return (vgtid, *_joined(texts, escs))

    def _forget_entries(self) -> None:
        self._vg_entries, self._vg_sgs, self._vg_texts, self._vg_escs = (), [], [], []

    def _shard_entry(self, keyspace: str, shard: str, gtid: str) -> tuple[ShardGtid, str, bytes]:
        """A shard position, its JSON (``entry_json``) and that JSON as the body of a JSON string
        (``json_string_body``: JSON escapes are per character, so a VGTID's body is its entries'
        bodies joined)."""
        text = entry_json(keyspace, shard, gtid)
        return ShardGtid(keyspace, shard, gtid), text, json_string_body(text)

    def tick(self) -> None:
        """A heartbeat record if one is due (after commits, on VTGate heartbeats, while idle).

        It carries the current position's VGTID and seals a commit point of its own at the same
        position, so the sink commits it (and the offset) while the source is idle.
        """
        hb = self.features.heartbeats
        if hb is None or not hb.due() or self._in_txn:
            return
        lw_ms = None
        if hb.low_watermark and self.features.low_watermark is not None:
            lw = self.features.low_watermark()
            lw_ms = None if lw is None else int(lw * 1000)
        rec = hb.maybe_emit(self._raw.to_json(), True, lw_ms)
        if rec is None:
            return
        self.sink.send_to_partition(rec.topic, HEARTBEAT_PARTITION, rec.key, rec.value, rec.headers)
        # A fresh object for the same position: the sink seals (and, exactly-once, commits) it.
        self.seal(dataclasses.replace(self.position))

    def _journal(self, ev: Any) -> None:  # Any: a VEvent (upb)
        """A source shard's reshard journal: the task stops for reassignment once every source
        shard of it the task holds has delivered it (``journals``); until then the shard is done
        (pinned before its journal) and the others stream on."""
        journal = ev.journal
        if not self.journal_stops or journal.migration_type != binlogdata_pb2.MigrationType.SHARDS:
            return
        progress = self.journals
        if progress is not None:
            if not ev.shard:
                raise ProtocolError(f"reshard journal {journal.id} without the shard that delivered it")
            try:
                complete = progress.reached(journal, (ev.keyspace, ev.shard), self.position)
            except JournalMismatch as exc:
                raise ProtocolError(str(exc)) from None
            if not complete:
                # The journal's own VGTID and COMMIT would move the shard past it: skipped.
                self._journal_tail = ev.shard
                log.info("reshard journal %d: shard %s/%s reached it; streaming %s until each reaches it too, so "
                         "none of their changes before the cut-over is skipped", journal.id, ev.keyspace, ev.shard,
                         names(progress.pending))
                if self.metrics is not None:
                    self.metrics.awaiting_journal = progress.report()
                return
        raise ReassignmentNeeded(reassigned(self.position, journal), journal)

    def _skip_journal_tail(self, t: int) -> None:
        """The done shard's events after its JOURNAL up to its COMMIT (VTGate sends them together;
        another shard's events are streamed as usual)."""
        if t == COMMIT:
            self._journal_tail = None
            self._in_txn = False
            self._pending_vgtid = None

    def abandon_transaction(self) -> None:
        """Forget a partly received transaction (the stream broke); it is replayed on reconnect."""
        self._clear_deferred()
        self._pending_vgtid = None
        self._journal_tail = None  # the done shard is left out of the next request
        if self._signals is not None:
            self._signals.rollback()
        if self._txmeta is not None:
            # Only a streamed (oversized) transaction has records out already; an exactly-once
            # sink aborts them, an at-least-once one keeps them and the replay skips them.
            self._txmeta.interrupt(delivered=self._streaming_txn and self._keeps_partial)
        self._in_txn = False
