"""Helpers for backfill tests: a 4-shard keyspace under a live workload, and the proof."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cdcworker.backfill.handoff import ShardHandoff, marks_for, marks_from_run
from cdcworker.backfill.progress import RunState
from cdcworker.offsets import Vgtid
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import as_text, compare, materialise
from vtgatesim import VTGateSim
from vtgatesim.workload import TABLE_DDL, Workload

KS = "shop"
SHARDS = ["-40", "40-80", "80-c0", "c0-"]
LINES_DDL = "create table lines (order_id bigint not null, line int not null, qty int, primary key (order_id, line))"


def make_keyspace(sim: VTGateSim) -> None:
    sim.create_keyspace(KS, SHARDS, vindex_columns={"lines": "order_id"},
                        ddl=[TABLE_DDL.format(t="items"), TABLE_DDL.format(t="orders"), LINES_DDL])


def props(broker: KafkaBroker, sim: VTGateSim, prefix: str | None = None) -> dict[str, str]:
    prefix = prefix or f"bf{uuid.uuid4().hex[:8]}"
    return {
        "name": f"conn-{prefix}",
        "topic.prefix": prefix,
        "database.hostname": "127.0.0.1",
        "database.port": str(sim.port),
        "vitess.keyspace": KS,
        "vitess.tablet.type": "PRIMARY",
        "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}",
        "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "snapshot.mode": "never",
        "shardcdc.metrics.port": "0",
    }


class LinesWorkload:
    """Inserts, updates, composite-key changes and deletes on ``lines`` (deterministic)."""

    def __init__(self, sim: VTGateSim, seed: int = 7) -> None:
        self.sim, self.rng = sim, random.Random(seed)
        self.keys: list[tuple[int, int]] = []
        self.next_order = 1

    def insert_many(self, n: int) -> None:
        vals = []
        for _ in range(n):
            o = self.next_order
            self.next_order += 1
            for line in (1, 2):
                self.keys.append((o, line))
                vals.append(f"({o}, {line}, {self.rng.randint(0, 99)})")
        for i in range(0, len(vals), 200):
            self.sim.execute("insert into lines (order_id, line, qty) values " + ", ".join(vals[i:i + 200]), KS)

    def step(self) -> None:
        op = self.rng.random()
        if op < 0.4 or len(self.keys) < 10:
            self.insert_many(1)
            return
        o, line = self.keys[self.rng.randrange(len(self.keys))]
        if op < 0.7:
            self.sim.execute(f"update lines set qty = qty + 1 where order_id = {o} and line = {line}", KS)
        elif op < 0.85:  # composite-key change on the same shard (same order_id)
            new = max(ln for oo, ln in self.keys if oo == o) + 1
            self.sim.execute(f"update lines set line = {new} where order_id = {o} and line = {line}", KS)
            self.keys.remove((o, line))
            self.keys.append((o, new))
        else:
            self.sim.execute(f"delete from lines where order_id = {o} and line = {line}", KS)
            self.keys.remove((o, line))


def populate(sim: VTGateSim, rows_per_table: int) -> tuple[Workload, Workload, LinesWorkload]:
    items = Workload(sim, KS, "items", seed=1, large_every=40, large_rows=150)
    orders = Workload(sim, KS, "orders", seed=2)
    for w in (items, orders):
        for start in range(0, rows_per_table, 500):
            n = min(500, rows_per_table - start)
            vals = ", ".join(f"({w.next_id + i}, 'n{w.next_id + i}', {i % 97}, {i % 1000}.25)" for i in range(n))
            sim.execute(f"insert into {w.table} (id, name, qty, price) values {vals}", KS)
            w.ids.extend(range(w.next_id, w.next_id + n))
            w.next_id += n
    lines = LinesWorkload(sim)
    lines.insert_many(rows_per_table // 2)
    return items, orders, lines


@contextmanager
def live_workload(sim: VTGateSim, loads: tuple[Workload, Workload, LinesWorkload], rate: float = 150.0
                  ) -> Iterator[dict[str, int]]:
    """Runs all three workloads round-robin in a thread until the block ends."""
    stop = threading.Event()
    count = {"transactions": 0}

    def body() -> None:
        while not stop.is_set():
            for w in loads:
                w.step()
            count["transactions"] += 3
            stop.wait(3 / rate)  # pacing, not synchronisation

    t = threading.Thread(target=body, name="workload", daemon=True)
    t.start()
    try:
        yield count
    finally:
        stop.set()
        t.join(30)


def handoffs(state: RunState, tables: tuple[str, ...], holds: Mapping[str, str] | None = None
             ) -> dict[str, ShardHandoff]:
    """The catch-up states of a finished run. With ``holds`` (shard -> position taken before the run,
    as a worker's ``hold_from``) they are what the worker builds (``marks_for``; the catch-up scans
    final changes from the hold); without, a catch-up with no hold and so no final changes."""
    out = {}
    for shard in SHARDS:
        if holds is None:
            held = ShardHandoff(shard, state.run_id, tables)
            marks = {t: marks_from_run(state.watermarks(shard, t)) for t in tables}
        else:
            held = ShardHandoff(shard, state.run_id, tables, holds=dict.fromkeys(tables, holds[shard]),
                                epoch=state.epoch)
            marks = {t: marks_for(state, shard, t, state.epoch, holds[shard]) for t in tables}
        out[shard] = held.to_catchup(marks, rejoin_at=None)
    return out


def catchup_start(h: dict[str, ShardHandoff]) -> Vgtid:
    return Vgtid.of(KS, {s: h[s].catchup_start() or "" for s in SHARDS})


def assert_topics_equal_source(broker: KafkaBroker, sim: VTGateSim, prefix: str,
                               read_committed: bool = False) -> dict[str, Any]:
    """Materialise each table's topic in order per key: must equal the source exactly."""
    out: dict[str, Any] = {}
    for table in ("items", "orders"):
        state = materialise(consume_all(broker.bootstrap, f"{prefix}.{KS}.{table}", read_committed=read_committed))
        diff = compare(state, sim.source_truth(KS, table), "id")
        assert diff.empty, f"{table}: {diff.summary()}"
        out[table] = state
    state = materialise(consume_all(broker.bootstrap, f"{prefix}.{KS}.lines", read_committed=read_committed))
    got = {(as_text(r["order_id"]), as_text(r["line"])): as_text(r["qty"]) for r in state.rows.values()}
    want = {(r["order_id"].decode(), r["line"].decode()): r["qty"].decode()  # type: ignore[union-attr]
            for r in sim.source_truth(KS, "lines")}
    assert got == want, f"lines: {len(set(want) - set(got))} missing, {len(set(got) - set(want))} unexpected"
    out["lines"] = state
    return out
