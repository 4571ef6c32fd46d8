"""Seed corpus of the scanner fuzz target: real VStreamResponse bytes from the VTGate test server.

A two-shard keyspace with a table of most MySQL column types gets inserts, updates, a row moved to a
new key (delete + insert), deletes, NULLs and edge values, a DDL, and the VStream's responses are taken as the bytes
the server sent (the raw-bytes call the worker makes). Each response is written as it came, and,
when it holds ROW events, once more behind its shard's latest FIELD event (a VStreamResponse is a
repeated field: concatenated encodings are one response), so the oracle can compile the table's
plans from the same input; and all of them as one response (consecutive transactions, for the
tx_begin comparison). Plus a few hand-made odd encodings (tests/integration/worker/test_worker_native_scan.py's).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from pathlib import Path
from typing import Any

import grpc

from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2
from vtgatesim import VTGateSim

_T = binlogdata_pb2.VEventType

TABLE = """create table wide (
  id bigint not null auto_increment, t tinyint, u int unsigned, ub bigint unsigned, de decimal(10,2),
  f float, d double, c char(8), v varchar(64), tx text, b blob, vb varbinary(16), bn binary(4),
  e enum('a','b''q','c,d'), s set('x','y','z'), b1 bit(1), b12 bit(12), dt date, ts timestamp(6) null,
  dtm datetime(3), tm time(6), y year, j json, primary key (id))"""

ROWS = [
    "(1, -128, 4294967295, 18446744073709551615, -12.50, 1.5, 1e300, 'ab', 'plain', 'é😀\\\"q', x'00ff', x'01',"
    " x'01020304', 'b''q', 'x,z', b'1', b'101010101010', '2024-02-29', '2024-05-06 07:08:09.123456',"
    " '1969-12-31 23:59:59.500', '-838:59:59.000000', 2024, '{\"k\": [1, null]}')",
    "(2, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,"
    " null, null, null, null, null, null)",
    "(3, 0, 0, 0, 0.00, -0, 0.001, '', '\\n\\t\\\\', '', '', '', x'00000000', 'a', '', b'0', b'0',"
    " '0001-01-01', '1970-01-01 00:00:01.000000', '9999-12-31 23:59:59.999', '00:00:00.000001', 1901, '[]')",
]
STATEMENTS = [
    *[f"insert into wide values {r}" for r in ROWS],
    "update wide set v = 'changed', f = 3.25 where id = 1",
    # a row to a new key: delete + insert, as on Vitess, which refuses an UPDATE of the primary vindex column
    "delete from wide where id = 3",
    "insert into wide (id, v, de) values (40, 'moved', 0.00)",
    "delete from wide where id = 2",
    "insert into wide (id, v) values (7, 'later'), (8, null), (9, 'x')",
    "alter table wide add column extra int",
    "insert into wide (id, v, extra) values (10, 'after ddl', 5)",
]
LAST = b"after ddl"


def _raw_stream(address: str, req: vtgate_pb2.VStreamRequest) -> tuple[Any, queue.Queue[bytes | None]]:
    channel = grpc.insecure_channel(address)
    call = channel.unary_stream("/vtgateservice.Vitess/VStream", request_serializer=vtgate_pb2.VStreamRequest.SerializeToString,
                                response_deserializer=None)(req)
    out: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        try:
            for r in call:
                out.put(r)
        except grpc.RpcError:
            pass
        out.put(None)
        channel.close()

    threading.Thread(target=pump, daemon=True).start()
    return call, out


def vtgate_responses() -> list[bytes]:
    """The raw VStreamResponses the test server sends for the workload above."""
    sim = VTGateSim().start()
    try:
        sim.create_keyspace("ks", shards=["-80", "80-"], ddl=[TABLE])
        req = vtgate_pb2.VStreamRequest(vgtid=binlogdata_pb2.VGtid(shard_gtids=[
            binlogdata_pb2.ShardGtid(keyspace="ks", shard=s, gtid="current") for s in ("-80", "80-")]))
        call, responses = _raw_stream(sim.address, req)
        got: list[bytes] = []
        try:
            # 'current' is resolved when each shard's stream starts (its VGTID + OTHER): only then
            # does the workload run, or its first rows would precede the starting positions.
            while len(got) < 2:
                r = responses.get(timeout=30)
                if r is None:
                    raise RuntimeError("the test server ended the VStream before it started")
                got.append(r)
            for sql in STATEMENTS:
                sim.execute(sql, "ks")
            # Read until the last statement's row arrives (each read has a deadline).
            while not got or LAST not in got[-1]:
                r = responses.get(timeout=30)
                if r is None:
                    raise RuntimeError("the test server ended the VStream before the workload's last row")
                got.append(r)
        finally:
            call.cancel()
        return got
    finally:
        sim.stop()


def with_fields(responses: list[bytes]) -> list[bytes]:
    """Each response with ROW events behind the latest FIELD event of its shard(s)."""
    fields: dict[str, bytes] = {}
    out = []
    for data in responses:
        resp = vtgate_pb2.VStreamResponse.FromString(data)
        for ev in resp.events:
            if ev.type == _T.FIELD:
                fields[ev.shard] = vtgate_pb2.VStreamResponse(events=[ev]).SerializeToString()
        shards = {ev.shard for ev in resp.events if ev.type == _T.ROW}
        if shards and all(s in fields for s in shards):
            out.append(b"".join(fields[s] for s in sorted(shards)) + data)
    return out


def _tag(field_no: int, wire: int) -> bytes:
    return bytes([field_no << 3 | wire]) if field_no < 16 else bytes([(field_no << 3 | wire) & 0x7F | 0x80, field_no >> 4])


def _ld(field_no: int, payload: bytes) -> bytes:
    n = len(payload)
    prefix = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        prefix.append(b | (0x80 if n else 0))
        if not n:
            break
    return _tag(field_no, 2) + bytes(prefix) + payload


def odd_encodings() -> list[bytes]:
    """Encodings protobuf allows that VTGate does not send: merged sub-messages, unknown fields,
    the shard only on the VEvent, unpacked lengths, invalid UTF-8, truncation."""
    rc = binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1], values=b"1")).SerializeToString()
    unpacked = _ld(2, _tag(1, 0) + b"\x02" + _ld(2, b"1"))  # RowChange.after with one unpacked length
    row_event = _ld(1, b"ks.t") + _ld(2, rc) + _ld(4, b"-80")
    fe = binlogdata_pb2.VEvent(type=_T.FIELD, field_event=binlogdata_pb2.FieldEvent(
        table_name="ks.t", fields=[query_pb2.Field(name="id", type=query_pb2.INT64, column_type="bigint", flags=3)]))
    fe_bytes = _ld(1, fe.SerializeToString())
    events = [
        _tag(1, 0) + bytes([_T.ROW]) + _ld(5, row_event) + _ld(5, _ld(2, rc)),
        _tag(1, 0) + bytes([_T.ROW]) + _ld(5, _ld(1, b"ks.t") + _ld(2, rc) + _ld(9, b"zz")) + _ld(23, b"80-") + _ld(15, b"x"),
        _tag(1, 0) + bytes([_T.ROW]) + _ld(5, _ld(1, b"\xff\xfe") + _ld(2, rc)),
        _tag(1, 0) + bytes([_T.ROW]) + _ld(5, _ld(1, b"ks.t") + _ld(2, unpacked) + _ld(6, b"")),
    ]
    out = [fe_bytes + _ld(1, ev) for ev in events]
    whole = vtgate_pb2.VStreamResponse(events=[binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=5)]).SerializeToString()
    out.append(whole[:-1])
    return out


def write(corpus: Path) -> int:
    """Writes the seeds into ``corpus`` (named by content hash); returns how many."""
    corpus.mkdir(parents=True, exist_ok=True)
    raw = vtgate_responses()
    # The whole stream as one response too: transactions in a row for the tx_begin comparison.
    seeds = [*raw, *with_fields(raw), b"".join(raw), *odd_encodings()]
    for s in seeds:
        (corpus / f"seed-{hashlib.sha1(s).hexdigest()[:16]}").write_bytes(s)
    return len(seeds)
