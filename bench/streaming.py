"""Worker streaming benchmark: throughput, a 1M-row transaction, commit→ack latency.

Three processes, as in production: the Kafka broker (a JVM), the VTGate test server (a Python
process of its own that holds a pre-generated binlog), and one worker process running
``WorkerTask`` (the code behind ``shardcdc worker``) with a small monitor thread that records
when the first response arrived and when the last position became durable. 10-column rows,
Debezium JSON with schemas, 2 shards.

    .venv/bin/python bench/streaming.py throughput --rows 200000 --per-txn 20,100 --runs 3
    .venv/bin/python bench/streaming.py bigtxn --rows 1000000
    .venv/bin/python bench/streaming.py latency --rate 5000 --seconds 20
    .venv/bin/python bench/streaming.py replay --rows 200000 --per-txn 20      # the server alone

throughput: rows/s from the first VStream response to the moment the worker knows the last
position is durable (at-least-once: every record acknowledged, checked at each offset flush,
``offset.flush.interval.ms=100``; exactly-once: the Kafka transaction holding the final offset
committed). bigtxn: one transaction of N rows on one shard; peak RSS of the worker process.
latency: the server commits transactions of 10 rows at a steady rate and records each commit's
wall time; the worker records when the last record of that transaction was acknowledged by Kafka
(delivery report served); p50/p99 of the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEYSPACE = "bench"
DDL = (
    "CREATE TABLE bench (id BIGINT NOT NULL, a INT, b INT UNSIGNED, c VARCHAR(64), d VARCHAR(255), "
    "e DECIMAL(10,2), f DOUBLE, g DATETIME(3), h BIGINT, i TINYINT, PRIMARY KEY (id))"
)


def row_values(i: int) -> tuple[Any, ...]:
    return (i, i % 1000, i * 7, f"name-{i}", f"a somewhat longer description of row {i}",
            f"{i % 10000}.25", i / 3, "2024-05-06 07:08:09.123", i * 1000003, i % 100)


# --- the VTGate test server process ---------------------------------------------------------


class _Gen:
    """Commits rows straight into shard stores and binlogs (the SQL parser is not what we measure)."""

    def __init__(self, sim: Any) -> None:
        from vtgatesim import mysqltypes

        self.sim = sim
        self.norm = mysqltypes.normalize
        self.ks = sim.topo.keyspace(KEYSPACE)

    def commit(self, shard: Any, ids: list[int]) -> Any:
        from vtgatesim.executor import ShardTxn

        with self.sim.topo.lock:
            schema = shard.store.table("bench")
            cts = [c.ct for c in schema.columns]
            txn = ShardTxn(shard)
            for i in ids:
                row = tuple(self.norm(ct, v) for ct, v in zip(cts, row_values(i), strict=True))
                shard.store.insert(schema, row)
                txn.record(schema, None, row)
            return txn.commit()

    def bulk(self, first: int, rows: int, per_txn: int) -> None:
        """`rows` rows from id `first`, grouped per shard into transactions of `per_txn` rows."""
        buckets: dict[str, list[int]] = {}
        for i in range(first, first + rows):
            shard = self.ks.shard_for_value(i)
            b = buckets.setdefault(shard.name, [])
            b.append(i)
            if len(b) == per_txn:
                self.commit(shard, b)
                buckets[shard.name] = []
        for name, b in buckets.items():
            if b:
                self.commit(self.ks.shards[name], b)

    def paced(self, rate: float, seconds: float, per_txn: int, first: int, out: list[tuple[str, int, int]]) -> None:
        """Commit `per_txn`-row transactions (alternating shards) at `rate` rows/s; log commit times."""
        shards = self.ks.serving_shards()
        ids = {s.name: [] for s in shards}  # type: dict[str, list[int]]
        i = first
        interval = per_txn / rate
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < seconds:
            target = shards[n % len(shards)]
            batch: list[int] = []
            while len(batch) < per_txn:
                if self.ks.shard_for_value(i) is target:
                    batch.append(i)
                else:
                    ids[self.ks.shard_for_value(i).name].append(i)
                i += 1
            entry = self.commit(target, batch)
            out.append((target.name, entry.seq, time.time_ns()))
            n += 1
            delay = t0 + n * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the workload, not synchronisation


def sim_main(args: argparse.Namespace) -> None:
    """Serve a keyspace with a pre-generated binlog; print its address and positions as JSON."""
    from vtgatesim import VTGateSim

    sim = VTGateSim().start()
    shards = args.shards.split(",")
    sim.create_keyspace(KEYSPACE, shards, ddl=[DDL])
    start = sim.positions(KEYSPACE)
    gen = _Gen(sim)
    t = time.monotonic()
    if args.rows:
        gen.bulk(1, args.rows, args.per_txn)
    info = {"address": sim.address, "start": start, "final": sim.positions(KEYSPACE),
            "generate_seconds": time.monotonic() - t}
    print(json.dumps(info), flush=True)
    commits: list[tuple[str, int, int]] = []
    for line in sys.stdin:  # commands from the driver; EOF ends the server
        cmd = json.loads(line)
        if cmd["op"] == "paced":
            commits.clear()
            gen.paced(cmd["rate"], cmd["seconds"], cmd["per_txn"], args.rows + 1, commits)
            print(json.dumps({"commits": commits, "final": sim.positions(KEYSPACE)}), flush=True)
    sim.stop()


# --- the worker process ---------------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> None:
    """Run one WorkerTask until `final` is durable; print timings and peak RSS as JSON."""
    from cdcworker.config import load_config
    from cdcworker.events import native
    from cdcworker.task import WorkerTask

    props = json.loads(Path(args.props).read_text())
    final: dict[str, str] = json.loads(Path(args.final).read_text())
    task = WorkerTask(load_config([], env={}, overrides=props))
    acks: list[tuple[str, str, int]] = []
    if args.ack_log:
        _log_acks(task, acks)
    marks: dict[str, float] = {}
    rss: list[int] = []
    threads_at: dict[str, dict[str, float]] = {}

    wait_for = final.pop("__wait__", "")

    def monitor() -> None:
        nonlocal final
        while "done" not in marks:
            if wait_for and not final and os.path.exists(wait_for):
                final = json.loads(Path(wait_for).read_text())
            p, s = task.processor, task.sink
            if "first" not in marks and p is not None and p.stats.events_seen:
                marks["first"] = time.monotonic()
                marks["cpu_first"] = time.process_time()
                threads_at["first"] = _thread_cpu()
            if final and s is not None and s.durable is not None and {sg.shard: sg.gtid for sg in s.durable} == final:
                marks["done"] = time.monotonic()
                marks["cpu_done"] = time.process_time()
                threads_at["done"] = _thread_cpu()
                task.stop("bench done")
                return
            if "ready" not in marks and p is not None and task._call is not None:
                marks["ready"] = time.monotonic()
                print("READY", flush=True)
            if len(rss) < 100_000:
                rss.append(_rss_kb())
            time.sleep(0.01)  # a sampling interval, not synchronisation

    threading.Thread(target=monitor, daemon=True).start()
    result = task.run()
    first, done = threads_at.get("first", {}), threads_at.get("done", {})
    threads = {k: round(v - first.get(k, 0.0), 2) for k, v in done.items() if v - first.get(k, 0.0) >= 0.01}
    p = task.processor
    out = {
        "exit": result.exit_code,
        "reason": result.reason,
        "seconds": marks.get("done", 0) - marks.get("first", 0),
        "cpu_seconds": marks.get("cpu_done", 0) - marks.get("cpu_first", 0),
        "rows": p.stats.rows_seen if p else 0,
        "records": p.stats.records_sent if p else 0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "max_sampled_rss_mb": max(rss, default=0) / 1024,
        "acks": acks,
        "encoder": "native" if native.enabled() else "python",
        "threads": threads,
    }
    print(json.dumps(out), flush=True)


def _thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name of this process (Python, gRPC and librdkafka threads alike)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    py_names = {str(t.native_id): t.name.split(" ")[-1].strip("()") for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            name = py_names.get(tid) or Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        name = name.rstrip("0123456789") or name  # rdk:broker12 -> rdk:broker
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 0.01}


def _rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _log_acks(task: Any, acks: list[tuple[str, str, int]]) -> None:
    """Latency probe: the wall time at which each commit point's records were all acknowledged
    (the delivery report of its last record served in the worker)."""
    from cdcworker import sink as sinkmod

    base = sinkmod.Segment

    def note(seg: Any) -> None:
        now = time.time_ns()
        acks.extend((sg.shard, sg.gtid, now) for sg in getattr(seg.position, "shard_gtids", seg.position))

    class Probe(base):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def on_delivery(self, err: Any, msg: object) -> None:
            base.on_delivery(self, err, msg)
            if self.sealed and self.acked == self.produced:
                note(self)

    orig_commit = sinkmod.KafkaSink.commit_point

    def commit_point(self: Any, position: Any) -> None:
        seg = self._open
        orig_commit(self, position)
        if seg.produced and seg.acked == seg.produced:  # acked before it was sealed
            note(seg)

    sinkmod.Segment = Probe  # type: ignore[misc]
    sinkmod.KafkaSink.commit_point = commit_point  # type: ignore[method-assign]


# --- the driver -----------------------------------------------------------------------------


class SimProcess:
    def __init__(self, rows: int, per_txn: int, shards: str) -> None:
        from localkafka.children import bound_preexec

        self.proc = subprocess.Popen(
            [sys.executable, __file__, "_sim", "--rows", str(rows), "--per-txn", str(per_txn), f"--shards={shards}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=bound_preexec(),
        )
        assert self.proc.stdout is not None
        self.info = json.loads(self.proc.stdout.readline())
        self.address: str = self.info["address"]

    def command(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        from localkafka.children import stop_group

        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, kill=True)


def start_vgtid(positions: dict[str, str]) -> str:
    return json.dumps([{"keyspace": KEYSPACE, "shard": s, "gtid": g, "table_p_ks": []}
                       for s, g in sorted(positions.items())])


def run_worker(broker: Any, sim: SimProcess, final: dict[str, str], mode: str, tag: str,
               extra: dict[str, str] | None = None, ack_log: bool = False, profile: str = "",
               ready: threading.Event | None = None, encoder: str = "", tree: str = "") -> dict[str, Any]:
    from localkafka import create_topics

    prefix = f"b{tag}{os.getpid()}{int(time.time() * 1000) % 100000}"
    create_topics(broker.bootstrap, [f"{prefix}.{KEYSPACE}.bench"], partitions=6)
    host, port = sim.address.rsplit(":", 1)
    props = {
        "name": f"conn-{prefix}", "topic.prefix": prefix, "database.hostname": host, "database.port": port,
        "vitess.keyspace": KEYSPACE, "vitess.shard": ",".join(sorted(sim.info["start"])), "vitess.tablet.type": "PRIMARY",
        "vitess.vgtid": start_vgtid(sim.info["start"]), "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}", "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1", "offset.flush.interval.ms": "100", "snapshot.mode": "never",
        "shardcdc.metrics.port": "0",
    }
    if mode == "exactly-once":
        props.update({"exactly.once.support": "required"})
    props.update(extra or {})
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "props.json").write_text(json.dumps(props))
        (Path(tmp) / "final.json").write_text(json.dumps(final))
        cmd = [sys.executable, __file__, "_worker", str(Path(tmp) / "props.json"), str(Path(tmp) / "final.json")]
        if ack_log:
            cmd.append("--ack-log")
        if profile:
            cmd = ["/tmp/pyspy/bin/py-spy", "record", "-r", "200", "-o", profile, "-f", "speedscope", "--", *cmd]
        load0 = os.getloadavg()[0]
        errf = tempfile.TemporaryFile("w+")  # noqa: SIM115 - read after the process ends
        env = dict(os.environ)
        if encoder:
            env["SHARDCDC_NATIVE"] = "0" if encoder == "python" else "1"
        if tree:  # --base-tree: the worker imports cdcworker from another source tree (A/B)
            env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, env=env)
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            if line.startswith("READY") and ready is not None:
                ready.set()
            elif line.startswith("{"):
                lines.append(line)
        proc.wait(900)
        errf.seek(0)
        err = errf.read()
    if proc.returncode or not lines:
        raise RuntimeError(f"worker exited {proc.returncode}:\n{err[-3000:]}")
    res: dict[str, Any] = json.loads(lines[-1])
    res["load"] = (load0, os.getloadavg()[0])
    if res["exit"] != 0:
        raise RuntimeError(f"worker failed: {res['reason']}\n{err[-3000:]}")
    return res


def replay_rate(sim: SimProcess, rows: int) -> float:
    """The server alone: a parse-only client process (no encoding, no Kafka) streams every row."""
    code = f"""
