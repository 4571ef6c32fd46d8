"""``minimize_skew`` (vstream_manager.go ``alignStreams`` / ``computeSkew``).

A shard stream whose next COMMIT is more than 2 s (MaxSkew) ahead of the slowest stream waits
until the laggard catches up, or until the laggard's idle tablet sends a heartbeat. The laggard
itself never waits. Here shard -80 replays transactions committed 100 s ago while 80- has a new
one; the test clock (``sim.executor.clock``) writes the old ones.
"""

from __future__ import annotations

import time
from typing import Any

from vtgatesim_fixtures import (
    CUSTOMER,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2
from vtgatesim import VTGateSim

T = binlogdata_pb2.VEventType
# hash vindex: 1 2 3 5 -> shard -80, 4 6 -> shard 80-


def _ids(resp: Any) -> list[int]:
    return [int(rc.after.values[: rc.after.lengths[0]]) for e in resp.events if e.type == T.ROW
            for rc in e.row_event.row_changes]


def _insert(sim: VTGateSim, i: int) -> None:
    sim.execute(f"insert into customer (id, email) values ({i}, 'e{i}')", "commerce")


def _laggard_behind(sim: VTGateSim, stub: Any, minimize_skew: bool) -> Reader:
    """Both shards at `current`, then three -80 transactions committed 100 s ago, received."""
    sim.tablet_heartbeat_interval = 120.0  # no idle heartbeat during the test unless woken
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "", "current"), minimize_skew=minimize_skew))
    starts = [r.next(), r.next()]
    assert sorted(e.shard for s in starts for e in s.events if e.type == T.OTHER) == ["-80", "80-"]
    real = time.time
    sim.executor.clock = lambda: real() - 100
    for i in (1, 2, 3):
        _insert(sim, i)
    old = [r.next() for _ in range(3)]
    assert [_ids(x) for x in old] == [[1], [2], [3]]  # the laggard is never held back
    assert all(e.timestamp < real() - 90 for x in old for e in x.events if e.type == T.COMMIT)
    sim.executor.clock = real
    return r


def _wait(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling the simulator's counter


def test_faster_shard_waits_until_the_laggard_catches_up(sim: VTGateSim, stub: Any) -> None:
    r = _laggard_behind(sim, stub, minimize_skew=True)
    _insert(sim, 4)  # on 80-, now: 100 s ahead of -80
    _wait(lambda: sim.skew_pauses >= 1, "80- to pause")
    assert r.q.empty()  # held back while the skew lasts
    _insert(sim, 5)  # on -80, now: the laggard catches up and clears the skew
    got = [_ids(r.next()) for _ in range(2)]
    assert sorted(got) == [[4], [5]]
    assert r.error is None
    r.close()


def test_idle_laggard_heartbeat_releases_the_paused_shard(sim: VTGateSim, stub: Any) -> None:
    r = _laggard_behind(sim, stub, minimize_skew=True)
    _insert(sim, 4)
    _wait(lambda: sim.skew_pauses >= 1, "80- to pause")
    assert r.q.empty()
    # -80 has nothing more to send: its tablet's next HEARTBEAT (now) ends the skew.
    sim.topo.shard("commerce", "-80").binlog.wake()
    assert _ids(r.next()) == [4]
    r.close()


def test_without_minimize_skew_nothing_waits(sim: VTGateSim, stub: Any) -> None:
    r = _laggard_behind(sim, stub, minimize_skew=False)
    _insert(sim, 4)
    assert _ids(r.next()) == [4]
    assert sim.skew_pauses == 0
    r.close()
