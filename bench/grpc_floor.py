"""Per-message server cost of Python gRPC VStream servers: which gRPC setup can serve fastest.

    .venv/bin/python bench/grpc_floor.py [--rows 300000] [--rows-per-txn 20] [--runs 5] \
        [--variants sim,sync,aio-gen,aio-write,sync+frame+wbuf,...]

Each variant is a server in its own process. `sim` is the VTGate test server replaying a pre-generated
binlog (as bench/vtgatesim_replay.py); the others are do-nothing handlers that send the same
pre-serialized `VStreamResponse` (BEGIN, ROW with N row changes, VGTID, COMMIT) `rows / N` times:
`sync` (grpc.server, generator of bytes), `aio-gen` (grpc.aio, async generator), `aio-write`
(grpc.aio, `await context.write(bytes)`). `+frame`, `+wbuf`, `+look`, `+mcs`, `+nocomp`, `+tput` add
server channel options (MODS below); `+poll` sets GRPC_POLL_STRATEGY=poll. `sim+freeze` / `sim+nogc` /
`sim+swi` / `sim+obN` try gc.freeze(), gc.disable(), a 0.2 ms GIL switch interval and an N-deep outbox
in the test server (experiments; none changed the figure, see BENCHMARKS.md). All servers are started
first and the runs go round-robin, so every variant sees the same mix of machine load. The Go client
(bench/vstreamclient) streams and decodes every response.

Reported per run: the server process's CPU time (user+system of all threads, /proc/PID/stat) per
message, its thread context switches per message (/proc/PID/task/*/status), the wall-clock rate and
the client's CPU. Per-message CPU swings by about 2x between runs on the shared VM, so compare medians
of interleaved runs; switches per message are the steadier structural figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

BASES = {
    "sync": "sync grpc.server, generator yielding bytes",
    "aio-gen": "grpc.aio server, async generator yielding bytes",
    "aio-write": "grpc.aio server, await context.write(bytes) in a loop",
    "sim": "the VTGate test server replaying a pre-generated binlog",
}
# Modifiers: `base+mod+mod...`
MODS: dict[str, list[tuple[str, Any]]] = {
    "frame": [("grpc.http2.max_frame_size", 1 << 20)],
    "wbuf": [("grpc.http2.write_buffer_size", 1 << 20)],
    "look": [("grpc.http2.lookahead_bytes", 1 << 20)],
    "mcs": [("grpc.max_concurrent_streams", 16)],
    "nocomp": [("grpc.default_compression_algorithm", 0)],
    "tput": [("grpc.optimization_target", "throughput")],
}
DEFAULT = "sim,sync,aio-gen,aio-write,sync+frame+wbuf,aio-write+frame+wbuf"


def response(k: int) -> bytes:
    from vitessapi import binlogdata_pb2, query_pb2

    ev = binlogdata_pb2.VEvent
    changes = [binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[len(str(i)), 10, 3],
                                                            values=f"{i}name-{i:05d}{i % 1000:03d}".encode()))
               for i in range(k)]
    return binlogdata_pb2.VStreamResponse(events=[
        ev(type=binlogdata_pb2.BEGIN, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0"),
        ev(type=binlogdata_pb2.ROW, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0",
           row_event=binlogdata_pb2.RowEvent(table_name="bench.t", row_changes=changes, keyspace="bench", shard="0")),
        ev(type=binlogdata_pb2.VGTID, vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(
            keyspace="bench", shard="0", gtid="MySQL56/" + "a" * 36 + ":1-100000")])),
        ev(type=binlogdata_pb2.COMMIT, timestamp=1, current_time=1 << 60, keyspace="bench", shard="0"),
    ]).SerializeToString()


def serve(variant: str, n: int, k: int) -> None:
    """Child process: serve `variant`, print the port, run until killed."""
    import grpc
    from vtgatesim_replay import request_hex

    base, *mods = variant.split("+")
    if base == "sim":
        serve_sim(n * k, k, mods)
        return
    opts = [o for m in mods if m in MODS for o in MODS[m]]
    resp = response(k)
    if base == "sync":
        from concurrent import futures

        def handler(_req: bytes, _ctx: Any) -> Any:
            for _ in range(n):
                yield resp

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                             options=opts)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("vtgateservice.Vitess", {
            "VStream": grpc.unary_stream_rpc_method_handler(handler)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(port, request_hex("x"), flush=True)
        server.wait_for_termination()
        return

    async def agen(_req: bytes, _ctx: Any) -> Any:
        for _ in range(n):
            yield resp

    async def awrite(_req: bytes, ctx: Any) -> None:
        write = ctx.write
        for _ in range(n):
            await write(resp)

    async def main() -> None:
        server = grpc.aio.server(options=opts)
        h = agen if base == "aio-gen" else awrite
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("vtgateservice.Vitess", {
            "VStream": grpc.unary_stream_rpc_method_handler(h)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, request_hex("x"), flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def serve_sim(rows: int, k: int, mods: list[str]) -> None:
    """The VTGate test server with a pre-generated binlog (as bench/vtgatesim_replay.py)."""
    from vtgatesim_replay import generate, request_hex

    from vtgatesim import VTGateSim

    sim = VTGateSim().start()
    sim.create_keyspace("bench", ddl=["create table t (id bigint not null, name varchar(32), qty int, "
                                      "primary key (id))"])
    pos = sim.position("bench", "0")
    generate(sim, rows, k)
    if "freeze" in mods:
        import gc

        gc.freeze()
    if "nogc" in mods:
        import gc

        gc.disable()
    if "swi" in mods:
        sys.setswitchinterval(0.0002)
    for m in mods:
        if m.startswith("ob"):
            from vtgatesim import vstream

            vstream.Outbox.__init__.__defaults__ = (int(m[2:]),)
    print(sim.port, request_hex(pos), flush=True)
    threading.Event().wait()


def cpu_of(pid: int) -> float:
    """user+system seconds of process `pid` (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def switches_of(pid: int) -> int:
    """Context switches (voluntary + involuntary) of all threads of process `pid`."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def start_server(variant: str, n: int, k: int) -> tuple[subprocess.Popen[str], int, str]:
    env = dict(os.environ)
    if "poll" in variant.split("+"):
        env["GRPC_POLL_STRATEGY"] = "poll"
    srv = subprocess.Popen([sys.executable, __file__, "--serve", variant, str(n), str(k)],
                           stdout=subprocess.PIPE, text=True, env=env)
    assert srv.stdout is not None
    port, req = srv.stdout.readline().split()
    return srv, int(port), req


def main() -> None:
    from vtgatesim_replay import go_client

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--rows-per-txn", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), int(args.serve[2]))
        return
    k = args.rows_per_txn
    n = -(-args.rows // k)
    client = go_client()
    variants = args.variants.split(",")
    print(f"load average {os.getloadavg()}; {n} responses of {k} rows, {len(response(k))} bytes each", flush=True)
    servers = {}
    per_msg: dict[str, list[float]] = {v: [] for v in variants}
    switches: dict[str, list[float]] = {v: [] for v in variants}
    rates: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for v in variants:
            servers[v] = start_server(v, n, k)
        # Round-robin, so every variant sees the same mix of machine load.
        for run in range(args.runs):
            for v in variants:
                srv, port, req = servers[v]
                cmd = [client, f"127.0.0.1:{port}", req, str(args.rows)]
                c0, x0 = cpu_of(srv.pid), switches_of(srv.pid)
                r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout)
                time.sleep(0.05)  # let the server finish the call (its status) before reading its CPU
                cpu = cpu_of(srv.pid) - c0
                switches[v].append((switches_of(srv.pid) - x0) / r["responses"])
                per_msg[v].append(cpu / r["responses"] * 1e6)
                rates[v].append(r["rows"] / r["seconds"])
                print(f"run {run + 1} {v}: server cpu {cpu:.2f}s = {per_msg[v][-1]:.1f} us/message, "
                      f"{switches[v][-1]:.1f} thread switches/message; {rates[v][-1]:,.0f} row events/s wall; "
                      f"client cpu {r['client_cpu']:.2f}s; load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for srv, _, _ in servers.values():
            srv.kill()
            srv.wait()
    print(f"load average {os.getloadavg()}")
    for v in variants:
        us = statistics.median(per_msg[v])
        print(f"{v:16s} {us:6.1f} us/message (min {min(per_msg[v]):.1f}), {statistics.median(switches[v]):.1f} "
              f"switches/message => {k * 1e6 / us:>9,.0f} row events/s per server core; wall median "
              f"{statistics.median(rates[v]):,.0f}  [{BASES[v.split('+')[0]]}]")


if __name__ == "__main__":
    main()
