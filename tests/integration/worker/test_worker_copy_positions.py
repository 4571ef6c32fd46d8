"""Commit points of the initial copy (VStream copy phase): every one is a position to resume from.

VTGate's VGTID shows a shard between two tables with a gtid and no ``table_p_ks`` (a restart
would only stream: the next tables never copied), and a completed table leaves ``table_p_ks`` (a
resumed copy copies it again from the start and drops its changes until then). The processor's
positions keep such a shard copying, with the last lastpk of each table it completed, until the
shard's COPY_COMPLETED, which seals a commit point of its own at VTGate's VGTID. Records keep
VTGate's VGTID (``source.vgtid``). The responses are VTGate's for one shard copying ``a`` then ``b``
with a catch-up transaction in between (docs: vitess-vstream-protocol.md §3.5).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from events_fixtures import field, field_event, insert, update
from worker_fixtures import PositionSink

from cdcworker.events import EncoderConfig, native
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.vgtid import LastPK, PKField, PKRow, TableLastPK
from cdcworker.streaming import StreamProcessor
from vitessapi import binlogdata_pb2, vtgate_pb2

_T = binlogdata_pb2.VEventType
G = "MySQL56/0b7e9d2a-1111-2222-3333-444455556666:1-"


def _lastpk(table: str, value: bytes) -> TableLastPK:
    return TableLastPK(table, LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((len(value),), value),)))


def _vgtid_event(gtid: str, *pks: TableLastPK) -> binlogdata_pb2.VEvent:
    sg = ShardGtid("ks", "0", gtid, pks).to_proto()
    return binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=binlogdata_pb2.VGtid(shard_gtids=[sg]), keyspace="ks", shard="0")


def _ev(t: int, **kw: Any) -> binlogdata_pb2.VEvent:
    return binlogdata_pb2.VEvent(type=t, keyspace="ks", shard="0", **kw)


def _field(table: str) -> binlogdata_pb2.VEvent:
    fields = [field("id", "INT64", "bigint", flags=1 | 2), field("v", "VARCHAR", "varchar(8)")]
    return _ev(_T.FIELD, field_event=field_event(f"ks.{table}", fields, "ks", "0"))


def _rows(table: str, *changes: binlogdata_pb2.RowChange) -> binlogdata_pb2.VEvent:
    return _ev(_T.ROW, row_event=binlogdata_pb2.RowEvent(table_name=f"ks.{table}", keyspace="ks", shard="0",
                                                         row_changes=list(changes)))


def _responses() -> list[list[binlogdata_pb2.VEvent]]:
    begin, commit = _ev(_T.BEGIN), _ev(_T.COMMIT)
    return [
        [begin, _field("a")], [_vgtid_event(G + "5")],
        [_rows("a", insert(b"1", b"x")), _rows("a", insert(b"2", b"y")), _vgtid_event(G + "5", _lastpk("a", b"2")), commit],
        [begin, _vgtid_event(G + "5"), commit],  # a done
        [begin, _field("a"), _rows("a", update([b"1", b"x"], [b"1", b"z"])), _vgtid_event(G + "6"),
         _ev(_T.COMMIT, timestamp=1_700_000_006)],  # catch-up before b
        [begin, _vgtid_event(G + "6"), commit],  # fast-forward
        [begin, _field("b")], [_vgtid_event(G + "6")],
        [_rows("b", insert(b"1", b"w")), _vgtid_event(G + "6", _lastpk("b", b"1")), commit],
        [begin, _vgtid_event(G + "6"), commit],  # b done
        [_ev(_T.COPY_COMPLETED), binlogdata_pb2.VEvent(type=_T.COPY_COMPLETED)],
        [begin, _rows("b", insert(b"2", b"v")), _vgtid_event(G + "7"), _ev(_T.COMMIT, timestamp=1_700_000_007)],
    ]


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw-bytes"])
def test_copy_commit_points_resume_the_copy_until_copy_completed(raw: bool) -> None:
    if raw:
        assert native.available(), "the native extension is not built: run `make native`"
    sink = PositionSink()
    proc = StreamProcessor(EncoderConfig("p"), sink, Vgtid((ShardGtid("ks", "0", ""),)))
    for events in _responses():
        resp = vtgate_pb2.VStreamResponse(events=events)
        proc.process(resp.SerializeToString() if raw else resp)
    a2, b1 = _lastpk("a", b"2"), _lastpk("b", b"1")
    assert [Vgtid(p.shard_gtids) for p in sink.positions] == [
        Vgtid((ShardGtid("ks", "0", G + "5", (a2,)),)),  # a's batch: VTGate's own
        Vgtid((ShardGtid("ks", "0", G + "5", (a2,)),)),  # a done: still copying, a keeps its lastpk
        Vgtid((ShardGtid("ks", "0", G + "6", (a2,)),)),  # catch-up
        Vgtid((ShardGtid("ks", "0", G + "6", (a2,)),)),  # fast-forward
        Vgtid((ShardGtid("ks", "0", G + "6", (b1, a2)),)),  # b's batch
        Vgtid((ShardGtid("ks", "0", G + "6", (a2, b1)),)),  # b done
        Vgtid((ShardGtid("ks", "0", G + "6"),)),  # COPY_COMPLETED: VTGate's position, streaming
        Vgtid((ShardGtid("ks", "0", G + "7"),)),
    ]
    assert [p.copying for p in sink.positions] == [True] * 6 + [False] * 2
    assert proc.position == Vgtid((ShardGtid("ks", "0", G + "7"),))
    # records carry VTGate's VGTID
    vgtids = [json.loads(r[3])["payload"]["source"]["vgtid"] for r in sink.records if r[3]]
    assert [json.loads(v)[0]["table_p_ks"] for v in vgtids] == [
        [a2.to_json()], [a2.to_json()], [], [b1.to_json()], []]
