"""Fault injection (stall, slow, drop, fail, restart; per stream and per server), transaction_chunk_size
and TLS on the VTGate test server. Synchronisation is by events and stream contents, never sleeps."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from vtgatesim_fixtures import (
    CUSTOMER,
    WAIT,
    Reader,
    request,
    sim_fixture,  # noqa: F401
    stub_fixture,  # noqa: F401
)

from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim import FaultPlan, VTGateSim

T = binlogdata_pb2.VEventType


def names(resp: vtgate_pb2.VStreamResponse) -> list[str]:
    return [T.Name(e.type) for e in resp.events]


def unsharded(sim: VTGateSim) -> None:
    sim.create_keyspace("commerce", ddl=[CUSTOMER])


def insert(sim: VTGateSim, i: int, target: str = "commerce") -> None:
    sim.execute(f"insert into customer (id, email) values ({i}, 'e{i}')", target)


def test_stall_until_release(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    plan = sim.inject(FaultPlan(stall_after_events=2))
    r = Reader(stub, request(("commerce", "0", "current")))
    assert names(r.next()) == ["VGTID", "OTHER"]  # 2 events: the next group stalls
    insert(sim, 1)
    assert plan.stalled.wait(WAIT)
    assert r.q.empty()  # the stalled group was never queued
    plan.release()
    assert names(r.next()) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    insert(sim, 2)
    assert names(r.next()) == ["BEGIN", "ROW", "VGTID", "COMMIT"]
    r.close()


def test_stall_ends_after_bounded_timeout(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    plan = sim.inject(FaultPlan(stall_after_events=2, stall_timeout=0.3))
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    t0 = time.monotonic()
    insert(sim, 1)
    assert names(r.next()) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    assert time.monotonic() - t0 >= 0.3
    assert plan.stalled.is_set() and plan.released.is_set()
    r.close()


def test_slow_stream_delays_every_response(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    for i in range(1, 4):
        insert(sim, i)
    pos = sim.position("commerce", "0")
    sim.inject(FaultPlan(delay_per_response=0.1))
    r = Reader(stub, request(("commerce", "0", "current")))
    t0 = time.monotonic()
    assert names(r.next()) == ["VGTID", "OTHER"]
    for i in range(4, 7):
        insert(sim, i)
    got = [r.next() for _ in range(3)]
    assert time.monotonic() - t0 >= 0.4  # four responses, each held back 0.1 s
    assert [x.events[-3].row_event.row_changes[0].after.values for x in got] == [
        b"4e4", b"5e5", b"6e6"]
    assert got[0].events[-2].vgtid.shard_gtids[0].gtid != pos
    r.close()


def test_drop_connection_and_resume_from_last_vgtid(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    sim.inject(FaultPlan(drop_after_events=7))
    r = Reader(stub, request(("commerce", "0", "current")))
    first = r.next()
    for i in range(1, 4):
        insert(sim, i)
    second = r.next()  # 2 + 5 events: the third group is dropped
    err = r.end()
    assert err is not None and err.code() == grpc.StatusCode.UNAVAILABLE
    assert names(first) == ["VGTID", "OTHER"] and names(second) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    # the client resumes from the last VGTID it saw and gets the rest exactly once
    req = vtgate_pb2.VStreamRequest(vgtid=second.events[3].vgtid)
    r2 = Reader(stub, req)
    a, b = r2.next(), r2.next()
    assert names(a) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"] and names(b) == ["BEGIN", "ROW", "VGTID", "COMMIT"]
    assert [a.events[2].row_event.row_changes[0].after.values, b.events[1].row_event.row_changes[0].after.values] == [
        b"2e2", b"3e3"]
    assert b.events[2].vgtid.shard_gtids[0].gtid == sim.position("commerce", "0")
    r2.close()


def test_fail_with_code_per_stream_and_per_server(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    sim.inject(FaultPlan(fail_after_events=2, fail_code=9, fail_message="injected precondition"))
    failing = Reader(stub, request(("commerce", "0", "current")))
    failing.next()
    healthy = Reader(stub, request(("commerce", "0", "current")))  # the one-shot plan was used up
    healthy.next()
    insert(sim, 1)
    err = failing.end()
    assert err is not None and err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err.details() == "injected precondition"
    assert names(healthy.next()) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    healthy.close()
    # server-wide: every new stream gets the plan until cleared
    sim.inject(FaultPlan(fail_after_events=0), next_stream=False)
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as ei:
            list(stub.VStream(request(("commerce", "0", "current"))))
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    sim.faults.clear()
    ok = Reader(stub, request(("commerce", "0", "current")))
    assert names(ok.next()) == ["VGTID", "OTHER"]
    ok.close()


def test_restart_keeps_data_and_positions(sim: VTGateSim, stub: Any) -> None:
    unsharded(sim)
    r = Reader(stub, request(("commerce", "0", "current")))
    r.next()
    insert(sim, 1)
    last = r.next().events[3].vgtid
    pos = sim.position("commerce", "0")
    port = sim.port
    sim.restart()
    err = r.end()
    assert err is not None and err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert sim.port == port and sim.position("commerce", "0") == pos
    insert(sim, 2)
    # the same channel reconnects; the stream resumes from the saved VGTID
    r2 = Reader(stub, vtgate_pb2.VStreamRequest(vgtid=last))
    resp = r2.next(timeout=10)
    assert names(resp) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"]
    assert resp.events[2].row_event.row_changes[0].after.values == b"2e2"
    res = stub.Execute(vtgate_pb2.ExecuteRequest(session=vtgate_pb2.Session(target_string="commerce"),
                                                 query=query_pb2.BoundQuery(sql="select id from customer order by id")))
    assert [row.values for row in res.result.rows] == [b"1", b"2"]
    r2.close()


def _big_txn(sim: VTGateSim, stub: Any, chunk: int) -> tuple[FaultPlan, Reader]:
    """Two shards, a stall after 5 events, then a 600-row transaction (several tablet packets) on -80."""
    sim.packet_size = 100
    sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER])
    plan = sim.inject(FaultPlan(stall_after_events=5))
    r = Reader(stub, request(("commerce", "", "current"), transaction_chunk_size=chunk))
    assert sorted(names(r.next()) + names(r.next())) == ["OTHER", "OTHER", "VGTID", "VGTID"]  # 4 events
    values = ", ".join(f"({i}, '{'x' * 40}')" for i in range(1, 601))
    sim.execute(f"insert into customer (id, email) values {values}", "commerce:-80")
    return plan, r


def test_transaction_chunk_size_sends_chunks_before_commit_without_interleaving(sim: VTGateSim, stub: Any) -> None:
    plan, r = _big_txn(sim, stub, chunk=1)
    assert plan.stalled.wait(WAIT)
    # chunking kicked in at the first packet: it went out alone, the stall hit the second
    first = r.next()
    assert names(first)[:2] == ["BEGIN", "FIELD"] and "COMMIT" not in names(first)
    assert r.q.empty()
    done = threading.Event()

    def other_shard() -> None:
        insert(sim, 1000, "commerce:80-")
        done.set()

    threading.Thread(target=other_shard, daemon=True).start()
    assert done.wait(WAIT)  # committed on 80- while -80 holds the stream mid-transaction
    plan.release()
    rest = []
    while True:
        resp = r.next()
        rest.append(resp)
        if resp.events[-1].type == T.COMMIT and resp.events[0].shard == "-80":
            break
    assert all(e.shard == "-80" for x in rest for e in x.events if e.type != T.VGTID)
    assert len(rest) >= 2 and all("VGTID" not in names(x) for x in rest[:-1])
    rows = sum(len(e.row_event.row_changes) for x in [first, *rest] for e in x.events if e.type == T.ROW)
    assert rows == 600
    other = r.next()  # only now the other shard's transaction
    assert names(other) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"] and other.events[0].shard == "80-"
    r.close()


def test_without_chunking_the_transaction_goes_out_whole(sim: VTGateSim, stub: Any) -> None:
    plan, r = _big_txn(sim, stub, chunk=0)
    # vtgate buffers until COMMIT: the whole transaction is one contiguous group, so the stall
    # (crossed inside it) only hits the next group
    resps = []
    while True:
        resp = r.next()
        resps.append(resp)
        if resp.events[-1].type == T.COMMIT:
            break
    assert len(resps) >= 3 and names(resps[-1])[-2:] == ["VGTID", "COMMIT"]
    assert sum(len(e.row_event.row_changes) for x in resps for e in x.events if e.type == T.ROW) == 600
    assert not plan.stalled.is_set()
    insert(sim, 1000, "commerce:80-")
    assert plan.stalled.wait(WAIT) and r.q.empty()
    plan.release()
    other = r.next()
    assert names(other) == ["BEGIN", "FIELD", "ROW", "VGTID", "COMMIT"] and other.events[0].shard == "80-"
    r.close()


# -- TLS


@pytest.fixture(name="tls_material")
def tls_material_fixture() -> Iterator[tuple[bytes, bytes, bytes]]:
    """A throwaway CA and a server certificate for localhost / 127.0.0.1: (ca_pem, key_pem, cert_pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vtgatesim test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    yield ca.public_bytes(pem), key_pem, cert.public_bytes(pem)


def test_tls_serves_vtgate_and_vtctld(tls_material: tuple[bytes, bytes, bytes]) -> None:
    from vitessapi import vtctldata_pb2, vtctlservice_pb2_grpc

    ca_pem, key_pem, cert_pem = tls_material
    sim = VTGateSim(tls=(key_pem, cert_pem)).start()
    try:
        unsharded(sim)
        ch = grpc.secure_channel(sim.address, grpc.ssl_channel_credentials(root_certificates=ca_pem))
        stub = vtgateservice_pb2_grpc.VitessStub(ch)
        insert(sim, 1)
        res = stub.Execute(vtgate_pb2.ExecuteRequest(session=vtgate_pb2.Session(target_string="commerce"),
                                                     query=query_pb2.BoundQuery(sql="select email from customer")))
        assert [row.values for row in res.result.rows] == [b"e1"]
        r = Reader(stub, request(("commerce", "0", "current")))
        assert names(r.next()) == ["VGTID", "OTHER"]
        r.close()
        vtctld = vtctlservice_pb2_grpc.VtctldStub(ch)
        shards = vtctld.FindAllShardsInKeyspace(vtctldata_pb2.FindAllShardsInKeyspaceRequest(keyspace="commerce"))
        assert list(shards.shards) == ["0"]
        # a plaintext client cannot talk to the TLS port
        plain = vtgateservice_pb2_grpc.VitessStub(grpc.insecure_channel(sim.address))
        with pytest.raises(grpc.RpcError) as ei:
            plain.Execute(vtgate_pb2.ExecuteRequest(query=query_pb2.BoundQuery(sql="select 1")), timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        ch.close()
    finally:
        sim.stop()
