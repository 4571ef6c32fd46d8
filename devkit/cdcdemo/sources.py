"""The source the demo streams: the VTGate test server (in this process; it can reshard), or real
Vitess v24 (``--real-vitess``: a ``vttestserver`` from ``make vitess``; ``--vtgate``: a VTGate that
is already running). Each gives the demo the same few things: an address, the shards, a workload's
target, a reshard step when it has one, and the source table's rows at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vtgatesim.executor import Result
from vtgatesim.workload import TABLE_DDL

COLUMNS = ("id", "name", "qty", "price")


class SourceError(RuntimeError):
    """The source cannot start: one line saying what to do."""


@dataclass
class DemoSource:
    label: str  # how the demo names it
    vtgate: str  # gRPC address
    shards: list[str]
    target: Any  # vtgatesim.workload.SQLTarget: where the workload writes
    truth: Callable[[], list[dict[str, bytes | None]]]  # the table's rows, by id
    reshard: Callable[[int], object] | None = None  # split into N shards (the test server only)
    positions: Callable[[], dict[str, str]] | None = None  # every shard's position (the test server only)


class VTGateTarget:
    """A workload target over a real VTGate's gRPC API (``realvitess.VTGateClient``), answering
    with the test server's ``Result`` shape."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    def _result(res: Any) -> Result:
        from vtgatesim.wire import row_values

        return Result(fields=[{"name": f.name} for f in res.fields],
                      rows=[row_values(r.lengths, r.values) for r in res.rows],
                      rows_affected=res.rows_affected, insert_id=res.insert_id)

    def execute(self, sql: str, target: str = "", binds: dict[str, Any] | None = None) -> Result:
        return self._result(self.client.execute(sql, target))

    def execute_transaction(self, statements: list[str], target: str = "",
                            binds: dict[str, Any] | None = None) -> Result:
        self.client.transaction(statements, target)
        return Result()

    def is_sharded(self, keyspace: str) -> bool:
        return True  # the demo's keyspace is sharded by a hash vindex on id


@contextlib.contextmanager
def sim_source(keyspace: str, table: str, shards: Sequence[str]) -> Iterator[DemoSource]:
    from vtgatesim import VTGateSim

    with VTGateSim() as sim:
        sim.create_keyspace(keyspace, list(shards))
        sim.execute(TABLE_DDL.format(t=table), keyspace)
        yield DemoSource("VTGate test server", sim.address, list(shards), sim,
                         truth=lambda: sim.source_truth(keyspace, table),
                         reshard=lambda n: sim.reshard(keyspace, n), positions=lambda: sim.positions(keyspace))


def require_vitess() -> None:
    """SourceError (one line: run `make vitess`) unless Vitess v24 and MariaDB are installed."""
    from realvitess import vitess_env

    try:
        vitess_env()
    except RuntimeError as exc:
        raise SourceError(f"--real-vitess needs Vitess v24 over MariaDB: {exc}") from None


@contextlib.contextmanager
def real_source(keyspace: str, table: str, shards: int, vtgate: str | None) -> Iterator[DemoSource]:
    """A vttestserver of ``make vitess`` with the demo's table (``vtgate`` None), or the VTGate at
    ``vtgate`` whose keyspace already has ``table`` in its VSchema."""
    from realvitess import VTGateClient, VTTestServer, vitess_env
    from realvitess.single import hash_vschema

    with contextlib.ExitStack() as stack:
        label = f"VTGate {vtgate} (real Vitess)"
        if vtgate is None:
            require_vitess()
            vt = stack.enter_context(VTTestServer(keyspace, shards, [TABLE_DDL.format(t=table)],
                                                  hash_vschema([table]), env=vitess_env()))
            vtgate, label = vt.vtgate, "real Vitess v24 (vttestserver)"
        client = stack.enter_context(VTGateClient(vtgate))
        found = sorted(bytes(r["Shards"] or b"").decode().split("/", 1)[1]
                       for r in client.rows(f"show vitess_shards like '{keyspace}/%'"))
        if not found:
            raise SourceError(f"VTGate {vtgate} has no keyspace {keyspace!r}: create it (and table {table!r} in "
                              "its VSchema) or use --real-vitess")
        yield DemoSource(label, vtgate, found, VTGateTarget(client),
                         truth=lambda: client.source_truth(keyspace, table, COLUMNS))
