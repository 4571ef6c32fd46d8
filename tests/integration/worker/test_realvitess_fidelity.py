"""The VTGate test server measured against real Vitess v24 (docs/fidelity.md): the same statements
on both, their Execute errors and the VStream events of one shard compared, normalised for GTIDs,
timestamps and database names. Where they agree the test says so; where a difference is kept, the
test pins it as docs/fidelity.md lists it, so that a change on either side is seen."""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from realvitess_fixtures import KEYSPACE, TABLE_DDL, vstream_queue

from realvitess import VTGateClient, VTTestServer
from realvitess.client import VTGateError
from vitessapi import binlogdata_pb2
from vtgatesim import VTGateSim
from vtgatesim.wire import row_values

pytestmark = pytest.mark.realvitess

T = binlogdata_pb2.VEventType
TABLE = "fid"
# ids 1, 2, 3 hash to -80, 4 to 80- (hash vindex).
SCRIPT = [
    ["insert into fid (id, name, qty, price) values (1, 'a', 1, 1.50), (2, 'b', 2, 2.50)"],
    ["update fid set qty = 7, price = 0.05 where id = 1"],
    ["delete from fid where id = 2"],
    ["insert into fid (id, name, qty, price) values (3, 'c', 3, -3.50)", "update fid set name = NULL where id = 3"],
]


@pytest.fixture(scope="module")
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace(KEYSPACE, ["-80", "80-"], ddl=[TABLE_DDL.format(t=TABLE)])
        yield s


def _error(client: VTGateClient, sql: str) -> tuple[int, str]:
    with pytest.raises(VTGateError) as caught:
        client.execute(sql, KEYSPACE)
    return caught.value.code, caught.value.message


def _mysql_part(message: str) -> str:
    """The tablet's MySQL error inside a VTGate message: text, errno and SQLSTATE."""
    found = re.search(r"desc = (.*?\(errno \d+\) \(sqlstate \w+\))", message)
    assert found, message
    return found.group(1)


def test_execute_errors(sim: VTGateSim, real_vitess: VTTestServer) -> None:
    with real_vitess.client() as real, VTGateClient(sim.address) as test:
        for c in (real, test):
            c.execute("insert into fid (id, name) values (100, 'x')", KEYSPACE)
        same = "update fid set id = 5 where id = 100"
        assert _error(real, same) == _error(test, same) == (
            12, "VT12001: unsupported: you cannot UPDATE primary vindex columns; invalid update on vindex: hash")
        dup = "insert into fid (id, name) values (100, 'dup')"
        (rc, rm), (tc, tm) = _error(real, dup), _error(test, dup)
        assert rc == tc == 6 and _mysql_part(rm) == _mysql_part(tm) == (
            "Duplicate entry '100' for key 'PRIMARY' (errno 1062) (sqlstate 23000)")
        # Kept differences (docs/fidelity.md 6-8): the target's shard name and the CallerID/Sql suffix.
        assert rm.startswith("target: commerce.80-.primary: ") and "(CallerID: " in rm  # id 100 is on 80-
        assert tm.startswith("target: commerce.0.primary: ")
        # With the table in its schema tracking, VTGate's planner answers before any tablet does.
        assert _error(real, "select nope from fid") == (3, "column 'nope' not found in table 'fid'")
        assert _error(test, "select nope from fid") == (5, "target: commerce.0.primary: vttablet: rpc error: code = "
                                                           "NotFound desc = Unknown column 'nope' in 'field "
                                                           "list' (errno 1054) (sqlstate 42S22)")
        assert _error(real, "select * from nope") == _error(test, "select * from nope") == (2, "table nope not found")
        assert _error(real, "update fid set id = id where id = 100") == (
            12, "VT12001: unsupported: only values are supported; invalid update on column: `id` with expr: [id]")


