"""Deterministic workload generator: inserts, updates (incl. PK changes and cross-shard moves), deletes,
multi-row and very large transactions, at a target rate; `commit_generated` for transactions too
large to hold in memory (a 1,000,000-row insert)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from . import binlog as bl
from . import mysqltypes
from .executor import Result, binlog_image
from .sim import VTGateSim


class SQLTarget(Protocol):
    """Where a workload writes: the test server (VTGateSim) or a client of another VTGate (the demo's
    real Vitess) answering with the test server's ``Result``."""

    def execute(self, sql: str, target: str = "", binds: dict[str, Any] | None = None) -> Result: ...

    def execute_transaction(self, statements: list[str], target: str = "",
                            binds: dict[str, Any] | None = None) -> Result: ...

    def is_sharded(self, keyspace: str) -> bool: ...

TABLE_DDL = ("create table {t} (id bigint not null, name varchar(64), qty int, price decimal(10,2), "
             "primary key (id))")


@dataclass
class WorkloadStats:
    transactions: int = 0
    rows: int = 0


@dataclass(frozen=True)
class Step:
    """What one transaction did: `op` is insert, update, pk_update or delete; `ids` the rows' ids
    (for pk_update the old id, then the new one: in a sharded keyspace the row may change shard)."""

    op: str
    ids: tuple[int, ...]


def change_id(sim: SQLTarget, keyspace: str, table: str, old: int, new: int) -> None:
    """Give row ``old`` of ``table`` the id ``new``, as an application on Vitess can: an UPDATE of
    the primary key in an unsharded keyspace; in a sharded one, where the id is the primary vindex
    column and Vitess refuses to UPDATE it (VT12001), a DELETE and an INSERT of the row in one
    transaction (the row may move to another shard)."""
    if not sim.is_sharded(keyspace):
        sim.execute(f"update {table} set id = {new} where id = {old}", keyspace)
        return
    res = sim.execute(f"select * from {table} where id = {old}", keyspace)
    names = [f["name"] for f in res.fields]
    values = [_sql_literal(v) for v in res.rows[0]]
    values[[n.lower() for n in names].index("id")] = str(new)
    sim.execute_transaction([
        f"delete from {table} where id = {old}",
        f"insert into {table} ({', '.join(names)}) values ({', '.join(values)})",
    ], keyspace)


def _sql_literal(text: bytes | None) -> str:
    if text is None:
        return "null"
    return "'" + text.decode().replace("\\", "\\\\").replace("'", "''") + "'"


