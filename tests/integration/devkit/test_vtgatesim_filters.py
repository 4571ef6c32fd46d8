"""VStream filter rules on the VTGate test server, as the tablet vstreamer's planbuilder treats them:
keyrange filters, in_keyrange, keyspace_id() in the select list, and the constructs it refuses."""

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
)

from cdcworker.keyrange import hash_keyspace_id
from vitessapi import binlogdata_pb2, query_pb2
from vtgatesim import VTGateSim
from vtgatesim import sql as sqlp
from vtgatesim.filters import FilterError, Rules
from vtgatesim.schema import TableSchema, table_from_create

T = binlogdata_pb2.VEventType
KSID_1 = bytes.fromhex("166b40b44aba4bd6")  # hash vindex of 1 (tests/unit/worker/test_keyrange.py)


def customer_schema() -> TableSchema:
    stmt = sqlp.parse(CUSTOMER)
    assert isinstance(stmt, sqlp.CreateTable)
    return table_from_create(stmt)


@pytest.mark.parametrize(("where", "error"), [
    ("id = 1 or id = 2", "unsupported constraint: id = 1 or id = 2"),
    ("id > 0 and (id = 1 or id = 2)", "unsupported constraint: id = 1 or id = 2"),
    ("not id = 1", "unsupported constraint: not id = 1"),
    ("not (id = 1 or id = 2)", "unsupported constraint: not (id = 1 or id = 2)"),
    ("id between 1 and 2", "unsupported constraint: id between 1 and 2"),
    ("email is null", "unsupported constraint: email is null"),
    ("length(email) = 1", "unexpected: length(email) = 1"),
    ("email like 'a%'", "comparison operator like not supported"),
    ("id not in (1, 2)", "comparison operator not in not supported"),
    ("id <=> 1", "comparison operator <=> not supported"),
    ("id = 1.5", "unexpected: id = 1.5"),
    ("1 = id", "unexpected: 1 = id"),
    ("nope = 1", "column nope not found in table customer"),
    ("in_keyrange(id, '-80')", "[BUG] unexpected in_keyrange parameters: id, '-80'"),
    ("in_keyrange(id, 'xxhash', '-80')", 'vindexType "xxhash" not found'),
    ("in_keyrange('-40-80')", "unexpected in_keyrange parameter: '-40-80'"),
])
def test_where_clauses_the_planbuilder_refuses(where: str, error: str) -> None:
    rules = Rules([("customer", f"select * from customer where {where}")])
    with pytest.raises(FilterError) as ei:
        rules.plan(customer_schema(), "id", sharded=True)
    assert str(ei.value) == error


@pytest.mark.parametrize(("rule", "error"), [
    (("customer", "select id, keyspace_id() from customer"), "table customer has no primary vindex"),
    (("customer", "select * from customer where in_keyrange('-80')"), "table customer has no primary vindex"),
    (("/.*", "-80"), "table customer has no primary vindex"),
])
def test_vindex_constructs_need_a_primary_vindex(rule: tuple[str, str], error: str) -> None:
    with pytest.raises(FilterError) as ei:
        Rules([rule]).plan(customer_schema(), "id", sharded=False)
    assert str(ei.value) == error


@pytest.mark.parametrize(("rule", "error"), [
    (("customer", "select id, upper(email) from customer"), "unsupported function: upper(email)"),
    (("customer", "select id, keyspace_id(id) from customer"), "unexpected: keyspace_id(id)"),
    (("customer", "select id from orders"),
     "unsupported: select expression table orders does not match the table entry name customer"),
    (("/.*", "select * from customer"), "malformed spec: doesn't define a range: \"select * from customer\""),
    (("/.*", "-40-80"), "error parsing keyrange: -40-80"),
    (("/(", ""), "error parsing regexp: missing closing ): `(`"),
])
def test_select_lists_and_rules_the_planbuilder_refuses(rule: tuple[str, str], error: str) -> None:
    with pytest.raises(FilterError) as ei:
        Rules([rule]).plan(customer_schema(), "id", sharded=True)
    assert str(ei.value) == error


