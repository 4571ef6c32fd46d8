"""The worker with real Vitess v24 as its source (issue 27's benchmark), in one run per shard count:

- **source**: the real VTGate alone: the Go VStream client (bench/vstreamclient) reads every row
  from the start position, counting events and no more: what bounds every other figure here;
- **shardcdc**: a worker (at-least-once, and exactly-once with ``--modes``) from the start position to
  the end position, rows/s over the broker's LogAppendTime window of the data topic, worker CPU per
  row (bench/streaming.py's ``run_worker``);
- **debezium**: the real Debezium Vitess connector (3.5.0.Final, Kafka Connect standalone, tuned as
  in ``streaming.DEBEZIUM_TUNED``/``CONNECT_TUNED`` unless ``--debezium-defaults``) on the same VTGate;
- **testserver**: the same worker with the VTGate test server's recorded responses for the same
  rows as its source (the Go replay: what the other streaming figures use).

The real source is ``vttestserver`` (vtcombo: VTGate, the tablets and vtctld in one process) over one
MariaDB 10.11 that holds every shard: every shard's stream also carries the other shards'
transactions as empty ones (docs/fidelity.md, entry 4), so the source's work grows with the shard
count where a cluster with a MariaDB per shard would not. Its rows are loaded before any side runs
(``--per-txn`` rows per single-shard INSERT), so every side reads the same binlog from the same
position; the sides run interleaved, run by run.

    .venv/bin/python bench/realvtgate.py --rows 200000 --shards 2,4 --runs 3 --json bench/results/raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from streaming import (
    CONNECT_TUNED,
    DDL,
    DEBEZIUM_TUNED,
    KEYSPACE,
    LOG_APPEND_TIME,
    ReplaySource,
    SimProcess,
    _topic_window,
    _topic_window_committed,
    _worker_request,
    median_ci,
    row_values,
    run_debezium,
    run_worker,
)

from realvitess.single import VTTestServer, hash_vschema
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim.topology import keyspace_id


class RealSource:
    """A vttestserver keyspace ``bench`` with ``rows`` rows loaded: what ``run_worker`` and
    ``run_debezium`` need of a source (``address``; ``info`` with the start and end positions)."""

    def __init__(self, vt: VTTestServer, start: dict[str, str], final: dict[str, str], load_seconds: float) -> None:
        self.vt, self.address = vt, vt.vtgate
        self.info = {"start": start, "final": final, "load_seconds": load_seconds}


def _vstream(channel: grpc.Channel, positions: dict[str, str], table: str, timeout: float) -> Any:
    """A VStream of ``table`` (keyspace ``bench``) from ``positions`` ({shard: gtid or "current"})."""
    return vtgateservice_pb2_grpc.VitessStub(channel).VStream(vtgate_pb2.VStreamRequest(
        tablet_type=1, vgtid=binlogdata_pb2.VGtid(shard_gtids=[
            binlogdata_pb2.ShardGtid(keyspace=KEYSPACE, shard=s, gtid=g) for s, g in positions.items()]),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=table, filter=f"select * from {table}")])),
        timeout=timeout)


def current_positions(address: str, shards: list[str], timeout: float = 120.0) -> dict[str, str]:
    """Every shard's position now: a VStream from ``current`` until its VGTID names them all."""
    with grpc.insecure_channel(address) as channel:
        call = _vstream(channel, {s: "current" for s in shards}, "bench", timeout)
        try:
            for resp in call:
                for ev in resp.events:
                    if ev.type == binlogdata_pb2.VEventType.VGTID:
                        pos = {sg.shard: sg.gtid for sg in ev.vgtid.shard_gtids}
                        if set(pos) == set(shards) and "current" not in pos.values():
                            return pos
        finally:
            call.cancel()
    raise RuntimeError(f"no position for every shard of {shards} from {address}")


MARKER_DDL = "CREATE TABLE marker (id BIGINT NOT NULL, PRIMARY KEY (id))"


