"""SIGKILL the worker at random points during a mixed workload; the topics must equal the source.

At-least-once may deliver a change twice (reported); exactly-once with ``read_committed`` must not.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdcworker.verify import compare, materialise
from localkafka import KafkaBroker, consume_all
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


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SHARDCDC_LOG_LEVEL": "WARNING"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cdcworker.cli", "worker", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=bound_preexec(),
        )


def _caught_up(broker: KafkaBroker, sim: VTGateSim, offsets_topic: str, read_committed: bool) -> bool:
    from cdcworker.offsets import OffsetValue

    try:
        records = consume_all(broker.bootstrap, offsets_topic, read_committed=read_committed)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False  # no worker has created the offsets topic yet
        raise
    if not records or records[-1].value is None:
        return False
    stored = OffsetValue.from_bytes(records[-1].value)
    return {sg.shard: sg.gtid for sg in stored.vgtid} == sim.positions("shop") and not stored.vgtid.copying


def _run_crash_scenario(tmp_path: Path, broker: KafkaBroker, sim: VTGateSim, prefix: str, extra: dict[str, str]) -> tuple[int, int]:
    rng = random.Random(20261122)
    workload = Workload(sim, "shop", table="items", seed=7, large_every=60, large_rows=300)
    workload.ensure_table()
    workload.run(transactions=150)  # history for the initial snapshot (VStream copy)
    config = tmp_path / "worker.properties"
    log = tmp_path / "worker.log"
    _write_config(config, broker, sim, prefix, extra)
    read_committed = extra.get("exactly.once.support") == "required"

    writer = threading.Thread(target=workload.run, kwargs={"transactions": 900, "rate": 120.0}, daemon=True)
    writer.start()
    kills = 0
    try:
        for _ in range(KILLS):
            proc = _start(config, log)
            # The fault schedule: kill after a random 0.3-1.2 s of work (startup included), mid-copy,
            # mid-transaction or between offset flushes alike.
            time.sleep(rng.uniform(0.3, 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills += 1
    finally:
        workload.stop()
        writer.join(60)
    # Let a last worker catch up with everything, then stop it cleanly.
    proc = _start(config, log)
    try:
        deadline = time.monotonic() + 120
        while not _caught_up(broker, sim, f"offsets-{prefix}", read_committed):
            assert proc.poll() is None, f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"worker did not catch up:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]

    records = consume_all(broker.bootstrap, f"{prefix}.shop.items", read_committed=read_committed)
    state = materialise(records)
    diff = compare(state, sim.source_truth("shop", "items"), "id", ["id", "name", "qty", "price"])
    assert diff.empty, diff.summary()
    assert kills == KILLS
    return state.applied, state.duplicates


def test_at_least_once_survives_20_kills(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    applied, duplicates = _run_crash_scenario(tmp_path, kafka_broker, sim, "alo", {})
    print(f"at-least-once: {applied} records applied, {duplicates} duplicates after {KILLS} kills")
    assert applied > 0


def test_exactly_once_survives_20_kills_without_duplicates(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    applied, duplicates = _run_crash_scenario(
        tmp_path, kafka_broker, sim, "eos", {"exactly.once.support": "required", "poll.interval.ms": "100"}
    )
    print(f"exactly-once: {applied} records applied, {duplicates} duplicates after {KILLS} kills")
    assert duplicates == 0
