"""Backfill benchmark: rows/s of a 4-shard snapshot with Spark local[1] and local[2], against one
VStream copy in the streaming worker (the Debezium way), and the test server's own read rates.

Processes, as in production: the Kafka broker (JVM), the VTGate test server (its own Python
process holding the table in its SQLite shard stores), Spark (driver JVM + Python workers, which
read chunks over gRPC and produce to Kafka themselves), or one worker process running
``WorkerTask`` with ``snapshot.mode=initial``. 10-column rows, Debezium JSON with schemas.

    .venv/bin/python bench/backfill.py all --rows 2000000 --runs 3
    .venv/bin/python bench/backfill.py spark --rows 200000 --cores 2 --runs 1
    .venv/bin/python bench/backfill.py spark --rows 2000000 --runs 5 --interleave   # the 2-core ratio
    .venv/bin/python bench/backfill.py server --rows 2000000       # the server's own read rates

spark: rows/s from the call of ``run_backfill`` (plan + all chunks, every record acknowledged and
every chunk marked done) to its return; the SparkSession is created and warmed up before (JVM
start-up is not counted). vstream: from the worker's first VStream response until all rows were
seen and the final copy position is durable (every record acknowledged). ``--interleave`` runs
local[1] and local[2] alternately, one run per Spark process, and reports each pair's ratio: the
VM's speed drifts over minutes, and the 2-core ratio is only as good as its two halves' conditions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEYSPACE = "bench"
SHARDS = "-40,40-80,80-c0,c0-"
DDL = (
    "CREATE TABLE bench (id BIGINT NOT NULL, a INT, b INT UNSIGNED, c VARCHAR(64), d VARCHAR(255), "
    "e DECIMAL(10,2), f DOUBLE, g DATETIME(3), h BIGINT, i TINYINT, PRIMARY KEY (id))"
)


def row_values(i: int) -> tuple[Any, ...]:
    return (i, i % 1000, i * 7, f"name-{i}", f"a somewhat longer description of row {i}",
            f"{i % 10000}.25", i / 3, "2024-05-06 07:08:09.123", i * 1000003, i % 100)


# --- the VTGate test server process ---------------------------------------------------------------


def sim_main(args: argparse.Namespace) -> None:
    """Serve a 4-shard keyspace whose table holds `rows` rows (loaded into the shard stores
    directly: a snapshot reads tables, not binlogs)."""
    from vtgatesim import VTGateSim, mysqltypes

    sim = VTGateSim().start()
    sim.create_keyspace(KEYSPACE, SHARDS.split(","), ddl=[DDL])
    ks = sim.topo.keyspace(KEYSPACE)
    t = time.monotonic()
    buckets: dict[str, list[tuple[Any, ...]]] = {}
    with sim.topo.lock:
        schema0 = ks.serving_shards()[0].store.table("bench")
        assert schema0 is not None
        cts = [c.ct for c in schema0.columns]

        def flush(name: str) -> None:
            shard = ks.shards[name]
            schema = shard.store.table("bench")
            shard.store.begin()
            shard.store.insert_many(schema, buckets.pop(name))  # type: ignore[arg-type]
            shard.store.commit()

        for i in range(1, args.rows + 1):
            name = ks.shard_for_value(i).name
            b = buckets.setdefault(name, [])
            b.append(tuple(mysqltypes.normalize(ct, v) for ct, v in zip(cts, row_values(i), strict=True)))
            if len(b) >= 20_000:
                flush(name)
        for name in list(buckets):
            flush(name)
    load_s = time.monotonic() - t
    # Pre-encode every row into the shard stores' row cache (one cold full read per shard, timed):
    # chunk reads then serve cached query.Rows, as MySQL serves a warm buffer pool.
    t, c = time.monotonic(), time.process_time()
    rendered = 0
    if not args.cold:
        for s in ks.serving_shards():
            stream = sim.executor.stream_select("SELECT * FROM bench", f"{KEYSPACE}:{s.name}")
            assert stream is not None
            rendered += sum(len(b) for b in stream.batches)
    info = {"address": sim.address, "positions": sim.positions(KEYSPACE), "load_seconds": load_s, "pid": os.getpid(),
            "rendered": rendered, "render_seconds": time.monotonic() - t, "render_cpu": time.process_time() - c}
    print(json.dumps(info), flush=True)
    for _line in sys.stdin:  # EOF ends the server
        pass
    sim.stop()


class SimProcess:
    def __init__(self, rows: int, cold: bool = False) -> None:
        from cdcoperator.local.children import start_bound

        cmd = [sys.executable, __file__, "_sim", "--rows", str(rows), *(["--cold"] if cold else [])]
        self.proc = start_bound(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.info = json.loads(self.proc.stdout.readline())
        self.address: str = self.info["address"]

    def cpu_seconds(self) -> float:
        """The server process's CPU time so far (user + system, all threads)."""
        return proc_cpu(self.proc.pid)

    def close(self) -> None:
        from cdcoperator.local.children import stop_group

        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, kill=True)


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSplit:
    """CPU seconds used by the test server and the Kafka broker during one phase (the rest of a
    2-core box's time goes to the job: Spark's JVM and Python workers, or the worker)."""

    def __init__(self, sim: SimProcess, broker: Any) -> None:
        self.sim, self.broker_pid = sim, broker._proc.pid
        self.start = (sim.cpu_seconds(), proc_cpu(self.broker_pid))

    def done(self) -> dict[str, float]:
        now = (self.sim.cpu_seconds(), proc_cpu(self.broker_pid))
        return {k: round(b - a, 1) for k, a, b in zip(("server", "broker"), self.start, now, strict=True)}


