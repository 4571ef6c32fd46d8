"""The real worker (``shardcdc worker`` in a subprocess) doing the backfill hand-off: it holds the
backfilled tables back while the run goes on (other tables keep flowing), catches them up from the
chunk high watermarks once the progress topic says every chunk of its shard is done, and rejoins
them to its live stream, under a workload of inserts, updates, primary-key changes, cross-shard
moves, deletes and large transactions on the same tables.

The job waits for every shard's ``held`` marker before reading its chunks (the hand-shake). The
proof is per key, against the shards' binlogs: in topic order, the live changes up to the hold,
then the snapshot row (the state at the key's chunk high watermark) or, when the key is absent
there, its final delete, then exactly the changes after that high watermark, in source order; no
live record after the snapshot row. And the topics, materialised, equal the source, also when the
worker is SIGKILLed while holding (exact: nothing is replayed) or during the catch-up (then
replays, i.e. repeated records, are allowed), and with the exactly-once sink.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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
    handed_off_then_flowing,
    holds,
    offsets,
    phases,
    records,
    wait,
)

from cdcworker.backfill.handoff import OFFSET_FIELD
from cdcworker.backfill.job import run_backfill
from cdcworker.backfill.progress import PlanRecord
from cdcworker.backfill.spec import BackfillSpec, Chunk
from cdcworker.backfill.taskhandoff import FAULT_DIR_ENV
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim
from vtgatesim.workload import change_id

TABLES = ("items", "orders", "lines")
CATCHUP_PHASE, HELD_PHASE = "catchup", "held"
# Killed while holding, then started as the next task generation (the operator after a rescale):
# the new task key has no offset of its own and must take the hold over from the old key.
HELD_NEW_GENERATION = "held, new generation"
NEXT_GENERATION = {"vitess.offset.storage.per.task": "true", "shardcdc.task.generation": "1",
                   "shardcdc.task.prev.count": "1", "shardcdc.task.history": "0:1"}


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        make_keyspace(s)
        yield s


# Keys the random workload must not touch (removed from its id list): the scripted cases below.
EXISTING, MOVED, TRANSIENT, MOVED_TO = 7, 11, 900_001, 900_011


def _scripted_before_run(sim: VTGateSim) -> None:
    """A change the worker emits live before the run: the topic then holds a record of EXISTING."""
    sim.execute(f"update items set qty = qty + 1 where id = {EXISTING}", KS)


def _scripted_during_hold(sim: VTGateSim) -> None:
    """After every shard holds and before any chunk is read (the job's on_planned hook)."""
    # A key inserted and deleted during the run before its chunk is read: no snapshot row.
    sim.execute(f"insert into items (id, name, qty, price) values ({TRANSIENT}, 't', 1, 1.00)", KS)
    sim.execute(f"delete from items where id = {TRANSIENT}", KS)
    # A key that existed before the run (with a record in the topic), deleted before its chunk is
    # read: the topic must end with its delete.
    sim.execute(f"delete from items where id = {EXISTING}", KS)
    # A primary-key change moving a row from the first chunk into the last (and across shards):
    change_id(sim, KS, "items", MOVED, MOVED_TO)  # as Vitess allows: delete + insert in one transaction


def _scenario(tmp_path: Path, broker: KafkaBroker, sim: VTGateSim, kill_in: str | None = None,
              exactly_once: bool = False) -> dict[str, Any]:
    loads = populate(sim, 1000)
    for k in (EXISTING, MOVED):
        loads[0].ids.remove(k)
    p = props(broker, sim)
    if exactly_once:
        p["exactly.once.support"] = "required"
    worker = Worker(tmp_path, p)
    fault_dir = tmp_path / "handoff-fault"  # the worker's fault point (taskhandoff.FAULT_DIR_ENV)
    fault_dir.mkdir()
    if kill_in == CATCHUP_PHASE:
        (fault_dir / "armed").write_text("")
    # The job itself waits for every shard's hold (the hand-shake), then calls on_planned.
    spec = BackfillSpec("run-handoff", TABLES, p, chunk_size=100, max_concurrent_chunks_per_shard=2,
                        await_holds=True, hold_timeout_seconds=60)
    killed_in: set[str] = set()
    killed = threading.Event()
    reads: list[Chunk] = []
    lock = threading.Lock()
    first_reads: dict[str, dict[str, dict[str, str]]] = {}

    def during_hold(plans: list[PlanRecord]) -> None:
        assert {pl.shard for pl in plans} == set(SHARDS)
        _scripted_during_hold(sim)

    def on_read(chunk: Chunk) -> None:
        with lock:  # lanes run on threads: each read gets its own number
            reads.append(chunk)
            n = len(reads)
        if chunk.shard not in first_reads:  # the holds the progress topic shows at a shard's first read
            first_reads[chunk.shard] = holds(broker, p, spec.run_id)
        if n == 15:  # some chunks done, others not: one transaction on both sides of them
            sim.execute("update orders set qty = qty + 1", KS)
        if kill_in in (HELD_PHASE, HELD_NEW_GENERATION) and n == 20:
            # Killed while it holds the tables back and chunks are being read (the test's main
            # thread restarts it: a child dies with the thread that started it, start_bound).
            assert HELD_PHASE in phases(offsets(broker, p)[-1])
            worker.kill()
            killed_in.add(HELD_PHASE)
            killed.set()

    os.environ[FAULT_DIR_ENV] = str(fault_dir)  # read by the worker processes this test starts
    try:
        with live_workload(sim, loads) as count:
            worker.start()
            wait(lambda: offsets(broker, p), worker, 60, "the worker's first offset")
            _scripted_before_run(sim)
            wait(lambda: any(v is not None and (json.loads(v)["payload"]["after"] or {}).get("id") == EXISTING
                             for _, v in records(broker, f"{p['topic.prefix']}.{KS}.items")),
                 worker, 30, "the live record of the existing key")
            with ThreadPoolExecutor(1) as pool:
                job = pool.submit(run_backfill, spec, engine="local", parallelism=4, on_planned=during_hold,
                                  on_read=on_read)
                if kill_in in (HELD_PHASE, HELD_NEW_GENERATION):
                    assert killed.wait(120), "no kill while holding"
                    if kill_in == HELD_NEW_GENERATION:
                        worker.configure(NEXT_GENERATION)
                    worker.start()
                result = job.result()
            assert result.chunks_read == result.chunks_total >= 30
            if kill_in == CATCHUP_PHASE:
                # The worker dies as soon as its offset says a shard is catching up (its stream was
                # rewound): the armed fault point, as a watcher of the offsets could miss a catch-up
                # that is over within a second.
                assert worker.proc is not None
                assert worker.proc.wait(60) == 70, worker.output()
                assert (fault_dir / "fired").exists()
                last = offsets(broker, p)[-1]
                killed_in = phases(last)
                worker.start()
            # The workload goes on past the hand-off: the rejoined tables must flow live again.
            handed_off_then_flowing(broker, p, worker, count)
        wait(lambda: caught_up(broker, sim, p), worker, 60, "the worker caught up")
    finally:
        os.environ.pop(FAULT_DIR_ENV, None)
        worker.stop()
    # Every shard's first chunk was read after its worker announced the hold of all three tables.
    assert {s: set(h.get(s, ())) for s, h in first_reads.items()} == {s: set(TABLES) for s in SHARDS}
    values = offsets(broker, p)
    seen_phases = set().union(*(phases(v) for v in values))
    late = {s for v in values for s, d in (v.fields.get(OFFSET_FIELD) or {}).items() if d.get("late")}
    caps: dict[str, set[float]] = {}  # each shard's low watermark cap, as stored with its hold
    for v in values:
        for s, d in (v.fields.get(OFFSET_FIELD) or {}).items():
            if d.get("watermark_cap") is not None:
                caps.setdefault(s, set()).add(d["watermark_cap"])
    try:
        states = assert_topics_equal_source(broker, sim, p["topic.prefix"], read_committed=exactly_once)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(broker, sim, p, str(exc))}\n{worker.output()}") from None
    sequences = assert_per_key_sequences(broker, sim, p, spec, replays=kill_in == CATCHUP_PHASE,
                                         read_committed=exactly_once)
    ops = {json.loads(r.value)["payload"]["op"] for r in consume_all(broker.bootstrap, f"{p['topic.prefix']}.{KS}.items")
           if r.value}
    keys = {json.loads(r.key)[1].get("task_key") for r in consume_all(broker.bootstrap, p["offset.storage.topic"])}
    return {"keys": keys, "phases": seen_phases, "killed_in": killed_in, "states": states, "ops": ops, "log": worker.output(),
            "late": late, "sequences": sequences, "caps": caps}


