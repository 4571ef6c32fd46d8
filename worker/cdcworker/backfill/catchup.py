"""The streaming side of the hand-off: a StreamProcessor that applies ``handoff`` rules.

``HandoffProcessor`` is the worker's own ``StreamProcessor`` (same decoding, encoder, sink and
commit points) with one difference: before a transaction's rows are encoded, each row change is
judged by its shard's ``ShardHandoff``. ``run_catchup`` drives one such stream from the catch-up
start to a target position (used by tests, the CLI and as the reference for wiring the rule into
the worker's task loop, see docs/backfill.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from cdcworker.backfill.handoff import ShardHandoff
from cdcworker.backfill.reconcile import KeyReader
from cdcworker.backfill.rowchange import PartialChange
from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig, TablePlan
from cdcworker.offsets import Vgtid
from cdcworker.sink import KafkaSink
from cdcworker.streaming import FIELD, StreamProcessor
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

PRI_KEY_FLAG = 2
ISINTEGRAL = 256


def key_reader_for(fe: Any) -> KeyReader | None:
    idx = [i for i, f in enumerate(fe.fields) if f.flags & PRI_KEY_FLAG]
    if not idx:
        return None
    return KeyReader(idx, [bool(fe.fields[i].type & ISINTEGRAL) for i in idx])


class HandoffProcessor(StreamProcessor):
    """The worker's processor, emitting held tables' changes by the hand-off rule."""

    def __init__(self, encoder: EncoderConfig, sink: KafkaSink, start: Vgtid,
                 handoffs: Mapping[str, ShardHandoff], **kwargs: Any) -> None:
        super().__init__(encoder, sink, start, **kwargs)
        self.handoffs = dict(handoffs)
        self.key_readers: dict[tuple[str, str], KeyReader | None] = {}
        self.suppressed = 0

    def process(self, response: Any) -> None:
        for ev in response.events:
            if ev.type == FIELD:
                fe = ev.field_event
                self.key_readers[(fe.shard or ev.shard, fe.table_name)] = key_reader_for(fe)
        super().process(response)

    def _emit(self, commit_seconds: int, vgtid_json: str) -> None:
        """Drop (or split) the row changes the hand-off rule withholds, then encode the rest exactly
        as the worker does. Only relies on ``_deferred`` holding (plan, row change or changes)."""
        deferred = self._deferred
        if deferred and self.handoffs:
            positions = {sg["shard"]: sg["gtid"] for sg in orjson.loads(vgtid_json)}
            kept: list[tuple[TablePlan, Any]] = []
            for plan, item in deferred:
                pos = positions.get(plan.shard, "")
                many = not hasattr(item, "HasField")
                changes = [c for rc in (item if many else (item,))
                           if (c := self._judge(plan, rc, pos)) is not None]
                self.suppressed += (len(item) if many else 1) - len(changes)
                if changes:
                    kept.append((plan, changes if many else changes[0]))
            deferred[:] = kept
        super()._emit(commit_seconds, vgtid_json)

    def _judge(self, plan: TablePlan, rc: Any, position: str) -> Any:
        h = self.handoffs.get(plan.shard)
        if h is None:
            return rc
        reader = self.key_readers.get((plan.shard, f"{plan.keyspace}.{plan.table}")) or self.key_readers.get(
            (plan.shard, plan.table)
        )
        has_b, has_a = rc.HasField("before"), rc.HasField("after")
        bk = reader(rc.before) if reader is not None and has_b else None
        ak = reader(rc.after) if reader is not None and has_a else None
        if plan.table not in h.tables:
            return rc if h.emit(plan.table, None, position) else None
        eb, ea = h.emit_change(plan.table, bk, ak, position)
        if (eb or not has_b) and (ea or not has_a):
            return rc
        if eb:
            return PartialChange(before=rc.before)
        if ea:
            return PartialChange(after=rc.after)
        return None


def run_catchup(
    config: WorkerConfig,
    handoffs: Mapping[str, ShardHandoff],
    start: Vgtid,
    until: Vgtid,
    timeout: float = 300.0,
) -> HandoffProcessor:
    """Stream from ``start`` until every shard's position covers ``until``; flush; return stats."""
    from cdcworker.backfill.gtid import covers
    from cdcworker.source.channel import open_channel
    from cdcworker.task import channel_settings, encoder_config, producer_config

    settings = channel_settings(config)
    channel = open_channel(settings)
    sink = KafkaSink(producer_config(config))
    proc = HandoffProcessor(encoder_config(config), sink, start, handoffs, lookahead_rows=1 << 30)
    stub = vtgateservice_pb2_grpc.VitessStub(channel)
    req = vtgate_pb2.VStreamRequest(
        tablet_type=config.source.tablet_type.upper().replace("MASTER", "PRIMARY"),
        vgtid=start.to_proto(),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]),
    )
    call = stub.VStream(req, metadata=settings.call_metadata(), timeout=timeout)

    def reached() -> bool:
        for sg in until:
            cur = proc.position.get(sg.shard, sg.keyspace)
            if cur is None or not cur.gtid.startswith("MySQL56/") or not covers(cur.gtid, sg.gtid):
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
