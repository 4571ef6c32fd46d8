"""Replay a pre-generated binlog to one VStream client over loopback and report row events/s.

Usage: .venv/bin/python bench/vtgatesim_replay.py [--rows 300000] [--rows-per-txn 20]
"""

from __future__ import annotations

import argparse
import time

import grpc

from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim import VTGateSim


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--rows-per-txn", type=int, default=20)
    args = ap.parse_args()
    sim = VTGateSim().start()
    sim.create_keyspace("bench", ddl=["create table t (id bigint not null, name varchar(32), qty int, primary key (id))"])
    pos = sim.position("bench", "0")
    t0 = time.perf_counter()
    k = args.rows_per_txn
    for base in range(0, args.rows, k):
        vals = ", ".join(f"({i}, 'name-{i}', {i % 1000})" for i in range(base + 1, base + k + 1))
        sim.execute(f"insert into t (id, name, qty) values {vals}", "bench")
    gen = time.perf_counter() - t0
    ch = grpc.insecure_channel(sim.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = vtgateservice_pb2_grpc.VitessStub(ch)
    req = vtgate_pb2.VStreamRequest(vgtid=binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="bench", shard="0", gtid=pos)]))
    rows = events = responses = 0
    t1 = time.perf_counter()
    call = stub.VStream(req)
    for resp in call:
        responses += 1
        for e in resp.events:
            events += 1
            if e.type == binlogdata_pb2.ROW:
                rows += len(e.row_event.row_changes)
        if rows >= args.rows:
            break
    dt = time.perf_counter() - t1
    call.cancel()
    sim.stop()
    print(f"generated {args.rows} rows in {gen:.1f}s; replayed {rows} row changes, {events} events, "
          f"{responses} responses in {dt:.2f}s: {rows / dt:,.0f} row events/s ({args.rows_per_txn} rows/txn)")


if __name__ == "__main__":
    main()
