"""The first ``SnapshotEngine``: a second VStream that copies the requested tables.

The live stream keeps running. The snapshot stream asks VTGate for a copy (``gtid=""`` for this
task's shards, ``tables_to_copy`` = the requested tables, one filter rule per table carrying the
``additional-condition``). Its rows become ``op=r`` records with ``source.snapshot`` = ``"true"``,
the very last one ``"last"``, and ``source.vgtid`` = the copy's VGTID (with ``table_p_ks``, as
Debezium's initial copy shows it). The engine stops the stream at COPY_COMPLETED.

Both streams are turned into records on the task's processing thread (``pump``), between live
transactions, so the sink sees one ordered sequence. A ``stop-snapshot`` that ends the run emits the
row held back for ``"last"`` with that marker (the next ``pump``), so every stopped or completed
snapshot that emitted rows ends with exactly one ``"last"``; a multi-table request whose last
tables are empty ends with the last row of the last non-empty table. Ordering against the live stream follows
DBLog's rule: while a snapshot runs, the keys the live stream emits for the snapshotted tables are
remembered, and a snapshot row whose key the live stream has already emitted is dropped (the live
record is as new or newer). A snapshot row emitted first is simply overtaken by the live records
that follow it, so a consumer always ends with the newest state.

Resumable: while a snapshot is queued or running, every commit point the task seals carries the
snapshot's state into the offset value (``state_fields``): our own ``shardcdc_snapshot`` key (the
requests, and the copy VGTID with ``table_p_ks`` up to which every row has been handed to the
sink) and Debezium's ``incremental_snapshot_collections`` (the collections still to snapshot, in
Debezium's JSON format; the Vitess connector ignores both keys). A restarted task ``restore``s it
and resumes the copy from that VGTID; the row held back for ``"last"`` is never covered by it, so
the final marker is emitted exactly once after a stop. Resume is per shard: a shard whose entry
has neither ``table_p_ks`` nor an empty gtid is done. The stored copy VGTID is VTGate's made safe
to resume from (``offsets.copyresume``): until a shard's own COPY_COMPLETED, a shard between two
tables (a gtid and no ``table_p_ks``, which a restart would read as "copied") keeps copying, and
the tables it completed keep their last lastpk, so a resumed copy neither skips the next tables
nor copies the completed ones again (VTGate copies every requested table without a lastpk from
the start, in name order).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcworker.events import EncoderConfig, SourceContext, TablePlan
from cdcworker.filters.failure import EventLocation, FailureHandler
from cdcworker.filters.tables import table_rule
from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.copyresume import CopyResume
from cdcworker.offsets.value import Checkpoint, with_offset_fields
from cdcworker.snapshot import SnapshotRequest
from vitessapi import binlogdata_pb2, vtgate_pb2

if TYPE_CHECKING:
    from cdcworker.offsets import Vgtid
    from cdcworker.sink import KafkaSink
    from cdcworker.streaming import StreamProcessor

log = logging.getLogger(__name__)

_T = binlogdata_pb2.VEventType
_END = object()
# Offset-value keys: ours (the resume state) and Debezium's list of collections still to snapshot.
STATE_KEY = "shardcdc_snapshot"
DEBEZIUM_COLLECTIONS_KEY = "incremental_snapshot_collections"
STATE_KEYS = frozenset({STATE_KEY, DEBEZIUM_COLLECTIONS_KEY})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def copy_rules(keyspace: str, request: SnapshotRequest) -> list[tuple[str, str]]:
    """One filter rule per table: ``select * from t where <condition>`` or a ``/^t$`` match."""
    rules = []
    for table in request.tables(keyspace):
        cond = request.condition(keyspace, table)
        if cond:
            name = table if _IDENT.fullmatch(table) else "`" + table.replace("`", "``") + "`"
            rules.append((table, f"select * from {name} where {cond}"))
        else:
            rules.append((table_rule(table), ""))
    return rules


class _WatchingSink:
    """The live stream's sink while a snapshot runs: remembers (topic, key) of watched topics.
    (The snapshot's resume state reaches every commit point through ``StreamProcessor.seal``.)"""

    # The native sink's C loop sends rows without calling ``send``: it would skip ``seen``, and a
    # snapshot read of a key the live stream already changed would overwrite the newer state.
    # No ``rows_sender`` here sends every live record through ``send`` while a snapshot runs.
    rows_sender = None

    def __init__(self, inner: Any, topics: set[str], seen: set[tuple[str, bytes]]) -> None:  # Any: the live sink (KafkaSink or the native sink: no common base)
        self.inner = inner
        self._topics = topics
        self.seen = seen

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any) -> None:  # Any: the wrapped sink's headers, passed through
        if key is not None and topic in self._topics:
            self.seen.add((topic, key))
        self.inner.send(topic, key, value, headers)

    def __getattr__(self, name: str) -> Any:  # Any: any attribute of the wrapped sink
        return getattr(self.inner, name)


