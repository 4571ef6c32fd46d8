"""VStream semantics of the VTGate test server: exact event sequences and positions."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from vtgatesim_fixtures import (
    CUSTOMER,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
    vgtid,
)

from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2
from vtgatesim import FaultPlan, VTGateSim
from vtgatesim.gtid import GtidSet

T = binlogdata_pb2.VEventType


def unsharded(sim: VTGateSim) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])


def test_empty_vgtid_is_invalid_argument(sim: VTGateSim, stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(vtgate_pb2.VStreamRequest()))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # vstreamManager.VStream wraps resolveParams' errors (vterrors.Wrap): the prefix is on the wire.
    assert ei.value.details() == ("failed to resolve vstream parameters: "
                                  "vgtid must have at least one value with a starting position in ShardGtids")


def test_empty_keyspace_requires_current(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("", "", "MySQL56/x"))))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(ei.value.details()).startswith(
        "failed to resolve vstream parameters: for an empty keyspace, the Gtid value must be 'current'")


def test_current_then_transaction(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    pos0 = sim.position("commerce", "0")
    r = Reader(stub, request(("commerce", "0", "current")))
    first = r.next()
    assert [e.type for e in first.events] == [T.VGTID, T.OTHER]
    assert first.events[0].vgtid.shard_gtids[0].gtid == pos0
    assert first.events[0].keyspace == "commerce" and first.events[0].shard == "0"
    sim.execute("insert into customer (id, email) values (1, 'alice@domain.com')", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    row = resp.events[2].row_event
    assert row.table_name == "commerce.customer"
    assert list(row.row_changes[0].after.lengths) == [1, 16]
    assert row.row_changes[0].after.values == b"1alice@domain.com"
    assert not row.row_changes[0].HasField("before")
    pos1 = sim.position("commerce", "0")
    uuid = sim.topo.shard("commerce", "0").server_uuid
    assert pos1 == f"MySQL56/{uuid}:1-2"  # the CREATE TABLE was transaction 1
    assert resp.events[3].vgtid == binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="commerce", shard="0", gtid=pos1)])
    for e in (resp.events[0], resp.events[1], resp.events[2], resp.events[4]):
        assert e.keyspace == "commerce" and e.shard == "0" and e.current_time > 0 and e.timestamp > 0
    # second transaction on the same table: no FIELD; update has before and after
    sim.execute("update customer set email = 'b' where id = 1", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.ROW, T.VGTID, T.COMMIT]
    ch = resp.events[1].row_event.row_changes[0]
    assert ch.before.values == b"1alice@domain.com" and ch.after.values == b"1b"
    # DDL on a streamed table -> VGTID, DDL; the next row gets a fresh FIELD with the new column
    sim.execute("alter table customer add column n int", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.VGTID, T.DDL]
    assert resp.events[1].statement == "alter table customer add column n int"
    sim.execute("delete from customer where id = 1", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert [f.name for f in resp.events[1].field_event.fields] == ["id", "email", "n"]
    assert list(resp.events[2].row_event.row_changes[0].before.lengths) == [1, 1, -1]
    sim.other("commerce", "0")
    assert [e.type for e in r.next().events] == [T.VGTID, T.OTHER]
    r.close()


def test_explicit_position_and_reparent(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    pos = sim.position("commerce", "0")
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    old = sim.topo.shard("commerce", "0").server_uuid
    new = sim.reparent("commerce", "0")
    sim.execute("insert into customer (id, email) values (3, 'c')", "commerce")
    r = Reader(stub, request(("commerce", "0", pos)))
    a, b = r.next(), r.next()
    assert a.events[2].row_event.row_changes[0].after.values == b"2b"
    assert b.events[1].row_event.row_changes[0].after.values == b"3c"
    assert [e.type for e in b.events] == [T.BEGIN, T.ROW, T.VGTID, T.COMMIT]
    expect = GtidSet.runs({old: 3, new: 1}).position()
    assert b.events[2].vgtid.shard_gtids[0].gtid == expect == sim.position("commerce", "0")
    assert "," in expect
    r.close()


def test_position_not_contained_is_gtidset_mismatch(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    uuid = sim.topo.shard("commerce", "0").server_uuid
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("commerce", "0", f"MySQL56/{uuid}:1-99"))))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "GTIDSet Mismatch" in str(ei.value.details())


def test_sharded_current_vgtid_carries_all_shards(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "", "current")))
    got = [r.next(), r.next()]
    assert sorted(x.events[0].shard for x in got) == ["-80", "80-"]
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")  # id 1 -> -80
    resp = r.next()
    vg = resp.events[-2].vgtid
    assert [(s.keyspace, s.shard) for s in vg.shard_gtids] == [("commerce", "-80"), ("commerce", "80-")]
    assert vg.shard_gtids[0].gtid == sim.position("commerce", "-80")
    assert vg.shard_gtids[1].gtid == sim.position("commerce", "80-")
    r.close()


def test_filters_exclude_keyspace_and_nonmatching(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER, "create table orders (id bigint, sku varchar(10), primary key (id))"])
    r = Reader(stub, request(("commerce", "0", "current"), exclude_keyspace_from_table_name=True,
                             rules=[("customer", "select id from customer where id > 5")]))
    r.next()
    sim.execute("insert into orders (id, sku) values (1, 'x')", "commerce")
    assert [e.type for e in r.next().events] == [T.BEGIN, T.VGTID, T.COMMIT]
    sim.execute("insert into customer (id, email) values (1, 'a'), (9, 'z')", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert resp.events[1].field_event.table_name == "customer"
    assert [f.name for f in resp.events[1].field_event.fields] == ["id"]
    assert [c.after.values for c in resp.events[2].row_event.row_changes] == [b"9"]
    sim.execute("create table other (id int primary key)", "commerce")
    assert [e.type for e in r.next().events] == [T.VGTID, T.OTHER]
    r.close()


def test_copy_phase_sequence(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER, "create table product (sku varchar(10), primary key (sku))"])
    sim.execute("insert into customer (id, email) values (1, 'a'), (2, 'b')", "commerce")
    sim.execute("insert into product (sku) values ('p1')", "commerce")
    pos = sim.position("commerce", "0")
    # Exact messages, re-run to inspect payloads
    r = Reader(stub, request(("commerce", "0", "")))
    resps = [r.next() for _ in range(8)]
    # The second table's FIELD has no VGTID after it: the stream is at its snapshot already
    # (uvstreamer.setPosition; measured on Vitess v24 by test_realvitess_differential.py).
    assert [[T.Name(e.type) for e in x.events] for x in resps] == [
        ["BEGIN", "FIELD"], ["VGTID"], ["ROW", "ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["BEGIN", "FIELD"], ["ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"],
    ]
    assert resps[1].events[0].vgtid == binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="commerce", shard="0", gtid=pos)])
    lastpk = binlogdata_pb2.TableLastPK(table_name="customer", lastpk=query_pb2.QueryResult(
        fields=[query_pb2.Field(name="id", type=query_pb2.INT64)], rows=[query_pb2.Row(lengths=[1], values=b"2")]))
    assert resps[2].events[2].vgtid == binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="commerce", shard="0", gtid=pos, table_p_ks=[lastpk])])
    assert [len(e.row_event.row_changes) for e in resps[2].events[:2]] == [1, 1]
    assert resps[3].events[1].vgtid.shard_gtids[0].table_p_ks == []
    assert resps[7].events[0].keyspace == "commerce" and resps[7].events[0].shard == "0"
    assert resps[7].events[1].keyspace == "" and resps[7].events[1].shard == ""
    # after the copy: streaming with a fresh FIELD
    sim.execute("insert into customer (id, email) values (3, 'c')", "commerce")
    assert [T.Name(e.type) for e in r.next().events] == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    r.close()


def test_copy_resume_from_table_p_ks(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a'), (2, 'b'), (3, 'c')", "commerce")
    pos = sim.position("commerce", "0")
    lastpk = binlogdata_pb2.TableLastPK(table_name="customer", lastpk=query_pb2.QueryResult(
        fields=[query_pb2.Field(name="id", type=query_pb2.INT64)], rows=[query_pb2.Row(lengths=[1], values=b"1")]))
    req = request(("commerce", "0", pos))
    req.vgtid.shard_gtids[0].table_p_ks.append(lastpk)
    r = Reader(stub, req)
    resps = [r.next() for _ in range(4)]
    assert [[T.Name(e.type) for e in x.events] for x in resps] == [  # at its start position: no VGTID after FIELD
        ["BEGIN", "FIELD"], ["ROW", "ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"]]
    assert [e.row_event.row_changes[0].after.values for e in resps[1].events[:2]] == [b"2b", b"3c"]
    r.close()
    bad = request(("commerce", "0", pos))
    bad.vgtid.shard_gtids[0].table_p_ks.append(binlogdata_pb2.TableLastPK(table_name="customer"))
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(bad))
    assert ei.value.details() == "lastpk for table customer has no fields defined"


def _summary(resp: vtgate_pb2.VStreamResponse) -> list[str]:
    """Event types with what matters here: ROW changes (table:before>after), FIELD and VGTID tables,
    the VGTID's gtid sequence number and table_p_ks (table>lastpk) of the only shard."""
    out = []
    for e in resp.events:
        name = T.Name(e.type)
        if e.type == T.ROW:
            name += "(" + e.row_event.table_name.split(".")[-1] + ":" + ",".join(
                f"{c.before.values.decode() if c.HasField('before') else '-'}>"
                f"{c.after.values.decode() if c.HasField('after') else '-'}" for c in e.row_event.row_changes) + ")"
        elif e.type == T.FIELD:
            name += "(" + e.field_event.table_name.split(".")[-1] + ")"
        elif e.type == T.VGTID:
            sg = e.vgtid.shard_gtids[0]
            name += f"({sg.gtid.rsplit('-', 1)[-1]};" + ",".join(
                f"{p.table_name}>{p.lastpk.rows[0].values.decode()}" for p in sg.table_p_ks) + ")"
        out.append(name)
    return out


