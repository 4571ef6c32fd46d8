"""Helpers for worker tests: a simulated keyspace, a worker config, running a task in a thread."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from cdcworker.config import WorkerConfig, load_config
from cdcworker.task import TaskResult, WorkerTask
from localkafka import KafkaBroker

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
    return load_config([], env={}, overrides=props)


@dataclass
class RunningTask:
    task: WorkerTask
    thread: threading.Thread
    result: TaskResult | None = None

    def stop(self, timeout: float = 60.0) -> TaskResult:
        self.task.stop("test stop")
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"
        assert self.result is not None
        return self.result

    def wait(self, timeout: float = 60.0) -> TaskResult:
        self.thread.join(timeout)
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


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling interval of a condition with a deadline, not synchronisation