def _events(address: str, start: str, stop: threading.Event) -> queue.Queue[Any]:
    """A VStream of shard -80 from ``start``, table fid only, read in a thread into a queue; returns
    once the stream is positioned (its first VGTID)."""
    out = vstream_queue(address, [("-80", start)], [TABLE], stop)
    first = out.get(timeout=60)  # positioned at "current": later writes are streamed
    assert not isinstance(first, Exception) and first.type == T.VGTID, first
    return out


def _normalised(out: queue.Queue[Any], rows: int) -> list[tuple[Any, ...]]:
    """FIELD and ROW events until ``rows`` ROW events: FIELD metadata without database names,
    row images as MySQL text."""
    seen: list[tuple[Any, ...]] = []
    while sum(1 for e in seen if e[0] == "ROW") < rows:
        ev = out.get(timeout=60)
        assert not isinstance(ev, Exception), ev
        if ev.type == T.FIELD:
            seen.append(("FIELD", tuple((f.name, f.type, f.table, f.org_table, f.org_name, f.column_length,
                                         f.charset, f.decimals, f.flags, f.column_type)
                                        for f in ev.field_event.fields)))
        elif ev.type == T.ROW:
            for rc in ev.row_event.row_changes:
                seen.append(("ROW", ev.row_event.table_name,
                             row_values(rc.before.lengths, rc.before.values) if rc.HasField("before") else None,
                             row_values(rc.after.lengths, rc.after.values) if rc.HasField("after") else None))
    return seen


def test_vstream_field_and_row_events(sim: VTGateSim, real_vitess: VTTestServer) -> None:
    stop = threading.Event()
    try:
        streams = {}
        with real_vitess.client() as real, VTGateClient(sim.address) as test:
            for name, c, address in (("real", real, real_vitess.vtgate), ("test", test, sim.address)):
                c.execute("delete from fid where id in (1, 2, 3)", KEYSPACE)
                streams[name] = _events(address, "current", stop)
            for c in (real, test):
                for stmts in SCRIPT:
                    if len(stmts) == 1:
                        c.execute(stmts[0], KEYSPACE)
                    else:
                        c.transaction(stmts, KEYSPACE)
        got = {name: _normalised(q, 6) for name, q in streams.items()}
    finally:
        stop.set()
    rows = {name: [e for e in events if e[0] == "ROW"] for name, events in got.items()}
    # Kept difference (docs/fidelity.md): v24.0.4 renders a binlog DECIMAL below 1 with its leading
    # zero (vitessio/vitess#20228 is in it); the test server keeps the older `.05` by default.
    assert rows["real"][2][3] == [b"1", b"a", b"7", b"0.05"] and rows["test"][2][3] == [b"1", b"a", b"7", b".05"]
    rows["test"][2] = rows["real"][2]
    assert rows["real"] == rows["test"]
    fields = {name: next(e for e in events if e[0] == "FIELD")[1] for name, events in got.items()}
    # Kept differences (docs/fidelity.md): MariaDB 10.11 keeps integer display widths in column_type
    # and its default character set is utf8mb3 (charset 33, 3 bytes a character); the test server is
    # MySQL 8 (no widths, utf8mb4_0900_ai_ci = 255, 4 bytes a character).
    assert [(f[0], f[5], f[6], f[9]) for f in fields["real"]] == [
        ("id", 20, 63, "bigint(20)"), ("name", 192, 33, "varchar(64)"), ("qty", 11, 63, "int(11)"),
        ("price", 12, 63, "decimal(10,2)")]
    assert [(f[0], f[5], f[6], f[9]) for f in fields["test"]] == [
        ("id", 20, 63, "bigint"), ("name", 256, 255, "varchar(64)"), ("qty", 11, 63, "int"),
        ("price", 12, 63, "decimal(10,2)")]
    same = [(f[:5], f[7], f[8]) for f in fields["real"]]  # name, type, table, org_table, org_name; decimals, flags
    assert same == [(f[:5], f[7], f[8]) for f in fields["test"]]
