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
    vgtid,
)

from vitessapi import (
    binlogdata_pb2,
    query_pb2,
    topodata_pb2,
    vtctldata_pb2,
    vtctlservice_pb2_grpc,
    vtgate_pb2,
)
from vtgatesim import VTGateSim
from vtgatesim.reshard import hash_streams
from vtgatesim.server import STREAM_EXECUTE_ROWS

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


def fnv1_63(text: str) -> int:
    """64-bit FNV-1 (Go's hash/fnv New64) with the top bit dropped, as workflow.HashStreams returns it."""
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h * 0x100000001B3) % 2**64) ^ b
    return h % 2**63


def test_journal_id_is_hash_streams() -> None:
    assert fnv1_63("a") == 0xAF63BD4C8601B7BE - 2**63  # the FNV-1 64 test vector for "a", top bit dropped
    # target keyspace, then the sorted "shard:uid" of every stream (uids from 1 on each new target primary)
    assert hash_streams("commerce", {"80-": [1], "-80": [1]}) == fnv1_63("commerce-80:180-:1")
    assert hash_streams("commerce", {"0": [1, 2]}) == fnv1_63("commerce0:10:2")


def expected_journal(sim: VTGateSim, keyspace: str, sources: list[str], targets: list[str], streams: str,
                     local_position: str) -> binlogdata_pb2.Journal:
    """A source shard's journal built by hand from the reference (traffic_switcher createJournals)."""
    return binlogdata_pb2.Journal(
        id=fnv1_63(keyspace + streams),
        migration_type=binlogdata_pb2.SHARDS,
        tables=["/.*"],
        local_position=local_position,
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=keyspace, shard=t, gtid=sim.position(keyspace, t))
                     for t in targets],
        participants=[binlogdata_pb2.KeyspaceShard(keyspace=keyspace, shard=s) for s in sources])


def test_stream_follows_two_successive_reshards(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "", "current")))
    assert sorted(x.events[0].shard for x in (r.next(), r.next())) == ["-80", "80-"]
    split = sim.reshard("commerce", 4)
    assert split.id == fnv1_63("commerce-40:140-80:180-c0:1c0-:1")
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")  # id 1 -> -40
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert resp.events[2].shard == "-40"
    quarters = ["-40", "40-80", "80-c0", "c0-"]
    assert resp.events[3].vgtid == vgtid(*[("commerce", s, sim.position("commerce", s)) for s in quarters])
    # the merge journals every quarter with another id (other target shards), so the stream follows it too
    merge = sim.reshard("commerce", ["0"])
    assert merge.id == fnv1_63("commerce0:10:20:30:4") != split.id
    sim.execute("insert into customer (id, email) values (2, 'b')", "commerce")
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert [c.after.values for c in resp.events[2].row_event.row_changes] == [b"2b"]
    assert resp.events[3].vgtid == vgtid(("commerce", "0", sim.position("commerce", "0")))
    r.close()


def test_journal_event_and_vgtid_after_following(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "0", "current"), include_reshard_journal_events=True))
    r.next()
    before = sim.position("commerce", "0")
    sim.reshard("commerce", 2)
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.JOURNAL, T.VGTID, T.COMMIT]
    assert resp.events[1].journal == expected_journal(sim, "commerce", ["0"], ["-80", "80-"], "-80:180-:1", before)
    assert resp.events[1].keyspace == "commerce" and resp.events[1].shard == "0"
    assert resp.events[2].vgtid == vgtid(("commerce", "0", sim.position("commerce", "0")))
    # the stream keeps going on the new shards, from the journal's positions
    sim.execute("insert into customer (id, email) values (200, 'z')", "commerce")  # id 200 -> 80-
    resp = r.next()
    assert [e.type for e in resp.events] == [T.BEGIN, T.FIELD, T.ROW, T.VGTID, T.COMMIT]
    assert resp.events[2].shard == "80-"
    assert resp.events[3].vgtid == vgtid(("commerce", "-80", sim.position("commerce", "-80")),
                                         ("commerce", "80-", sim.position("commerce", "80-")))
    r.close()


def test_reshard_journal_events_and_stop_on_reshard(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    r = Reader(stub, request(("commerce", "", "current"), stop_on_reshard=True))
    r.next(), r.next()
    before = sim.positions("commerce")
    sim.reshard("commerce", ["0"])
    journals = {}
    for _ in range(2):  # one JOURNAL per participant
        resp = r.next()
        assert [e.type for e in resp.events] == [T.BEGIN, T.JOURNAL, T.VGTID, T.COMMIT]
        journals[resp.events[1].shard] = resp.events[1].journal
    for shard in ("-80", "80-"):
        assert journals[shard] == expected_journal(sim, "commerce", ["-80", "80-"], ["0"], "0:10:2", before[shard])
    assert r.end() is None  # the stream ends cleanly after the journal, without the new shard


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
    assert_shard_gone(stub, "-80", pos)


def assert_shard_gone(stub: Any, shard: str, pos: str) -> None:
    """vstream_manager.keyspaceHasBeenResharded: the VGTID names a shard the topology no longer has."""
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.VStream(request(("commerce", shard, pos))))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ei.value.details() == (
        f'error starting stream from shard GTID keyspace:"commerce" shard:"{shard}" gtid:"{pos}": failed to '
        f"determine if keyspace commerce has been resharded: shard provided in VGTID, {shard}, not found in the "
        "commerce keyspace"
    )


