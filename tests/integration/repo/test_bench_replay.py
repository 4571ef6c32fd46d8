"""The worker benchmark's replay source (``bench/streaming.py --source replay``) serves exactly the
test server's bytes: ``_record`` captures one VStream of the test server, ``bench/vstreamreplay``
(Go) serves the capture, and a gRPC client reads the same responses, byte for byte, from both;
the replayed stream stays open after the last response (as VTGate at the head of the binlog) and
any other method is UNIMPLEMENTED. A benchmark whose source differs from the server would measure
something else, so this is checked here rather than trusted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from cdcoperator.local.children import start_bound
from vitessapi import binlogdata_pb2, vtgate_pb2
from vtgatesim import VTGateSim

BENCH = Path(__file__).resolve().parents[3] / "bench"
DDL = ["CREATE TABLE bench (id BIGINT NOT NULL, note VARCHAR(64), PRIMARY KEY (id))"]


def _load(name: str) -> ModuleType:
    """A bench script as a module, without putting bench/ on sys.path."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def replay_binary() -> str:
    return str(_load("gobuild").go_binary("vstreamreplay"))


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim(packet_size=512) as s:  # small packets: several responses per large transaction
        s.create_keyspace("bench", ["-80", "80-"], ddl=DDL)
        yield s


def _without_current_time(raw: bytes) -> vtgate_pb2.VStreamResponse:
    response = vtgate_pb2.VStreamResponse.FromString(raw)
    for ev in response.events:
        ev.ClearField("current_time")
    return response


def _request(start: dict[str, str]) -> bytes:
    """A VStream of every table of the bench keyspace from ``start`` (shard -> GTID)."""
    return vtgate_pb2.VStreamRequest(
        tablet_type="PRIMARY",
        vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="bench", shard=s, gtid=g)
                                                for s, g in sorted(start.items())]),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]),
    ).SerializeToString()


def _stream(address: str, request: bytes) -> grpc.Future:
    channel = grpc.insecure_channel(address)
    call = channel.unary_stream("/vtgateservice.Vitess/VStream", request_serializer=None, response_deserializer=None)
    return call(request)


def test_replay_serves_the_recorded_bytes_and_stays_open(sim: VTGateSim, replay_binary: str, tmp_path: Path) -> None:
    streaming = _load("streaming")
    start = sim.positions("bench")
    for i in range(1, 41):
        sim.execute(f"INSERT INTO bench (id, note) VALUES ({i}, 'row {i}')", "bench")
    sim.execute("INSERT INTO bench (id, note) VALUES " + ", ".join(f"({i}, '{'x' * 40}')" for i in range(100, 160)),
                "bench")
    final = sim.positions("bench")
    request = _request(start)
    capture = tmp_path / "replay.bin"
    recorded = streaming._record(sim.address, request, str(capture), final)

    # What the test server sends, read again independently of the capture.
    expected = []
    call = _stream(sim.address, request)
    for raw in call:
        expected.append(raw)
        if len(expected) == recorded["responses"]:
            break
    call.cancel()
    frames = capture.read_bytes()
    captured = []
    while frames:
        assert frames[0] == 0  # uncompressed gRPC frames, ready to serve
        n = int.from_bytes(frames[1:5], "big")
        captured.append(frames[5 : 5 + n])
        frames = frames[5 + n :]
    # The same responses as a stream of the test server, but for current_time (the sending moment).
    assert [_without_current_time(r) for r in captured] == [_without_current_time(r) for r in expected]
    expected = captured
    rows = sum(len(ev.row_event.row_changes) for raw in expected
               for ev in vtgate_pb2.VStreamResponse.FromString(raw).events if ev.type == binlogdata_pb2.VEventType.ROW)
    assert rows == 40 + 60
    assert recorded["bytes"] == sum(len(r) for r in expected)

    proc = start_bound([replay_binary, str(capture)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        address = json.loads(proc.stdout.readline())["address"]
        call = _stream(address, request)
        got = [next(call) for _ in expected]
        assert got == expected
        # Nothing more, and no end: a server ending the stream sends its trailers with the last
        # bytes; the replay keeps the stream open (VTGate at the head of the binlog) until cancelled.
        assert not call.done()
        call.cancel()
        assert call.code() == grpc.StatusCode.CANCELLED

        channel = grpc.insecure_channel(address)
        execute = channel.unary_unary("/vtgateservice.Vitess/Execute", request_serializer=None,
                                      response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            execute(vtgate_pb2.ExecuteRequest().SerializeToString(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        channel.close()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the replay serves until its standard input closes
        assert proc.wait(10) == 0


def test_paced_replay_releases_one_response_per_interval_and_reports_when(sim: VTGateSim, replay_binary: str,
                                                                         tmp_path: Path) -> None:
    """``-interval``: response k goes out no earlier than start + k * interval, and the replay prints
    each release time; ``_recorded_transactions`` names the transaction each response carries."""
    streaming = _load("streaming")
    start = sim.positions("bench")
    for i in range(1, 7):  # six one-row transactions, alternating between the shards
        sim.execute(f"INSERT INTO bench (id, note) VALUES ({i}, 'row {i}')", "bench")
    final = sim.positions("bench")
    request = _request(start)
    capture = tmp_path / "replay.bin"
    recorded = streaming._record(sim.address, request, str(capture), final)
    txns = streaming._recorded_transactions(str(capture))
    assert len(txns) == recorded["responses"]
    named = [t for t in txns if t is not None]
    assert len(named) == 6
    # The last transaction of each shard is the one that brought it to its final position.
    for shard, gtid in final.items():
        assert max(n for s, n in named if s == shard) == streaming._txn_number(gtid)

    interval_ns = 20_000_000
    proc = start_bound([replay_binary, f"-interval={interval_ns}ns", str(capture)], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        address = json.loads(proc.stdout.readline())["address"]
        call = _stream(address, request)
        got = [next(call) for _ in txns]
        released = json.loads(proc.stdout.readline())
        call.cancel()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(10) == 0
    assert b"".join(b"\x00" + len(r).to_bytes(4, "big") + r for r in got) == capture.read_bytes()
    sent, late = released["sent_ns"], released["late_ns"]
    assert len(sent) == len(late) == len(txns)
    begin = sent[0] - late[0]  # the pacing's start (wall clock; lateness is on the monotonic clock)
    due = [s - lt - begin for s, lt in zip(sent, late, strict=True)]
    assert all(abs(d - k * interval_ns) < 1_000_000 for k, d in enumerate(due)), due
    assert all(lt >= 0 for lt in late)
