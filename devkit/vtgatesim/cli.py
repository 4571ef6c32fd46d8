"""`shardcdc vtgate-sim` / `python -m vtgatesim`: serve a simulated cluster on loopback."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from .sim import VTGateSim
from .workload import Workload


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--port", type=int, default=15991, help="gRPC port for vtgate and vtctld (0 = any)")
    parser.add_argument("--keyspace", action="append", default=[],
                        help="NAME[:SHARDS] e.g. commerce or customer:-80,80- or customer:4 (repeatable)")
    parser.add_argument("--sql", action="append", default=[], help="KEYSPACE:SQL to run at start (repeatable)")
    parser.add_argument("--workload", default="", help="KEYSPACE to run the workload generator on")
    parser.add_argument("--rate", type=float, default=100.0, help="workload transactions per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reshard-after", type=float, default=0.0, help="seconds; reshard the workload keyspace")
    parser.add_argument("--reshard-to", default="", help="target shards for --reshard-after, e.g. -40,40-80,80-")
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    return run


def run(args: argparse.Namespace) -> int:
    tls = None
    if args.tls_cert and args.tls_key:
        tls = (args.tls_key.read_bytes(), args.tls_cert.read_bytes())
    sim = VTGateSim(tls=tls)
    for spec in args.keyspace or ["commerce"]:
        name, _, shards = spec.partition(":")
        sim.create_keyspace(name, (int(shards) if shards.isdigit() else shards.split(",")) if shards else None)
    for spec in args.sql:
        ks, _, stmt = spec.partition(":")
        sim.execute(stmt, ks)
    sim.start(args.port)
    print(f"vtgate-sim listening on {sim.address} (vtgateservice.Vitess, vtctlservice.Vtctld)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    wl = None
    if args.workload:
        wl = Workload(sim, args.workload, seed=args.seed)
        wl.ensure_table()
        threading.Thread(target=wl.run, kwargs={"rate": args.rate}, daemon=True).start()
    if args.reshard_after and args.workload:
        targets: list[str] | int = args.reshard_to.split(",") if args.reshard_to else 2
        if not stop.wait(args.reshard_after):
            sim.reshard(args.workload, targets)
            print(f"resharded {args.workload} to {targets}", flush=True)
    stop.wait()
    if wl:
        wl.stop()
    sim.stop()
    return 0