import grpc, json, time
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc
pos = {sim.info['start']!r}
ch = grpc.insecure_channel({sim.address!r}, options=[("grpc.max_receive_message_length", 64 << 20)])
req = vtgate_pb2.VStreamRequest(tablet_type=1, vgtid=binlogdata_pb2.VGtid(shard_gtids=[
    binlogdata_pb2.ShardGtid(keyspace={KEYSPACE!r}, shard=s, gtid=g) for s, g in sorted(pos.items())]),
    filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]))
got = 0; t0 = None
call = vtgateservice_pb2_grpc.VitessStub(ch).VStream(req)
for resp in call:
    if t0 is None: t0 = time.perf_counter()
    for e in resp.events:
        if e.type == binlogdata_pb2.ROW: got += len(e.row_event.row_changes)
    if got >= {rows}: break
print(json.dumps({{"rows": got, "seconds": time.perf_counter() - t0}}))
call.cancel()
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=600)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return float(r["rows"] / r["seconds"])


def _median_line(name: str, values: list[float], unit: str, target: float | None = None) -> str:
    med = statistics.median(values)
    s = f"{name}: median {med:,.0f} {unit} over {len(values)} runs {[round(v) for v in values]}"
    if target:
        s += f" = {med / target:.2f} x target {target:,.0f}"
    return s


