"""The simulator's workload generator: determinism, its target rate (counted on a fake clock, no
waiting) and what its primary-key updates look like on the wire (a cross-shard move is a delete on
one shard and an insert on the other)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from vtgatesim_fixtures import (
    Reader,
    request,
    row_values,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2, vtgate_pb2
from vtgatesim import VTGateSim
from vtgatesim import binlog as bl
from vtgatesim.workload import Step, Workload

T = binlogdata_pb2.VEventType


class FakeClock:
    """Monotonic time that moves only when the workload sleeps or a step costs time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class TimedWorkload(Workload):
    """Each step takes `cost` seconds of the fake clock."""

    def __init__(self, sim: VTGateSim, clock: FakeClock, cost: float) -> None:
        super().__init__(sim, "ks", seed=5, clock=clock, sleep=clock.sleep)
        self.fake, self.cost = clock, cost

    def step(self) -> Step:
        done = super().step()
        self.fake.now += self.cost
        return done


def test_workload_is_deterministic_and_matches_truth() -> None:
    truths = []
    for _ in range(2):
        s = VTGateSim()
        s.create_keyspace("ks", 2)
        wl = Workload(s, "ks", seed=7, large_every=20, large_rows=50)
        wl.ensure_table()
        wl.run(transactions=60)
        truths.append(s.source_truth("ks", "items"))
    assert truths[0] == truths[1] and len(truths[0]) > 50


# Powers of two keep the fake clock's sums exact.
@pytest.mark.parametrize(("cost", "transactions", "sleep"), [
    (0.0, 128, 1 / 64),  # 64/s for 2 s
    (1 / 256, 128, 3 / 256),  # steps take a quarter of their slot: the rest is slept
    (1 / 32, 64, None),  # steps slower than the rate: no sleeping, as many as fit
])
def test_rate_paces_transactions(cost: float, transactions: int, sleep: float | None) -> None:
    sim = VTGateSim()
    sim.create_keyspace("ks")
    clock = FakeClock()
    wl = TimedWorkload(sim, clock, cost)
    wl.ensure_table()
    wl.run(rate=64, duration=2.0)
    assert wl.stats.transactions == transactions
    # one binlog transaction per step in an unsharded keyspace (after the CREATE TABLE)
    entries = sim.topo.shard("ks", "0").binlog.entries
    assert [e.kind for e in entries] == [bl.DDL] + [bl.TXN] * transactions
    assert clock.sleeps == ([] if sleep is None else [sleep] * transactions)
    assert clock.now == 2.0


def test_rate_with_a_transaction_count() -> None:
    sim = VTGateSim()
    sim.create_keyspace("ks")
    clock = FakeClock()
    wl = TimedWorkload(sim, clock, 0.0)
    wl.ensure_table()
    wl.run(transactions=40, rate=8)
    assert wl.stats.transactions == 40 and clock.now == 5.0


def _change(resp: vtgate_pb2.VStreamResponse) -> tuple[str, binlogdata_pb2.RowChange]:
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    row = resp.events[2].row_event
    assert row.table_name == "ks.items" and len(row.row_changes) == 1
    return row.shard, row.row_changes[0]


def _same_row(image: Any, truth: dict[str, bytes | None], row_id: int) -> None:
    """A streamed image is the row `truth` (read before the step) under id `row_id`; prices compare as
    numbers (the binlog rendering of DECIMAL differs from MySQL's text)."""
    got = row_values(image)
    assert got[:3] == [str(row_id).encode(), truth["name"], truth["qty"]]
    price, want = got[3], truth["price"]
    assert price is not None and want is not None and Decimal(price.decode()) == Decimal(want.decode())


def test_pk_changes_move_rows_between_shards(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("ks", ["-80", "80-"])
    wl = Workload(sim, "ks", seed=3)
    wl.ensure_table()
    ks = sim.topo.keyspace("ks")
    seen: set[str] = set()
    for _ in range(500):
        positions = sim.positions("ks")
        before = {int(r["id"] or b"0"): r for r in sim.source_truth("ks", "items")}
        step = wl.step()
        if step.op != "pk_update":
            continue
        old, new = step.ids
        src, dst = ks.shard_for_value(old).name, ks.shard_for_value(new).name
        kind = "move" if src != dst else "same"
        if kind in seen:
            continue
        seen.add(kind)
        # replay just this step's transactions from the positions before it
        r = Reader(stub, request(*[("ks", s, p) for s, p in positions.items()]))
        if kind == "same":
            # One transaction on the shard: the DELETE, then the INSERT (Vitess refuses an UPDATE of the
            # primary vindex column, so the workload changes the id as an application must).
            resp = r.next()
            types = [e.type for e in resp.events]
            rows = [e.row_event for e in resp.events if e.type == T.ROW]
            assert types[:1] == [T.BEGIN] and types[-2:] == [T.VGTID, T.COMMIT]
            assert [(row.shard, len(row.row_changes)) for row in rows] == [(src, 1), (src, 1)]
            deleted, inserted = rows[0].row_changes[0], rows[1].row_changes[0]
            assert deleted.HasField("before") and not deleted.HasField("after")
            assert inserted.HasField("after") and not inserted.HasField("before")
            _same_row(deleted.before, before[old], old)
            _same_row(inserted.after, before[old], new)
        else:
            changes = dict(_change(r.next()) for _ in range(2))  # the shards' order is not defined
            assert sorted(changes) == sorted([src, dst])
            assert changes[src].HasField("before") and not changes[src].HasField("after")  # DELETE
            assert changes[dst].HasField("after") and not changes[dst].HasField("before")  # INSERT
            _same_row(changes[src].before, before[old], old)
            _same_row(changes[dst].after, before[old], new)
        r.close()
        if seen == {"move", "same"}:
            break
    assert seen == {"move", "same"}
    assert {r["id"] for r in sim.source_truth("ks", "items")} == {str(i).encode() for i in wl.ids}
