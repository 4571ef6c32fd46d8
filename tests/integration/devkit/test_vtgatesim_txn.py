"""Multi-statement transactions over Execute: BEGIN; statements; COMMIT in one session -> one binlog
transaction per shard; ROLLBACK leaves no trace; reads inside see own writes, others do not."""

from __future__ import annotations

from typing import Any

from vtgatesim_fixtures import (
    CUSTOMER,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2, query_pb2, topodata_pb2, vtgate_pb2
from vtgatesim import VTGateSim

T = binlogdata_pb2.VEventType


class Session:
    """A client that echoes the returned session, as vtgate clients do."""

    def __init__(self, stub: Any, target: str) -> None:
        self.stub = stub
        self.session = vtgate_pb2.Session(target_string=target, autocommit=True)

    def run(self, sql: str) -> vtgate_pb2.ExecuteResponse:
        resp: vtgate_pb2.ExecuteResponse = self.stub.Execute(vtgate_pb2.ExecuteRequest(
            session=self.session, query=query_pb2.BoundQuery(sql=sql)))
        self.session = resp.session
        assert not resp.HasField("error"), resp.error
        return resp


def ids_on(sim: VTGateSim, shard: str, n: int) -> list[int]:
    ks = sim.topo.keyspace("commerce")
    return [i for i in range(1, 1000) if ks.shard_for_value(i).name == shard][:n]


def test_begin_statements_commit_is_one_binlog_transaction_per_shard(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    a1, a2 = ids_on(sim, "-80", 2)
    (b1,) = ids_on(sim, "80-", 1)
    pos = sim.positions("commerce")
    r = Reader(stub, request(("commerce", "", "current")))
    r.next(), r.next()
    s = Session(stub, "commerce")
    assert s.run("begin").session.in_transaction
    s.run(f"insert into customer (id, email) values ({a1}, 'x')")
    s.run(f"insert into customer (id, email) values ({a2}, 'y'), ({b1}, 'z')")
    s.run(f"update customer set email = 'x2' where id = {a1}")
    assert [(x.target.shard, x.target.tablet_type) for x in s.session.shard_sessions] == [
        ("-80", topodata_pb2.PRIMARY), ("80-", topodata_pb2.PRIMARY)]
    assert all(x.transaction_id > 0 for x in s.session.shard_sessions)
    # own writes are visible inside the transaction, not outside it; nothing is in the binlog yet
    inside = s.run("select id, email from customer order by id").result.rows
    assert sorted(row.values for row in inside) == sorted([f"{a1}x2".encode(), f"{a2}y".encode(),
                                                           f"{b1}z".encode()])
    other = Session(stub, "commerce").run("select count(*) from customer").result.rows
    assert other[0].values == b"0"
    assert sim.positions("commerce") == pos
    resp = s.run("commit")
    assert not resp.session.in_transaction and not resp.session.shard_sessions
    got = {}
    for _ in range(2):
        x = r.next()
        got[x.events[0].shard] = x
    assert [T.Name(e.type) for e in got["-80"].events] == ["BEGIN", "FIELD", "ROW", "ROW", "ROW", "VGTID", "COMMIT"]
    rows = got["-80"].events
    assert [c.after.values for c in rows[2].row_event.row_changes] == [f"{a1}x".encode()]
    assert [c.after.values for c in rows[3].row_event.row_changes] == [f"{a2}y".encode()]
    upd = rows[4].row_event.row_changes[0]
    assert (upd.before.values, upd.after.values) == (f"{a1}x".encode(), f"{a1}x2".encode())
    assert [T.Name(e.type) for e in got["80-"].events] == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    for shard in ("-80", "80-"):  # exactly one GTID per shard for the whole transaction
        uuid = sim.topo.shard("commerce", shard).server_uuid
        assert sim.position("commerce", shard) == f"MySQL56/{uuid}:1-2"
    r.close()


def test_a_transaction_opening_with_an_update_or_delete_is_in_the_binlog(sim: VTGateSim, stub: Any) -> None:
    """The first UPDATE/DELETE of a shard in a session used to be written before the shard's SQLite
    transaction began, so the per-call rollback kept it and COMMIT's replay found nothing to change:
    the data changed with no binlog transaction (found by the differential suite against real Vitess)."""
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a'), (2, 'b')", "commerce")
    r = Reader(stub, request(("commerce", "", "current")))
    assert [T.Name(e.type) for e in r.next().events] == ["VGTID", "OTHER"]  # positioned
    for stmts in (["update customer set email = 'a2' where id = 1"],
                  ["delete from customer where id = 2", "update customer set email = 'a3' where id = 1"]):
        s = Session(stub, "commerce")
        s.run("begin")
        for sql in stmts:
            s.run(sql)
        assert Session(stub, "commerce").run("select email from customer where id = 1").result.rows[0].values == (
            b"a" if len(stmts) == 1 else b"a2"), "a write of an open transaction is visible outside it"
        s.run("commit")
        events = r.next().events
        assert [T.Name(e.type) for e in events if e.type != T.FIELD] == ["BEGIN", *["ROW"] * len(stmts), "VGTID",
                                                                         "COMMIT"]
    assert sim.source_truth("commerce", "customer") == [{"id": b"1", "email": b"a3"}]
    r.close()


def test_rollback_and_implicit_commit(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    pos = sim.position("commerce", "0")
    s = Session(stub, "commerce")
    s.run("begin")
    s.run("insert into customer (id, email) values (1, 'a')")
    assert not s.run("rollback").session.in_transaction
    assert sim.position("commerce", "0") == pos and sim.source_truth("commerce", "customer") == []
    # DDL inside a transaction commits it first (MySQL implicit commit)
    s.run("start transaction")
    s.run("insert into customer (id, email) values (2, 'b')")
    s.run("create table t2 (id int primary key)")
    assert not s.session.in_transaction
    assert [row["id"] for row in sim.source_truth("commerce", "customer")] == [b"2"]
    # a failing statement leaves the transaction open without it
    s.run("begin")
    s.run("insert into customer (id, email) values (3, 'c')")
    dup = s.stub.Execute(vtgate_pb2.ExecuteRequest(session=s.session, query=query_pb2.BoundQuery(
        sql="insert into customer (id, email) values (2, 'dup')")))
    assert dup.error.code == 6 and "Duplicate entry" in dup.error.message
    s.session = dup.session
    assert s.session.in_transaction
    s.run("commit")
    assert [row["id"] for row in sim.source_truth("commerce", "customer")] == [b"2", b"3"]


def test_python_api_execute_transaction(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    res = sim.execute_transaction(["insert into customer (id, email) values (1, 'a')",
                                   "update customer set email = 'b' where id = 1"], "commerce")
    assert res.rows_affected == 1
    resp = r.next()
    assert [T.Name(e.type) for e in resp.events] == ["BEGIN", "FIELD", "ROW", "ROW", "VGTID", "COMMIT"]
    r.close()


def test_failed_statement_is_atomic(sim: VTGateSim) -> None:
    import pytest

    from vtgatesim import VTError

    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    pos = sim.position("commerce", "0")
    with pytest.raises(VTError) as ei:
        sim.execute("insert into customer (id, email) values (10, 'a'), (2, 'dup')", "commerce")
    assert ei.value.code == 6
    assert [row["id"] for row in sim.source_truth("commerce", "customer")] == [b"2"]
    assert sim.position("commerce", "0") == pos


def test_auto_increment_ids_are_stable_inside_a_transaction(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    s = Session(stub, "commerce")
    s.run("begin")
    first = s.run("insert into customer (email) values ('a')").result.insert_id
    second = s.run("insert into customer (email) values ('b')").result.insert_id
    s.run("commit")
    assert (first, second) == (1, 2)
    assert [(row["id"], row["email"]) for row in sim.source_truth("commerce", "customer")] == [
        (b"1", b"a"), (b"2", b"b")]