# --filters: the column options a privacy-minded deployment sets, on the benchmark table (a table
# include list pushed down to VTGate, one column left out, one truncated, one masked).
FILTER_PROPS = {
    "table.include.list": rf"{KEYSPACE}\.bench",
    "column.exclude.list": rf"{KEYSPACE}\.bench\.h",
    "column.truncate.to.16.chars": rf"{KEYSPACE}\.bench\.d",
    "column.mask.with.8.chars": rf"{KEYSPACE}\.bench\.c",
}


def _props(text: str) -> dict[str, str]:
    """``--props k=v,k=v``: worker properties on top of the benchmark's (feature on/off figures)."""
    return dict(item.split("=", 1) for item in text.split(",") if item)


def throughput(args: argparse.Namespace) -> None:
    from localkafka import KafkaBroker

    targets = {"at-least-once": 60_000, "exactly-once": 40_000}
    with KafkaBroker(heap="1g") as broker:
        for per_txn in [int(x) for x in args.per_txn.split(",")]:
            sim = SimProcess(args.rows, per_txn, args.shards)
            try:
                print(f"# {args.rows} rows, {per_txn} rows per shard transaction, shards {args.shards}; "
                      f"generated in {sim.info['generate_seconds']:.1f}s", flush=True)
                final = sim.info["final"]
                rates = [replay_rate(sim, args.rows) for _ in range(args.replay_runs)]
                if rates:
                    print(_median_line("server replay (parse-only client)", rates, "rows/s"), flush=True)
                base_props = {**(FILTER_PROPS if args.filters else {}), **_props(args.props)}
                variants = [(enc, "", base_props) for enc in args.encoders.split(",")]
                if args.base_tree:
                    variants += [(f"{enc}@base", args.base_tree, base_props) for enc in args.encoders.split(",")]
                if args.ab_props or args.ab_filters:
                    # Feature on/off in the same set, interleaved: the "15 % below core" comparison.
                    ab = {**base_props, **(FILTER_PROPS if args.ab_filters else {}), **_props(args.ab_props)}
                    variants += [(f"{enc}+ab", "", ab) for enc in args.encoders.split(",")]
                for mode in args.modes.split(","):
                    got: dict[str, list[float]] = {v[0]: [] for v in variants}
                    cpu: dict[str, list[float]] = {v[0]: [] for v in variants}
                    for run in range(args.runs):
                        # Variants interleaved run by run: a shared machine's load drifts.
                        for name, tree, extra in variants:
                            enc = name.split("@")[0].split("+")[0]
                            prof = f"{args.profile}-{mode}-{name}-{per_txn}-{run}.json" if args.profile else ""
                            r = run_worker(broker, sim, final, mode, mode[0], extra=extra, profile=prof,
                                           encoder=enc, tree=tree)
                            got[name].append(r["rows"] / r["seconds"])
                            cpu[name].append(r["cpu_seconds"] / r["rows"] * 1e6)
                            print(f"{mode} {per_txn}/txn {name} ({r['encoder']}) run {run + 1}: {got[name][-1]:,.0f} rows/s, "
                                  f"{r['records']} records, worker cpu {r['cpu_seconds']:.2f}s for {r['seconds']:.2f}s "
                                  f"({cpu[name][-1]:.1f} us/row), peak RSS {r['peak_rss_mb']:.0f} MB, "
                                  f"load {r['load'][0]:.2f}->{r['load'][1]:.2f}", flush=True)
                            print(f"    worker cpu s per thread: {r.get('threads')}", flush=True)
                    for name, *_ in variants:
                        print(_median_line(f"{mode} {per_txn}/txn {name}", got[name], "rows/s", targets.get(mode)), flush=True)
                        print(f"{mode} {per_txn}/txn {name}: worker cpu median {statistics.median(cpu[name]):.1f} us/row "
                              f"{[round(c, 1) for c in cpu[name]]}", flush=True)
            finally:
                sim.close()


