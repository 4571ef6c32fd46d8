"""The hand-off protocol against a real worker (``shardcdc worker`` in a subprocess), the VTGate test
server and the broker: a run cancelled mid-way releases its holds without losing a change (and a
table not in the run flows all along); a conditional run catches up the rows outside its
condition; a new connector whose initial snapshot is a backfill holds every table from its first
position; and the job's hand-shake (it waits for the workers' holds, or fails clearly).

Every proof is per key against the shards' binlogs (``handoff_fixtures.assert_per_key_sequences``)
plus the materialised topics equal to the source.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from backfill_fixtures import (
    KS,
    SHARDS,
    assert_topics_equal_source,
    live_workload,
    make_keyspace,
    populate,
    props,
)
from handoff_fixtures import (
    Worker,
    assert_per_key_sequences,
    caught_up,
    diagnose,
    handed_off,
    handed_off_then_flowing,
    live_record_of,
    offsets,
    phases,
    progress,
    records,
    wait,
)

from cdcworker.backfill import cli
from cdcworker.backfill.gtid import covers
from cdcworker.backfill.handoff import OFFSET_FIELD
from cdcworker.backfill.job import HoldTimeout, RunCancelled, progress_store, run_backfill, worker_config
from cdcworker.backfill.progress import AttemptRecord, RunAbandoned, parse_record
from cdcworker.backfill.spec import BackfillSpec, Chunk
from cdcworker.backfill.taskhandoff import INITIAL_RUN_PROPERTY
from localkafka import KafkaBroker
from vtgatesim import VTGateSim


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        make_keyspace(s)
        yield s


def _write(broker: KafkaBroker, p: dict[str, str], rec: RunAbandoned) -> None:
    spec = BackfillSpec("writer", ("x",), p)
    from confluent_kafka import Producer

    progress_store(spec, worker_config(spec)).write(Producer({"bootstrap.servers": broker.bootstrap}), [rec])


def test_cancelled_run_releases_its_hold_and_loses_no_change(tmp_path: Path, kafka_broker: KafkaBroker,
                                                             sim: VTGateSim) -> None:
    p = props(kafka_broker, sim)
    worker = Worker(tmp_path, p)
    spec = BackfillSpec("run-cancel", ("items", "lines"), p, chunk_size=100, max_concurrent_chunks_per_shard=1,
                        await_holds=True, hold_timeout_seconds=60)
    reads: list[Chunk] = []
    lock = threading.Lock()
    during: dict[str, object] = {}
    orders_topic = f"{p['topic.prefix']}.{KS}.orders"

    def on_read(chunk: Chunk) -> None:
        with lock:  # lanes run on threads: each read gets its own number
            reads.append(chunk)
            n = len(reads)
        if n == 6:
            # orders is not in the run: its changes reach Kafka while items and lines are held.
            sim.execute(f"update orders set qty = 4242 where id = {flowing_id}", KS)
            wait(lambda: live_record_of(kafka_broker, orders_topic, "qty", 4242), worker, 30, "the orders change")
            during["phases"] = phases(offsets(kafka_broker, p)[-1])
            during["handed_off"] = handed_off(kafka_broker, p)
        if n == 12:
            raise RuntimeError("cancelled mid-way")  # the lanes stop before their next chunk

    flowing_id, later_id = 3, 5  # an orders row changed during the hold, an items row after the release
    try:
        worker.start()
        wait(lambda: offsets(kafka_broker, p), worker, 60, "the worker's first offset")
        loads = populate(sim, 1000)  # streamed live: chunks never read still have every row in the topics
        loads[1].ids.remove(flowing_id)
        loads[0].ids.remove(later_id)
        wait(lambda: caught_up(kafka_broker, sim, p), worker, 60, "the rows streamed")
        with live_workload(sim, loads) as count:
            with pytest.raises(RuntimeError, match="cancelled mid-way"):
                run_backfill(spec, engine="local", parallelism=4, on_read=on_read)
            state = progress_store(spec, worker_config(spec)).load(spec.run_id)
            assert 0 < len(state.done) < sum(pl.chunks for pl in state.plans.values())
            # The operator cancels the run (its objects are gone): the workers release the hold.
            _write(kafka_broker, p, RunAbandoned(spec.run_id, KS, None, "cancelled", "operator"))
            wait(lambda: handed_off(kafka_broker, p) == set(SHARDS), worker, 120, "every shard released")
            sim.execute(f"update items set qty = 777 where id = {later_id}", KS)
            wait(lambda: live_record_of(kafka_broker, f"{p['topic.prefix']}.{KS}.items", "qty", 777), worker, 30,
                 "a change after the release, live")
            seen = count["transactions"]
            wait(lambda: count["transactions"] >= seen + 150, worker, 30, "more live transactions after it")
        wait(lambda: caught_up(kafka_broker, sim, p), worker, 60, "the worker caught up")
    finally:
        worker.stop()
    # At the 6th read the hold is on while orders flowed (a shard whose chunks were all read by
    # then may already be catching up or handed off: the normal end of its part of the run).
    assert "held" in during["phases"] and during["handed_off"] != set(SHARDS), during  # type: ignore[operator]
    with pytest.raises(RunCancelled, match="cannot be resumed"):
        run_backfill(spec)
    try:
        assert_topics_equal_source(kafka_broker, sim, p["topic.prefix"])
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(kafka_broker, sim, p, str(exc))}\n{worker.output()}") from None
    # Per key: finished chunks' keys got their snapshot row then the changes after it; the keys of
    # chunks never read got every change made during the hold, in order; none was lost.
    seq = assert_per_key_sequences(kafka_broker, sim, p, spec, replays=False, tables=("items", "lines"))
    assert seq["snapshot"] > 500 and seq["unfinished"] > 500 and seq["unfinished_changed"] > 50, seq


def test_conditional_run_catches_up_rows_outside_its_condition(tmp_path: Path, kafka_broker: KafkaBroker,
                                                               sim: VTGateSim) -> None:
    p = props(kafka_broker, sim)
    worker = Worker(tmp_path, p)
    conditions = {"items": "qty < 50", "lines": "qty < 50"}
    spec = BackfillSpec("run-cond", ("items", "lines"), p, conditions=conditions, chunk_size=100,
                        max_concurrent_chunks_per_shard=1, await_holds=True, hold_timeout_seconds=60)
    try:
        worker.start()
        wait(lambda: offsets(kafka_broker, p), worker, 60, "the worker's first offset")
        loads = populate(sim, 1000)  # streamed live: the topics hold every row, inside the condition or not
        wait(lambda: caught_up(kafka_broker, sim, p), worker, 60, "the rows streamed")
        with live_workload(sim, loads) as count:
            result = run_backfill(spec, engine="local", parallelism=4)
            assert result.chunks_read == result.chunks_total and 0 < result.rows < 2000
            handed_off_then_flowing(kafka_broker, p, worker, count)
        wait(lambda: caught_up(kafka_broker, sim, p), worker, 60, "the worker caught up")
    finally:
        worker.stop()
    try:
        assert_topics_equal_source(kafka_broker, sim, p["topic.prefix"])
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(kafka_broker, sim, p, str(exc))}\n{worker.output()}") from None
    inside = {t: (lambda row: int(row["qty"] or 0) < 50) for t in conditions}
    seq = assert_per_key_sequences(kafka_broker, sim, p, spec, replays=False, tables=("items", "lines"),
                                   conditions=inside)
    # Rows outside the condition changed during the hold and got every change (the lost ones before).
    assert seq["uncovered"] > 10 and seq["snapshot"] > 300, seq


def test_initial_snapshot_worker_holds_every_table_until_its_backfill(tmp_path: Path, kafka_broker: KafkaBroker,
                                                                      sim: VTGateSim) -> None:
    loads = populate(sim, 600)
    p = props(kafka_broker, sim)
    p[INITIAL_RUN_PROPERTY] = "initial-0a1b2c3d"
    worker = Worker(tmp_path, p)
    spec = BackfillSpec("initial-0a1b2c3d", (".*",), p, chunk_size=100, await_holds=True, hold_timeout_seconds=60)
    topics = [f"{p['topic.prefix']}.{KS}.{t}" for t in ("items", "orders", "lines")]
    try:
        with live_workload(sim, loads) as count:
            worker.start()
            # Its first offset already holds every table, from real positions (no plan exists yet).
            state = wait(lambda: (v := offsets(kafka_broker, p)) and v[-1].fields.get(OFFSET_FIELD), worker, 60,
                         "the first offset")
            assert set(state) == set(SHARDS) and all(d["hold_all_from"].startswith("MySQL56/") and d["tables"] == []
                                                     for d in state.values())
            seen = count["transactions"]
            wait(lambda: count["transactions"] >= seen + 100, worker, 30, "live transactions")
            now = sim.positions(KS)
            wait(lambda: all(covers(sg.gtid, now[sg.shard]) for sg in offsets(kafka_broker, p)[-1].vgtid), worker, 60,
                 "the worker past those transactions")
            assert [records(kafka_broker, t) for t in topics] == [[], [], []]  # streamed, nothing emitted
            result = run_backfill(spec, engine="local", parallelism=4)
            assert result.chunks_read == result.chunks_total >= 12
            handed_off_then_flowing(kafka_broker, p, worker, count)
        wait(lambda: caught_up(kafka_broker, sim, p), worker, 60, "the worker caught up")
    finally:
        worker.stop()
    assert_topics_equal_source(kafka_broker, sim, p["topic.prefix"])
    # Per key: the snapshot row (or the final delete) comes first, never a live record.
    seq = assert_per_key_sequences(kafka_broker, sim, p, spec, replays=False)
    assert seq["live"] == 0 and seq["snapshot"] > 1000 and seq["after_high"] > 100, seq


def test_the_job_waits_for_holds_and_fails_clearly_without_workers(kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    populate(sim, 200)
    p = props(kafka_broker, sim)
    spec = BackfillSpec("run-noworker", ("items",), p, chunk_size=100, await_holds=True, hold_timeout_seconds=2)
    reads: list[Chunk] = []
    with pytest.raises(HoldTimeout, match=r"no worker acknowledged the hold of shard\(s\) -40, 40-80, 80-c0, c0- "
                                          r"within 2s"):
        run_backfill(spec, on_read=reads.append)
    assert reads == []  # nothing was read without the hand-shake
    # Through the CLI (the job): the failed attempt is abandoned, so no worker would keep holding it.
    argv = ["--table", "items", "--run-id", spec.run_id, "--chunk-size", "100", "--no-view", "--await-holds",
            "--hold-timeout", "2", *[f"--set={k}={v}" for k, v in p.items()]]
    assert cli.main(argv) == 1
    marks = [r for v in progress(kafka_broker, p) if isinstance(r := parse_record(v), AttemptRecord | RunAbandoned)]
    assert list(dict.fromkeys((type(m).__name__, m.epoch, m.key()) for m in marks)) == [
        ("AttemptRecord", 0, AttemptRecord(spec.run_id, KS, 0).key()),
        ("RunAbandoned", 0, RunAbandoned(spec.run_id, KS, 0).key())]
    # A standalone run (no workers, no hand-shake) resumes it in the next epoch and reads everything.
    assert cli.main([a for a in argv if a not in ("--await-holds", "--hold-timeout", "2")]) == 0
    state = progress_store(spec, worker_config(spec)).load(spec.run_id)
    assert state.complete and state.epoch == 1 and {d.epoch for d in state.done.values()} == {1}