@pytest.mark.parametrize(("where", "shown"), [
    ("id = 1 or id = 2", "id = 1 or id = 2"),
    ("not id = 1", "not id = 1"),
])
def test_refused_filter_fails_the_stream_as_vtgate_reports_it(sim: VTGateSim, stub: Any, where: str,
                                                              shown: str) -> None:
    """The tablet vstreamer plans a table at its first row: the error (code Unknown, wrapped with the
    position including that transaction) is ephemeral to vtgate, which gives up after three tries."""
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "0", "current"), rules=[("customer", f"select * from customer where {where}")]))
    r.next()
    pos = sim.position("commerce", "0")
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    failed_at = sim.position("commerce", "0").removeprefix("MySQL56/")  # includes the insert
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.UNKNOWN
    shard = sim.topo.shard("commerce", "0")
    assert err.details() == (
        f'error starting stream from shard GTID keyspace:"commerce" shard:"0" gtid:"{pos}": persistent error in '
        f"vstream for commerce/0 on tablet zone1-{shard.tablet_uid:010d}; giving up: vttablet: rpc error: "
        f"code = Unknown desc = stream (at source tablet) error @ {failed_at}: "
        f"unsupported constraint: {shown}"
    )
    assert sim.tablet_restarts == 2


def test_keyspace_id_in_the_select_list(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")  # id 1 -> -80
    r = Reader(stub, request(("commerce", "-80", ""), rules=[("customer", "select keyspace_id(), id from customer")]))
    copy = [r.next() for _ in range(5)]
    assert [[T.Name(e.type) for e in x.events] for x in copy] == [
        ["BEGIN", "FIELD"], ["VGTID"], ["ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"]]
    fields = list(copy[0].events[1].field_event.fields)
    assert fields[0] == query_pb2.Field(name="keyspace_id", type=query_pb2.VARBINARY, charset=63, flags=128)
    assert [f.name for f in fields] == ["keyspace_id", "id"]
    after = copy[2].events[0].row_event.row_changes[0].after
    assert (list(after.lengths), after.values) == ([8, 1], KSID_1 + b"1")
    # streaming phase: a fresh FIELD, and the keyspace id of every image (before and after)
    sim.execute("update customer set email = 'b' where id = 1", "commerce")
    resp = r.next()
    assert [T.Name(e.type) for e in resp.events] == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    assert list(resp.events[1].field_event.fields) == fields
    change = resp.events[2].row_event.row_changes[0]
    assert change.before.values == change.after.values == KSID_1 + b"1"
    r.close()


def test_keyrange_filter_and_in_keyrange(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    ids = list(range(1, 31))
    sim.execute("insert into customer (id, email) values " + ", ".join(f"({i}, 'e')" for i in ids), "commerce")

    def copied(shard: str, rule: tuple[str, str]) -> list[bytes]:
        r = Reader(stub, request(("commerce", shard, ""), rules=[rule]))
        rows = []
        while True:
            resp = r.next()
            rows += [e.row_event.row_changes[0].after.values for e in resp.events if e.type == T.ROW]
            if resp.events[0].type == T.COPY_COMPLETED:
                r.close()
                return rows

    def ksid(i: int) -> bytes:
        return hash_keyspace_id(i)

    low = [f"{i}e".encode() for i in ids if ksid(i) < b"\x40"]
    assert low and copied("-80", ("/.*", "-40")) == low
    assert copied("80-", ("/.*", "-40")) == []  # no row of 80- is in -40
    mid = [f"{i}e".encode() for i in ids if b"\x80" <= ksid(i) < b"\xc0"]
    assert mid and copied("80-", ("customer", "select * from customer where in_keyrange('80-c0')")) == mid
    # explicit vindex and column, AND-ed with a comparison; the select list projects
    want = [str(i).encode() for i in ids if ksid(i) < b"\x40" and i > 20]
    rule = ("customer", "select id from customer where in_keyrange(id, 'hash', '-40') and id > 20")
    assert want and copied("-80", rule) == want
    # streaming: rows outside the range leave the shard's transaction empty
    r = Reader(stub, request(("commerce", "-80", "current"), rules=[("/.*", "-40")]))
    r.next()
    inside = next(i for i in range(100, 200) if ksid(i) < b"\x40")
    outside = next(i for i in range(100, 200) if b"\x40" <= ksid(i) < b"\x80")
    sim.execute(f"insert into customer (id, email) values ({outside}, 'o')", "commerce")
    assert [T.Name(e.type) for e in r.next().events] == ["BEGIN", "VGTID", "COMMIT"]
    sim.execute(f"insert into customer (id, email) values ({inside}, 'i')", "commerce")
    resp = r.next()
    assert [T.Name(e.type) for e in resp.events] == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    assert resp.events[2].row_event.row_changes[0].after.values == f"{inside}i".encode()
    r.close()
