"""`shardcdc vtgate-sim` / `python -m vtgatesim`: serve a simulated cluster, or drive a running one.

    vtgate-sim [serve] [--host 0.0.0.0] --port 15991 --keyspace commerce:-80,80- [--sql 'commerce:create table ...']
    vtgate-sim workload --server 127.0.0.1:15991 --keyspace commerce --transactions 1000 [--rate 100]
    vtgate-sim reshard --server 127.0.0.1:15991 --keyspace commerce --to=-40,40-80,80- [--delete-old]

`serve` prints `vtgate-sim listening on HOST:PORT ...` (flushed) once both services accept calls and
stops cleanly on SIGTERM/SIGINT. `workload` and `reshard` talk to a running server through its
`vtgatesim.Control` service (see control.py) and print the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path

ACTIONS = ("serve", "workload", "reshard")


# Registered as `shardcdc vtgate-sim` through pyproject's `shardcdc.commands` entry points (a devkit command).
HELP = "Serve the VTGate test server (vtgate and vtctld gRPC services)"

def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("action", nargs="?", default="serve", choices=ACTIONS,
                        help="serve (default), or drive a running server: workload, reshard")
    parser.add_argument("--port", type=int, default=15991, help="serve: gRPC port for vtgate and vtctld (0 = any)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="serve: interface to bind (default loopback; 0.0.0.0 in a pod, so its Service reaches it)")
    parser.add_argument("--keyspace", action="append", default=[],
                        help="serve: NAME[:SHARDS] e.g. commerce or customer:-80,80- or customer:4 (repeatable); "
                             "workload/reshard: the keyspace")
    parser.add_argument("--sql", action="append", default=[], help="serve: KEYSPACE:SQL to run at start (repeatable)")
    parser.add_argument("--workload", default="", help="serve: KEYSPACE to run the workload generator on")
    parser.add_argument("--rate", type=float, default=100.0, help="workload transactions per second (0 = max)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reshard-after", type=float, default=0.0, help="serve: seconds; reshard the workload keyspace")
    parser.add_argument("--reshard-to", default="", help="serve: target shards for --reshard-after, e.g. -40,40-80,80-")
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--server", default="127.0.0.1:15991", help="workload/reshard: address of a running server")
    parser.add_argument("--transactions", type=int, default=1000, help="workload: number of transactions")
    parser.add_argument("--table", default="items", help="workload: table name")
    parser.add_argument("--to", default="", help="reshard: target shards (comma-separated) or a count")
    parser.add_argument("--delete-old", action="store_true", help="reshard: delete the source shards afterwards")
    return run


def _shards(spec: str) -> list[str] | int:
    return int(spec) if spec.isdigit() else spec.split(",")


def run(args: argparse.Namespace) -> int:
    if args.action == "workload":
        return _remote("Workload", args.server, {
            "keyspace": _one_keyspace(args), "transactions": args.transactions, "rate": args.rate,
            "seed": args.seed, "table": args.table})
    if args.action == "reshard":
        if not args.to:
            raise SystemExit("reshard needs --to SHARDS")
        return _remote("Reshard", args.server, {"keyspace": _one_keyspace(args), "targets": _shards(args.to),
                                                "delete_old": args.delete_old})
    return serve(args)


def _one_keyspace(args: argparse.Namespace) -> str:
    if len(args.keyspace) != 1:
        raise SystemExit(f"{args.action} needs exactly one --keyspace")
    return str(args.keyspace[0]).partition(":")[0]


def _remote(method: str, server: str, request: dict[str, object]) -> int:
    from .control import call

    print(json.dumps(call(server, method, request)), flush=True)
    return 0


def serve(args: argparse.Namespace) -> int:
    from .sim import VTGateSim
    from .workload import Workload

    tls = None
    if args.tls_cert and args.tls_key:
        tls = (args.tls_key.read_bytes(), args.tls_cert.read_bytes())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sim = VTGateSim(tls=tls)
    for spec in args.keyspace or ["commerce"]:
        name, _, shards = spec.partition(":")
        sim.create_keyspace(name, _shards(shards) if shards else None)
    for spec in args.sql:
        ks, _, stmt = spec.partition(":")
        sim.execute(stmt, ks)
    sim.start(args.port, args.host)
    print(f"vtgate-sim listening on {args.host}:{sim.port} (vtgateservice.Vitess, vtctlservice.Vtctld)", flush=True)
    wl = None
    if args.workload:
        wl = Workload(sim, args.workload, seed=args.seed)
        wl.ensure_table()
        threading.Thread(target=wl.run, kwargs={"rate": args.rate}, daemon=True).start()
    if args.reshard_after and args.workload:
        targets: list[str] | int = _shards(args.reshard_to) if args.reshard_to else 2
        if not stop.wait(args.reshard_after):
            sim.reshard(args.workload, targets)
            print(f"resharded {args.workload} to {targets}", flush=True)
    while not stop.wait(0.5):  # a bounded wait keeps signal handling prompt
        pass
    if wl:
        wl.stop()
    sim.stop()
    print("vtgate-sim stopped", flush=True)
    return 0