def props_for(broker: Any, sim: SimProcess, prefix: str) -> dict[str, str]:
    host, port = sim.address.rsplit(":", 1)
    return {
        "name": f"conn-{prefix}", "topic.prefix": prefix, "database.hostname": host, "database.port": port,
        "vitess.keyspace": KEYSPACE, "vitess.tablet.type": "PRIMARY", "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}", "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1", "offset.flush.interval.ms": "100", "snapshot.mode": "never",
        "shardcdc.metrics.port": "0",
    }


def new_prefix(tag: str) -> str:
    return f"bf{tag}{uuid.uuid4().hex[:6]}"


# --- the server's own read rates --------------------------------------------------------------------


def server_rates(sim: SimProcess, rows: int) -> dict[str, float]:
    """StreamExecute of whole shard tables (1 and 2 concurrent readers) and one VStream copy of all
    shards, counting rows without decoding them: what the server can deliver. For each, rows/s of
    wall time and rows per second of the server process's own CPU time (robust on a loaded box)."""
    import grpc

    from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2, vtgateservice_pb2_grpc

    shards = SHARDS.split(",")
    opts = [("grpc.max_receive_message_length", 64 << 20)]

    def read_shards(names: list[str]) -> int:
        stub = vtgateservice_pb2_grpc.VitessStub(grpc.insecure_channel(sim.address, options=opts))
        n = 0
        for s in names:
            req = vtgate_pb2.StreamExecuteRequest(
                session=vtgate_pb2.Session(target_string=f"{KEYSPACE}:{s}@primary"),
                query=query_pb2.BoundQuery(sql="SELECT * FROM bench"))
            for resp in stub.StreamExecute(req):
                n += len(resp.result.rows)
        return n

    def vstream_copy() -> int:
        stub = vtgateservice_pb2_grpc.VitessStub(grpc.insecure_channel(sim.address, options=opts))
        req = vtgate_pb2.VStreamRequest(
            tablet_type=1,  # PRIMARY
            vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=KEYSPACE, gtid="")]),
            filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]))
        n = 0
        call = stub.VStream(req)
        for resp in call:
            for ev in resp.events:
                if ev.type == binlogdata_pb2.VEventType.ROW:
                    n += len(ev.row_event.row_changes)
                elif ev.type == binlogdata_pb2.VEventType.COPY_COMPLETED and not ev.shard:
                    call.cancel()
                    return n
        return n

    def two_readers() -> int:
        got: list[int] = []
        threads = [threading.Thread(target=lambda names=names: got.append(read_shards(names)))
                   for names in (shards[:2], shards[2:])]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return sum(got)

    out: dict[str, float] = {}
    for name, fn in (("stream_execute_1", lambda: read_shards(shards)), ("stream_execute_2", two_readers),
                     ("vstream_copy", vstream_copy)):
        t, c = time.monotonic(), sim.cpu_seconds()
        n = fn()
        wall, cpu = time.monotonic() - t, sim.cpu_seconds() - c
        assert n == rows, (name, n, rows)
        out[name] = n / wall
        out[name + "_per_server_cpu_s"] = n / cpu
    return out


