"""The `vtgate-sim` CLI as a subprocess: readiness line, a query over gRPC, the workload and reshard
sub-actions against the running server, and a clean SIGTERM shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import grpc

from vitessapi import query_pb2, vtctldata_pb2, vtctlservice_pb2_grpc, vtgate_pb2, vtgateservice_pb2_grpc

DDL = "commerce:create table customer (id bigint not null, email varchar(64), primary key (id))"


def _execute(stub: vtgateservice_pb2_grpc.VitessStub, sql: str) -> vtgate_pb2.ExecuteResponse:
    resp: vtgate_pb2.ExecuteResponse = stub.Execute(vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(target_string="commerce"), query=query_pb2.BoundQuery(sql=sql)), timeout=10)
    assert not resp.HasField("error"), resp.error
    return resp


def test_cli_serve_query_workload_reshard_and_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "vtgatesim", "--port", "0", "--keyspace", "commerce:-80,80-",
                             "--sql", DDL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed and flushed once the server accepts calls
        assert line.startswith("vtgate-sim listening on 127.0.0.1:"), (line, proc.stderr and proc.stderr.read())
        addr = line.split()[3]
        with grpc.insecure_channel(addr) as ch:
            stub = vtgateservice_pb2_grpc.VitessStub(ch)
            _execute(stub, "insert into customer (id, email) values (1, 'a'), (200, 'b')")
            res = _execute(stub, "select id, email from customer order by id")
            assert [r.values for r in res.result.rows] == [b"1a", b"200b"]
            # sub-actions drive the running server from other processes
            out = subprocess.run([sys.executable, "-m", "vtgatesim", "workload", "--server", addr, "--keyspace",
                                  "commerce", "--transactions", "25", "--rate", "0", "--seed", "7"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout
            assert json.loads(out)["transactions"] == 25
            count = _execute(stub, "select count(*) from items").result.rows[0].values
            assert int(count) > 0
            out = subprocess.run([sys.executable, "-m", "vtgatesim", "reshard", "--server", addr, "--keyspace",
                                  "commerce", "--to", "4"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout
            assert json.loads(out)["participants"] == ["-80", "80-"]
            assert json.loads(out)["targets"] == ["-40", "40-80", "80-c0", "c0-"]
            shards = _execute(stub, "show vitess_shards like 'commerce/%'").result.rows
            assert [r.values for r in shards] == [b"commerce/-40", b"commerce/40-80", b"commerce/80-c0",
                                                  b"commerce/c0-"]
            vtctld = vtctlservice_pb2_grpc.VtctldStub(ch)
            srv = vtctld.GetSrvKeyspaces(vtctldata_pb2.GetSrvKeyspacesRequest(keyspace="commerce"), timeout=10)
            assert [s.name for s in srv.srv_keyspaces["zone1"].partitions[0].shard_references] == [
                "-40", "40-80", "80-c0", "c0-"]
            res = _execute(stub, "select id, email from customer order by id")
            assert [r.values for r in res.result.rows] == [b"1a", b"200b"]  # rows were copied to the targets
        proc.send_signal(signal.SIGTERM)
        out_rest, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert out_rest.strip().splitlines()[-1] == "vtgate-sim stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ipv4(hex_addr: str) -> str:
    """/proc/net/tcp{,6}'s address as IPv4: gRPC binds IPv6 sockets, a v4-mapped address for 127.0.0.1
    and the IPv6 any address (dual stack, every interface) for 0.0.0.0."""
    if len(hex_addr) == 32:
        if hex_addr == "0" * 32:
            return "0.0.0.0"
        assert hex_addr.startswith("0000000000000000FFFF0000"), hex_addr
        hex_addr = hex_addr[24:]
    return ".".join(str(int(hex_addr[i:i + 2], 16)) for i in (6, 4, 2, 0))


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of sockets listening on `port` (/proc/net/tcp and tcp6: state 0A = LISTEN)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr_hex, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:
                    found.add(_ipv4(addr_hex))
    return found


def test_cli_serve_binds_loopback_by_default_and_the_host_given() -> None:
    """`serve` listens on loopback only unless --host names an interface (0.0.0.0 in a pod, so the
    Service's cluster IP reaches it); the readiness line names what it bound."""
    for host_args, expect in (([], "127.0.0.1"), (["--host", "0.0.0.0"], "0.0.0.0")):
        proc = subprocess.Popen([sys.executable, "-m", "vtgatesim", "serve", "--port", "0", *host_args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith(f"vtgate-sim listening on {expect}:"), (line, proc.stderr and proc.stderr.read())
            port = int(line.split()[3].rsplit(":", 1)[1])
            assert _listening_addresses(port) == {expect}
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:  # loopback reaches both
                stub = vtgateservice_pb2_grpc.VitessStub(ch)
                assert _execute(stub, "show vitess_shards like 'commerce/%'").result.rows
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=20)
            assert proc.returncode == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
