"""Tables without a primary key, as MySQL and Vitess handle them.

MySQL accepts them; the binlog carries full row images, so the vstreamer streams their changes
like any other table (FIELD without PRI_KEY_FLAG). The copy phase orders and resumes by a "PK
equivalent" (rowstreamer.buildPKColumns: a unique key whose columns are all NOT NULL) or, without
one, by every column; that is what ``table_p_ks`` lastpk holds.
"""

from __future__ import annotations

from typing import Any

from vtgatesim_fixtures import (
    Reader,
    request,
    row_values,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2, query_pb2
from vtgatesim import VTGateSim

T = binlogdata_pb2.VEventType
LOGS = "create table logs (id bigint, msg varchar(16), n int)"
TAGS = "create table tags (id bigint, code varchar(8) not null, note varchar(8), unique key uk_code (code))"
PRI_KEY_FLAG, UNIQUE_KEY_FLAG, NOT_NULL_FLAG = 2, 4, 1


def _changes(resp: Any) -> list[tuple[list[bytes | None] | None, list[bytes | None] | None]]:
    return [(row_values(rc.before) if rc.HasField("before") else None, row_values(rc.after) if rc.HasField("after") else None)
            for e in resp.events if e.type == T.ROW for rc in e.row_event.row_changes]


def test_table_without_primary_key_is_created_and_streamed(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[LOGS, TAGS])
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()  # VGTID, OTHER
    sim.execute("insert into logs values (1, 'a', 1), (1, 'a', 1), (2, NULL, NULL)", "commerce")
    first = r.next()
    [fe] = [e.field_event for e in first.events if e.type == T.FIELD]
    assert [f.name for f in fe.fields] == ["id", "msg", "n"]
    assert all(not f.flags & PRI_KEY_FLAG for f in fe.fields)
    assert _changes(first) == [(None, [b"1", b"a", b"1"]), (None, [b"1", b"a", b"1"]), (None, [b"2", None, None])]

    # Full before/after images; duplicates are separate rows.
    sim.execute("update logs set n = 5 where id = 1", "commerce")
    assert _changes(r.next()) == [([b"1", b"a", b"1"], [b"1", b"a", b"5"])] * 2
    res = sim.execute("delete from logs where id = 1 limit 1", "commerce")
    assert res.rows_affected == 1
    assert _changes(r.next()) == [([b"1", b"a", b"5"], None)]
    sim.execute("update logs set msg = 'z' where msg is null", "commerce")
    assert _changes(r.next()) == [([b"2", None, None], [b"2", b"z", None])]
    truth = sim.source_truth("commerce", "logs")
    assert truth == [{"id": b"1", "msg": b"a", "n": b"5"}, {"id": b"2", "msg": b"z", "n": None}]

    # A unique key still refuses duplicates; its NOT NULL column carries UNIQUE_KEY_FLAG.
    sim.execute("insert into tags values (1, 'x', 'n1')", "commerce")
    [fe] = [e.field_event for e in r.next().events if e.type == T.FIELD]
    code = next(f for f in fe.fields if f.name == "code")
    assert code.flags & (UNIQUE_KEY_FLAG | NOT_NULL_FLAG) == UNIQUE_KEY_FLAG | NOT_NULL_FLAG
    assert all(not f.flags & PRI_KEY_FLAG for f in fe.fields)
    err = None
    try:
        sim.execute("insert into tags values (2, 'x', 'n2')", "commerce")
    except Exception as e:  # MySQLError
        err = str(e)
    assert err is not None and "Duplicate entry 'x' for key 'uk_code'" in err
    r.close()


def _copy(stub: Any, table_p_ks: list[binlogdata_pb2.TableLastPK] | None = None) -> list[Any]:
    req = request(("commerce", "0", ""))
    if table_p_ks:
        req.vgtid.shard_gtids[0].table_p_ks.extend(table_p_ks)
    r = Reader(stub, req)
    out = []
    while True:
        resp = r.next()
        out.append(resp)
        if any(e.type == T.COPY_COMPLETED and not e.shard for e in resp.events):
            break
    r.close()
    return out


def _lastpks(responses: list[Any]) -> list[tuple[str, list[str], list[list[bytes | None]]]]:
    out = []
    for resp in responses:
        for e in resp.events:
            if e.type == T.VGTID:
                for p in e.vgtid.shard_gtids[0].table_p_ks:
                    out.append((p.table_name, [f.name for f in p.lastpk.fields], [row_values(x) for x in p.lastpk.rows]))
    return out


def test_copy_orders_and_resumes_by_pk_equivalent_or_all_columns(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[LOGS, TAGS])
    sim.execute("insert into logs values (2, 'b', 1), (1, 'z', 9), (1, 'a', 3), (NULL, 'n', 0)", "commerce")
    sim.execute("insert into tags values (9, 'b', NULL), (8, 'a', 'x')", "commerce")
    out = _copy(stub)
    copied = {t: [] for t in ("logs", "tags")}  # type: dict[str, list[Any]]
    for resp in out:
        for e in resp.events:
            if e.type == T.ROW:
                copied[e.row_event.table_name.split(".")[-1]] += [row_values(rc.after) for rc in e.row_event.row_changes]
    # logs: every column is the key (NULL first, as MySQL orders); tags: the NOT NULL unique key `code`.
    assert copied["logs"] == [[None, b"n", b"0"], [b"1", b"a", b"3"], [b"1", b"z", b"9"], [b"2", b"b", b"1"]]
    assert copied["tags"] == [[b"8", b"a", b"x"], [b"9", b"b", None]]
    pks = _lastpks(out)
    assert ("logs", ["id", "msg", "n"], [[b"2", b"b", b"1"]]) in pks
    assert ("tags", ["code"], [[b"b"]]) in pks

    # Resume logs after (1, 'a', 3): the rows whose whole image sorts after it.
    lastpk = binlogdata_pb2.TableLastPK(table_name="logs", lastpk=query_pb2.QueryResult(
        fields=[query_pb2.Field(name="id", type=query_pb2.INT64), query_pb2.Field(name="msg", type=query_pb2.VARCHAR),
                query_pb2.Field(name="n", type=query_pb2.INT32)],
        rows=[query_pb2.Row(lengths=[1, 1, 1], values=b"1a3")]))
    resumed = _copy(stub, [lastpk])
    rows = [row_values(rc.after) for resp in resumed for e in resp.events if e.type == T.ROW
            and e.row_event.table_name.endswith("logs") for rc in e.row_event.row_changes]
    assert rows == [[b"1", b"z", b"9"], [b"2", b"b", b"1"]]
