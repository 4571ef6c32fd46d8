"""Generated transactions (`workload.commit_generated`): the same wire as an ordinary INSERT.

A big generated transaction keeps only a factory in the binlog and renders its Rows_events while
streaming (bounded memory); a client must not be able to tell it from the same rows inserted by
SQL. Two simulators with the same topology (same server UUIDs and GTIDs) get the same rows, one by
SQL and one generated, and their VStream responses must be equal byte for byte (current_time
aside), response boundaries included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from vtgatesim_fixtures import Reader
from vtgatesim_fixtures import request as vstream_request

from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim import FaultPlan, VTGateSim
from vtgatesim.workload import commit_generated

T = binlogdata_pb2.VEventType
DDL = ("create table big (id bigint not null, name varchar(64), qty int unsigned, price decimal(10,2), "
       "f double, at datetime(3), note text, primary key (id))")
N = 700  # several Rows_events (ROWS_EVENT_MAX) and, with PACKET, several responses
PACKET = 3000
TS = 1_700_000_000


def row_at(i: int) -> tuple[Any, ...]:
    return (i, f"name-{i}-" + "é" * (i % 5), i * 7, f"{i % 1000}.{i % 100:02d}", i / 3,
            f"2024-05-06 07:08:{i % 60:02d}.{i % 1000:03d}", None if i % 4 == 0 else "n" * (i % 50))


def sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v + "'"
    return repr(v)


class Pair:
    """Two simulators: `a` gets the rows by one SQL INSERT, `b` by commit_generated."""

    def __init__(self, spill: bool) -> None:
        self.spill = spill
        self.a, self.b = VTGateSim(packet_size=PACKET).start(), VTGateSim(packet_size=PACKET).start()
        self.channels = [grpc.insecure_channel(s.address) for s in (self.a, self.b)]
        self.stubs = [vtgateservice_pb2_grpc.VitessStub(ch) for ch in self.channels]
        for s in (self.a, self.b):
            s.create_keyspace("ks", ["0"], ddl=[DDL])
            s.executor.clock = lambda: TS
        self.start = self.a.position("ks", "0")
        assert self.b.position("ks", "0") == self.start

    def commit(self, first: int, count: int) -> None:
        values = ", ".join("(" + ", ".join(sql_literal(v) for v in row_at(i)) + ")"
                           for i in range(first, first + count))
        self.a.execute(f"insert into big (id, name, qty, price, f, at, note) values {values}", "ks")
        commit_generated(self.b, "ks", "0", "big", row_at, count, first=first, timestamp=TS, spill=self.spill)
        assert self.a.position("ks", "0") == self.b.position("ks", "0")

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
        self.a.stop()
        self.b.stop()


@pytest.fixture(name="pair", params=[True, False], ids=["spilled", "rendered"])
def pair_fixture(request: pytest.FixtureRequest) -> Iterator[Pair]:
    p = Pair(request.param)
    try:
        yield p
    finally:
        p.close()


def transactions(stub: Any, req: vtgate_pb2.VStreamRequest, count: int) -> list[bytes]:
    """The serialized responses up to the `count`-th COMMIT, current_time cleared."""
    r = Reader(stub, req)
    out: list[bytes] = []
    try:
        while count:
            resp = r.next(timeout=30)
            for e in resp.events:
                e.current_time = 0
                count -= e.type == T.COMMIT
            out.append(resp.SerializeToString())
    finally:
        r.close()
    return out


def test_generated_transaction_streams_the_same_responses(pair: Pair) -> None:
    pair.commit(1, N)
    pair.commit(N + 1, 3)  # a small one after it: streams continue past the generated entry
    req = vstream_request(("ks", "0", pair.start))
    a = transactions(pair.stubs[0], req, 2)
    b = transactions(pair.stubs[1], req, 2)
    assert b == a
    parsed = [vtgate_pb2.VStreamResponse.FromString(x) for x in a]
    rows = [e for r in parsed for e in r.events if e.type == T.ROW]
    assert sum(len(e.row_event.row_changes) for e in rows) == N + 3
    assert len(rows) > 3  # several Rows_events ...
    assert len(parsed) > 3  # ... over several responses
    assert [e.type for e in parsed[0].events][:2] == [T.BEGIN, T.FIELD]
    # A stream started later renders the generated transaction again, identically.
    assert transactions(pair.stubs[1], req, 2) == a
    assert pair.b.source_truth("ks", "big") == pair.a.source_truth("ks", "big")


def test_generated_transaction_with_filter_and_fault_fallback(pair: Pair) -> None:
    pair.commit(1, N)
    # A WHERE filter and a projection take the per-row (non-passthrough) path.
    req = vstream_request(("ks", "0", pair.start), rules=[("big", "select id, price from big where id < 300")])
    assert transactions(pair.stubs[1], req, 1) == transactions(pair.stubs[0], req, 1)
    # With a fault planned the generated entry goes through the ordinary (materialised) path.
    for s in (pair.a, pair.b):
        s.inject(FaultPlan(anonymise_columns=True))
    req = vstream_request(("ks", "0", pair.start))
    assert transactions(pair.stubs[1], req, 1) == transactions(pair.stubs[0], req, 1)


def test_generated_transaction_chunked_and_binlog_only(pair: Pair) -> None:
    pair.commit(1, 200)
    req = vstream_request(("ks", "0", pair.start), transaction_chunk_size=1000)
    assert transactions(pair.stubs[1], req, 1) == transactions(pair.stubs[0], req, 1)
    # store=False: the same events, the table itself does not get the rows.
    before = pair.b.source_truth("ks", "big")
    commit_generated(pair.b, "ks", "0", "big", row_at, 5, first=1000, store=False, timestamp=TS, spill=pair.spill)
    pair.a.execute("insert into big (id, name, qty, price, f, at, note) values "
                   + ", ".join("(" + ", ".join(sql_literal(v) for v in row_at(i)) + ")" for i in range(1000, 1005)),
                   "ks")
    assert pair.b.source_truth("ks", "big") == before
    req = vstream_request(("ks", "0", pair.start))
    assert transactions(pair.stubs[1], req, 2) == transactions(pair.stubs[0], req, 2)