# --- Spark -----------------------------------------------------------------------------------------------


def spark_main(args: argparse.Namespace) -> None:
    """One process per core count: a SparkSession (warmed up), then `runs` backfills."""
    from cdcworker.backfill.job import run_backfill, spark_session
    from cdcworker.backfill.spec import BackfillSpec

    if args.cpus:
        # Before the JVM starts: every process and thread Spark starts inherits the affinity.
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    props = json.loads(args.props)
    spark = spark_session(f"local[{args.cores}]", **{"spark.driver.memory": "1g"})
    spark.sparkContext.parallelize(range(args.cores * 2), args.cores * 2).map(lambda x: x).collect()  # warm-up
    out = []
    for i in range(args.runs):
        prefix = new_prefix(f"s{args.cores}")
        p = {**props, "topic.prefix": prefix, "name": f"conn-{prefix}"}
        spec = BackfillSpec(f"bench-{i}", ("bench",), p, chunk_size=args.chunk_size,
                            max_concurrent_chunks_per_shard=args.lanes_per_shard)
        res = run_backfill(spec, engine="spark", spark=spark)
        # Where a run's time goes: the chunks' phase (planning and start-up are outside it), and
        # how busy the cores were in it (a lane's set-up and the last lane's tail are not busy).
        out.append({"rows": res.rows, "seconds": res.seconds, "chunks": res.chunks_total,
                    "job_seconds": round(res.job_seconds, 2), "chunk_busy": round(res.busy(args.cores), 3)})
    spark.stop()
    print(json.dumps(out), flush=True)


def spark_cpus(cores: int, confine: bool) -> set[int] | None:
    """The CPUs the Spark process tree may use: ``cores`` of them when confined, else all.

    ``local[N]`` bounds only Spark's task threads; its driver JVM, the Python workers' librdkafka
    threads and the JVM's own threads run wherever they like. Confined, the whole application gets
    N CPUs, as a Spark pod with a CPU limit of N does in a cluster.
    """
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[:cores]) if confine and cores < len(allowed) else None


def _child_json(cmd: list[str], what: str) -> Any:
    """Run a timed child process; its last line of output is its JSON result (stderr shown on failure)."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_spark(broker: Any, sim: SimProcess, cores: int, runs: int, chunk_size: int, lanes: int,
              confine: bool = True, extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    props = {**props_for(broker, sim, "unused"), **(extra or {})}
    cmd = [sys.executable, __file__, "_spark", "--cores", str(cores), "--runs", str(runs), "--props", json.dumps(props),
           "--chunk-size", str(chunk_size), "--lanes-per-shard", str(lanes)]
    cpus = spark_cpus(cores, confine)
    if cpus is not None:
        cmd += ["--cpus", ",".join(map(str, sorted(cpus)))]
    return _child_json(cmd, "the Spark run")


# --- one VStream copy in the streaming worker -------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> None:
    """WorkerTask with snapshot.mode=initial until every row was seen and the copy's end is durable."""
    from cdcworker.config import load_config
    from cdcworker.task import WorkerTask

    props = json.loads(args.props)
    task = WorkerTask(load_config([], env={}, overrides=props))
    marks: dict[str, float] = {}

    def monitor() -> None:
        while "done" not in marks:
            p, s = task.processor, task.sink
            if "first" not in marks and p is not None and p.stats.events_seen:
                marks["first"] = time.monotonic()
            if (p is not None and s is not None and p.stats.rows_seen >= args.rows and s.durable is not None
                    and not s.durable.copying and s.pending == 0):
                marks["done"] = time.monotonic()
                task.stop("bench done")
                return
            time.sleep(0.01)  # a sampling interval, not synchronisation

    threading.Thread(target=monitor, daemon=True).start()
    task.run()
    p = task.processor
    print(json.dumps({"rows": p.stats.rows_seen if p else 0, "seconds": marks.get("done", 0) - marks.get("first", 0)}),
          flush=True)