class Workload:
    """`clock` (monotonic seconds) and `sleep` pace `run`; tests pass a fake pair to count what a
    rate produces without waiting. The default sleep returns early on stop()."""

    def __init__(self, sim: SQLTarget, keyspace: str, table: str = "items", seed: int = 1,
                 large_every: int = 0, large_rows: int = 1000, batch_max: int = 5,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] | None = None) -> None:
        self.sim, self.keyspace, self.table = sim, keyspace, table
        self.rng = random.Random(seed)
        self.large_every, self.large_rows, self.batch_max = large_every, large_rows, batch_max
        self.ids: list[int] = []
        self.next_id = 1
        self.stats = WorkloadStats()
        self._stop = threading.Event()
        self.clock = clock
        self.sleep = sleep if sleep is not None else self._stop.wait

    def ensure_table(self) -> None:
        self.sim.execute(TABLE_DDL.format(t=self.table) .replace("create table", "create table if not exists"),
                         self.keyspace)

    def step(self) -> Step:
        """One transaction (deterministic for a given seed)."""
        rng, t = self.rng, self.table
        self.stats.transactions += 1
        n = self.large_rows if self.large_every and self.stats.transactions % self.large_every == 0 else 0
        op = rng.random()
        if n or op < 0.5 or len(self.ids) < 10:
            count = n or rng.randint(1, self.batch_max)
            vals = []
            for _ in range(count):
                i = self.next_id
                self.next_id += 1
                self.ids.append(i)
                vals.append(f"({i}, 'n{i}', {rng.randint(0, 1000)}, {rng.randint(0, 99999) / 100:.2f})")
            self.sim.execute(f"insert into {t} (id, name, qty, price) values {', '.join(vals)}", self.keyspace)
            self.stats.rows += count
            return Step("insert", tuple(self.ids[-count:]))
        self.stats.rows += 1
        if op < 0.8:
            i = rng.choice(self.ids)
            self.sim.execute(f"update {t} set qty = qty + 1, name = 'u{rng.randint(0, 9999)}' where id = {i}",
                             self.keyspace)
            return Step("update", (i,))
        i = self.ids.pop(rng.randrange(len(self.ids)))
        if op < 0.9:
            # primary-key (and vindex) change: in a sharded keyspace the row may move to another shard
            j = self.next_id
            self.next_id += 1
            self.ids.append(j)
            change_id(self.sim, self.keyspace, t, i, j)
            return Step("pk_update", (i, j))
        self.sim.execute(f"delete from {t} where id = {i}", self.keyspace)
        return Step("delete", (i,))

    def run(self, transactions: int | None = None, rate: float = 0.0, duration: float | None = None) -> None:
        """Run `transactions` steps (or until stop()/duration) at `rate` transactions per second (0 = max)."""
        start = self.clock()
        done = 0
        while not self._stop.is_set():
            if transactions is not None and done >= transactions:
                break
            if duration is not None and self.clock() - start >= duration:
                break
            self.step()
            done += 1
            if rate > 0:
                # transaction n is due at start + n / rate, so pacing does not drift; after slow steps
                # the next ones run without waiting until the schedule is met again
                delay = start + done / rate - self.clock()
                if delay > 0:
                    self.sleep(delay)  # pacing, not synchronisation

    def stop(self) -> None:
        self._stop.set()


def commit_generated(sim: VTGateSim, keyspace: str, shard: str, table: str, row_at: Callable[[int], Sequence[Any]],
                     count: int, *, first: int = 1, store: bool = True, spill: bool = True,
                     timestamp: int | None = None, chunk: int = 10_000) -> bl.Entry:
    """Commit one INSERT of rows ``row_at(first) .. row_at(first + count - 1)`` on one shard, in bounded memory.

    The binlog entry is a `binlog.GeneratedRows`: every stream renders, from `row_at`, the
    Rows_events `executor.ShardTxn.commit` would have written for the same multi-row INSERT
    (values normalized as the executor stores them, binlog images, ROWS_EVENT_MAX grouping), so the
    wire is the ordinary path's (tests/integration/devkit/test_vtgatesim_generated.py). `row_at` must be pure (Python
    values in column order). The caller picks the shard (the vindex is not consulted). With
    `store=False` the rows go to the binlog only (the shard's table does not hold them: a source
    that is only streamed from its position, never copied or queried). With `spill` (default) the
    events are rendered once here into a temporary file (`binlog.spill`; streams then read them at
    replay speed); without, every stream renders them again from `row_at` (≈ 40 µs per 10-column row).
    """
    with sim.topo.lock:
        sh = sim.topo.keyspace(keyspace).shards[shard]
        schema = sh.store.table(table)
        if schema is None:
            raise KeyError(f"{keyspace}/{shard}: no table {table}")
        cts = [c.ct for c in schema.columns]
        norm = mysqltypes.normalize

        def stored(i: int) -> tuple[Any, ...]:
            return tuple(norm(ct, v) for ct, v in zip(cts, row_at(i), strict=True))

        if store:
            sh.store.begin()
            try:
                for lo in range(first, first + count, chunk):
                    sh.store.insert_many(schema, [stored(i) for i in range(lo, min(lo + chunk, first + count))])
            except BaseException:
                sh.store.rollback()
                raise
            sh.store.commit()

        def events() -> Iterator[bl.RowsEvent]:
            return bl.iter_rows_events(schema, ((None, binlog_image(schema, stored(i)))
                                                for i in range(first, first + count)))

        rows = bl.spill(events()) if spill else bl.GeneratedRows(events, count)
        return sh.binlog.append(bl.TXN, timestamp or int(time.time()), rows=rows, database=sh.database)