def end_positions(vt: VTTestServer, before: dict[str, str], timeout: float = 120.0) -> dict[str, str]:
    """Where each shard's stream ends: one ``marker`` row per shard is written after the load, and a
    VStream from ``before`` reads each shard's position after its marker's commit. (``current`` is
    not it: vttestserver's MariaDB holds every shard and Vitess's own tables, so the server's last
    GTID may be a transaction no shard stream carries, and a worker would wait for it forever.)"""
    ids: dict[str, int] = {}
    i = 1 << 40
    while len(ids) < len(vt.shards):
        kid = keyspace_id(i)
        shard = next(s for s in vt.shards if bytes.fromhex(s.split("-")[0] or "00") <= kid
                     < bytes.fromhex(s.split("-")[1] or "ff" * 9))
        ids.setdefault(shard, i)
        i += 1
    with vt.client() as client:
        for n in ids.values():
            client.execute(f"insert into marker (id) values ({n})", target=KEYSPACE)
    out: dict[str, str] = {}
    seen: set[str] = set()
    with grpc.insecure_channel(vt.vtgate, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        call = _vstream(channel, before, "marker", timeout)
        try:
            for resp in call:
                for ev in resp.events:
                    if ev.type == binlogdata_pb2.VEventType.ROW:
                        seen.add(ev.shard)
                    elif ev.type == binlogdata_pb2.VEventType.VGTID:
                        for sg in ev.vgtid.shard_gtids:
                            if sg.shard in seen:
                                out.setdefault(sg.shard, sg.gtid)
                if len(out) == len(vt.shards):
                    return out
        finally:
            call.cancel()
    raise RuntimeError(f"no end position for every shard: {out}")


def _literal(v: object) -> str:
    return "NULL" if v is None else str(v) if isinstance(v, int | float) else "'" + str(v).replace("'", "''") + "'"


def load(vt: VTTestServer, rows: int, per_txn: int, threads: int = 4) -> float:
    """``rows`` rows of streaming.row_values, ``per_txn`` rows per INSERT, each INSERT on one shard
    (ids grouped by their shard, as the test server's generator commits them); seconds taken."""
    ranges = [(bytes.fromhex(s.split("-")[0] or "00"), bytes.fromhex(s.split("-")[1] or "ff" * 9))
              for s in vt.shards]
    by_shard: list[list[int]] = [[] for _ in vt.shards]
    for i in range(1, rows + 1):
        kid = keyspace_id(i)
        by_shard[next(n for n, (lo, hi) in enumerate(ranges) if lo <= kid < hi)].append(i)
    statements = [
        "insert into bench (id, a, b, c, d, e, f, g, h, i) values "
        + ",".join("(" + ",".join(map(_literal, row_values(i))) + ")" for i in ids[k:k + per_txn])
        for ids in by_shard for k in range(0, len(ids), per_txn)
    ]
    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        clients = [vt.client() for _ in range(threads)]
        list(pool.map(lambda n: clients[n % threads].execute(statements[n], target=KEYSPACE), range(len(statements))))
        for c in clients:
            c.close()
    return time.monotonic() - t0


def source_rate(source: RealSource | ReplaySource, rows: int) -> dict[str, float]:
    """The source alone, read by the Go client: rows/s from its first response to the last row."""
    from gobuild import go_binary

    request = _worker_request(source, {}).hex()  # type: ignore[arg-type]  # needs .address and .info only
    out = subprocess.run([go_binary("vstreamclient"), source.address, request, str(rows)], check=True,
                         capture_output=True, text=True, timeout=900)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rows_per_s": r["rows"] / r["seconds"], "client_cpu_s": r.get("client_cpu", 0.0)}


def _worker_side(broker: Any, source: RealSource | ReplaySource, mode: str, rows: int) -> dict[str, Any]:
    r = run_worker(broker, source, source.info["final"], mode, "rv", topic_config=LOG_APPEND_TIME)  # type: ignore[arg-type]
    window = _topic_window_committed if mode == "exactly-once" else _topic_window
    count, first, last = window(broker.bootstrap, r["topic"])
    if count != rows:
        raise RuntimeError(f"{mode}: {count} records for {rows} rows")
    return {"rows_per_s": count / ((last - first) / 1000), "cpu_us_per_row": r["cpu_seconds"] / count * 1e6,
            "peak_rss_mb": r["peak_rss_mb"], "load": r["load"]}


def _debezium_side(broker: Any, source: RealSource, rows: int, tuned: bool) -> dict[str, Any]:
    r = run_debezium(broker, source, rows, "2g", False,  # type: ignore[arg-type]
                     DEBEZIUM_TUNED if tuned else {}, CONNECT_TUNED if tuned else {})
    return {"rows_per_s": r["records"] / r["seconds"], "cpu_us_per_row": r["cpu_seconds"] / r["records"] * 1e6,
            "jvm_rss_mb": r["max_rss_mb"], "load": r["load"]}


def one_shard_count(args: argparse.Namespace, broker: Any, shards: int, tmp: str) -> dict[str, Any]:
    vt = VTTestServer(KEYSPACE, shards, ddl=[DDL, MARKER_DDL], vschema=hash_vschema(["bench", "marker"])).start()
    sim = SimProcess(args.rows, args.per_txn, ",".join(vt.shards))
    try:
        start = current_positions(vt.vtgate, vt.shards)
        took = load(vt, args.rows, args.per_txn)
        source = RealSource(vt, start, end_positions(vt, start), took)
        replay = ReplaySource(sim, {}, tmp)
        print(f"# {shards} shards: {args.rows} rows loaded into vttestserver in {took:.1f}s "
              f"({args.rows / took:,.0f} rows/s through VTGate)", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {}
        for run in range(args.runs):
            for side in args.sides.split(","):
                if side == "source":
                    r = source_rate(source, args.rows)
                elif side == "testserver-source":
                    r = source_rate(replay, args.rows)
                elif side == "debezium":
                    r = _debezium_side(broker, source, args.rows, not args.debezium_defaults)
                elif side == "testserver":
                    r = _worker_side(broker, replay, "at-least-once", args.rows)
                else:
                    r = _worker_side(broker, source, side.removeprefix("shardcdc-"), args.rows)
                runs.setdefault(side, []).append(r)
                print(f"{shards} shards, {side} run {run + 1}: " + ", ".join(
                    f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()), flush=True)
        replay.close()
        return {"shards": shards, "load_seconds": took, "runs": runs, "summary": _summary(runs)}
    finally:
        sim.close()
        vt.stop()


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for side, rs in runs.items():
        for key in ("rows_per_s", "cpu_us_per_row"):
            vals = [r[key] for r in rs if key in r]
            if vals:
                lo, hi = median_ci(vals)
                out.setdefault(side, {}).update({key: statistics.median(vals), f"{key}_lo": lo, f"{key}_hi": hi})
        print(f"{side}: " + ", ".join(f"{k} {v:,.1f}" for k, v in out.get(side, {}).items()), flush=True)
    return out


def main() -> None:
    from localkafka.broker import KAFKA_JVM_PERFORMANCE_OPTS, KafkaBroker

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--per-txn", type=int, default=20)
    ap.add_argument("--shards", default="2,4")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--sides", default="source,shardcdc-at-least-once,shardcdc-exactly-once,debezium,testserver-source,"
                    "testserver", help="interleaved run by run")
    ap.add_argument("--debezium-defaults", action="store_true", help="Kafka Connect's and Debezium's defaults")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    results = {"args": vars(args), "load_before": os.getloadavg(), "by_shards": []}
    with KafkaBroker(heap="1g", jvm_options=KAFKA_JVM_PERFORMANCE_OPTS) as broker, \
            tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.shards.split(",")):
            results["by_shards"].append(one_shard_count(args, broker, n, tmp))  # type: ignore[attr-defined]
    results["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