def run_vstream(broker: Any, sim: SimProcess, rows: int) -> dict[str, Any]:
    prefix = new_prefix("v")
    props = {**props_for(broker, sim, prefix), "snapshot.mode": "initial"}
    cmd = [sys.executable, __file__, "_worker", "--rows", str(rows), "--props", json.dumps(props)]
    return _child_json(cmd, "the worker run")


# --- driver ----------------------------------------------------------------------------------------------


def rate(r: dict[str, Any]) -> float:
    return float(r["rows"] / r["seconds"]) if r["seconds"] > 0 else 0.0


def main_all(args: argparse.Namespace) -> None:
    from localkafka.broker import KAFKA_JVM_PERFORMANCE_OPTS, KafkaBroker

    sim = SimProcess(args.rows, cold=args.cold)
    info = sim.info
    print(f"# server loaded {args.rows:,} rows in {info['load_seconds']:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
    report: dict[str, Any] = {"rows": args.rows, "shards": SHARDS, "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    if info["rendered"]:
        report["server_render_rows_per_cpu_s"] = info["rendered"] / info["render_cpu"]
        print(f"# server pre-encoded {info['rendered']:,} rows in {info['render_seconds']:.1f} s "
              f"({report['server_render_rows_per_cpu_s']:,.0f} rows per CPU-second)", flush=True)
    try:
        with KafkaBroker(heap="1g", jvm_options=KAFKA_JVM_PERFORMANCE_OPTS) as broker:
            if "server" in args.what:
                report["server"] = server_rates(sim, args.rows)
                print("server", json.dumps(report["server"]), flush=True)
            extra = dict(kv.split("=", 1) for kv in args.props.split(",") if kv)
            cores_wanted = [c for c in (1, 2) if f"spark{c}" in args.what]
            # --interleave: one run per Spark process, local[1] and local[2] alternating, so a
            # drift of the VM's speed lands on both (each process pays its session's start-up
            # outside the timed backfill); otherwise all runs of one core count, then the other.
            rounds = [(c, 1) for _ in range(args.runs) for c in cores_wanted] if args.interleave else \
                [(c, args.runs) for c in cores_wanted]
            cpu_s: dict[int, dict[str, float]] = {}
            if cores_wanted and args.warmup_runs:
                # The broker's JIT compiles its produce path for the first ~40 s of load (its
                # compiler threads took up to 0.35 core meanwhile): untimed runs first, as a
                # JMH warm-up, so no timed run shares the CPUs with the compiler.
                cpu = CpuSplit(sim, broker)
                warm = run_spark(broker, sim, max(cores_wanted), args.warmup_runs, args.chunk_size,
                                 args.lanes_per_shard, confine=not args.unconfined, extra=extra)
                report["warmup_cpu_s"] = cpu.done()
                print("warm-up (untimed)", [f"{rate(r):,.0f}" for r in warm], "cpu-s", report["warmup_cpu_s"], flush=True)
            for cores, n in rounds:
                cpu = CpuSplit(sim, broker)
                runs = run_spark(broker, sim, cores, n, args.chunk_size, args.lanes_per_shard,
                                 confine=not args.unconfined, extra=extra)
                report.setdefault(f"spark{cores}", []).extend(runs)
                report[f"spark{cores}_cpus"] = sorted(spark_cpus(cores, not args.unconfined) or os.sched_getaffinity(0))
                split = cpu.done()
                cpu_s[cores] = {k: round(cpu_s.get(cores, {}).get(k, 0) + v, 1) for k, v in split.items()}
                report[f"spark{cores}_cpu_s"] = cpu_s[cores]
                print(f"spark local[{cores}] on CPUs {report[f'spark{cores}_cpus']}", [f"{rate(r):,.0f}" for r in runs],
                      "s/job-s/busy", [(round(r["seconds"], 1), r["job_seconds"], r["chunk_busy"]) for r in runs],
                      "cpu-s", split, flush=True)
            if "vstream" in args.what:
                cpu = CpuSplit(sim, broker)
                runs = [run_vstream(broker, sim, args.rows) for _ in range(args.runs)]
                report["vstream"] = runs
                report["vstream_cpu_s"] = cpu.done()
                print("vstream copy", [f"{rate(r):,.0f}" for r in runs], "cpu-s", cpu.done(), flush=True)
    finally:
        sim.close()
    med = {k: statistics.median(rate(r) for r in report[k]) for k in ("spark1", "spark2", "vstream") if k in report}
    report["median_rows_per_s"] = med
    if "spark1" in med and "spark2" in med:
        report["spark2_over_spark1"] = med["spark2"] / med["spark1"]
        if args.interleave:  # run i of local[2] over run i of local[1], taken minutes apart
            pairs = sorted(rate(b) / rate(a) for a, b in zip(report["spark1"], report["spark2"], strict=True))
            report["paired_ratios"] = [round(x, 3) for x in pairs]
            report["paired_ratio_median"] = statistics.median(pairs)
    if "vstream" in med and "spark2" in med:
        report["spark2_over_vstream"] = med["spark2"] / med["vstream"]
    report["load_after"] = os.getloadavg()
    print(json.dumps({k: v for k, v in report.items() if k not in ("spark1", "spark2", "vstream")}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, what in (("all", "server,spark1,spark2,vstream"), ("spark", ""), ("server", "server"), ("vstream", "vstream")):
        p = sub.add_parser(name)
        p.add_argument("--rows", type=int, default=2_000_000)
        p.add_argument("--runs", type=int, default=3)
        p.add_argument("--chunk-size", type=int, default=50_000)
        p.add_argument("--lanes-per-shard", type=int, default=2)
        p.add_argument("--cores", type=int, default=0, help="spark: only this core count")
        p.add_argument("--out", default="")
        p.add_argument("--cold", action="store_true", help="no pre-encoding: every read renders rows")
        p.add_argument("--unconfined", action="store_true", help="local[1] without confining the Spark process "
                       "tree to one CPU (its JVM and librdkafka threads then also use the other core)")
        p.add_argument("--props", default="", help="spark: extra connector properties k=v,k=v (e.g. producer.linger.ms=50)")
        p.add_argument("--warmup-runs", type=int, default=2, help="spark: untimed local[N] runs first (the "
                       "broker's JIT warm-up)")
        p.add_argument("--interleave", action="store_true", help="spark: alternate local[1] and local[2], one run "
                       "per Spark process (the VM's drift then lands on both)")
        p.set_defaults(what=what)
    p = sub.add_parser("_sim")
    p.add_argument("--rows", type=int, default=0)
    p.add_argument("--cold", action="store_true")
    p = sub.add_parser("_spark")
    for a in ("--cores", "--runs", "--chunk-size", "--lanes-per-shard"):
        p.add_argument(a, type=int)
    p.add_argument("--props")
    p.add_argument("--cpus", default="", help="confine the process tree to these CPUs (comma-separated)")
    p = sub.add_parser("_worker")
    p.add_argument("--rows", type=int)
    p.add_argument("--props")
    args = ap.parse_args()
    if args.cmd == "spark":
        args.what = f"spark{args.cores}" if args.cores else "spark1,spark2"
    if args.cmd == "_sim":
        sim_main(args)
    elif args.cmd == "_spark":
        spark_main(args)
    elif args.cmd == "_worker":
        worker_main(args)
    else:
        main_all(args)


if __name__ == "__main__":
    main()