def test_worker_holds_back_catches_up_and_rejoins_exactly(tmp_path: Path, kafka_broker: KafkaBroker,
                                                           sim: VTGateSim) -> None:
    out = _scenario(tmp_path, kafka_broker, sim)
    # The hand-off state travelled in the worker's offsets (held, then catch-up), then was dropped;
    # every hold began before its shard's chunks were read (the hand-shake), so none is late.
    assert out["phases"] == {"held", "catchup"}, out["log"]
    assert out["late"] == set()
    # Snapshot reads from the backfill, live changes from the worker, in one topic.
    assert out["ops"] == {"r", "c", "u", "d"}
    seq = out["sequences"]
    assert seq["snapshot"] > 2000 and seq["final_delete"] >= 3 and seq["live_then_snapshot"] > 0
    assert seq["after_high"] > 100


def test_worker_killed_during_catchup_is_still_exact(tmp_path: Path, kafka_broker: KafkaBroker,
                                                      sim: VTGateSim) -> None:
    out = _scenario(tmp_path, kafka_broker, sim, kill_in=CATCHUP_PHASE)
    assert CATCHUP_PHASE in out["killed_in"]
    assert out["sequences"]["final_delete"] >= 3


def test_worker_killed_while_holding_resumes_the_hold_exactly(tmp_path: Path, kafka_broker: KafkaBroker,
                                                              sim: VTGateSim) -> None:
    out = _scenario(tmp_path, kafka_broker, sim, kill_in=HELD_PHASE)
    # Restarted from its stored offset, the worker kept holding from the same positions (not late).
    assert out["killed_in"] == {HELD_PHASE} and out["late"] == set()
    # The low watermark cap survived the kill: the restarted worker stored the one it restored.
    assert out["caps"] and all(len(c) == 1 for c in out["caps"].values()), out["caps"]
    seq = out["sequences"]
    assert seq["snapshot"] > 2000 and seq["final_delete"] >= 3 and seq["after_high"] > 100


