"""Helpers for the vtgatesim tests: a running simulator and a VStream reader."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim import VTGateSim, wire

T = binlogdata_pb2.VEventType
# How long a test waits for a response or a state it expects: it comes in milliseconds, but the
# suite's 2 cores may be busy (a broker's or Vitess's JVM or Go GC); a wait that expects nothing
# passes its own shorter timeout.
WAIT = 30.0


class Reader:
    """Reads a VStream in a thread; tests wait for responses with timeouts (no sleeps)."""

    def __init__(self, stub: Any, req: vtgate_pb2.VStreamRequest) -> None:
        self.call = stub.VStream(req)
        self.q: queue.Queue[Any] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        try:
            for r in self.call:
                self.q.put(r)
        except grpc.RpcError as e:
            self.error = e
        self.q.put(None)

    def next(self, timeout: float = WAIT) -> vtgate_pb2.VStreamResponse:
        r = self.q.get(timeout=timeout)
        assert r is not None, f"stream ended: {self.error}"
        return r

    def types(self, n: int) -> list[list[str]]:
        return [[T.Name(e.type) for e in self.next().events] for _ in range(n)]

    def end(self, timeout: float = WAIT) -> grpc.RpcError | None:
        while True:
            r = self.q.get(timeout=timeout)
            if r is None:
                return self.error

    def close(self) -> None:
        self.call.cancel()


@pytest.fixture(name="sim")
def sim_fixture() -> Iterator[VTGateSim]:
    s = VTGateSim().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(name="stub")
def stub_fixture(sim: VTGateSim) -> Iterator[Any]:
    ch = grpc.insecure_channel(sim.address)
    try:
        yield vtgateservice_pb2_grpc.VitessStub(ch)
    finally:
        ch.close()


def request(*sgs: tuple[str, str, str], **flags: Any) -> vtgate_pb2.VStreamRequest:
    rules = flags.pop("rules", None)
    req = vtgate_pb2.VStreamRequest(vgtid=binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=k, shard=s, gtid=g) for k, s, g in sgs]),
        flags=vtgate_pb2.VStreamFlags(**flags))
    if rules is not None:
        req.filter.CopyFrom(binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=m, filter=f) for m, f in rules]))
    return req


def row_values(row: query_pb2.Row) -> list[bytes | None]:
    """A query.Row's column values (None for NULL: length -1)."""
    return wire.row_values(row.lengths, row.values)


def vgtid(*shard_gtids: tuple[str, str, str], pks: list[binlogdata_pb2.TableLastPK] | None = None
          ) -> binlogdata_pb2.VGtid:
    """An expected VGtid: (keyspace, shard, gtid) per entry, every entry with table_p_ks `pks`."""
    return binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=k, shard=s, gtid=g, table_p_ks=pks)
                                             for k, s, g in shard_gtids])


CUSTOMER = "create table customer (id bigint not null auto_increment, email varchar(128), primary key (id))"
