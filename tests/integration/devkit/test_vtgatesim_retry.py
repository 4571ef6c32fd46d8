"""vtgate's per-shard retry of tablet errors (vstream_manager.go ``streamFromTablet`` / ``shouldRetry``).

A tablet stream that ends with UNAVAILABLE or FAILED_PRECONDITION (or a GTIDSet Mismatch) is
restarted from the last position vtgate sent for that shard; the client sees nothing but a fresh
FIELD from the new tablet vstreamer. Three consecutive failures with no event in between end the
VStream ("persistent error ... giving up"); other codes end it at once.
"""

from __future__ import annotations

from typing import Any

import grpc
from vtgatesim_fixtures import (
    CUSTOMER,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2
from vtgatesim import FaultPlan, VTGateSim

T = binlogdata_pb2.VEventType
INTERNAL, UNAVAILABLE = 13, 14
TXN_WITH_FIELD = ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]


def _setup(sim: VTGateSim) -> str:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    pos = sim.position("commerce", "0")
    for i in (1, 2, 3):
        sim.execute(f"insert into customer (id, email) values ({i}, 'e{i}')", "commerce")
    return pos


def _row_ids(resp: Any) -> list[int]:
    return [int(rc.after.values[: rc.after.lengths[0]]) for e in resp.events if e.type == T.ROW
            for rc in e.row_event.row_changes]


def _gtid(resp: Any) -> str:
    return next(e.vgtid.shard_gtids[0].gtid for e in resp.events if e.type == T.VGTID)


def test_retryable_tablet_errors_resume_from_the_last_sent_position(sim: VTGateSim, stub: Any) -> None:
    pos = _setup(sim)
    uuid = pos.rsplit(":", 1)[0]
    # Each of the first two tablet connections fails after one transaction (5 events).
    sim.inject(FaultPlan(tablet_fail_after_events=5, tablet_failures=2))
    r = Reader(stub, request(("commerce", "0", pos)))
    got = [r.next() for _ in range(3)]
    # Every transaction exactly once, in order; each new tablet vstreamer sends FIELD again.
    assert [[T.Name(e.type) for e in g.events] for g in got] == [TXN_WITH_FIELD] * 3
    assert [_row_ids(g) for g in got] == [[1], [2], [3]]
    assert [_gtid(g) for g in got] == [f"{uuid}:1-2", f"{uuid}:1-3", f"{uuid}:1-4"]
    assert sim.tablet_restarts == 2
    sim.execute("insert into customer (id, email) values (4, 'e4')", "commerce")
    nxt = r.next()
    assert [T.Name(e.type) for e in nxt.events] == ["BEGIN", "ROW", "VGTID", "COMMIT"]  # same tablet session
    assert r.q.empty() and r.error is None
    r.close()


def test_two_consecutive_failures_are_absorbed(sim: VTGateSim, stub: Any) -> None:
    pos = _setup(sim)
    sim.inject(FaultPlan(tablet_fail_after_events=0, tablet_failures=2))
    r = Reader(stub, request(("commerce", "0", pos)))
    assert [_row_ids(r.next()) for _ in range(3)] == [[1], [2], [3]]
    assert sim.tablet_restarts == 2
    r.close()


def test_three_consecutive_failures_end_the_vstream(sim: VTGateSim, stub: Any) -> None:
    pos = _setup(sim)
    sim.inject(FaultPlan(tablet_fail_after_events=0, tablet_failures=3))
    r = Reader(stub, request(("commerce", "0", pos)))
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.UNAVAILABLE
    alias = f"zone1-{sim.topo.shard('commerce', '0').tablet_uid:010d}"
    assert err.details() == (
        f'error starting stream from shard GTID keyspace:"commerce" shard:"0" gtid:"{pos}": persistent error in '
        f"vstream for commerce/0 on tablet {alias}; giving up: "
        "vttablet: rpc error: code = Unavailable desc = injected tablet fault"
    )
    assert sim.tablet_restarts == 2


def test_progress_between_failures_resets_the_count(sim: VTGateSim, stub: Any) -> None:
    pos = _setup(sim)
    # Five failures, but each connection delivers a transaction first: never three in a row.
    sim.inject(FaultPlan(tablet_fail_after_events=5, tablet_failures=5))
    r = Reader(stub, request(("commerce", "0", pos)))
    assert [_row_ids(r.next()) for _ in range(3)] == [[1], [2], [3]]
    for i in (4, 5, 6):
        sim.execute(f"insert into customer (id, email) values ({i}, 'e{i}')", "commerce")
    assert [_row_ids(r.next()) for _ in range(3)] == [[4], [5], [6]]
    assert sim.tablet_restarts == 5
    assert r.error is None
    r.close()


def test_non_retryable_tablet_error_ends_the_vstream_at_once(sim: VTGateSim, stub: Any) -> None:
    pos = _setup(sim)
    sim.inject(FaultPlan(tablet_fail_after_events=5, tablet_fail_code=INTERNAL,
                         tablet_fail_message="vttablet: unexpected server EOF"))
    r = Reader(stub, request(("commerce", "0", pos)))
    first = r.next()
    assert _row_ids(first) == [1]
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.INTERNAL
    assert err.details().endswith(": vttablet: unexpected server EOF")
    assert f'gtid:"{_gtid(first)}": error in vstream for commerce/0 on tablet zone1-' in err.details()
    assert sim.tablet_restarts == 0
