"""Backfill on a Spark standalone cluster beside Spark local mode: rows/s and CPU per row per
executor core, on the same 4-shard table (bench/backfill.py's test server process and Kafka).

    .venv/bin/python bench/backfill_cluster.py --rows 200000 --runs 1
    .venv/bin/python bench/backfill_cluster.py --rows 2000000 --runs 3 --out result.json

cluster: devkit/sparkcluster (a master and ``--workers`` workers of one core, each with its own
executor JVM); the driver is this process, in client mode (as spark-submit runs a Python driver
against a standalone master). local: ``local[N]`` with N = the cluster's executor cores, driver
and executor in one JVM. Each session is warmed up (executors registered, Python workers started)
before the timed runs, and ``--warmup-runs`` untimed backfills run first. Per run: rows/s from ``run_backfill``'s call to its return (plan, chunks,
every record acknowledged, every chunk marked done); CPU seconds of the executor side over the
run (cluster: the executor JVMs and their Python workers, found by working directory; local: the
JVM and its Python workers, i.e. everything under this process but this process) and of the
driver (this Python process, plus, on the cluster, its JVM). The test server and the broker run
on the same machine and are reported apart.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backfill import CpuSplit, SimProcess, new_prefix, proc_cpu, props_for


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            out[pid] = proc_cpu(pid)
        except (OSError, IndexError, ValueError):
            continue
    return out


def delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two samples by processes alive at the second (they stay up for a session)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def cluster_pids(cluster: Any) -> list[int]:
    """The executor JVMs and their Python workers."""
    return [p for e in cluster.executors() for p in (e.pid, *descendants(e.pid))]


def local_pids(others: list[int]) -> list[int]:
    """The local-mode JVM and its Python workers: this process's descendants but ``others`` (the
    test server, the broker, the idle cluster daemons) and theirs."""
    skip = {*others, *(d for o in others for d in descendants(o))}
    return [p for p in descendants(os.getpid()) if p not in skip]


def run_mode(mode: str, master: str, cores: int, props: dict[str, str], args: argparse.Namespace,
             executor_pids: Any) -> list[dict[str, Any]]:
    from cdcworker.backfill.job import run_backfill, spark_session
    from cdcworker.backfill.spec import BackfillSpec

    spark = spark_session(master, app_name=f"bench-{mode}", **{"spark.driver.memory": "1g",
                                                              "spark.executor.memory": "1g",
                                                              "spark.executor.cores": "1"})
    try:
        spark.sparkContext.parallelize(range(cores * 4), cores * 4).map(lambda x: x).collect()  # warm-up
        out = []
        for i in range(-args.warmup_runs, args.runs):  # negative: untimed warm-up runs (JIT, producers)
            prefix = new_prefix(mode[0])
            p = {**props, "topic.prefix": prefix, "name": f"conn-{prefix}"}
            spec = BackfillSpec(f"bench-{mode}-{i + args.warmup_runs}", ("bench",), p, chunk_size=args.chunk_size,
                                max_concurrent_chunks_per_shard=args.lanes_per_shard)
            ex0, drv0 = cpu_of(executor_pids()), time.process_time()
            split = CpuSplit(args.sim, args.broker)
            res = run_backfill(spec, engine="spark", spark=spark)
            ex1, drv1 = cpu_of(executor_pids()), time.process_time()
            executor_cpu = delta(ex0, ex1)
            if i < 0:
                continue
            row = {"mode": mode, "executor_cores": cores, "rows": res.rows, "seconds": round(res.seconds, 2),
                   "rows_per_s": round(res.rows_per_second), "executor_cpu_s": round(executor_cpu, 2),
                   "driver_python_cpu_s": round(drv1 - drv0, 2),
                   "us_cpu_per_row": round(1e6 * executor_cpu / max(1, res.rows), 2),
                   "rows_per_s_per_core": round(res.rows_per_second / cores), **split.done(),
                   "load": round(os.getloadavg()[0], 2)}
            print(json.dumps(row), flush=True)
            out.append(row)
        return out
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--warmup-runs", type=int, default=1, help="untimed backfills first, per mode (the "
                    "executors' JIT and the broker's; 0: the first run is timed cold)")
    ap.add_argument("--workers", type=int, default=2, help="cluster workers, one core and one executor each")
    ap.add_argument("--chunk-size", type=int, default=20_000)
    ap.add_argument("--lanes-per-shard", type=int, default=1)
    ap.add_argument("--modes", default="cluster,local")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from localkafka.broker import KAFKA_JVM_PERFORMANCE_OPTS, KafkaBroker
    from sparkcluster import SparkCluster

    report: dict[str, Any] = {"rows": args.rows, "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                              "warmup_runs": args.warmup_runs,
                              "workers": args.workers, "chunk_size": args.chunk_size,
                              "lanes_per_shard": args.lanes_per_shard, "runs": []}
    args.sim = SimProcess(args.rows)
    try:
        with KafkaBroker(heap="1g", jvm_options=KAFKA_JVM_PERFORMANCE_OPTS) as broker, \
                tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp, \
                SparkCluster(Path(tmp), workers=args.workers, cores_per_worker=1) as cluster:
            args.broker = broker
            os.environ.update({k: v for k, v in cluster.env().items() if k.startswith(("SPARK_", "PYSPARK_"))})
            props = props_for(broker, args.sim, "unused")
            others = [args.sim.proc.pid, broker._proc.pid,
                      *(p.pid for p in [*cluster.workers, cluster.master] if p is not None)]
            for mode in args.modes.split(","):
                if mode == "cluster":
                    report["runs"] += run_mode(mode, cluster.master_url, args.workers, props, args,
                                               functools.partial(cluster_pids, cluster))
                else:
                    report["runs"] += run_mode(mode, f"local[{args.workers}]", args.workers, props, args,
                                               functools.partial(local_pids, others))
    finally:
        args.sim.close()
    report["load_after"] = os.getloadavg()
    for mode in args.modes.split(","):
        runs = [r for r in report["runs"] if r["mode"] == mode]
        if runs:
            report[mode] = {k: statistics.median(r[k] for r in runs)
                            for k in ("rows_per_s", "rows_per_s_per_core", "us_cpu_per_row")}
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
