"""Worker streaming throughput: one worker process (task), 10-column rows, JSON with schemas.

The VTGate test server holds a pre-generated binlog; the worker starts from the position before
it and streams every row into a real local Kafka broker. Reported: rows/s from the first response
to the last durable offset, at-least-once and exactly-once, plus peak RSS of this process.

    .venv/bin/python bench/streaming.py --rows 200000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from worker_fixtures import worker_config

from localkafka import KafkaBroker
from vtgatesim import VTGateSim

DDL = (
    "CREATE TABLE bench (id BIGINT NOT NULL, a INT, b INT UNSIGNED, c VARCHAR(64), d VARCHAR(255), "
    "e DECIMAL(10,2), f DOUBLE, g DATETIME(3), h BIGINT, i TINYINT, PRIMARY KEY (id))"
)


def generate(sim: VTGateSim, rows: int, per_txn: int) -> None:
    next_id = 1
    while next_id <= rows:
        vals = []
        for i in range(next_id, min(next_id + per_txn, rows + 1)):
            vals.append(
                f"({i}, {i % 1000}, {i * 7}, 'name-{i}', 'a somewhat longer description of row {i}', "
                f"{i % 10000}.25, {i / 3:.6f}, '2024-05-06 07:08:09.123', {i * 1000003}, {i % 100})"
            )
        sim.execute(f"INSERT INTO bench VALUES {', '.join(vals)}", "bench")
        next_id += per_txn


def run_once(broker: KafkaBroker, sim: VTGateSim, start_vgtid: str, rows: int, mode: str, run: int) -> float:
    from cdcworker.task import WorkerTask

    extra = {"snapshot.mode": "never", "vitess.vgtid": start_vgtid, "vitess.shard": "-80,80-", "max.queue.size": "8192"}
    if mode == "exactly-once":
        extra.update({"exactly.once.support": "required", "poll.interval.ms": "200"})
    cfg = worker_config(broker, sim.address, "bench", prefix=f"bench{run}{mode[0]}", extra=extra)
    task = WorkerTask(cfg)
    thread = threading.Thread(target=task.run, daemon=True)
    final = sim.positions("bench")
    t0 = time.monotonic()
    thread.start()
    first = None
    while True:
        sink = task.sink
        if first is None and task.processor is not None and task.processor.stats.events_seen:
            first = time.monotonic()
        if sink is not None and sink.durable is not None and {sg.shard: sg.gtid for sg in sink.durable} == final:
            break
        if time.monotonic() - t0 > 600:
            raise TimeoutError("benchmark did not finish")
        time.sleep(0.01)
    elapsed = time.monotonic() - (first or t0)
    task.stop("bench done")
    thread.join(60)
    return rows / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--per-txn", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="at-least-once,exactly-once")
    args = ap.parse_args()
    results: dict[str, list[float]] = {}
    with KafkaBroker(heap="1g") as broker, VTGateSim() as sim:
        sim.create_keyspace("bench", ["-80", "80-"], ddl=[DDL])
        start = json.dumps(
            [{"keyspace": "bench", "shard": s, "gtid": g, "table_p_ks": []} for s, g in sorted(sim.positions("bench").items())]
        )
        t = time.monotonic()
        generate(sim, args.rows, args.per_txn)
        print(f"generated {args.rows} rows in {time.monotonic() - t:.1f}s", flush=True)
        for mode in args.modes.split(","):
            for run in range(args.runs):
                rate = run_once(broker, sim, start, args.rows, mode, run)
                results.setdefault(mode, []).append(rate)
                print(f"{mode} run {run + 1}: {rate:,.0f} rows/s", flush=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for mode, rates in results.items():
        print(f"{mode}: median {statistics.median(rates):,.0f} rows/s over {len(rates)} runs {[round(r) for r in rates]}")
    print(f"peak RSS of the benchmark process (worker + test server + clients): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
