"""SIGKILL the worker at random points during a mixed workload; the topics must equal the source.

In the streaming schedules every kill lands while the worker streams: its /status endpoint says
it reads the binlog (the initial copy is complete), it has stored a position of its own, and it
has sent a random number of records since. At-least-once may deliver a change twice (the counts
are printed and kept in the README); exactly-once with ``read_committed`` must not. The copy
schedule kills an exactly-once worker during a two-table initial copy (``_run_copy_crash_scenario``);
at-least-once is not exact there: see the README.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from worker_fixtures import wait_for

from cdcoperator.local.children import start_bound
from cdcworker.config import property_to_env
from cdcworker.offsets import OffsetValue
from localkafka import KafkaBroker, consume_all, create_topics
from localkafka.broker import free_port
from shardcdc_cli.materialise import Materialised, compare, materialise
from vtgatesim import FaultPlan, VTGateSim
from vtgatesim.workload import Workload

KILLS = 20
EXACTLY_ONCE = {"exactly.once.support": "required", "poll.interval.ms": "100"}


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"])
        yield s


def _write_config(path: Path, broker: KafkaBroker, sim: VTGateSim, prefix: str, extra: dict[str, str]) -> None:
    host, port = sim.address.rsplit(":", 1)
    props = {
        "name": f"crash-{prefix}",
        "topic.prefix": prefix,
        "database.hostname": host,
        "database.port": port,
        "vitess.keyspace": "shop",
        "vitess.tablet.type": "PRIMARY",
        "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}",
        "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "offset.flush.interval.ms": "50",
        "snapshot.mode": "initial",
        "topic.creation.default.partitions": "3",
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def _start(config: Path, log: Path, status_port: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SHARDCDC_LOG_LEVEL": "WARNING", property_to_env("shardcdc.metrics.port"): str(status_port)}
    with log.open("ab") as out:
        return start_bound(
            [sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _status(port: int) -> dict[str, Any]:
    """The worker's /status document; {} while its endpoint is not up yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
            return doc
    except OSError:
        return {}


