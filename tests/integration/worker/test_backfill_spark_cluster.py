"""The backfill on a real Spark standalone cluster (devkit/sparkcluster): a master and two workers,
each launching its own executor JVM, and the job submitted with ``spark-submit --master spark://``
(the sparkSubmit engine's command, in client mode). Executors are separate processes that die:
the output must stay exact after materialisation whatever is killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
from polling import wait_for

from cdcworker.backfill import spark_main
from cdcworker.backfill.catchup import run_catchup
from cdcworker.backfill.job import FAULT_DIR_ENV, progress_store, worker_config
from cdcworker.backfill.progress import ChunkDone, RunState, parse_record
from cdcworker.backfill.spec import BackfillSpec
from cdcworker.config import load_config
from cdcworker.offsets import Vgtid
from localkafka import KafkaBroker, consume_all
from sparkcluster import SparkCluster, alive
from vtgatesim import VTGateSim

TABLES = ("items", "orders", "lines")
APP = Path(spark_main.__file__)
SUBMIT_TIMEOUT = 600.0  # a loaded 2-core machine starts a driver and two executor JVMs slowly
SUMMARY = re.compile(r"(\d+) chunks read, (\d+) already done")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores_per_worker=1) as c:
        yield c


def submit_args(spec: BackfillSpec) -> list[str]:
    """``shardcdc backfill`` arguments, as the operator's job_arguments pass them (properties inline
    here instead of a mounted config file)."""
    args = ["--run-id", spec.run_id, "--chunk-size", str(spec.chunk_size),
            "--max-concurrent-chunks", str(spec.max_concurrent_chunks_per_shard)]
    if spec.rows_per_second_per_shard:
        args += ["--rows-per-second", str(spec.rows_per_second_per_shard)]
    for t in spec.tables:
        args += ["--table", t]
    for k, v in spec.properties.items():
        args += ["--set", f"{k}={v}"]
    return args


def submit(cluster: SparkCluster, spec: BackfillSpec, fault_dir: Path | None = None, name: str = "submit"
           ) -> subprocess.Popen[Any]:
    conf = {"spark.speculation": "false", "spark.executor.cores": "1"}
    if fault_dir is not None:
        conf[f"spark.executorEnv.{FAULT_DIR_ENV}"] = str(fault_dir)
    return cluster.submit(APP, submit_args(spec), conf, log_name=f"{spec.run_id}-{name}")


def finish(cluster: SparkCluster, proc: subprocess.Popen[Any], spec: BackfillSpec, name: str = "submit"
           ) -> tuple[int, int, str]:
    """Wait for spark-submit; it must succeed. (chunks read, chunks already done, its log)."""
    rc = proc.wait(SUBMIT_TIMEOUT)
    log = cluster.log(f"{spec.run_id}-{name}")
    assert rc == 0, f"spark-submit exited {rc}:\n{log[-4000:]}"
    m = SUMMARY.search(log)
    assert m, log[-2000:]
    return int(m.group(1)), int(m.group(2)), log


def await_held(fault_dir: Path, proc: subprocess.Popen[Any], cluster: SparkCluster, spec: BackfillSpec,
               name: str = "submit") -> dict[str, Any]:
    """The fault hook's record, once a task stopped half-way through a chunk (its file polled)."""
    def held() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"spark-submit ended before a chunk was held:\n{cluster.log(f'{spec.run_id}-{name}')[-4000:]}")
        return (fault_dir / "held").exists()

    wait_for(held, SUBMIT_TIMEOUT, "a chunk held mid-way by the fault hook", period=0.1)
    return dict(json.loads((fault_dir / "held").read_bytes()))


def done_records(spec: BackfillSpec) -> list[ChunkDone]:
    store = progress_store(spec, worker_config(spec))
    recs = (parse_record(v) for _, v in store.records() if v is not None)
    return [r for r in recs if isinstance(r, ChunkDone) and r.chunk.run_id == spec.run_id]


def assert_each_chunk_done_once(spec: BackfillSpec, state: RunState) -> None:
    """No chunk was read to the end twice: one done record per chunk of the plan."""
    counts = Counter((r.chunk.shard, r.chunk.table, r.chunk.index) for r in done_records(spec))
    total = sum(p.chunks for p in state.plans.values())
    assert len(counts) == total and set(counts.values()) == {1}, counts.most_common(3)


def catch_up_and_compare(kafka_broker: KafkaBroker, sim: VTGateSim, spec: BackfillSpec, hold: dict[str, str]
                         ) -> RunState:
    """The worker's catch-up from its hold (taken before the run), then the topics must
    materialise to the source exactly."""
    state = progress_store(spec, worker_config(spec)).load(spec.run_id)
    assert state.complete
    end = Vgtid.of(KS, sim.positions(KS))
    h = handoffs(state, TABLES, hold)
    run_catchup(load_config([], env={}, overrides=dict(spec.properties)), h, catchup_start(h), end)
    assert_topics_equal_source(kafka_broker, sim, spec.properties["topic.prefix"])
    return state


def snapshot_reads(broker: KafkaBroker, spec: BackfillSpec) -> int:
    topics = [f"{spec.properties['topic.prefix']}.{KS}.{t}" for t in TABLES]
    return sum(1 for r in consume_all(broker.bootstrap, topics) if r.value and b'"op":"r"' in r.value)


