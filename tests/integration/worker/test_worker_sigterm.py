"""SIGTERM under load: the worker stops reading, flushes, commits its offset and exits 0 in time.

A worker process streams a two-shard keyspace while a workload writes (multi-row and large
transactions). On SIGTERM it must exit 0 within ``shardcdc.shutdown.grace.ms`` (plus process
teardown), and the offset it stored must cover exactly what Kafka holds: every transaction up to
the stored position is in the topic (no loss), and at most the one transaction after it per shard
(streamed but not yet committed when the signal came) is there beyond it (the replay bound).
A second run from that offset, stopped the same way, then makes the topic equal the source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from cdcoperator.local.children import start_bound
from cdcworker.offsets import OffsetValue
from localkafka import ConsumedRecord, KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

KEYSPACE = "shop"
SHARDS = ["-80", "80-"]
GRACE_MS = 4000
# Interpreter start-up is not part of the bound; the teardown after the flush (closing the gRPC
# channel, the producers, the metrics server) is, and gets this much on a loaded 2-core machine.
TEARDOWN_S = 3.0


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace(KEYSPACE, SHARDS)
        yield s


def _gtid_number(gtid: str) -> int:
    """The last transaction number of a one-server MySQL56 set (``MySQL56/<uuid>:1-N``)."""
    interval = gtid.rsplit(":", 1)[1]
    return int(interval.rsplit("-", 1)[-1])


def _write_config(path: Path, broker: KafkaBroker, sim: VTGateSim, prefix: str, start: str) -> None:
    host, port = sim.address.rsplit(":", 1)
    props = {
        "name": f"sigterm-{prefix}",
        "topic.prefix": prefix,
        "database.hostname": host,
        "database.port": port,
        "vitess.keyspace": KEYSPACE,
        "vitess.shard": ",".join(SHARDS),
        "vitess.vgtid": start,
        "vitess.tablet.type": "PRIMARY",
        "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}",
        "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        # Long enough that the offset written at shutdown is not just the periodic one.
        "offset.flush.interval.ms": "1000",
        "snapshot.mode": "never",
        "topic.creation.default.partitions": "3",
        "shardcdc.shutdown.grace.ms": str(GRACE_MS),
        "shardcdc.metrics.port": "0",
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SHARDCDC_LOG_LEVEL": "INFO"}
    with log.open("ab") as out:
        return start_bound(
            [sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _stored(broker: KafkaBroker, prefix: str) -> dict[str, int] | None:
    try:
        records = consume_all(broker.bootstrap, f"offsets-{prefix}")
    except KafkaException:  # the worker has not created its offsets topic yet
        return None
    if not records or records[-1].value is None:
        return None
    return {sg.shard: _gtid_number(sg.gtid) for sg in OffsetValue.from_bytes(records[-1].value).vgtid}


def _transactions(records: list[ConsumedRecord]) -> dict[str, set[int]]:
    """Per shard: the transaction numbers that have records in the topic."""
    out: dict[str, set[int]] = defaultdict(set)
    for r in records:
        if r.value is None:
            continue
        source = json.loads(r.value)["payload"]["source"]
        at = {sg["shard"]: sg["gtid"] for sg in json.loads(source["vgtid"])}
        out[source["shard"]].add(_gtid_number(at[source["shard"]]))
    return out


def _sigterm(proc: subprocess.Popen[bytes], log: Path) -> float:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(GRACE_MS / 1000 + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"worker ignored SIGTERM:\n{log.read_text()[-3000:]}") from None
    elapsed = time.monotonic() - t0
    assert rc == 0, f"exit code {rc}:\n{log.read_text()[-3000:]}"
    return elapsed


def _wait(predicate: object, timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert proc.poll() is None, f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)  # polling Kafka for a condition


def test_sigterm_under_load_flushes_commits_and_exits_0(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    prefix = f"sigterm{os.getpid()}"
    topic = f"{prefix}.{KEYSPACE}.items"
    workload = Workload(sim, KEYSPACE, table="items", seed=11, large_every=40, large_rows=400)
    workload.ensure_table()
    base = sim.positions(KEYSPACE)
    start = json.dumps([{"keyspace": KEYSPACE, "shard": s, "gtid": base[s]} for s in SHARDS])
    config, log = tmp_path / "worker.properties", tmp_path / "worker.log"
    _write_config(config, kafka_broker, sim, prefix, start)

    writer = threading.Thread(target=workload.run, kwargs={"rate": 300.0}, daemon=True)
    proc = _start(config, log)
    try:
        writer.start()
        # Under load: the worker has stored progress on both shards and the workload goes on.
        _wait(lambda: (s := _stored(kafka_broker, prefix)) is not None
              and all(s[sh] > _gtid_number(base[sh]) for sh in SHARDS), 60, "first offsets", proc, log)
        elapsed = _sigterm(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        workload.stop()
        writer.join(60)
    assert elapsed < GRACE_MS / 1000 + TEARDOWN_S, f"took {elapsed:.2f}s to stop"
    text = log.read_text()
    assert "worker exiting with status 0: received SIGTERM" in text, text[-3000:]

    stored = _stored(kafka_broker, prefix)
    assert stored is not None
    in_kafka = _transactions(consume_all(kafka_broker.bootstrap, topic))
    for shard in SHARDS:
        first, last = _gtid_number(base[shard]) + 1, stored[shard]
        committed = {n for n in in_kafka[shard] if n <= last}
        beyond = sorted(n for n in in_kafka[shard] if n > last)
        # No loss: every transaction up to the stored position is in Kafka (each one changes rows).
        assert committed == set(range(first, last + 1)), (shard, sorted(set(range(first, last + 1)) - committed))
        # No replay beyond one transaction: at most the next one was (partly) written.
        assert beyond in ([], [last + 1]), (shard, last, beyond)
        print(f"{shard}: stored {last} (from {first - 1}), beyond {beyond}, head at stop+teardown {sim.position(KEYSPACE, shard)}")
    print(f"stopped in {elapsed:.2f}s")

    # Resume from the stored offset, catch up with the rest, stop the same way: topic == source.
    proc = _start(config, log)
    try:
        heads = {s: _gtid_number(g) for s, g in sim.positions(KEYSPACE).items()}
        _wait(lambda: _stored(kafka_broker, prefix) == heads, 60, "the second run to catch up", proc, log)
        _sigterm(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    records = consume_all(kafka_broker.bootstrap, topic)
    state = materialise(records)
    diff = compare(state, sim.source_truth(KEYSPACE, "items"), "id", ["id", "name", "qty", "price"])
    assert diff.empty, diff.summary()
    assert state.applied > 0
