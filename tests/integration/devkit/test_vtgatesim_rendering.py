"""Value rendering per phase: binlog (streaming) ROWs vs copy-phase ROWs and Execute results.

Real Vitess decodes binlog rows itself (go/mysql/binlog/rbr.go): FLOAT/DOUBLE in Go 'E' format,
no ZEROFILL padding, and the released-Vitess DECIMAL quirks; the copy phase and Execute return
MySQL's text protocol. Exact bytes for both.
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

from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2
from vtgatesim import VTGateSim

T = binlogdata_pb2.VEventType

DDL = ("create table num (id int not null, f float, d double, dec52 decimal(5,2), dec100 decimal(10,0), "
       "z int(4) zerofill, dz decimal(8,3) zerofill, primary key (id))")
INSERT = ("insert into num (id, f, d, dec52, dec100, z, dz) values "
          "(1, 4.99, 1e20, 0.50, 5, 7, 1.5), (2, -0.5, -0.5, -0.50, 1234567890, 42, 0), "
          "(3, null, null, null, null, null, null)")

TEXT: list[list[bytes | None]] = [  # MySQL text protocol: copy phase, Execute
    [b"1", b"4.99", b"1e20", b"0.50", b"5", b"0007", b"00001.500"],
    [b"2", b"-0.5", b"-0.5", b"-0.50", b"1234567890", b"0042", b"00000.000"],
    [b"3", None, None, None, None, None, None],
]
BINLOG: list[list[bytes | None]] = [  # vstreamer binlog rendering: streaming phase
    [b"1", b"4.99E+00", b"1E+20", b".50", b"000000005", b"7", b"1.500"],
    [b"2", b"-5E-01", b"-5E-01", b"-.50", b"1234567890", b"42", b".000"],
    [b"3", None, None, None, None, None, None],
]


def _row_bytes(values: list[bytes | None]) -> query_pb2.Row:
    return query_pb2.Row(lengths=[-1 if v is None else len(v) for v in values],
                         values=b"".join(v for v in values if v is not None))


def test_streaming_rows_use_binlog_rendering(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[DDL])
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    sim.execute(INSERT, "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    changes = resp.events[2].row_event.row_changes
    assert [c.after for c in changes] == [_row_bytes(v) for v in BINLOG]
    # an update carries binlog renderings in both images
    sim.execute("update num set f = 0.25, z = 9 where id = 1", "commerce")
    ch = r.next().events[1].row_event.row_changes[0]
    assert row_values(ch.before) == BINLOG[0]
    assert row_values(ch.after) == [b"1", b"2.5E-01", b"1E+20", b".50", b"000000005", b"9", b"1.500"]
    r.close()


def test_copy_phase_and_execute_use_text_protocol(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[DDL])
    sim.execute(INSERT, "commerce")
    r = Reader(stub, request(("commerce", "0", "")))
    resps = [r.next() for _ in range(3)]
    assert [[e.type for e in x.events] for x in resps] == [
        [T.BEGIN, T.FIELD], [T.VGTID], [T.ROW, T.ROW, T.ROW, T.VGTID, T.COMMIT]]
    assert [e.row_event.row_changes[0].after for e in resps[2].events[:3]] == [_row_bytes(v) for v in TEXT]
    r.close()
    res = stub.Execute(vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(target_string="commerce"),
        query=query_pb2.BoundQuery(sql="select id, f, d, dec52, dec100, z, dz from num order by id")))
    assert not res.HasField("error")
    assert list(res.result.rows) == [_row_bytes(v) for v in TEXT]
    assert sim.source_truth("commerce", "num")[0] == dict(zip(["id", "f", "d", "dec52", "dec100", "z", "dz"],
                                                              TEXT[0], strict=True))


def test_copy_resumes_after_a_decimal_lastpk_and_catch_up_sends_all_of_its_changes(sim: VTGateSim, stub: Any) -> None:
    """A DECIMAL primary key renders differently in the binlog (.50) and in the copy (0.50); the copy
    resumes after the stored text lastpk. The catch-up before it sends every change of the table in
    its copy phase, beyond the lastpk too (uvstreamer.shouldSendEventForTable: isRowCopied is not
    implemented upstream), so the row after the lastpk comes as a change and again as a copy row."""
    sim.create_keyspace("commerce", ddl=["create table p (k decimal(5,2) not null, v int, primary key (k))",
                                         "create table q (id int not null, primary key (id))"])
    sim.execute("insert into p (k, v) values (0.50, 1), (2.00, 2)", "commerce")
    pos = sim.position("commerce", "0")
    sim.execute("update p set v = 10 where k = 0.50", "commerce")  # already copied range (k <= 0.50)
    sim.execute("update p set v = 20 where k = 2.00", "commerce")  # not yet copied (k > 0.50)
    lastpk = binlogdata_pb2.TableLastPK(table_name="p", lastpk=query_pb2.QueryResult(
        fields=[query_pb2.Field(name="k", type=query_pb2.DECIMAL)], rows=[_row_bytes([b"0.50"])]))
    req = request(("commerce", "0", pos))
    req.vgtid.shard_gtids[0].table_p_ks.append(lastpk)
    r = Reader(stub, req)
    types = []
    rows = []
    while True:
        resp = r.next()
        types.append([T.Name(e.type) for e in resp.events])
        rows += [row_values(c.after) for e in resp.events if e.type == T.ROW for c in e.row_event.row_changes]
        if resp.events[-1].type == T.COPY_COMPLETED:
            break
    # catch-up: both updates (binlog rendering); then the copy resumes after 0.50 (text rendering)
    assert rows == [[b".50", b"10"], [b"2.00", b"20"], [b"2.00", b"20"]]
    assert types == [
        ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"],  # catch-up: k=.50, in the copied range
        ["BEGIN", "ROW", "VGTID", "COMMIT"],  # catch-up: k=2.00, beyond the lastpk, sent as well
        ["BEGIN", "VGTID", "COMMIT"],  # fast-forward to the new snapshot
        # p resumed, then q (empty); at the snapshot already: no VGTID after FIELD (uvstreamer.setPosition)
        ["BEGIN", "FIELD"], ["ROW", "VGTID", "COMMIT"], ["BEGIN", "VGTID", "COMMIT"],
        ["BEGIN", "FIELD"], ["BEGIN", "VGTID", "COMMIT"],
        ["COPY_COMPLETED", "COPY_COMPLETED"]]
    r.close()