def test_a_new_task_generation_takes_the_hold_over(tmp_path: Path, kafka_broker: KafkaBroker,
                                                   sim: VTGateSim) -> None:
    # Before, the next generation's task started from the old key's position without its hold
    # state: it held again from there (late) and the changes between the two holds were lost.
    out = _scenario(tmp_path, kafka_broker, sim, kill_in=HELD_NEW_GENERATION)
    assert out["killed_in"] == {HELD_PHASE} and out["late"] == set(), out["log"]
    assert "task0_1_1" in out["keys"]  # the new generation stored (and handed off) under its own key
    assert out["caps"] and all(len(c) == 1 for c in out["caps"].values()), out["caps"]  # inherited with the hold
    seq = out["sequences"]
    assert seq["snapshot"] > 2000 and seq["final_delete"] >= 3 and seq["after_high"] > 100


def test_exactly_once_worker_hands_off_exactly(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    # The hold state and its rewinds are committed in Kafka transactions with the offsets; the
    # held marker goes out only once the transaction carrying the state committed.
    out = _scenario(tmp_path, kafka_broker, sim, exactly_once=True)
    assert out["phases"] == {"held", "catchup"} and out["late"] == set(), out["log"]
    seq = out["sequences"]
    assert seq["snapshot"] > 2000 and seq["final_delete"] >= 3 and seq["after_high"] > 100
