"""Where a transaction's BEGIN and END records go in the produce order.

A transaction held until its COMMIT produces its rows, then BEGIN and END next to each other (the
transaction topic's partition takes both at once); one streamed before its COMMIT (beyond
max.queue.size) sends BEGIN before its first rows, since those leave before the END is known.
Either way BEGIN precedes END, the counts and blocks are the same, and all of a transaction's
records precede its commit point.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from events_fixtures import field, field_event, insert
from worker_fixtures import RecordingSink

from cdcworker.events import EncoderConfig
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.streaming import Features, StreamProcessor
from cdcworker.txmeta import TransactionMonitor
from cdcworker.txmeta.monitor import TxMetaOptions
from vitessapi import binlogdata_pb2 as b
from vitessapi import vtgate_pb2

T = b.VEventType
GTID = "MySQL56/0b7e9d2a-1111-2222-3333-444455556666"


class PointSink(RecordingSink):
    """Records commit points in the same sequence as the records."""

    def commit_point(self, position: Any) -> None:
        self.records.append(("<commit point>", None, None, None, []))


def _transaction(first_id: int, rows: int, seq: int) -> list[bytes]:
    """One transaction on shard 0 over two responses: BEGIN + rows, then the rest + VGTID + COMMIT."""
    fe = field_event("t", [field("id", "INT64", "bigint", flags=1 | 2), field("name", "VARCHAR", "varchar(64)")], "ks", "0")
    fe.table_name = "ks.t"

    def row_event(ids: range) -> b.VEvent:
        rcs = [insert(str(i).encode(), f"n{i}".encode()) for i in ids]
        return b.VEvent(type=T.ROW, row_event=b.RowEvent(table_name="ks.t", row_changes=rcs, keyspace="ks", shard="0"),
                        keyspace="ks", shard="0")

    half = first_id + rows // 2
    vgtid = b.VGtid(shard_gtids=[b.ShardGtid(keyspace="ks", shard="0", gtid=f"{GTID}:1-{seq}")])
    groups = [
        [b.VEvent(type=T.BEGIN, timestamp=1_700_000_000, shard="0"), b.VEvent(type=T.FIELD, field_event=fe, shard="0"),
         row_event(range(first_id, half))],
        [row_event(range(half, first_id + rows)), b.VEvent(type=T.VGTID, vgtid=vgtid, shard="0"),
         b.VEvent(type=T.COMMIT, timestamp=1_700_000_001, shard="0")],
    ]
    return [vtgate_pb2.VStreamResponse(events=g).SerializeToString() for g in groups]


def _run(lookahead_rows: int, restored: dict[str, Any] | None = None, only_second: bool = False) -> list[tuple[str, Any]]:
    """(kind, payload) per produced record and commit point, for two 4-row transactions
    (``only_second``: the second alone, as after a restart at the first one's END)."""
    start = Vgtid((ShardGtid("ks", "0", f"{GTID}:1-{8 if only_second else 7}"),))
    features = Features()
    features.txmeta = TransactionMonitor(TxMetaOptions(topic="p.transaction", ordered=True), restored, start)
    sink = PointSink()
    proc = StreamProcessor(EncoderConfig("p"), sink, start, features=features, lookahead_rows=lookahead_rows)
    for r in ([] if only_second else _transaction(1, 4, 8)) + _transaction(5, 4, 9):
        proc.process(r)
    out: list[tuple[str, Any]] = []
    for topic, _p, _k, value, _h in sink.records:
        if topic == "<commit point>":
            out.append(("point", None))
            continue
        payload = json.loads(value)["payload"]
        if topic == "p.transaction":
            out.append((payload["status"], (payload["id"], payload["event_count"])))
        else:
            tx = payload["transaction"]
            out.append(("row", (payload["after"]["id"], tx["id"], tx["total_order"])))
    return out


def _ids(seq: int) -> str:
    return f'[{{"keyspace":"ks","shard":"0","gtid":"{GTID}:1-{seq}","table_p_ks":[]}}]'


def test_a_buffered_transaction_sends_its_rows_then_begin_and_end_together() -> None:
    got = _run(lookahead_rows=1000)
    one, two = _ids(8), _ids(9)
    assert got == [
        ("row", (1, one, 1)), ("row", (2, one, 2)), ("row", (3, one, 3)), ("row", (4, one, 4)),
        ("BEGIN", (one, None)), ("END", (one, 4)), ("point", None),
        ("row", (5, two, 1)), ("row", (6, two, 2)), ("row", (7, two, 3)), ("row", (8, two, 4)),
        ("BEGIN", (two, None)), ("END", (two, 4)), ("point", None),
    ]  # fmt: skip


def test_a_streamed_transaction_sends_begin_before_its_first_rows() -> None:
    got = _run(lookahead_rows=1)  # every transaction is streamed before its COMMIT
    kinds = [k for k, _ in got]
    assert kinds == ["BEGIN", "row", "row", "row", "row", "END", "point"] * 2
    # Streamed: identified by the position before it (a documented difference), counted the same.
    assert [v for k, v in got if k in ("BEGIN", "END")] == [
        (_ids(7), None), (_ids(7), 4), (_ids(8), None), (_ids(8), 4)]
    assert [v[2] for k, v in got if k == "row"] == [1, 2, 3, 4] * 2


def test_a_restart_at_an_end_offset_does_not_take_the_next_streamed_transaction_for_a_replay() -> None:
    # The offset stored at the first transaction's END names it and its counters, and its restart
    # VGTID is that transaction's own. The next transaction, streamed before its COMMIT, is
    # identified by the same VGTID (the position before it): it is a new transaction all the same,
    # so it gets its BEGIN and none of its rows are dropped as already delivered.
    one = _ids(8)
    restored = {"vgtid": one, "transaction_id": one, "transaction_data_collection_order_0.ks.t": 4}
    got = _run(lookahead_rows=1, restored=restored, only_second=True)
    assert [k for k, _ in got] == ["BEGIN", "row", "row", "row", "row", "END", "point"]
    assert [v for k, v in got if k in ("BEGIN", "END")] == [(one, None), (one, 4)]
    assert [v[:1] + v[2:] for k, v in got if k == "row"] == [(5, 1), (6, 2), (7, 3), (8, 4)]


def test_a_restart_inside_a_transaction_still_skips_what_was_delivered() -> None:
    # An offset stored inside the transaction (Debezium's per-record offsets: the restart VGTID is
    # the one before it) resumes it: no second BEGIN, the delivered rows are dropped, counters go on.
    two = _ids(9)
    restored = {"vgtid": _ids(8), "transaction_id": two, "transaction_data_collection_order_0.ks.t": 2}
    got = _run(lookahead_rows=1000, restored=restored, only_second=True)
    assert [k for k, _ in got] == ["row", "row", "END", "point"]
    assert [v for k, v in got if k == "row"] == [(7, two, 3), (8, two, 4)]
    assert [v for k, v in got if k == "END"] == [(two, 4)]


def test_a_replay_resumes_only_on_the_interrupted_shard() -> None:
    """Two shards: shard -80's transaction was interrupted after two delivered rows; the stream
    comes back with 80-'s transaction first, carrying the same id (a streamed transaction is named
    by the VGTID before it). 80-'s transaction is new: its BEGIN is sent and none of its rows are
    skipped; -80's replay then resumes (no second BEGIN, counters go on)."""
    two = ('[{"keyspace":"ks","shard":"-80","gtid":"' + GTID + ':1-8","table_p_ks":[]},'
           '{"keyspace":"ks","shard":"80-","gtid":"' + GTID + ':1-5","table_p_ks":[]}]')
    start = Vgtid.from_json(two)
    for restored in (None, {"vgtid": two, "transaction_id": "T",
                            "transaction_data_collection_order_-80.ks.t": 2}):
        mon = TransactionMonitor(TxMetaOptions(topic="p.transaction"), restored, start)
        if restored is None:  # in-process: the stream broke inside -80's transaction
            assert mon.begin("T", 1, "-80") is not None
            mon.on_event("-80.ks.t")
            mon.on_event("-80.ks.t")
            mon.interrupt(delivered=True)
        assert mon.begin("T", 2, "80-") is not None  # 80-'s own BEGIN
        block = json.loads(orjson.dumps(mon.on_event("80-.ks.t")))
        assert (block["total_order"], block["data_collection_order"]) == (1, 1)  # nothing skipped
        assert json.loads(mon.end(3).record.value)["payload"]["event_count"] == 1
        assert mon.begin("T", 4, "-80") is None  # -80's replay: resumed
        assert mon.on_event("-80.ks.t") is None and mon.on_event("-80.ks.t") is None  # delivered before
        block = json.loads(orjson.dumps(mon.on_event("-80.ks.t")))
        assert block["total_order"] == 3
