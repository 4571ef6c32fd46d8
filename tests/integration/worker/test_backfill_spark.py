"""The backfill on Spark (local mode, one session for the module): executors read chunks over
gRPC and produce to Kafka themselves; a task killed mid-chunk is retried; the output is exact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backfill_fixtures import (
    KS,
    assert_topics_equal_source,
    catchup_start,
    handoffs,
    live_workload,
    make_keyspace,
    populate,
    props,
)

from cdcworker.backfill.catchup import run_catchup
from cdcworker.backfill.job import FAULT_DIR_ENV, progress_store, run_backfill, spark_session, worker_config
from cdcworker.backfill.spec import BackfillSpec
from cdcworker.config import load_config
from cdcworker.offsets import Vgtid
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

TABLES = ("items", "orders", "lines")


@pytest.fixture(scope="module")
def fault_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("backfill-faults")


@pytest.fixture(scope="module")
def spark(fault_dir: Path) -> Iterator[Any]:
    # local[2,2]: two cores, a failed task is tried twice (Spark's task retry).
    session = spark_session("local[2,2]", **{f"spark.executorEnv.{FAULT_DIR_ENV}": str(fault_dir)})
    try:
        yield session
    finally:
        session.stop()


def test_spark_backfill_with_a_task_killed_mid_chunk_equals_source(
    spark: Any, fault_dir: Path, kafka_broker: KafkaBroker
) -> None:
    """A task dies after delivering half of a chunk, having deleted (through VTGate) a row it had
    delivered; the retry reads the chunk without it at a later high watermark. The stale snapshot
    row must not be the key's last record: the catch-up, held from before the run as a worker is,
    emits the key's delete as its final change."""
    with VTGateSim() as sim:
        make_keyspace(sim)
        loads = populate(sim, 1200)
        p = props(kafka_broker, sim)
        spec = BackfillSpec("spark-1", TABLES, p, chunk_size=150, max_concurrent_chunks_per_shard=2)
        (fault_dir / "armed").touch()
        hold = sim.positions(KS)  # a worker's hold_from: taken before any chunk is read (the hand-shake)
        with live_workload(sim, loads):
            result = run_backfill(spec, engine="spark", spark=spark)
        end = Vgtid.of(KS, sim.positions(KS))
        assert (fault_dir / "fired").exists(), "the fault hook did not kill a task"
        fired = json.loads((fault_dir / "fired").read_bytes())
        assert result.chunks_read == result.chunks_total
        state = progress_store(spec, worker_config(spec)).load(spec.run_id)
        assert state.complete
        h = handoffs(state, TABLES, hold)
        run_catchup(load_config([], env={}, overrides=p), h, catchup_start(h), end)
        assert_topics_equal_source(kafka_broker, sim, p["topic.prefix"])
        # The deleted row: the killed attempt's snapshot row, then (the retry did not read it) its
        # delete from the catch-up, last.
        pk = state.plans[(fired["shard"], fired["table"])].pk
        ops = []
        for r in consume_all(kafka_broker.bootstrap, f"{p['topic.prefix']}.{KS}.{fired['table']}"):
            if r.value is None:
                continue
            payload = json.loads(r.value)["payload"]
            row = payload["after"] or payload["before"]
            if [row[c] for c in pk] == fired["key"]:
                ops.append(payload["op"])
        assert ops[0] == "r" and ops.count("r") == 1 and ops[-1] == "d", ops
        # The killed task's half chunk was delivered again by the retry: more reads than rows, no loss.
        topics = [f"{p['topic.prefix']}.{KS}.{t}" for t in TABLES]
        reads = sum(1 for r in consume_all(kafka_broker.bootstrap, topics) if r.value and b'"op":"r"' in r.value)
        assert reads > sum(d.rows for d in state.done.values())