def _alive(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is not None:  # not an AssertionError: wait_for must not wait this out
        raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")


def _sent(proc: subprocess.Popen[bytes], port: int, records: int, log: Path) -> bool:
    """This process has sent ``records`` records."""
    _alive(proc, log)
    return _status(port).get("records_sent", -1) >= records


class OffsetsWatch:
    """The newest record of the task's offsets topic (one task, one key), read as it arrives."""

    def __init__(self, broker: KafkaBroker, topic: str, read_committed: bool) -> None:
        create_topics(broker.bootstrap, [topic], partitions=1, config={"cleanup.policy": "compact"})
        self._consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"offsets-watch-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.latest: OffsetValue | None = None

    def read(self) -> OffsetValue | None:
        """Everything that arrived since the last read; the newest offset."""
        while (msg := self._consumer.poll(0.05)) is not None:
            if msg.error() is not None:
                raise KafkaException(msg.error())
            if msg.value() is not None:
                self.latest = OffsetValue.from_bytes(msg.value())
        return self.latest

    def close(self) -> None:
        self._consumer.close()


def _streams_durably(
    proc: subprocess.Popen[bytes], port: int, log: Path, offsets: OffsetsWatch, earlier: OffsetValue | None
) -> dict[str, Any] | None:
    """The status once this process streams the binlog and has stored a position of its own."""
    _alive(proc, log)
    doc = _status(port)
    if not (doc.get("connected") and doc.get("state") == "streaming"):
        return None
    now = offsets.read()
    return doc if now is not None and now != earlier and not now.vgtid.copying else None


def _caught_up(sim: VTGateSim, offsets: OffsetsWatch) -> bool:
    stored = offsets.read()
    return stored is not None and {sg.shard: sg.gtid for sg in stored.vgtid} == sim.positions("shop") and not stored.vgtid.copying


@dataclass
class CrashReport:
    applied: int  # records applied by the verifier
    duplicates: int  # changes delivered more than once

    def line(self, mode: str) -> str:
        return f"{mode}: {self.applied} records applied, {self.duplicates} duplicates after {KILLS} kills while streaming"


def _run_crash_scenario(tmp_path: Path, broker: KafkaBroker, sim: VTGateSim, prefix: str, extra: dict[str, str]) -> CrashReport:
    rng = random.Random(20261122)
    workload = Workload(sim, "shop", table="items", seed=7, large_every=60, large_rows=300)
    workload.ensure_table()
    workload.run(transactions=150)  # history for the initial snapshot (VStream copy)
    config = tmp_path / "worker.properties"
    log = tmp_path / "worker.log"
    _write_config(config, broker, sim, prefix, extra)
    read_committed = extra.get("exactly.once.support") == "required"

    # The workload runs until the last kill, so every worker has changes to stream.
    writer = threading.Thread(target=workload.run, kwargs={"rate": 40.0}, daemon=True)
    writer.start()
    offsets = OffsetsWatch(broker, f"offsets-{prefix}", read_committed)
    kills = 0
    try:
        for _ in range(KILLS):
            port = free_port()
            earlier = offsets.read()
            proc = _start(config, log, port)
            # The fault schedule: once this process streams and its progress is durable (observed
            # on its status endpoint and in the offsets topic), kill it after a random number of
            # further records: mid-transaction, mid-batch or between offset flushes alike.
            durable = functools.partial(_streams_durably, proc, port, log, offsets, earlier)
            doc = wait_for(durable, timeout=60, what="a stored streaming position")
            after = doc["records_sent"] + rng.randint(1, 400)
            wait_for(functools.partial(_sent, proc, port, after, log), timeout=60, what=f"{after} records sent")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills += 1
    finally:
        workload.stop()
        writer.join(60)
    _last_worker_catches_up(config, log, sim, offsets)
    state = _verified(broker, prefix, sim, "items", read_committed)
    assert kills == KILLS
    return CrashReport(state.applied, state.duplicates)


def _last_worker_catches_up(config: Path, log: Path, sim: VTGateSim, offsets: OffsetsWatch) -> None:
    """A last worker catches up with everything, then stops cleanly (SIGTERM, exit 0)."""
    port = free_port()
    proc = _start(config, log, port)

    def caught_up() -> bool:
        # The stored position alone is not enough: the killed worker's last transaction may commit
        # (its coordinator finishing it) before this one has even installed its signal handlers,
        # and a SIGTERM then would find Python's default action (CI: exit -15). So this worker must
        # itself stream, having got its producer id, before it is asked to stop.
        _alive(proc, log)
        doc = _status(port)
        return doc.get("state") == "streaming" and _caught_up(sim, offsets)

    try:
        # Exactly-once, the killed worker's open transaction must end before the new producer gets
        # its id: Kafka answers CONCURRENT_TRANSACTIONS until then, and once in CI that lasted
        # ~60 s (librdkafka's transaction.timeout.ms), so the catch-up starts that much later.
        wait_for(caught_up, timeout=240, what="the last worker caught up")
    except BaseException:
        proc.kill()  # the wait's own failure is the one to report, with the worker's log
        proc.wait(10)
        print(log.read_text()[-3000:])
        offsets.close()
        raise
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        offsets.close()


def _verified(broker: KafkaBroker, prefix: str, sim: VTGateSim, table: str, read_committed: bool) -> Materialised:
    """The table's topic materialised per key; it must equal the source table."""
    state = materialise(consume_all(broker.bootstrap, f"{prefix}.shop.{table}", read_committed=read_committed))
    diff = compare(state, sim.source_truth("shop", table), "id", ["id", "name", "qty", "price"])
    assert diff.empty, f"{table}: {diff.summary()}"
    return state


def test_at_least_once_survives_20_kills(
    tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run_crash_scenario(tmp_path, kafka_broker, sim, "alo", {})
    with capsys.disabled():  # the counts belong in the test output (README, "Crash test")
        print("\n" + report.line("at-least-once"))
    assert report.applied > 0


def test_exactly_once_survives_20_kills_without_duplicates(
    tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run_crash_scenario(tmp_path, kafka_broker, sim, "eos", EXACTLY_ONCE)
    with capsys.disabled():
        print("\n" + report.line("exactly-once"))
    assert report.duplicates == 0


# --- kills during the initial copy ----------------------------------------------------------------

# Copied in name order: a small table, then a large one, so kills land in either, and between them.
COPY_TABLES = (("items", 80), ("orders", 600))  # (table, history transactions): ~2,500 and ~19,000 rows
# Each kill waits until the stored position copies this table (a completed one stays listed).
COPY_SCHEDULE = ("items", "items", "orders", "orders", "orders", "orders")


def _copies_durably(
    proc: subprocess.Popen[bytes], port: int, log: Path, offsets: OffsetsWatch, earlier: OffsetValue | None,
    table: str, stall: FaultPlan,
) -> dict[str, Any] | None:
    """Once this process has stored a position of its own: its status if it copies (/status says
    ``snapshotting``) and that position's ``table_p_ks`` lists ``table``, or ``{"stalled": True}``
    if its stream stalled before that."""
    _alive(proc, log)
    now = offsets.read()
    if now is None or now == earlier:
        return None
    if stall.stalled.is_set():
        return {"stalled": True}
    doc = _status(port)
    if not (doc.get("connected") and doc.get("state") == "snapshotting"):
        return None
    return doc if any(t.table_name == table for sg in now.vgtid for t in sg.table_p_ks) else None


def _sent_or_stalled(proc: subprocess.Popen[bytes], port: int, records: int, log: Path, stall: FaultPlan) -> bool:
    return stall.stalled.is_set() or _sent(proc, port, records, log)


def _copying_tables(value: OffsetValue) -> str:
    """The tables of each shard's stored copy position (for the test output)."""
    return " ".join(f"{sg.shard}:{'+'.join(t.table_name for t in sg.table_p_ks) or ('copy' if not sg.gtid else 'done')}"
                    for sg in value.vgtid)


@dataclass
class CopyCrashReport:
    applied: int
    duplicates: int
    positions: list[str]  # the stored copy position at each kill

    def line(self, mode: str) -> str:
        return (f"{mode}: {self.applied} records applied, {self.duplicates} duplicates after {len(self.positions)} "
                f"kills during the initial copy (stored position at each kill: {'; '.join(self.positions)})")


def _run_copy_crash_scenario(
    tmp_path: Path, broker: KafkaBroker, sim: VTGateSim, prefix: str, extra: dict[str, str]
) -> CopyCrashReport:
    """SIGKILL the worker during a two-table initial copy while the workload writes to both tables.

    Each process copies until it is killed: its VStream stalls after a random 2,500-3,500 events
    (six processes cannot copy the ~21,500 rows), and each response is slowed by 2 ms so records
    flow while the kill lands. The kill comes once the process reports ``snapshotting`` and has
    stored a position of its own (observed in the offsets topic) copying the scheduled table,
    after a random 1-2,000 further records; or at the stall if that comes first. So kills land in
    catch-ups, in copy batches and while a shard is between the two tables. A last worker then
    finishes the copy and catches up with the workload.
    """
    rng = random.Random(20261123)
    sim.packet_size = 1000  # ~30 rows per copy batch: many commit points with table_p_ks
    workloads = []
    for i, (table, history) in enumerate(COPY_TABLES):
        w = Workload(sim, "shop", table=table, seed=11 + i, large_every=10, large_rows=300)
        w.ensure_table()
        w.run(transactions=history)
        w.large_every = 60  # while the worker runs: 20 transactions/s per table, every 60th a 300-row insert
        workloads.append(w)
    config = tmp_path / "worker.properties"
    log = tmp_path / "worker.log"
    _write_config(config, broker, sim, prefix, extra)
    read_committed = extra.get("exactly.once.support") == "required"
    writers = [threading.Thread(target=w.run, kwargs={"rate": 20.0}, daemon=True) for w in workloads]
    for t in writers:
        t.start()
    offsets = OffsetsWatch(broker, f"offsets-{prefix}", read_committed)
    positions = []
    try:
        for table in COPY_SCHEDULE:
            port = free_port()
            earlier = offsets.read()
            stall = sim.inject(FaultPlan(stall_after_events=rng.randint(2500, 3500), delay_per_response=0.002))
            proc = _start(config, log, port)
            copying = functools.partial(_copies_durably, proc, port, log, offsets, earlier, table, stall)
            doc = wait_for(copying, timeout=60, what=f"a stored position of this process copying {table}")
            if not doc.get("stalled"):
                after = doc["records_sent"] + rng.randint(1, 2000)
                wait_for(functools.partial(_sent_or_stalled, proc, port, after, log, stall), timeout=60,
                         what=f"{after} records sent or the stall")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            stored = offsets.read()
            assert stored is not None and stored.vgtid.copying, f"not a copy to resume: {stored}"
            positions.append(_copying_tables(stored))
    finally:
        for w in workloads:
            w.stop()
        for t in writers:
            t.join(60)
        sim.faults.clear()
    _last_worker_catches_up(config, log, sim, offsets)
    states = [_verified(broker, prefix, sim, table, read_committed) for table, _ in COPY_TABLES]
    return CopyCrashReport(sum(s.applied for s in states), sum(s.duplicates for s in states), positions)


def test_exactly_once_survives_kills_during_the_copy_without_duplicates(
    tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run_copy_crash_scenario(tmp_path, kafka_broker, sim, "eoscopy", EXACTLY_ONCE)
    with capsys.disabled():
        print("\n" + report.line("exactly-once"))
    assert report.duplicates == 0
    assert len(report.positions) == len(COPY_SCHEDULE)
