"""The streaming side of the hand-off: a StreamProcessor that applies ``handoff`` rules.

``HandoffProcessor`` is the worker's own ``StreamProcessor`` (same decoding, encoder, sink and
commit points) with one difference: before a transaction's rows are encoded, each row change is
judged by its shard's ``ShardHandoff`` (held tables are dropped while ``held``; in the catch-up a
change is kept after its key's chunk high watermark, or as the key's final change).
``scan_finals`` is the catch-up's first pass (keys only, the held tables only) that finds those
final changes. ``run_catchup`` drives one catch-up stream to a target position (used by tests and
as the reference for the wiring in the worker's task loop, see docs/backfill.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc
import orjson

from cdcworker.backfill.gtid import covers, is_position
from cdcworker.backfill.handoff import CATCHUP, FinalChanges, ShardHandoff, Verdict, WindowScan
from cdcworker.backfill.reconcile import KeyReader
from cdcworker.backfill.rowchange import PartialChange
from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig, TablePlan
from cdcworker.filters.tables import table_rule
from cdcworker.offsets import Vgtid
from cdcworker.sink import KafkaSink
from cdcworker.streaming import FIELD, StreamProcessor
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

log = logging.getLogger(__name__)

PRI_KEY_FLAG = 2
ISINTEGRAL = 256
_T = binlogdata_pb2.VEventType


def key_reader_for(fe: Any) -> KeyReader | None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    idx = [i for i, f in enumerate(fe.fields) if f.flags & PRI_KEY_FLAG]
    if not idx:
        return None
    return KeyReader(idx, [bool(fe.fields[i].type & ISINTEGRAL) for i in idx])


def _table(name: str, keyspace: str) -> str:
    return name[len(keyspace) + 1:] if keyspace and name.startswith(keyspace + ".") else name


class HandoffProcessor(StreamProcessor):
    """The worker's processor, emitting held tables' changes by the hand-off rule."""

    def __init__(self, encoder: EncoderConfig, sink: KafkaSink, start: Vgtid,
                 handoffs: Mapping[str, ShardHandoff], **kwargs: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        super().__init__(encoder, sink, start, **kwargs)
        self.handoffs = dict(handoffs)
        self.key_readers: dict[tuple[str, str], KeyReader | None] = {}
        self.suppressed = 0
        self.finals_emitted = 0

    def process(self, response: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        for ev in response.events:
            if ev.type == FIELD:
                fe = ev.field_event
                self.key_readers[(fe.shard or ev.shard, _table(fe.table_name, fe.keyspace))] = key_reader_for(fe)
        super().process(response)

    def _emit(self, commit_seconds: int, vgtid_json: str, body: bytes | None = None) -> None:
        """Drop (or split) the row changes the hand-off rule withholds, then encode the rest exactly
        as the worker does. Only relies on ``_deferred`` holding (plan, row change or changes)."""
        deferred = self._deferred
        if deferred and self.handoffs:
            positions = {sg["shard"]: sg["gtid"] for sg in orjson.loads(vgtid_json)}
            # Verdicts per half (old key, new key); FINAL counts only for a key's last change here.
            judged: list[tuple[TablePlan, bool, list[tuple[Any, Verdict, Verdict]]]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
            last: dict[tuple[str, str, Any], tuple[int, int]] = {}
            for i, (plan, item) in enumerate(deferred):
                many = not hasattr(item, "HasField")
                rows = []
                for j, rc in enumerate(item if many else (item,)):
                    vb, va = self._judge(plan, rc, positions.get(plan.shard, ""), last, (i, j))
                    rows.append((rc, vb, va))
                judged.append((plan, many, rows))
            kept: list[tuple[TablePlan, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
            for i, (plan, many, rows) in enumerate(judged):
                changes = []
                for j, (rc, vb, va) in enumerate(rows):
                    c = self._keep(plan, rc, vb, va, last, (i, j))
                    if c is not None:
                        changes.append(c)
                self.suppressed += len(rows) - len(changes)
                if changes:
                    kept.append((plan, changes if many else changes[0]))
            deferred[:] = kept
        super()._emit(commit_seconds, vgtid_json, body)

    def _keys(self, plan: TablePlan, rc: Any) -> tuple[Any, Any]:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        reader = self.key_readers.get((plan.shard, plan.table))
        if reader is None:
            return None, None
        return (reader(rc.before) if rc.HasField("before") else None,
                reader(rc.after) if rc.HasField("after") else None)

    def _judge(self, plan: TablePlan, rc: Any, position: str, last: dict[tuple[str, str, Any], tuple[int, int]],  # Any: vitessapi protobuf messages (generated code: no types for mypy)
               at: tuple[int, int]) -> tuple[Verdict, Verdict]:
        h = self.handoffs.get(plan.shard)
        if h is None:
            return Verdict.EMIT, Verdict.EMIT
        if plan.table not in h.tables or h.phase != CATCHUP:
            v = h.decide(plan.table, None, position)  # whole tables: held, flowing, or after rejoin_at
            return v, v
        bk, ak = self._keys(plan, rc)
        vb = h.decide(plan.table, bk, position) if rc.HasField("before") else Verdict.SKIP
        va = h.decide(plan.table, ak, position) if rc.HasField("after") else Verdict.SKIP
        for key, v in ((bk, vb), (ak, va)):
            if v == Verdict.FINAL:
                last[(plan.shard, plan.table, key)] = at
        return vb, va

    def _keep(self, plan: TablePlan, rc: Any, vb: Verdict, va: Verdict,  # Any: vitessapi protobuf messages (generated code: no types for mypy)
              last: dict[tuple[str, str, Any], tuple[int, int]], at: tuple[int, int]) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        has_b, has_a = rc.HasField("before"), rc.HasField("after")
        if Verdict.FINAL in (vb, va):
            bk, ak = self._keys(plan, rc)
            if vb == Verdict.FINAL and last.get((plan.shard, plan.table, bk)) != at:
                vb = Verdict.SKIP
            if va == Verdict.FINAL and last.get((plan.shard, plan.table, ak)) != at:
                va = Verdict.SKIP
            self.finals_emitted += 1 if Verdict.FINAL in (vb, va) else 0
        eb, ea = bool(vb) and has_b, bool(va) and has_a
        if (eb or not has_b) and (ea or not has_a):
            return rc
        if eb:
            return PartialChange(before=rc.before)
        if ea:
            return PartialChange(after=rc.after)
        return None


# --- the first pass -------------------------------------------------------------------------------

OnChange = Callable[[str, Any, Any, str], None]  # (table, old key, new key, transaction position)


def _read_window(vstream: Callable[[vtgate_pb2.VStreamRequest], Iterable[Any]], keyspace: str, tablet_type: str,  # Any: vitessapi protobuf messages (generated code: no types for mypy)
                 shard: str, start: str, highs: list[str], rules: list[binlogdata_pb2.Rule], on_change: OnChange) -> None:
    """Stream ``shard`` from ``start`` until every one of ``highs`` is covered, calling ``on_change``
    per row change (primary keys only) once its transaction is complete."""
    req = vtgate_pb2.VStreamRequest(
        tablet_type=tablet_type,
        vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=keyspace, shard=shard, gtid=start)]),
        filter=binlogdata_pb2.Filter(rules=rules),
    )
    call: Any = vstream(req)  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    readers: dict[str, KeyReader | None] = {}
    pending: list[tuple[str, Any, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    try:
        for resp in call:
            for ev in resp.events:
                t = ev.type
                if t == _T.ROW:
                    re = ev.row_event
                    table = _table(re.table_name, re.keyspace or keyspace)
                    reader = readers.get(table)
                    for rc in re.row_changes:
                        pending.append((table, reader(rc.before) if reader and rc.HasField("before") else None,
                                        reader(rc.after) if reader and rc.HasField("after") else None))
                elif t == _T.FIELD:
                    fe = ev.field_event
                    readers[_table(fe.table_name, fe.keyspace or keyspace)] = key_reader_for(fe)
                elif t == _T.ROLLBACK:
                    pending.clear()
                elif t == _T.VGTID:
                    pos = next((sg.gtid for sg in ev.vgtid.shard_gtids if sg.shard == shard), None)
                    if pos is None:
                        continue
                    # Rows come before their transaction's VGTID: the transaction is complete here.
                    for table, bk, ak in pending:
                        on_change(table, bk, ak, pos)
                    pending.clear()
                    if all(covers(pos, hi) for hi in highs):
                        return
        raise RuntimeError(f"catch-up scan on {shard} ended before reaching its chunk high watermarks")
    finally:
        cancel = getattr(call, "cancel", None)
        if cancel is not None:
            cancel()


def scan_finals(vstream: Callable[[vtgate_pb2.VStreamRequest], Iterable[Any]], keyspace: str, tablet_type: str,  # Any: vitessapi protobuf messages (generated code: no types for mypy)
                h: ShardHandoff) -> WindowScan:
    """Read the shard's held tables from the smallest hold to every chunk high watermark (keys only)
    and return each key's final change (``handoff.FinalChanges``). Tables with an additional
    condition are read a second time through a VStream filtered by it (Vitess evaluates the
    condition on each row image), which tells which keys no snapshot row covers."""
    window = h.scan_window()
    if window is None:
        return WindowScan({t: {} for t in h.tables})
    start, highs = window
    acc = FinalChanges(h)
    _read_window(vstream, keyspace, tablet_type, h.shard, start, highs,
                 [binlogdata_pb2.Rule(match=table_rule(t)) for t in h.tables], acc.change)
    conditions = h.conditions
    if conditions:
        from cdcworker.snapshot import SnapshotRequest
        from cdcworker.snapshot.vstream_copy import copy_rules

        # The same rules a conditional VStream copy uses: ``select * from t where <condition>``.
        request = SnapshotRequest("", tuple(conditions), dict(conditions))
        rules = [binlogdata_pb2.Rule(match=m, filter=f) for m, f in copy_rules(keyspace, request)]
        try:
            _read_window(vstream, keyspace, tablet_type, h.shard, start, highs, rules, acc.in_condition)
        except (grpc.RpcError, RuntimeError) as exc:
            # VStream filters take only AND-ed column comparisons; a condition beyond that (OR, LIKE,
            # functions) cannot be evaluated here. Then no key is known to be inside it: each key
            # the window changed gets every change after the hold (a superset, still exact per key).
            log.warning("shard %s: the condition of %s cannot filter a VStream (%s): every key changed during "
                        "the hold is caught up in full", h.shard, ", ".join(sorted(conditions)), exc)
            acc.forget_condition()
    return acc.scan()


def finals_scanner(config: WorkerConfig) -> Callable[[ShardHandoff], WindowScan]:
    """``scan_finals`` over a channel of its own (the worker task's catch-up hook)."""
    from cdcworker.config.clients import channel_settings
    from cdcworker.source.channel import open_channel

    def scan(h: ShardHandoff) -> WindowScan:
        settings = channel_settings(config)
        channel = open_channel(settings)
        try:
            stub = vtgateservice_pb2_grpc.VitessStub(channel)
            return scan_finals(lambda req: stub.VStream(req, metadata=settings.call_metadata()),
                               config.source.keyspace, _tablet_type(config), h)
        finally:
            channel.close()

    return scan


def _tablet_type(config: WorkerConfig) -> str:
    return config.source.tablet_type.upper().replace("MASTER", "PRIMARY")


def run_catchup(
    config: WorkerConfig,
    handoffs: Mapping[str, ShardHandoff],
    start: Vgtid,
    until: Vgtid,
    timeout: float = 300.0,
) -> HandoffProcessor:
    """Stream from ``start`` until every shard's position covers ``until``; flush; return stats.
    States without finals get them scanned first."""
    from cdcworker.config.clients import channel_settings, encoder_config, producer_config
    from cdcworker.source.channel import open_channel

    scan = finals_scanner(config)
    handoffs = {s: h if h.finals is not None else h.with_scan(scan(h)) for s, h in handoffs.items()}
    settings = channel_settings(config)
    channel = open_channel(settings)
    sink = KafkaSink(producer_config(config))
    proc = HandoffProcessor(encoder_config(config), sink, start, handoffs, lookahead_rows=1 << 30)
    stub = vtgateservice_pb2_grpc.VitessStub(channel)
    req = vtgate_pb2.VStreamRequest(
        tablet_type=_tablet_type(config),
        vgtid=start.to_proto(),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]),
    )
    call = stub.VStream(req, metadata=settings.call_metadata(), timeout=timeout)

    def reached() -> bool:
        for sg in until:
            cur = proc.position.get(sg.shard, sg.keyspace)
            if cur is None or not is_position(cur.gtid) or not covers(cur.gtid, sg.gtid):
                return False
        return True

    try:
        if not reached():
            for resp in call:
                proc.process(resp)
                if reached():
                    break
        sink.flush(60)
    finally:
        call.cancel()
        channel.close()
    return proc