def _stored_requests(offset_fields: JsonMapping | None) -> list[tuple[SnapshotRequest, str, set[str]]]:
    """The snapshot requests of a stored offset (``state_fields``): (request, copy VGTID, stopped tables)."""
    raw = offset_fields.get(STATE_KEY) if offset_fields else None
    if not isinstance(raw, str):
        return []
    try:
        return [
            (SnapshotRequest(str(r["id"]), tuple(r["data_collections"]), dict(r.get("conditions") or {}),
                             str(r.get("kind") or "incremental")),
             str(r.get("vgtid") or ""), set(r.get("stopped") or ()))
            for r in json.loads(raw)["requests"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("the stored ad-hoc snapshot state cannot be read (%s); it is dropped", exc)
        return []


class _Run:
    """One request being copied."""

    def __init__(self, request: SnapshotRequest, call: Any, topics: set[str], depth: int, resume: str = "") -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        self.request = request
        # Copy VGTIDs (JSON): of the newest flushed batch, and the resume point: every row up to
        # it has been handed to the sink (or superseded), so a restart may continue after it.
        self.flushed_vgtid = resume
        self.resume_vgtid = resume
        self.held_prev = resume  # the resume point while a row is held back
        self.call = call
        self.topics = topics
        self.seen: set[tuple[str, bytes]] = set()
        self.stopped_tables: set[str] = set()
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        self.plans: dict[tuple[str, str], TablePlan] = {}
        self.rows: list[tuple[TablePlan, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        self.held: tuple[TablePlan, Any, int, str] | None = None  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        self.vgtid_json = ""
        self.vgtid: Vgtid | None = None  # the newest VGTID of the copy stream
        self.copy = CopyResume(())  # resume points of the shards copied (set by _launch)
        # Per shard, the copy state (table_p_ks) at the last COMMIT: a transaction that does not
        # move it is the tablet's catch-up of binlog changes, not a copy batch.
        self.pks: JsonObject = {}
        self.catchup_rows = 0
        self.cancelled = False
        self.emitted = 0
        self.superseded = 0
        self.thread = threading.Thread(target=self._read, name=f"snapshot-{request.id}", daemon=True)

    def _read(self) -> None:
        try:
            for response in self.call:
                while not self.cancelled:
                    try:
                        self.queue.put(response, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self.cancelled:
                    return
            self.queue.put(_END)
        except BaseException as exc:  # handed to the processing thread
            self.queue.put(exc)


class VStreamCopyEngine:
    """``SnapshotEngine`` over a second VStream; ``pump`` runs on the task's processing thread."""

    def __init__(
        self,
        open_stream: Callable[[vtgate_pb2.VStreamRequest], Any],  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        keyspace: str,
        shards: Callable[[], Sequence[str]],
        encoder: EncoderConfig,
        tablet_type: str = "PRIMARY",
        exclude_keyspace_from_table_name: bool = False,
        failures: FailureHandler | None = None,
        depth: int = 16,
    ) -> None:
        self._open = open_stream
        self.keyspace = keyspace
        self._shards = shards
        self.encoder = encoder
        self.tablet_type = tablet_type
        self.exclude_keyspace_from_table_name = exclude_keyspace_from_table_name
        self.failures = failures or FailureHandler("warn")
        self._depth = depth
        self._queued: deque[SnapshotRequest] = deque()
        self._resume: dict[str, str] = {}  # request id -> copy VGTID to resume from (restored)
        self._stopped: dict[str, set[str]] = {}  # request id -> tables a stop-snapshot removed (restored)
        self._state_cache: tuple[tuple[tuple[str, str, int], ...], tuple[tuple[str, str], ...]] | None = None
        self._run: _Run | None = None
        self._stopped_run: _Run | None = None  # stopped by a signal: its held row still to emit as "last"
        self.completed: list[str] = []  # request ids, in completion order
        self.records = 0
        self.superseded = 0  # reads dropped because the live stream had emitted the row already

    # --- SnapshotEngine ---------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._run is not None or bool(self._queued) or self._stopped_run is not None

    def start(self, request: SnapshotRequest) -> None:
        if not request.tables(self.keyspace):
            log.info("snapshot %s names no table of keyspace %s; nothing to do", request.id, self.keyspace)
            return
        running = [self._run.request] if self._run is not None else []
        if any(r.id == request.id for r in [*running, *self._queued]):
            # A signal replayed after a restart, whose snapshot was restored from the offset.
            log.info("snapshot %s is already running or queued; the signal is ignored", request.id)
            return
        self._queued.append(request)

    # --- resume state in the offset -----------------------------------------------------------

    def state_fields(self) -> tuple[tuple[str, str], ...]:
        """Offset-value fields describing queued and running snapshots (empty when there are none)."""
        run = self._run
        entries = []
        if run is not None:
            entries.append((run.request, run.resume_vgtid, run.stopped_tables))
        entries.extend((r, self._resume.get(r.id, ""), self._stopped.get(r.id, set())) for r in self._queued)
        if not entries:
            return ()
        cache_key = tuple((r.id, v, len(st)) for r, v, st in entries)
        if self._state_cache is not None and self._state_cache[0] == cache_key:
            return self._state_cache[1]
        requests = []
        collections = []
        for r, vgtid, stopped in entries:
            requests.append({
                "id": r.id,
                "data_collections": list(r.data_collections),
                "conditions": dict(r.conditions),
                "kind": r.kind,
                "stopped": sorted(stopped),
                "vgtid": vgtid,
            })
            for table in r.tables(self.keyspace):
                if table not in stopped:
                    collections.append({
                        "incremental_snapshot_collections_id": f"{self.keyspace}.{table}",
                        "incremental_snapshot_collections_additional_condition": r.condition(self.keyspace, table),
                        "incremental_snapshot_collections_surrogate_key": None,
                    })
        fields = (
            (DEBEZIUM_COLLECTIONS_KEY, json.dumps(collections, separators=(",", ":"), ensure_ascii=False)),
            (STATE_KEY, json.dumps({"requests": requests}, separators=(",", ":"), ensure_ascii=False)),
        )
        self._state_cache = (cache_key, fields)
        return fields

    def decorate(self, position: Vgtid) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """``position`` with the snapshot state now in its offset fields (``offsets.Checkpoint.extra``);
        a state that ended is removed."""
        return with_offset_fields(position, self.state_fields(), STATE_KEYS)

    def restore(self, offset_fields: JsonMapping | None) -> None:
        """Queue the snapshots a previous run of this task stored in its offset (``state_fields``)."""
        for request, vgtid, stopped in _stored_requests(offset_fields):
            if vgtid:
                self._resume[request.id] = vgtid
            if stopped:
                self._stopped[request.id] = stopped
            self._queued.append(request)
            log.info("snapshot %s restored from the offset (%s)", request.id, "resuming" if vgtid else "from the start")

    def restore_inherited(self, values: Mapping[str, JsonMapping]) -> None:
        """A new generation's task: resume the snapshots the tasks its shards come from had queued
        or running (``values``: shard -> the offset fields it was inherited with). Each shard
        resumes from its own entry of the old copy position; a shard with none (its old task had
        finished the snapshot, or not started it) is copied again from the start, so a rescale in
        the middle of a snapshot loses no shard of it (at worst reads some rows twice)."""
        found: dict[str, SnapshotRequest] = {}
        entries: dict[str, dict[str, ShardGtid]] = {}
        stopped: dict[str, set[str]] = {}
        for shard, fields in values.items():
            for request, vgtid, gone in _stored_requests(fields):
                found.setdefault(request.id, request)
                stopped.setdefault(request.id, set()).update(gone)
                own = [sg for sg in Vgtid.from_json(vgtid) if sg.shard == shard] if vgtid else []
                if own:
                    entries.setdefault(request.id, {})[shard] = own[0]
        shards = list(self._shards())
        for rid, request in found.items():
            have = entries.get(rid, {})
            start = Vgtid(tuple(have.get(s) or ShardGtid(self.keyspace, s, "") for s in shards))
            self._resume[rid] = start.to_json()
            if stopped.get(rid):
                self._stopped[rid] = stopped[rid]
            self._queued.append(request)
            log.info("snapshot %s inherited from the previous generation (%d of %d shards resuming)",
                     rid, sum(1 for s in shards if s in have), len(shards))

    def on_abort(self, durable: Any) -> None:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """The exactly-once sink aborted its open Kafka transaction (a reconnect inside a streamed
        transaction): snapshot records since ``durable`` are gone with it, while the live stream
        rewinds there. The snapshots start over from the state ``durable`` carries, as after a
        restart; one started since then starts from the beginning."""
        stored = _stored_requests(dict(durable.extra) if isinstance(durable, Checkpoint) else {})
        run = self._run
        if run is None and not stored:
            return
        if run is not None:
            self._stop_run(complete=False)
        ids = {r.id for r, _, _ in stored}
        later = ([run.request] if run is not None and run.request.id not in ids else []) + [
            r for r in self._queued if r.id not in ids]
        self._queued = deque([*(r for r, _, _ in stored), *later])
        self._resume = {r.id: v for r, v, _ in stored if v}
        self._stopped = {r.id: st for r, _, st in stored if st}
        self.completed = [c for c in self.completed if c not in ids]
        log.info("snapshots %s start over from the last committed offset (Kafka transaction aborted)",
                 ", ".join(r.id for r in self._queued) or "-")

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        if not data_collections:
            if request_id is None:
                self._queued.clear()
                self._resume.clear()
                self._stopped.clear()
            else:
                self._queued = deque(r for r in self._queued if r.id != request_id)
                self._resume.pop(request_id, None)
                self._stopped.pop(request_id, None)
            if self._run is not None and request_id in (None, self._run.request.id):
                self._stop_run(complete=False, signalled=True)
            return
        tables = {dc.partition(".")[2] or dc for dc in data_collections}
        run = self._run
        if run is not None:
            run.stopped_tables |= {t for t in tables if t in run.request.tables(self.keyspace)}
            if set(run.request.tables(self.keyspace)) <= run.stopped_tables:
                self._stop_run(complete=False, signalled=True)
        # Queued (or restored) requests lose the tables too: Debezium's stop-snapshot removes them
        # from every pending snapshot, not only the running one.
        kept: deque[SnapshotRequest] = deque()
        for r in self._queued:
            own = set(r.tables(self.keyspace))
            stopped = self._stopped.get(r.id, set()) | (own & tables)
            if own <= stopped:
                self._resume.pop(r.id, None)
                self._stopped.pop(r.id, None)
                log.info("snapshot %s: every table stopped before it ran; dropped", r.id)
                continue
            if stopped:
                self._stopped[r.id] = stopped
            kept.append(r)
        self._queued = kept

    def close(self) -> None:
        self._queued.clear()
        if self._run is not None:
            self._stop_run(complete=False)

    # --- processing thread ------------------------------------------------------------------

    # Any: pump swaps the processor's sink for a _WatchingSink, a duck of KafkaSink that StreamProcessor.sink does not admit
    def pump(self, processor: Any, max_responses: int = 32) -> int:
        """Emit what the snapshot stream delivered, between live transactions; returns records sent."""
        if processor is None or not processor.between_transactions:
            return 0
        if self._stopped_run is not None:
            self._finish_stopped(processor)
        if self._run is None:
            if not self._queued:
                if isinstance(processor.sink, _WatchingSink):
                    processor.sink = processor.sink.inner  # stop remembering live keys
                return 0
            self._launch(self._queued.popleft())
        run = self._run
        assert run is not None
        live = processor.sink
        if not isinstance(live, _WatchingSink) or live.seen is not run.seen:
            base = live.inner if isinstance(live, _WatchingSink) else live
            processor.sink = _WatchingSink(base, run.topics, run.seen)
        sink = processor.sink.inner
        before = run.emitted
        done = False
        for _ in range(max_responses):
            try:
                item = run.queue.get_nowait()
            except queue.Empty:
                break
            if item is _END:
                log.warning("snapshot %s: VTGate ended the copy stream before COPY_COMPLETED", run.request.id)
                done = True
                break
            if isinstance(item, BaseException):
                if not run.cancelled:
                    log.error("snapshot %s failed: %s", run.request.id, item)
                done = True
                break
            if self._events(run, item, sink):
                self._emit_held(run, sink, "last")
                done = True
                break
        if done:
            self._stop_run(complete=not run.cancelled)
            if not self.active:
                processor.sink = sink
        if run.emitted != before or done:
            # A commit point at the live position: the sink makes the snapshot records durable
            # (and, exactly-once, commits them) without waiting for the next live transaction,
            # and the offset records the snapshot's progress (or its end).
            processor.seal(dataclasses.replace(processor.position))
        return run.emitted - before

    def _finish_stopped(self, processor: StreamProcessor) -> None:
        """After a ``stop-snapshot``: the held row goes out as ``"last"``, then a commit point."""
        run, self._stopped_run = self._stopped_run, None
        assert run is not None
        live = processor.sink
        sink = live.inner if isinstance(live, _WatchingSink) else live
        before = run.emitted
        self._emit_held(run, sink, "last")
        if run.emitted != before:
            processor.seal(dataclasses.replace(processor.position))

    def _launch(self, request: SnapshotRequest) -> None:
        tables = request.tables(self.keyspace)
        naming = self.encoder.topic_naming()
        # DefaultTopicNamingStrategy names one topic per shard: watch those of every shard.
        topics = {tp for t in tables for tp in naming.data_topics(self.keyspace, t, self._shards())}
        resume = self._resume.pop(request.id, "")
        if resume:
            # Only the shards still copying: a shard that finished never sends COPY_COMPLETED again.
            shard_gtids = [sg.to_proto() for sg in Vgtid.from_json(resume) if sg.copying]
            if not shard_gtids:
                log.info("snapshot %s: every shard was copied before the restart", request.id)
                self.completed.append(request.id)
                return
            log.info("snapshot %s: resuming the copy from %s", request.id, resume)
        else:
            shard_gtids = [binlogdata_pb2.ShardGtid(keyspace=self.keyspace, shard=s, gtid="") for s in self._shards()]
        req = vtgate_pb2.VStreamRequest(
            tablet_type=self.tablet_type,
            vgtid=binlogdata_pb2.VGtid(shard_gtids=shard_gtids),
            filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=m, filter=f) for m, f in copy_rules(self.keyspace, request)]),
            flags=vtgate_pb2.VStreamFlags(
                tables_to_copy=tables, exclude_keyspace_from_table_name=self.exclude_keyspace_from_table_name
            ),
        )
        log.info("snapshot %s: copying %s of %s", request.id, ", ".join(tables), self.keyspace)
        run = _Run(request, self._open(req), topics, self._depth, resume)
        run.stopped_tables |= self._stopped.pop(request.id, set())
        run.copy = CopyResume(ShardGtid.from_proto(sg) for sg in shard_gtids)
        run.pks = {sg.shard: ShardGtid.from_proto(sg).table_p_ks for sg in shard_gtids}
        self._run = run
        run.thread.start()

    def _stop_run(self, complete: bool, signalled: bool = False) -> None:
        run = self._run
        if run is None:
            return
        run.cancelled = True
        with contextlib.suppress(Exception):
            run.call.cancel()
        self._run = None
        if signalled:  # the next pump emits the held row and unwraps the live sink
            self._stopped_run = run
        if complete:
            self.completed.append(run.request.id)
            log.info(
                "snapshot %s complete: %d records (%d superseded by live changes, %d catch-up rows left to "
                "the live stream)", run.request.id, run.emitted, run.superseded, run.catchup_rows,
            )
        else:
            log.info("snapshot %s stopped after %d records", run.request.id, run.emitted)

    def _events(self, run: _Run, response: Any, sink: KafkaSink) -> bool:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """Handle one snapshot-stream response; True at the final COPY_COMPLETED."""
        for ev in response.events:
            t = ev.type
            if t == _T.ROW:
                re_ = ev.row_event
                plan = run.plans.get((re_.shard or ev.shard, re_.table_name))
                if plan is None or plan.table in run.stopped_tables:
                    continue
                for rc in re_.row_changes:
                    if rc.HasField("after"):
                        # Catch-up updates during the copy are reads of the newer state.
                        run.rows.append((plan, rc if not rc.HasField("before") else binlogdata_pb2.RowChange(after=rc.after)))
            elif t == _T.FIELD:
                fe = ev.field_event
                key = (fe.shard or ev.shard, fe.table_name)
                try:
                    run.plans[key] = TablePlan.compile(fe, self.encoder)
                except ValueError as exc:
                    run.plans.pop(key, None)
                    where = EventLocation(fe.keyspace, key[0], fe.table_name, run.vgtid_json)
                    self.failures.handle("snapshot FIELD event cannot be planned", where, exc)
            elif t == _T.VGTID:
                run.vgtid = v = Vgtid.from_proto(ev.vgtid)
                run.vgtid_json = v.to_json()
            elif t == _T.COMMIT:
                self._drop_catchup(run)
                self._flush(run, sink, ev.timestamp)
            elif t == _T.COPY_COMPLETED:
                if ev.shard:
                    run.copy.completed(ev.keyspace, ev.shard)
                self._flush(run, sink, 0)
                if not ev.shard:
                    return True  # VTGate's final COPY_COMPLETED: every shard is copied
        return False

    @staticmethod
    def _drop_catchup(run: _Run) -> None:
        """Drop the rows of a catch-up transaction (the copy state did not move): binlog changes the
        live stream delivers itself, in order. Read as rows, a resumed copy's replay of an update
        made before a later delete would bring the deleted row back after its tombstone."""
        if run.vgtid is None:
            return
        now = {sg.shard: sg.table_p_ks for sg in run.vgtid}
        if run.rows:
            shard = run.rows[0][0].shard
            if shard in run.pks and now.get(shard) == run.pks[shard]:
                run.catchup_rows += len(run.rows)
                run.rows = []
        run.pks = now

    def _flush(self, run: _Run, sink: KafkaSink, commit_ts: int) -> None:
        """Emit the rows of a copy batch, always holding the newest one back: it may be the last.

        Moves the resume point: to this batch's VGTID when nothing is held, else to the VGTID of
        the batch before the held row's (a restart re-copies that batch, the held row included).
        """
        if run.rows:
            ts = commit_ts or int(time.time())
            rows, run.rows = run.rows, []
            for plan, rc in rows:
                if self._superseded(run, plan, rc, ts):
                    continue
                if run.held is not None:
                    self._emit_held(run, sink, "true")
                run.held = (plan, rc, ts, run.vgtid_json)
                run.held_prev = run.flushed_vgtid
        if run.vgtid is not None:
            run.flushed_vgtid = run.copy.resumable(run.vgtid).to_json()
        run.resume_vgtid = run.held_prev if run.held is not None else run.flushed_vgtid

    def _superseded(self, run: _Run, plan: TablePlan, rc: Any, ts: int) -> bool:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """The live stream already emitted this row's key (as new or newer): drop the read."""
        if not run.seen:
            return False
        try:
            _, key = plan.key(plan.decode(rc.after))
        except Exception:  # the failure mode is applied when the row is encoded
            return False
        if key is not None and (plan.topic, key) in run.seen:
            run.superseded += 1
            self.superseded += 1
            return True
        return False

    def _emit_held(self, run: _Run, sink: KafkaSink, marker: str) -> None:
        held, run.held = run.held, None
        if held is None:
            return
        plan, rc, ts, vgtid_json = held
        sink.ensure_topic(plan.topic)  # a table the live stream has not written to yet: its first use
        ctx = SourceContext(plan.keyspace, plan.shard, ts, vgtid_json, marker)
        try:
            recs = plan.encode_change(rc, ctx, time.time_ns(), "r")
        except Exception as exc:
            self.failures.handle("snapshot ROW value cannot be converted", EventLocation(plan.keyspace, plan.shard, plan.table, vgtid_json), exc)
            return
        for rec in recs:
            if rec.key is not None and (rec.topic, rec.key) in run.seen:
                run.superseded += 1  # overtaken while held back
                self.superseded += 1
                continue
            sink.send(rec.topic, rec.key, rec.value, rec.headers)
            run.emitted += 1
            self.records += 1
