"""SHOW statements the Debezium connector issues through Execute: column names and row shapes."""

from __future__ import annotations

from typing import Any

from vtgatesim_fixtures import (
    CUSTOMER,
    row_values,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import query_pb2, vtgate_pb2
from vtgatesim import VTGateSim


def run(stub: Any, sql: str, target: str = "") -> vtgate_pb2.ExecuteResponse:
    resp: vtgate_pb2.ExecuteResponse = stub.Execute(vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(target_string=target), query=query_pb2.BoundQuery(sql=sql)))
    return resp


def _rows(resp: vtgate_pb2.ExecuteResponse) -> list[list[bytes | None]]:
    return [row_values(r) for r in resp.result.rows]


def test_show_vitess_shards_tablets_and_tables(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER, "create table orders (id int primary key)"])
    sim.create_keyspace("lookup", ddl=["create table names (id int primary key)"])
    shards = run(stub, "/*vt+ WORKLOAD_NAME=debezium */ SHOW VITESS_SHARDS LIKE 'commerce/%'")
    assert [f.name for f in shards.result.fields] == ["Shards"]
    assert _rows(shards) == [[b"commerce/-80"], [b"commerce/80-"]]
    tablets = run(stub, "/*vt+ WORKLOAD_NAME=debezium */ SHOW VITESS_TABLETS")
    assert [f.name for f in tablets.result.fields] == [
        "Cell", "Keyspace", "Shard", "TabletType", "State", "Alias", "Hostname", "PrimaryTermStartTime"]
    rows = _rows(tablets)
    assert [r[:5] for r in rows] == [[b"zone1", b"commerce", b"-80", b"PRIMARY", b"SERVING"],
                                     [b"zone1", b"commerce", b"80-", b"PRIMARY", b"SERVING"],
                                     [b"zone1", b"lookup", b"0", b"PRIMARY", b"SERVING"]]
    uid = sim.topo.shard("commerce", "-80").tablet_uid
    assert rows[0][5] == f"zone1-{uid:010d}".encode()
    tables = run(stub, "/*vt+ WORKLOAD_NAME=debezium */ SHOW TABLES", "commerce@primary")
    assert [f.name for f in tables.result.fields] == ["Tables_in_commerce"]
    assert _rows(tables) == [[b"customer"], [b"orders"]]
    assert _rows(run(stub, "show tables like 'ord%'", "commerce")) == [[b"orders"]]
    assert _rows(run(stub, "show tables", "lookup")) == [[b"names"]]
    err = run(stub, "show tables")  # two keyspaces and no target: vtgate has no default keyspace
    assert err.error.code == 9 and err.error.message.startswith("VT09005: No database selected")
