"""Streaming from real Vitess v24 (vttestserver over MariaDB 10.11, keyspace ``commerce`` over
``-80, 80-``): the copy phase, then inserts, updates, id changes (delete + insert in one transaction)
and deletes; the topic materialised equals the source, at-least-once and exactly-once, and after the
worker is SIGKILLed mid-stream. Positions here are MariaDB GTIDs (``MariaDB/0-<server>-<seq>``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from polling import wait_for
from realvitess_fixtures import Writer, records, topic_equals_source, worker_props
from worker_fixtures import running_task

from cdcoperator.local.children import start_bound, stop_group
from cdcworker import exitcodes
from cdcworker.config import load_config
from cdcworker.offsets import OffsetValue
from localkafka import KafkaBroker, consume_all
from realvitess import VTTestServer

pytestmark = pytest.mark.realvitess

EXACTLY_ONCE = {"exactly.once.support": "required", "poll.interval.ms": "100"}


@pytest.mark.parametrize(("table", "extra"), [("items_alo", {}), ("items_eos", EXACTLY_ONCE)],
                         ids=["at-least-once", "exactly-once"])
def test_copy_then_stream_equals_the_source(
    real_vitess: VTTestServer, kafka_broker: KafkaBroker, table: str, extra: dict[str, str]
) -> None:
    prefix = f"rv{uuid.uuid4().hex[:8]}"
    with real_vitess.client() as client:
        writer = Writer(client, table, seed=len(table) + len(extra))
        writer.insert(60)  # present before the worker starts: the VStream copy phase sends them
        cfg = load_config([], env={}, overrides=worker_props(kafka_broker, real_vitess, prefix, table, **extra))
        with running_task(cfg) as run:
            wait_for(lambda: len(records(kafka_broker, prefix, table)) >= 60, timeout=180,
                     what="the copy phase's 60 rows", period=0.5)
            writer.run(120)
            state = topic_equals_source(kafka_broker, client, prefix, table, read_committed=bool(extra))
            result = run.stop()
    assert result.exit_code == exitcodes.OK, result.reason
    assert state.tombstones > 0 and state.applied > 180
    if extra:
        assert state.duplicates == 0  # exactly-once: no change delivered twice
    stored = consume_all(kafka_broker.bootstrap, f"offsets-{prefix}")
    gtids = {sg.gtid for sg in OffsetValue.from_bytes(stored[-1].value or b"").vgtid}
    assert gtids and all(g.startswith("MariaDB/") for g in gtids), gtids


def _start_worker(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return start_bound([sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
                           stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SHARDCDC_LOG_LEVEL": "WARNING"})


def test_a_worker_killed_mid_stream_loses_nothing(
    real_vitess: VTTestServer, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Exactly-once worker SIGKILLed twice while it streams a workload; each restart resumes from
    its stored MariaDB position: the topic equals the source and holds no change twice."""
    table, prefix = "items_kill", f"rk{uuid.uuid4().hex[:8]}"
    config, log = tmp_path / "worker.properties", tmp_path / "worker.log"
    props = worker_props(kafka_broker, real_vitess, prefix, table, **EXACTLY_ONCE)
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    with real_vitess.client() as client:
        writer = Writer(client, table, seed=7)
        writer.insert(40)
        for _ in range(2):
            proc = _start_worker(config, log)
            try:
                seen = len(records(kafka_broker, prefix, table, read_committed=True))
                writer.run(40)
                wait_for(lambda n=seen: len(records(kafka_broker, prefix, table, read_committed=True)) > n + 10,
                         timeout=180, what="records streamed before the kill", period=0.5)
                assert proc.poll() is None, log.read_text()[-3000:]
                os.killpg(proc.pid, signal.SIGKILL)  # mid-stream: the writer's changes are still arriving
                writer.run(20)
            except AssertionError:
                print(log.read_text()[-4000:])  # the worker's side, in the test report
                raise
            finally:
                stop_group(proc, kill=True)
        proc = _start_worker(config, log)
        try:
            writer.run(20)
            state = topic_equals_source(kafka_broker, client, prefix, table, read_committed=True)
        finally:
            stop_group(proc)
    assert state.duplicates == 0, log.read_text()[-3000:]