def test_reshard_delete_old_then_old_position_fails(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    sim.execute("insert into customer (id, email) values (1, 'a')", "commerce")
    pos = sim.position("commerce", "0")
    sim.reshard("commerce", ["-80", "80-"], delete_old=True)
    assert sorted(sim.topo.keyspace("commerce").shards) == ["-80", "0", "80-"]
    assert sim.topo.keyspace("commerce").shards["0"].deleted
    assert_shard_gone(stub, "0", pos)
    # a VGTID naming the new shards streams on
    r = Reader(stub, request(("commerce", "-80", "current"), ("commerce", "80-", "current")))
    assert sorted(x.events[0].shard for x in (r.next(), r.next())) == ["-80", "80-"]
    r.close()


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


def test_update_of_the_primary_vindex_column_is_refused_as_vitess_v24_does(sim: VTGateSim, stub: Any) -> None:
    """Vitess v24's planner refuses SET of a primary vindex column on a sharded keyspace whatever the
    new value (even an unchanged one, even when no row matches), with vtrpc code UNIMPLEMENTED (12;
    MySQL error 1235 over the MySQL protocol); nothing is written. Targeted at one shard, or in an
    unsharded keyspace, it is an ordinary UPDATE."""
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    sim.create_keyspace("lookup", ddl=[CUSTOMER])

    def ex(sql: str, target: str = "commerce") -> vtgate_pb2.ExecuteResponse:
        return stub.Execute(vtgate_pb2.ExecuteRequest(session=vtgate_pb2.Session(target_string=target),
                                                      query=query_pb2.BoundQuery(sql=sql)))
    assert ex("insert into customer (id, email) values (1, 'a')").result.rows_affected == 1
    before = sim.positions("commerce")
    refused = "VT12001: unsupported: you cannot UPDATE primary vindex columns; invalid update on vindex: hash"
    for sql in ("update customer set id = 200 where id = 1", "UPDATE customer SET email = 'b', ID = 1 WHERE id = 1",
                "update customer set id = 5 where id = 999"):
        err = ex(sql).error
        assert (err.code, err.message) == (12, refused), sql
    assert sim.positions("commerce") == before
    assert sim.source_truth("commerce", "customer") == [{"id": b"1", "email": b"a"}]
    assert ex("update customer set id = 2 where id = 1", "commerce:-80").result.rows_affected == 1
    ex("insert into customer (id, email) values (1, 'a')", "lookup")
    assert ex("update customer set id = 2 where id = 1", "lookup").result.rows_affected == 1


def test_an_unknown_table_is_refused_by_the_planner_on_a_sharded_keyspace(sim: VTGateSim, stub: Any) -> None:
    """Vitess v24 plans from the VSchema: a table it does not know is refused before any tablet
    (vtrpc UNKNOWN, ``table nope not found``); at a shard, or unsharded, the tablet answers (1146)."""
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    sim.create_keyspace("lookup", ddl=[CUSTOMER])

    def err(sql: str, target: str) -> tuple[int, str]:
        e = stub.Execute(vtgate_pb2.ExecuteRequest(session=vtgate_pb2.Session(target_string=target),
                                                   query=query_pb2.BoundQuery(sql=sql))).error
        return e.code, e.message
    for sql in ("select * from nope", "insert into nope (id) values (1)", "delete from nope where id = 1"):
        assert err(sql, "commerce") == (2, "table nope not found"), sql
    assert err("select * from nope", "commerce:-80")[0] == 5
    assert "Table 'vt_lookup.nope' doesn't exist (errno 1146)" in err("select * from nope", "lookup")[1]


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


def test_vtctld_get_keyspace(sim: VTGateSim) -> None:
    sim.create_keyspace("commerce", 2)
    ch = grpc.insecure_channel(sim.address)
    vt = vtctlservice_pb2_grpc.VtctldStub(ch)
    got = vt.GetKeyspace(vtctldata_pb2.GetKeyspaceRequest(keyspace="commerce"))
    assert got == vtctldata_pb2.GetKeyspaceResponse(keyspace=vtctldata_pb2.Keyspace(
        name="commerce", keyspace=topodata_pb2.Keyspace(sidecar_db_name="_vt", durability_policy="none")))
    with pytest.raises(grpc.RpcError) as ei:
        vt.GetKeyspace(vtctldata_pb2.GetKeyspaceRequest(keyspace="nope"))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    assert ei.value.details() == "node doesn't exist: keyspaces/nope/Keyspace"
    ch.close()


def test_stream_execute_sends_rows_after_the_fields(sim: VTGateSim, stub: Any) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])
    n = STREAM_EXECUTE_ROWS + 44
    sim.execute("insert into customer (id, email) values " + ", ".join(f"({i}, 'e{i}')" for i in range(1, n + 1)),
                "commerce")
    stream = list(stub.StreamExecute(vtgate_pb2.StreamExecuteRequest(
        session=vtgate_pb2.Session(target_string="commerce"),
        query=query_pb2.BoundQuery(sql="select id, email from customer where id > 0 order by id"))))
    assert len(stream) == 3
    assert [f.name for f in stream[0].result.fields] == ["id", "email"] and not stream[0].result.rows
    assert [len(x.result.rows) for x in stream[1:]] == [STREAM_EXECUTE_ROWS, 44]
    assert all(not x.result.fields for x in stream[1:])
    rows = [r for x in stream[1:] for r in x.result.rows]
    assert [r.values for r in rows] == [f"{i}e{i}".encode() for i in range(1, n + 1)]
    assert list(rows[-1].lengths) == [len(str(n)), len(str(n)) + 1]

