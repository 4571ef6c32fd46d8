"""Replay a pre-generated binlog to one VStream client over loopback and report row events/s.

    .venv/bin/python bench/vtgatesim_replay.py [--rows 300000] [--rows-per-txn 20] [--runs 3]

The server (this process) pre-generates `--rows` inserted rows in transactions of `--rows-per-txn`
rows (one multi-row INSERT each, so one ROW event with that many row changes per transaction), then
each run starts a fresh client process that streams from the position before the data, parses every
`VStreamResponse` with the generated protobuf classes and counts row changes until it has all of them.
The client runs in its own process, as a worker would; "row events/s" counts row changes (one per
inserted row). Prints one line per run and the median.

`--floor` serves the same number of responses from a bare gRPC handler that yields one pre-serialized
response of the same shape over and over: the transport + client ceiling no server can beat.

`--go-client` runs bench/vstreamclient (Go, standard library only: gRPC over h2c, protobuf wire
walked to the row changes) instead of the Python client, built with the Go toolchain on first use
into ~/.cache/shardcdc/bin. It shows what the server serves when the client is not the bottleneck.
`--clients N` runs N such client processes at once, each on its own VStream.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def go_client() -> str:
    """The Go client binary (bench/vstreamclient), built once per source change."""
    from gobuild import go_binary

    return go_binary("vstreamclient")


def request_hex(pos: str) -> str:
    from vitessapi import binlogdata_pb2, vtgate_pb2

    req = vtgate_pb2.VStreamRequest(vgtid=binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="bench", shard="0", gtid=pos)]))
    return req.SerializeToString().hex()


def client(addr: str, pos: str, rows: int) -> None:
    """Run in a child process: stream from `pos`, parse every response, count row changes."""
    import grpc

    from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

    row_type = binlogdata_pb2.ROW
    ch = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = vtgateservice_pb2_grpc.VitessStub(ch)
    req = vtgate_pb2.VStreamRequest(vgtid=binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="bench", shard="0", gtid=pos)]))
    got = events = responses = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    call = stub.VStream(req)
    for resp in call:
        responses += 1
        for e in resp.events:
            events += 1
            if e.type == row_type:
                got += len(e.row_event.row_changes)
        if got >= rows:
            break
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    call.cancel()
    print(json.dumps({"rows": got, "events": events, "responses": responses, "seconds": dt, "client_cpu": cpu}))


def generate(sim: object, rows: int, per_txn: int) -> None:
    """Commit `rows` rows straight into the shard store and binlog (skips SQL parsing, same binlog)."""
    from vtgatesim import mysqltypes
    from vtgatesim.executor import ShardTxn
    from vtgatesim.sim import VTGateSim

    assert isinstance(sim, VTGateSim)
    with sim.topo.lock:
        shard = sim.topo.shard("bench", "0")
        schema = shard.store.table("t")
        assert schema is not None
        cts = [c.ct for c in schema.columns]
        for base in range(0, rows, per_txn):
            txn = ShardTxn(shard)
            for i in range(base + 1, min(base + per_txn, rows) + 1):
                row = tuple(mysqltypes.normalize(ct, v) for ct, v in zip(cts, (i, f"name-{i}", i % 1000), strict=True))
                shard.store.insert(schema, row)
                txn.record(schema, None, row)
            txn.commit()


def floor(args: argparse.Namespace) -> None:
    """The same client against a handler that only yields one fixed serialized response."""
    from concurrent import futures

    import grpc

    from vitessapi import binlogdata_pb2, query_pb2

    k = args.rows_per_txn
    ev = binlogdata_pb2.VEvent
    changes = [binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[len(str(i)), 10, 3],
                                                            values=f"{i}name-{i:05d}{i % 1000:03d}".encode()))
               for i in range(k)]
    resp = binlogdata_pb2.VStreamResponse(events=[
        ev(type=binlogdata_pb2.BEGIN, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0"),
        ev(type=binlogdata_pb2.ROW, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0",
           row_event=binlogdata_pb2.RowEvent(table_name="bench.t", row_changes=changes, keyspace="bench", shard="0")),
        ev(type=binlogdata_pb2.VGTID, vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(
            keyspace="bench", shard="0", gtid="MySQL56/" + "a" * 36 + ":1-100000")])),
        ev(type=binlogdata_pb2.COMMIT, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0"),
    ]).SerializeToString()
    n = -(-args.rows // k)

    def handler(_req: bytes, _ctx: grpc.ServicerContext) -> object:
        for _ in range(n):
            yield resp

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("vtgateservice.Vitess", {
        "VStream": grpc.unary_stream_rpc_method_handler(handler, request_deserializer=None,
                                                        response_serializer=None)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    rates = []
    addr = f"127.0.0.1:{port}"
    cmd = ([go_client(), addr, request_hex("x"), str(args.rows)] if args.go_client
           else [sys.executable, __file__, "--client", addr, "x", str(args.rows)])
    for run in range(args.runs):
        s0 = os.times()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        s1 = os.times()
        r = json.loads(out)
        rates.append(r["rows"] / r["seconds"])
        server_cpu = (s1.user - s0.user) + (s1.system - s0.system)
        print(f"floor run {run + 1}: {r['responses'] / r['seconds']:,.0f} responses/s, "
              f"{rates[-1]:,.0f} row events/s (server cpu {server_cpu:.2f}s, client cpu {r['client_cpu']:.2f}s)",
              flush=True)
    server.stop(0)
    print(f"floor median of {len(rates)}: {statistics.median(rates):,.0f} row events/s ({k} rows/response)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--rows-per-txn", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--floor", action="store_true", help="bare gRPC handler yielding one fixed response")
    ap.add_argument("--go-client", action="store_true", help="use the Go client (bench/vstreamclient)")
    ap.add_argument("--clients", type=int, default=1, help="concurrent client processes, one VStream each")
    ap.add_argument("--client", nargs=3, metavar=("ADDR", "POS", "ROWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        client(args.client[0], args.client[1], int(args.client[2]))
        return

    from vtgatesim import VTGateSim

    if args.floor:
        floor(args)
        return
    sim = VTGateSim().start()
    sim.create_keyspace("bench", ddl=["create table t (id bigint not null, name varchar(32), qty int, primary key (id))"])
    pos = sim.position("bench", "0")
    t0 = time.perf_counter()
    generate(sim, args.rows, args.rows_per_txn)
    print(f"generated {args.rows} rows in {args.rows // args.rows_per_txn} transactions in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
    rates = []
    env = dict(os.environ)
    if args.go_client:
        cmd = [go_client(), sim.address, request_hex(pos), str(args.rows)]
    else:
        cmd = [sys.executable, __file__, "--client", sim.address, pos, str(args.rows)]
    for run in range(args.runs):
        s0 = os.times()
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(args.clients)]
        outs = [p.communicate()[0] for p in procs]
        s1 = os.times()
        if any(p.returncode for p in procs):
            raise SystemExit(f"client failed: {[p.returncode for p in procs]}")
        results = [json.loads(o) for o in outs]
        # Aggregate rate: all row changes delivered, over the slowest client's time.
        rows = sum(r["rows"] for r in results)
        seconds = max(r["seconds"] for r in results)
        responses = sum(r["responses"] for r in results)
        rate = rows / seconds
        rates.append(rate)
        server_cpu = (s1.user - s0.user) + (s1.system - s0.system)
        print(f"run {run + 1}: {rows} row changes, {sum(r['events'] for r in results)} events, {responses} "
              f"responses in {seconds:.2f}s: {rate:,.0f} row events/s ({responses / seconds:,.0f} responses/s; "
              f"server cpu {server_cpu:.2f}s, client cpu {sum(r['client_cpu'] for r in results):.2f}s)", flush=True)
    sim.stop()
    kind = "Go" if args.go_client else "Python"
    print(f"median of {len(rates)}: {statistics.median(rates):,.0f} row events/s "
          f"({args.rows_per_txn} rows/txn, {args.clients} {kind} client process(es))")


if __name__ == "__main__":
    main()
