"""SIGKILL the worker at random points during a mixed workload; the topics must equal the source.

Every kill lands while the worker streams: its /status endpoint says it reads the binlog (the
initial copy is complete), it has stored a position of its own, and it has sent a random number of
records since. At-least-once may deliver a change twice (the counts are printed and kept in the
README); exactly-once with ``read_committed`` must not. Kills during the copy are not in this
schedule: see the README on at-least-once copies.
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

from cdcworker.config import property_to_env
from cdcworker.offsets import OffsetValue
from cdcworker.verify import compare, materialise
from localkafka import KafkaBroker, consume_all, create_topics
from localkafka.broker import free_port
from localkafka.children import bound_preexec
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

KILLS = 20


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
        return subprocess.Popen(
            [sys.executable, "-m", "cdcworker.cli", "worker", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=bound_preexec(),
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
    # Let a last worker catch up with everything, then stop it cleanly.
    proc = _start(config, log)

    def caught_up() -> bool:
        _alive(proc, log)
        return _caught_up(sim, offsets)

    try:
        wait_for(caught_up, timeout=120, what="the last worker caught up")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
        offsets.close()

    records = consume_all(broker.bootstrap, f"{prefix}.shop.items", read_committed=read_committed)
    state = materialise(records)
    diff = compare(state, sim.source_truth("shop", "items"), "id", ["id", "name", "qty", "price"])
    assert diff.empty, diff.summary()
    assert kills == KILLS
    return CrashReport(state.applied, state.duplicates)


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
    report = _run_crash_scenario(
        tmp_path, kafka_broker, sim, "eos", {"exactly.once.support": "required", "poll.interval.ms": "100"}
    )
    with capsys.disabled():
        print("\n" + report.line("exactly-once"))
    assert report.duplicates == 0
