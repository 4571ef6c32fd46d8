"""``shardcdc demo``: the main job on embedded defaults, on one machine.

Starts a real Kafka broker, the VTGate test server with a 4-shard ``commerce`` keyspace and a
live workload, and a connector with 2 tasks (per-task offsets, shards dealt round-robin as the
operator does). A live view shows each task's shards, position and throughput; at the end the
topics are materialised and compared with the source tables.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the workload runs")
    parser.add_argument("--rate", type=float, default=200.0, help="workload transactions per second")
    parser.add_argument("--tasks", type=int, default=2, help="connector tasks")
    return run


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from cdcworker.config import load_config
    from cdcworker.offsets.migration import assign_shards
    from cdcworker.task import WorkerTask
    from cdcworker.verify import compare, materialise
    from localkafka import KafkaBroker, consume_all
    from vtgatesim import VTGateSim
    from vtgatesim.workload import Workload

    console = Console()
    shards = ["-40", "40-80", "80-c0", "c0-"]
    with KafkaBroker() as broker, VTGateSim() as sim:
        console.print(f"[bold]Kafka[/] {broker.bootstrap}   [bold]VTGate test server[/] {sim.address}")
        sim.create_keyspace("commerce", shards)
        workload = Workload(sim, "commerce", table="items", seed=42, large_every=200, large_rows=2000)
        workload.ensure_table()
        host, port = sim.address.rsplit(":", 1)
        assignment = assign_shards(shards, args.tasks)
        tasks: list[WorkerTask] = []
        for i, task_shards in enumerate(assignment):
            props = {
                "name": "demo",
                "topic.prefix": "demo",
                "database.hostname": host,
                "database.port": port,
                "vitess.keyspace": "commerce",
                "vitess.tablet.type": "PRIMARY",
                "bootstrap.servers": broker.bootstrap,
                "offset.storage.topic": "demo-offsets",
                "offset.storage.replication.factor": "1",
                "offset.flush.interval.ms": "200",
                "snapshot.mode": "initial",
                "tasks.max": str(len(assignment)),
                "vitess.offset.storage.per.task": "true",
                "vitess.offset.storage.task.key.gen": "0",
                "vitess.prev.num.tasks": "1",
                "shardcdc.task.id": str(i),
                "shardcdc.task.count": str(len(assignment)),
                "shardcdc.task.shards": ",".join(task_shards),
                "topic.creation.default.partitions": "4",
                "shardcdc.metrics.port": "0",  # both tasks run in this process
            }
            tasks.append(WorkerTask(load_config([], env={}, overrides=props)))
        threads = [threading.Thread(target=t.run, name=f"task{i}", daemon=True) for i, t in enumerate(tasks)]
        for t in threads:
            t.start()
        writer = threading.Thread(target=workload.run, kwargs={"duration": args.seconds, "rate": args.rate}, daemon=True)
        writer.start()

        def view(rates: dict[int, float]) -> Table:
            table = Table(title="shardcdc demo: connector 'demo', keyspace 'commerce'")
            for col in ("task", "shards", "position (per shard)", "records", "events/s"):
                table.add_column(col)
            for i, task in enumerate(tasks):
                proc = task.processor
                pos = "\n".join(f"{sg.shard}: …{sg.gtid[-12:]}" for sg in proc.position) if proc else "starting"
                sent = task.sink.records_sent if task.sink else 0
                table.add_row(f"task{i}", ",".join(assignment[i]), pos, str(sent), f"{rates.get(i, 0.0):,.0f}")
            table.caption = f"workload: {workload.stats.transactions} transactions, {workload.stats.rows} rows"
            return table

        last = {i: 0 for i in range(len(tasks))}
        rates: dict[int, float] = {}
        with Live(view(rates), console=console, refresh_per_second=4) as live:
            while writer.is_alive():
                writer.join(0.5)
                for i, task in enumerate(tasks):
                    sent = task.sink.records_sent if task.sink else 0
                    rates[i] = (sent - last[i]) / 0.5
                    last[i] = sent
                live.update(view(rates))
            # Let every task reach the source's final positions, then stop them cleanly.
            final = sim.positions("commerce")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = all(
                    t.processor is not None
                    and all(final[sg.shard] == sg.gtid for sg in t.processor.position)
                    for t in tasks
                )
                live.update(view(rates))
                if done:
                    break
                time.sleep(0.2)
        for task in tasks:
            task.stop("demo finished")
        for t in threads:
            t.join(60)
        records = consume_all(broker.bootstrap, "demo.commerce.items")
        state = materialise(records)
        diff = compare(state, sim.source_truth("commerce", "items"), "id", ["id", "name", "qty", "price"])
        console.print(
            f"consumed {len(records)} records; materialised {len(state.rows)} rows; "
            f"{state.duplicates} duplicate deliveries"
        )
        if diff.empty:
            console.print("[bold green]verified: the topic equals the source table[/]")
            return 0
        console.print(f"[bold red]mismatch[/]\n{diff.summary()}")
        return 1
