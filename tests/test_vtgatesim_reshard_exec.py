"""Resharding journals and Execute/vtctld through gRPC on the VTGate test server."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from vtgatesim_fixtures import (
    CUSTOMER,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2, query_pb2, vtctldata_pb2, vtctlservice_pb2_grpc, vtgate_pb2
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

T = binlogdata_pb2.VEventType


def test_reshard_follows_journal(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a'), (2, 'b')", "commerce")
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    journal = sim.reshard("commerce", ["-80", "80-"])
    assert [(p.keyspace, p.shard) for p in journal.participants] == [("commerce", "0")]
    assert [s.shard for s in journal.shard_gtids] == ["-80", "80-"]
    sim.execute("insert into customer (id, email) values (3, 'c')", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    vg = resp.events[3].vgtid
    assert [s.shard for s in vg.shard_gtids] == ["-80", "80-"]
    r.close()


def test_reshard_journal_events_and_stop_on_reshard(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "0", "current"), stop_on_reshard=True))
    r.next()
    sim.reshard("commerce", 2)
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.JOURNAL, T.VGTID, T.COMMIT]
    assert resp.events[1].journal.migration_type == binlogdata_pb2.SHARDS
    assert r.end() is None  # the stream ends cleanly after the journal


def test_not_all_participants_and_deleted_shard(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    pos = sim.position("commerce", "-80")
    r = Reader(stub, request(("commerce", "-80", "current")))
    r.next()
    sim.reshard("commerce", ["0"])
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.INTERNAL
    assert "not all journaling participants are in the stream" in err.details()
    sim.delete_shards("commerce", ["-80", "80-"])
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("commerce", "-80", pos))))
    # vstream_manager.keyspaceHasBeenResharded: the VGTID names a shard the topology no longer has
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ei.value.details() == (
        f'error starting stream from shard GTID keyspace:"commerce" shard:"-80" gtid:"{pos}": failed to determine '
        "if keyspace commerce has been resharded: shard provided in VGTID, -80, not found in the commerce keyspace"
    )


def test_execute_show_and_errors(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    def ex(sql: str, target: str = "commerce") -> vtgate_pb2.ExecuteResponse:
        return stub.Execute(vtgate_pb2.ExecuteRequest(session=vtgate_pb2.Session(target_string=target),
                                                      query=query_pb2.BoundQuery(sql=sql)))
    res = ex("/*vt+ WORKLOAD_NAME=debezium */ SHOW VITESS_SHARDS LIKE 'commerce/%'", "")
    assert [f.name for f in res.result.fields] == ["Shards"]
    assert [r.values for r in res.result.rows] == [b"commerce/-80", b"commerce/80-"]
    assert ex("insert into customer (id, email) values (1, 'a'), (200, 'b')").result.rows_affected == 2
    res = ex("select id, email from customer where id >= 1 order by id desc limit 1")
    assert [(list(r.lengths), r.values) for r in res.result.rows] == [([3, 1], b"200b")]
    err = ex("insert into customer (id, email) values (1, 'x')").error
    assert err.code == 6 and "Duplicate entry '1' for key 'PRIMARY' (errno 1062) (sqlstate 23000)" in err.message
    assert ex("select * from nope").error.code != 0
    assert ex("drop table customer").error.code == 12
    stream = list(stub.StreamExecute(vtgate_pb2.StreamExecuteRequest(
        session=vtgate_pb2.Session(target_string="commerce:-80"), query=query_pb2.BoundQuery(sql="select id from customer"))))
    assert stream[0].result.fields[0].name == "id" and not stream[0].result.rows


def test_vtctld_discovery(sim: VTGateSim) -> None:
    sim.create_keyspace("commerce", 4)
    ch = grpc.insecure_channel(sim.address)
    vt = vtctlservice_pb2_grpc.VtctldStub(ch)
    shards = vt.FindAllShardsInKeyspace(vtctldata_pb2.FindAllShardsInKeyspaceRequest(keyspace="commerce")).shards
    assert sorted(shards) == ["-40", "40-80", "80-c0", "c0-"]
    assert shards["40-80"].shard.key_range.start == b"\x40" and shards["40-80"].shard.is_primary_serving
    srv = vt.GetSrvKeyspaces(vtctldata_pb2.GetSrvKeyspacesRequest(keyspace="commerce")).srv_keyspaces["zone1"]
    assert [s.name for s in srv.partitions[0].shard_references] == ["-40", "40-80", "80-c0", "c0-"]
    ch.close()


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