def test_resumed_copy_catch_up_and_tables_copied_as_upstream(sim: VTGateSim, stub: Any) -> None:
    """A copy of a, b, c resumed from gtid + table_p_ks (uvstreamer buildTablePlan, filterEvents).

    Before the interruption a was copied completely (no longer in table_p_ks), b up to id 2, c not
    at all; then each table changed. Every table of the copy is planned again: b resumes after its
    lastpk, a and c are copied from the start. The catch-up sends every change of a table with a
    lastpk (beyond the lastpk too: b's id 2 -> 9 and the delete of 3) and none of a table without
    one, so a's delete is never reported when VTGate's own VGTID is resumed. With a's last lastpk
    kept in table_p_ks (what the worker stores, offsets.copyresume), a's changes are sent as well
    and only its rows beyond that lastpk are copied again."""
    sim.create_keyspace("commerce", ddl=[f"create table {t} (id bigint not null, v varchar(8), primary key (id))"
                                         for t in ("a", "b", "c")])
    sim.execute("insert into a (id, v) values (1, 'a1'), (2, 'a2')", "commerce")
    sim.execute("insert into b (id, v) values (1, 'b1'), (2, 'b2'), (3, 'b3')", "commerce")
    sim.execute("insert into c (id, v) values (1, 'c1')", "commerce")
    pos = sim.position("commerce", "0")
    assert pos.endswith(":1-6")
    for sql in ("update a set v = 'A1' where id = 1", "delete from a where id = 2", "insert into a (id, v) values (3, 'a3')",
                "update b set v = 'B1' where id = 1", "update b set id = 9 where id = 2", "delete from b where id = 3",
                "insert into c (id, v) values (2, 'c2')"):  # gtids 7 .. 13
        sim.execute(sql, "commerce")

    def lastpk(table: str, value: bytes) -> binlogdata_pb2.TableLastPK:
        return binlogdata_pb2.TableLastPK(table_name=table, lastpk=query_pb2.QueryResult(
            fields=[query_pb2.Field(name="id", type=query_pb2.INT64)], rows=[query_pb2.Row(lengths=[len(value)], values=value)]))

    def resume(*pks: binlogdata_pb2.TableLastPK) -> list[list[str]]:
        req = request(("commerce", "0", pos))
        req.vgtid.shard_gtids[0].table_p_ks.extend(pks)
        r = Reader(stub, req)
        out = []
        while not out or out[-1][-1] != "COPY_COMPLETED":
            out.append(_summary(r.next()))
        r.close()
        return out

    copy_b_and_c = [
        ["BEGIN", "FIELD(b)"], ["ROW(b:->9b2)", "VGTID(13;b>9)", "COMMIT"], ["BEGIN", "VGTID(13;)", "COMMIT"],
        ["BEGIN", "FIELD(c)"], ["ROW(c:->1c1)", "ROW(c:->2c2)", "VGTID(13;c>2)", "COMMIT"],
        ["BEGIN", "VGTID(13;)", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"]]
    # VTGate's VGTID: b in table_p_ks
    assert resume(lastpk("b", b"2")) == [
        ["BEGIN", "VGTID(7;b>2)", "COMMIT"], ["BEGIN", "VGTID(8;b>2)", "COMMIT"], ["BEGIN", "VGTID(9;b>2)", "COMMIT"],
        ["BEGIN", "FIELD(b)", "ROW(b:1b1>1B1)", "VGTID(10;b>2)", "COMMIT"],
        ["BEGIN", "ROW(b:2b2>9b2)", "VGTID(11;b>2)", "COMMIT"],
        ["BEGIN", "ROW(b:3b3>-)", "VGTID(12;b>2)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2)", "COMMIT"],  # fast-forward to the snapshot
        ["BEGIN", "FIELD(a)"], ["ROW(a:->1A1)", "ROW(a:->3a3)", "VGTID(13;b>2,a>3)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2)", "COMMIT"],
        *copy_b_and_c]
    # a's last lastpk kept as well: a's changes are sent, a is copied after id 2 only
    assert resume(lastpk("b", b"2"), lastpk("a", b"2")) == [
        ["BEGIN", "FIELD(a)", "ROW(a:1a1>1A1)", "VGTID(7;b>2,a>2)", "COMMIT"],
        ["BEGIN", "ROW(a:2a2>-)", "VGTID(8;b>2,a>2)", "COMMIT"],
        ["BEGIN", "ROW(a:->3a3)", "VGTID(9;b>2,a>2)", "COMMIT"],
        ["BEGIN", "FIELD(b)", "ROW(b:1b1>1B1)", "VGTID(10;b>2,a>2)", "COMMIT"],
        ["BEGIN", "ROW(b:2b2>9b2)", "VGTID(11;b>2,a>2)", "COMMIT"],
        ["BEGIN", "ROW(b:3b3>-)", "VGTID(12;b>2,a>2)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2,a>2)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2,a>2)", "COMMIT"],
        ["BEGIN", "FIELD(a)"], ["ROW(a:->3a3)", "VGTID(13;b>2,a>3)", "COMMIT"],
        ["BEGIN", "VGTID(13;b>2)", "COMMIT"],
        *copy_b_and_c]


def test_copy_catch_up_passes_ddl_and_other_events(sim: VTGateSim, stub: Any) -> None:
    """uvstreamer.filterEvents drops only HEARTBEATs and the ROW/FIELD events of tables whose copy
    has not started: a DDL and an OTHER event in a resumed copy's catch-up reach the client, as
    they do while streaming (the server dropped them before)."""
    sim.create_keyspace("commerce", ddl=["create table b (id bigint not null, v varchar(8), primary key (id))"])
    sim.execute("insert into b (id, v) values (1, 'b1'), (2, 'b2')", "commerce")
    pos = sim.position("commerce", "0")
    sim.execute("create table d (id bigint not null, primary key (id))", "commerce")
    sim.other("commerce", "0")
    sim.execute("update b set v = 'B1' where id = 1", "commerce")
    req = request(("commerce", "0", pos))
    req.vgtid.shard_gtids[0].table_p_ks.append(binlogdata_pb2.TableLastPK(table_name="b", lastpk=query_pb2.QueryResult(
        fields=[query_pb2.Field(name="id", type=query_pb2.INT64)], rows=[query_pb2.Row(lengths=[1], values=b"1")])))
    r = Reader(stub, req)
    out: list[list[str]] = []
    while not out or out[-1][-1] != "COPY_COMPLETED":
        out.append(_summary(r.next()))
    r.close()
    assert out[:3] == [
        ["VGTID(3;b>1)", "DDL"],  # the catch-up's DDL and OTHER, shaped as while streaming
        ["VGTID(4;b>1)", "OTHER"],
        ["BEGIN", "FIELD(b)", "ROW(b:1b1>1B1)", "VGTID(5;b>1)", "COMMIT"],
    ]


def test_copy_batch_goes_out_with_its_field_and_progress_with_its_rows(sim: VTGateSim, stub: Any) -> None:
    """vtgate sends a shard's events at COMMIT, under the stream lock: a table's [BEGIN, FIELD] and
    snapshot [VGTID] come with its first batch, and a VGTID never shows a shard's copy progress
    before that shard's rows were sent. Checked on every response of a four-shard copy."""
    sim.packet_size = 30  # a few rows per batch: ~1,000 copy transactions, four shard threads
    shards = ["-40", "40-80", "80-c0", "c0-"]
    sim.create_keyspace("commerce", shards, ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values " + ", ".join(f"({i}, 'u{i}')" for i in range(1, 4001)), "commerce")
    r = Reader(stub, request(*[("commerce", s, "") for s in shards]))
    copied: dict[str, set[int]] = {s: set() for s in shards}
    open_head: dict[str, bool] = {s: False for s in shards}
    last = None
    while True:
        resp = r.next()
        events = resp.events
        if events[-1].type == T.COPY_COMPLETED and not events[-1].shard:
            break
        for e in events:
            if e.type == T.FIELD:
                open_head[e.shard] = True
            elif e.type == T.ROW:
                copied[e.shard] |= {int(c.after.values[:c.after.lengths[0]]) for c in e.row_event.row_changes}
            elif e.type == T.COMMIT:
                open_head[e.shard] = False
            elif e.type == T.VGTID:
                for sg in e.vgtid.shard_gtids:
                    for p in sg.table_p_ks:  # progress shown only for rows already sent
                        assert int(p.lastpk.rows[0].values) in copied[sg.shard], (sg.shard, p)
        # another shard's response never comes while a shard's copy transaction is open
        assert sum(open_head.values()) <= 1 and (not any(open_head.values()) or open_head[events[0].shard]), resp
        last = resp
    assert last is not None
    assert {s: len(ids) for s, ids in copied.items()} == {
        s: len(sim.execute("select id from customer", f"commerce/{s}").rows) for s in copied}
    r.close()


def test_large_transaction_split_by_packet_size(stub: Any, sim: VTGateSim) -> None:
    sim.packet_size = 100
    unsharded(sim)
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    values = ", ".join(f"({i}, '{'x' * 40}')" for i in range(1, 301))
    sim.execute(f"insert into customer (id, email) values {values}", "commerce")
    resps = []
    while True:
        resp = r.next()
        resps.append(resp)
        if resp.events[-1].type == T.COMMIT:
            break
    assert len(resps) > 1
    assert all(T.VGTID not in [e.type for e in x.events] for x in resps[:-1])
    assert [e.type for e in resps[-1].events][-2:] == [T.VGTID, T.COMMIT]
    rows = sum(len(e.row_event.row_changes) for x in resps for e in x.events if e.type == T.ROW)
    assert rows == 300
    r.close()


def test_heartbeats_when_idle(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    r = Reader(stub, request(("commerce", "0", "current"), heartbeat_interval=1))
    r.next()
    hb = r.next(timeout=3).events[0]
    assert hb.type == T.HEARTBEAT and hb.keyspace == "" and hb.timestamp == hb.current_time // 10**9
    r.close()


def test_keyspace_heartbeat_rows(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    r = Reader(stub, request(("commerce", "0", "current"), stream_keyspace_heartbeats=True))
    plain = Reader(stub, request(("commerce", "0", "current")))
    r.next(), plain.next()
    sim.write_heartbeat("commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert resp.events[1].field_event.is_internal_table and resp.events[2].row_event.is_internal_table
    assert resp.events[2].row_event.table_name == "commerce.heartbeat"
    assert [e.type for e in plain.next().events] == [T.BEGIN, T.VGTID, T.COMMIT]
    r.close(), plain.close()


def test_fault_unavailable_after_events_and_anonymised(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    sim.inject(FaultPlan(fail_after_events=2, anonymise_columns=True))
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    sim.execute("insert into customer (id, email) values (2, 'a')", "commerce")
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.UNAVAILABLE


def test_anonymised_field_names(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    sim.inject(FaultPlan(anonymise_columns=True))
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    assert [f.name for f in r.next().events[1].field_event.fields] == ["@1", "@2"]
    r.close()


def test_regex_keyspace_expands_to_matching_keyspaces(sim: VTGateSim, stub: Any) -> None:
    for ks, shards in (("commerce", None), ("customer", ["-80", "80-"]), ("other", None)):
        sim.create_keyspace(ks, shards, ddl=[CUSTOMER])
    r = Reader(stub, request(("/^c", "", "current")))  # every shard of commerce and customer
    first = [r.next() for _ in range(3)]
    assert sorted((x.events[1].keyspace, x.events[1].shard) for x in first) == [
        ("commerce", "0"), ("customer", "-80"), ("customer", "80-")]
    assert all([e.type for e in x.events] == [T.VGTID, T.OTHER] for x in first)
    sim.execute("insert into customer (id, email) values (1, 'a')", "customer")
    resp = r.next()
    assert resp.events[-2].vgtid == vgtid(*[(k, s, sim.position(k, s))
                                             for k, s in (("commerce", "0"), ("customer", "-80"), ("customer", "80-"))])
    sim.execute("insert into customer (id, email) values (1, 'a')", "other")
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    resp = r.next()  # nothing from `other`
    assert resp.events[2].row_event.table_name == "commerce.customer"
    r.close()


def test_regex_keyspace_that_does_not_compile(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("/(", "", "current"))))
    # vterrors.Wrapf of Go's regexp error: code Unknown
    assert ei.value.code() == grpc.StatusCode.UNKNOWN
    assert ei.value.details() == ("failed to resolve vstream parameters: "
                                  "failed to compile regexp using /(: error parsing regexp: missing closing ): `(`")


def test_empty_keyspace_with_current_streams_every_keyspace(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.create_keyspace("customer", ["-80", "80-"], ddl=[CUSTOMER])
    r = Reader(stub, request(("", "", "current")))
    first = [r.next() for _ in range(3)]
    assert sorted((x.events[1].keyspace, x.events[1].shard) for x in first) == [
        ("commerce", "0"), ("customer", "-80"), ("customer", "80-")]
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert resp.events[3].vgtid == vgtid(*[(k, s, sim.position(k, s))
                                            for k, s in (("commerce", "0"), ("customer", "-80"), ("customer", "80-"))])
    r.close()


def test_unspecified_shard_with_an_explicit_gtid_is_invalid(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    pos = sim.position("commerce", "0")
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("commerce", "", pos))))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details() == ("failed to resolve vstream parameters: "
                                  "if shards are unspecified, the Gtid value must be 'current' or empty; got: "
                                  f'shard_gtids:{{keyspace:"commerce" gtid:"{pos}"}}')


def test_tables_to_copy_limits_the_copy_not_the_stream(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER, "create table product (sku varchar(10), primary key (sku))"])
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    sim.execute("insert into product (sku) values ('p1')", "commerce")
    pos = sim.position("commerce", "0")
    r = Reader(stub, request(("commerce", "0", ""), tables_to_copy=["product"]))
    resps = [r.next() for _ in range(5)]
    assert [[T.Name(e.type) for e in x.events] for x in resps] == [
        ["BEGIN", "FIELD"], ["VGTID"], ["ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"]]
    assert resps[0].events[1].field_event.table_name == "commerce.product"
    assert resps[2].events[0].row_event.row_changes[0].after.values == b"p1"
    assert resps[3].events[1].vgtid == vgtid(("commerce", "0", pos))
    # customer was not copied, but its changes stream
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    resp = r.next()
    assert [T.Name(e.type) for e in resp.events] == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    assert resp.events[2].row_event.row_changes[0].after.values == b"2b"
    r.close()


def test_copy_in_several_batches_with_exact_lastpks(sim: VTGateSim, stub: Any) -> None:
    sim.packet_size = 4  # two 2-byte rows ("1", "a") per batch
    unsharded(sim)
    sim.execute("insert into customer (id, email) values " + ", ".join(f"({i}, '{c}')" for i, c in
                                                                        enumerate("abcdef", 1)), "commerce")
    pos = sim.position("commerce", "0")
    r = Reader(stub, request(("commerce", "0", "")))
    resps = [r.next() for _ in range(9)]
    assert [[T.Name(e.type) for e in x.events] for x in resps] == [
        ["BEGIN", "FIELD"], ["VGTID"],
        ["ROW", "ROW", "VGTID", "COMMIT"], ["BEGIN"],
        ["ROW", "ROW", "VGTID", "COMMIT"], ["BEGIN"],
        ["ROW", "ROW", "VGTID", "COMMIT"],
        ["BEGIN", "VGTID", "COMMIT"], ["COPY_COMPLETED", "COPY_COMPLETED"]]
    assert resps[1].events[0].vgtid == vgtid(("commerce", "0", pos))

    def lastpk(v: bytes) -> binlogdata_pb2.TableLastPK:
        return binlogdata_pb2.TableLastPK(table_name="customer", lastpk=query_pb2.QueryResult(
            fields=[query_pb2.Field(name="id", type=query_pb2.INT64)], rows=[query_pb2.Row(lengths=[1], values=v)]))

    for resp, last, rows in ((resps[2], b"2", [b"1a", b"2b"]), (resps[4], b"4", [b"3c", b"4d"]),
                             (resps[6], b"6", [b"5e", b"6f"])):
        assert [e.row_event.row_changes[0].after.values for e in resp.events[:2]] == rows
        assert resp.events[2].vgtid == vgtid(("commerce", "0", pos), pks=[lastpk(last)])
    assert resps[7].events[1].vgtid == vgtid(("commerce", "0", pos))
    r.close()


def test_a_table_name_rule_needs_a_select_filter_when_streaming(sim: VTGateSim, stub: Any) -> None:
    # The binlog vstreamer parses a table name's filter as SQL (buildTablePlan): an empty one fails
    # the stream at the table's first event, with sqlparser's error (code INVALID_ARGUMENT, not
    # retried). Only the copy phase reads it as `select *` (uvstreamer getQuery). A regex rule's
    # empty filter means every row and column in both.
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    r = Reader(stub, request(("commerce", "0", ""), rules=[("customer", "")]))
    kinds = [[T.Name(e.type) for e in r.next().events] for _ in range(5)]
    assert kinds[-1] == ["COPY_COMPLETED", "COPY_COMPLETED"]  # the copy phase reads the table
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Query was empty" in (err.details() or "")
    r.close()
    r = Reader(stub, request(("commerce", "0", "current"), rules=[("/^customer$", "")]))
    r.next()
    sim.execute("insert into customer (id, email) values (3, 'c')", "commerce")
    assert [e.type for e in r.next().events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    r.close()


@pytest.mark.parametrize(("rules", "message"), [
    ([("/^$", "")], "stream needs a position or a table to copy"),  # uvstreamer.init
    ([("/.*", ""), ("xyz", "")], "table xyz is not present in the database"),  # buildTablePlan
], ids=["nothing-to-copy", "missing-table"])
def test_a_copy_needs_a_table_to_copy(sim: VTGateSim, stub: Any, rules: list[tuple[str, str]], message: str) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    err = Reader(stub, request(("commerce", "0", ""), rules=rules)).end()
    assert err is not None and message in (err.details() or ""), err
    # With a position there is nothing to copy and nothing to fail: the stream just streams.
    r = Reader(stub, request(("commerce", "0", "current"), rules=[("/^$", "")]))
    assert [e.type for e in r.next().events] == [T.VGTID, T.OTHER]
    r.close()


def test_a_filter_without_rules_matches_no_table(sim: VTGateSim, stub: Any) -> None:
    # vtgate's resolveParams puts "/.*" only in place of a missing Filter.
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    req = request(("commerce", "0", "current"))
    req.filter.Clear()
    req.filter.SetInParent()
    r = Reader(stub, req)
    r.next()
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    assert [e.type for e in r.next().events] == [T.BEGIN, T.VGTID, T.COMMIT]
    r.close()
