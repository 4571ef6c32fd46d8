"""Helpers for worker tests: a simulated keyspace, a worker config, running a task in a thread."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from polling import wait_for as wait_for  # re-exported for the worker tests

from cdcworker.config import WorkerConfig, load_config
from cdcworker.sink import KafkaSink
from cdcworker.task import TaskResult, WorkerTask
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

T = TypeVar("T")

CUSTOMER_DDL = (
    "CREATE TABLE customer (id BIGINT NOT NULL AUTO_INCREMENT, email VARCHAR(128), "
    "PRIMARY KEY (id))"
)


def worker_config(
    broker: KafkaBroker,
    vtgate: str,
    keyspace: str,
    prefix: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> WorkerConfig:
    return load_config([], env={}, overrides=worker_properties(broker, vtgate, keyspace, prefix, extra))


def worker_properties(
    broker: KafkaBroker,
    vtgate: str,
    keyspace: str,
    prefix: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``worker_config``'s properties (for a worker started as a process: ``-c`` file)."""
    host, port = vtgate.rsplit(":", 1)
    prefix = prefix or f"p{uuid.uuid4().hex[:8]}"
    props = {
        "name": f"conn-{prefix}",
        "topic.prefix": prefix,
        "database.hostname": host,
        "database.port": port,
        "vitess.keyspace": keyspace,
        "vitess.tablet.type": "PRIMARY",
        "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}",
        "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "offset.flush.interval.ms": "100",
        "snapshot.mode": "never",
        "shardcdc.metrics.port": "0",  # several tasks share this process
        **(extra or {}),
    }
    return props


def insert_customers(sim: VTGateSim, ids: range, keyspace: str = "commerce") -> None:
    """One transaction per row of ``CUSTOMER_DDL``'s table."""
    for i in ids:
        sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", keyspace)


@contextmanager
def commerce_sim(ddl: tuple[str, ...] | list[str] = (CUSTOMER_DDL,), customers: int = 0) -> Iterator[VTGateSim]:
    """A test server with keyspace ``commerce`` over ``-80, 80-`` made of ``ddl``, holding customers
    ``1..customers`` (one transaction each)."""
    with VTGateSim() as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=list(ddl))
        insert_customers(sim, range(1, customers + 1))
        yield sim


def start_here(sim: VTGateSim, keyspace: str = "commerce") -> dict[str, str]:
    """Properties that start a task at the shards' positions now: later writes are streamed,
    earlier ones not, whenever the task connects (no wait for it to be positioned)."""
    positions = sim.positions(keyspace)
    start = [{"keyspace": keyspace, "shard": shard, "gtid": gtid} for shard, gtid in positions.items()]
    return {"vitess.shard": ",".join(positions), "vitess.vgtid": json.dumps(start)}


class RecordingSink(KafkaSink):
    """The sink interface the processor uses, recording instead of producing."""

    def __init__(self) -> None:  # no producer
        self.records: list[tuple[Any, ...]] = []
        self.points: list[str] = []
        self.records_sent = 0

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any) -> None:
        self.records.append((topic, None, key, value, list(headers or [])))
        self.records_sent += 1

    def send_to_partition(self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any) -> None:
        self.records.append((topic, partition, key, value, list(headers or [])))
        self.records_sent += 1

    def commit_point(self, position: Any) -> None:
        self.points.append(repr(position))


class PositionSink(RecordingSink):
    """A ``RecordingSink`` that keeps every commit point's position object."""

    def __init__(self) -> None:
        super().__init__()
        self.positions: list[Any] = []

    def commit_point(self, position: Any) -> None:
        self.positions.append(position)


def _dump_if_alive(thread: threading.Thread) -> None:
    """Every thread's stack on stderr when the worker outlived its wait: where it is stuck."""
    if thread.is_alive():
        import faulthandler

        faulthandler.dump_traceback(all_threads=True)


@dataclass
class RunningTask:
    task: WorkerTask
    thread: threading.Thread
    result: TaskResult | None = None

    def stop(self, timeout: float = 60.0) -> TaskResult:
        self.task.stop("test stop")
        self.thread.join(timeout)
        _dump_if_alive(self.thread)
        assert not self.thread.is_alive(), "worker did not stop"
        assert self.result is not None
        return self.result

    def wait(self, timeout: float = 60.0) -> TaskResult:
        self.thread.join(timeout)
        _dump_if_alive(self.thread)
        assert not self.thread.is_alive(), "worker did not finish"
        assert self.result is not None
        return self.result


@contextmanager
def running_task(config: WorkerConfig) -> Iterator[RunningTask]:
    task = WorkerTask(config)
    holder = RunningTask(task, threading.Thread())

    def body() -> None:
        holder.result = task.run()

    holder.thread = threading.Thread(target=body, name="worker-task", daemon=True)
    holder.thread.start()
    try:
        yield holder
    finally:
        if holder.thread.is_alive():
            task.stop("test teardown")
            holder.thread.join(60)


def caught_up(sim: VTGateSim, run: RunningTask, keyspace: str = "commerce") -> bool:
    """Everything committed on the task's shards was read and Kafka acknowledged it."""
    p, sink = run.task.processor, run.task.sink
    if p is None or sink is None or p.position is None:
        return False
    source = sim.positions(keyspace)
    held = {sg.shard: sg.gtid for sg in p.position}
    return bool(held) and all(source.get(shard) == gtid for shard, gtid in held.items()) and sink.pending == 0


def wait_positioned(sim: VTGateSim, run: RunningTask, keyspace: str = "commerce") -> None:
    """Wait until the task holds a real position on every shard of ``keyspace``.

    A start from ``current`` is resolved per shard when that shard's stream starts (as in VTGate),
    so a write made before then is, rightly, not streamed: tests write only after this.
    """
    wait_for(lambda: caught_up(sim, run, keyspace), what="the stream positioned at the current GTIDs")