def bigtxn(args: argparse.Namespace) -> None:
    from localkafka import KafkaBroker

    with KafkaBroker(heap="1g") as broker:
        sim = SimProcess(args.rows, args.rows, "0")
        try:
            print(f"# one transaction of {args.rows} rows on one shard; generated in "
                  f"{sim.info['generate_seconds']:.1f}s", flush=True)
            for mode in args.modes.split(","):
                for run in range(args.runs):
                    r = run_worker(broker, sim, sim.info["final"], mode, "t" + mode[0])
                    print(f"{mode} run {run + 1}: {r['rows'] / r['seconds']:,.0f} rows/s, peak RSS of the worker "
                          f"{r['peak_rss_mb']:.0f} MB (sampled max {r['max_sampled_rss_mb']:.0f} MB), "
                          f"load {r['load'][0]:.2f}->{r['load'][1]:.2f}", flush=True)
        finally:
            sim.close()


def latency(args: argparse.Namespace) -> None:
    from localkafka import KafkaBroker

    with KafkaBroker(heap="1g") as broker:
        for run in range(args.runs):
            sim = SimProcess(0, 10, args.shards)
            tmp = Path(tempfile.mkdtemp())
            try:
                holder: dict[str, Any] = {}
                final_path = tmp / "final.json"
                ready = threading.Event()

                def target(sim: SimProcess = sim, final_path: Path = final_path, ready: threading.Event = ready,
                           holder: dict[str, Any] = holder) -> None:
                    holder["r"] = run_worker(broker, sim, {"__wait__": str(final_path)}, "at-least-once", "l",
                                             ack_log=True, ready=ready)

                w = threading.Thread(target=target)
                w.start()
                if not ready.wait(120):
                    raise TimeoutError("worker did not connect")
                paced = sim.command(op="paced", rate=args.rate, seconds=args.seconds, per_txn=10)
                (tmp / "final.tmp").write_text(json.dumps(paced["final"]))
                (tmp / "final.tmp").rename(final_path)
                w.join()
                result = holder["r"]
                commit = {(s, seq): ns for s, seq, ns in paced["commits"]}
                first_ack: dict[tuple[str, int], int] = {}
                for shard, gtid, ack_ns in result["acks"]:
                    # A commit point names every shard; a shard's gtid first appears with the
                    # transaction that produced it, later ones only repeat it.
                    k = (shard, int(gtid.rsplit("-", 1)[-1].rsplit(":", 1)[-1]))
                    first_ack[k] = min(first_ack.get(k, ack_ns), ack_ns)
                lat = sorted((ack - commit[k]) / 1e6 for k, ack in first_ack.items() if k in commit)
                p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
                print(f"latency run {run + 1}: {len(lat)} transactions of 10 rows at {args.rate:.0f} rows/s: "
                      f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms; worker peak RSS "
                      f"{result['peak_rss_mb']:.0f} MB; load {result['load'][0]:.2f}->{result['load'][1]:.2f}",
                      flush=True)
            finally:
                sim.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("throughput")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--per-txn", default="20,100")
    p.add_argument("--shards", default="-80,80-")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--replay-runs", type=int, default=1)
    p.add_argument("--modes", default="at-least-once,exactly-once")
    p.add_argument("--profile", default="", help="py-spy speedscope output prefix")
    p.add_argument("--encoders", default="native", help="native,python: A/B the row encoder (SHARDCDC_NATIVE)")
    p.add_argument("--props", default="", help="extra worker properties k=v,k=v (e.g. tx metadata)")
    p.add_argument("--filters", action="store_true", help="table/column filter options on (FILTER_PROPS)")
    p.add_argument("--ab-props", default="", help="A/B: also run with these extra properties (k=v,...), "
                   "interleaved run by run (variant name +ab)")
    p.add_argument("--ab-filters", action="store_true", help="A/B: also run with FILTER_PROPS (variant +ab)")
    p.add_argument("--base-tree", default="", help="A/B: also run workers importing cdcworker from this "
                   "directory (e.g. an older commit's worker/ from git archive), interleaved run by run")
    p = sub.add_parser("bigtxn")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--modes", default="at-least-once")
    p = sub.add_parser("latency")
    p.add_argument("--rate", type=float, default=5000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--shards", default="-80,80-")
    p = sub.add_parser("_sim")
    p.add_argument("--rows", type=int, default=0)
    p.add_argument("--per-txn", type=int, default=20)
    p.add_argument("--shards", default="-80,80-")
    p = sub.add_parser("_worker")
    p.add_argument("props")
    p.add_argument("final")
    p.add_argument("--ack-log", action="store_true")
    args = ap.parse_args()
    {"throughput": throughput, "bigtxn": bigtxn, "latency": latency, "_sim": sim_main,
     "_worker": worker_main}[args.cmd](args)


if __name__ == "__main__":
    main()