@dataclass
class Run:
    spec: BackfillSpec
    transactions: dict[str, int]
    state: RunState | None = None


@contextmanager
def backfill_under_workload(kafka_broker: KafkaBroker, run_id: str, lanes_per_shard: int) -> Iterator[Run]:
    """Three tables over 4 shards under a live workload for the block (which runs the backfill);
    then the worker's catch-up, and the topics must equal the source (``Run.state``: the run)."""
    with VTGateSim() as sim:
        make_keyspace(sim)
        loads = populate(sim, 1200)
        spec = BackfillSpec(run_id, TABLES, props(kafka_broker, sim), chunk_size=150,
                            max_concurrent_chunks_per_shard=lanes_per_shard)
        hold = sim.positions(KS)  # a worker's hold_from: taken before any chunk is read
        with live_workload(sim, loads) as count:
            run = Run(spec, count)
            yield run
        run.state = catch_up_and_compare(kafka_broker, sim, spec, hold)


def armed(tmp_path: Path) -> Path:
    """A fault directory whose hook holds the first chunk that reaches it after its lane finished one."""
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    (fault_dir / "hold-armed").touch()
    return fault_dir


def test_cluster_backfill_under_workload_is_exact(cluster: SparkCluster, kafka_broker: KafkaBroker) -> None:
    with backfill_under_workload(kafka_broker, "cluster-1", lanes_per_shard=2) as run:
        read, skipped, _ = finish(cluster, submit(cluster, run.spec), run.spec)
        assert run.transactions["transactions"] > 0
    assert run.state is not None
    assert (read, skipped) == (sum(p.chunks for p in run.state.plans.values()), 0)
    assert_each_chunk_done_once(run.spec, run.state)
    # Executors ran on both workers, each its own JVM (its directory under each worker's).
    assert all(any(cluster.worker_dir(i).glob("app-*/*/stderr")) for i in range(2))


def test_an_executor_jvm_killed_mid_chunk_is_rerun_and_exact(cluster: SparkCluster, kafka_broker: KafkaBroker,
                                                            tmp_path: Path) -> None:
    """A task holds half-way through a chunk (its lane finished a chunk before); its executor JVM
    is SIGKILLed. Spark reruns the task elsewhere: the lane's finished chunks are skipped (one done
    record per chunk), the held chunk is read again, and the output materialises exactly."""
    fault_dir = armed(tmp_path)
    with backfill_under_workload(kafka_broker, "cluster-exec", lanes_per_shard=1) as run:
        proc = submit(cluster, run.spec, fault_dir)
        held = await_held(fault_dir, proc, cluster, run.spec)
        executor = cluster.executor_of(held["pid"])
        assert executor is not None, f"no executor JVM above the task's Python worker {held['pid']}"
        os.kill(executor.pid, signal.SIGKILL)
        # The executor's Python workers go with it (PySpark's daemon ends when its JVM does):
        # nothing of the killed attempt writes after this.
        wait_for(lambda: not alive(held["pid"]), 60, "the killed executor's Python worker to exit")
        read, skipped, log = finish(cluster, proc, run.spec)
    assert run.state is not None
    assert "ExecutorLostFailure" in log, "Spark did not see the executor die"
    assert skipped >= 1, "the rerun task must skip the chunk its lane finished before the kill"
    assert read + skipped == sum(p.chunks for p in run.state.plans.values())
    assert_each_chunk_done_once(run.spec, run.state)
    # The held chunk's first half was delivered by the killed attempt and again by the rerun.
    assert snapshot_reads(kafka_broker, run.spec) > sum(d.rows for d in run.state.done.values())


def test_a_killed_driver_rerun_with_the_same_run_id_resumes(cluster: SparkCluster, kafka_broker: KafkaBroker,
                                                           tmp_path: Path) -> None:
    """spark-submit (the driver) is SIGKILLed while a chunk is half-way; its executors go. A second
    spark-submit with the same run id reads only the chunks not done, and the result is exact."""
    fault_dir = armed(tmp_path)
    with backfill_under_workload(kafka_broker, "cluster-driver", lanes_per_shard=1) as run:
        first = submit(cluster, run.spec, fault_dir, name="first")
        held = await_held(fault_dir, first, cluster, run.spec, "first")
        executor = cluster.executor_of(held["pid"])
        assert executor is not None
        SparkCluster.kill_driver(first)
        cluster.await_no_executors(executor.app_id)
        assert not alive(held["pid"])
        before = progress_store(run.spec, worker_config(run.spec)).load(run.spec.run_id)
        total = sum(p.chunks for p in before.plans.values())
        assert 0 < len(before.done) < total and not before.complete
        read, skipped, _ = finish(cluster, submit(cluster, run.spec, name="second"), run.spec, name="second")
    assert run.state is not None
    # The killed driver wrote no abandon marker: the rerun continues its epoch (which a worker's
    # hold would still be on), so chunks done before the kill keep their own high watermarks.
    assert run.state.epoch == before.epoch and not run.state.abandoned
    assert (read, skipped) == (total - len(before.done), len(before.done))
    assert_each_chunk_done_once(run.spec, run.state)
