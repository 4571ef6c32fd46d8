"""Offline reshard: the keyspace is split while the worker is down.

On restart the worker resumes from its stored positions on the old shards. VTGate still serves
them (non-serving shards keep their tablets until deleted), so the worker reads the changes made
before the cutover, reaches the journal, and then:

- holding every participant (one task for the keyspace): VTGate follows the journal and the worker
  continues on the new shards, storing their positions;
- holding only some (per-task mode): it stops at the journal, stores the target positions and
  exits with status 10 (reassignment needed);
- if the old shards were deleted meanwhile, it fails at once with a message saying what happened
  and what to do, and leaves its stored offset as it was.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
from worker_fixtures import CUSTOMER_DDL, RunningTask, running_task, worker_config

from cdcworker import exitcodes, keyrange
from cdcworker.config import WorkerConfig
from cdcworker.offsets import OffsetPartition, OffsetValue, offset_record_key
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim

KS = "commerce"
OLD = ["-80", "80-"]
NEW = ["-40", "40-80", "80-c0", "c0-"]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace(KS, OLD, ddl=[CUSTOMER_DDL])
        yield s


def _wait_for(predicate: Callable[[], object], what: str, run: RunningTask, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert run.thread.is_alive(), f"worker ended while waiting for {what}: {run.result}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling the worker's state


def _streaming(run: RunningTask) -> bool:
    # The first VStream response (VGTID, OTHER at `current`) has been processed.
    return run.task.processor is not None and run.task.processor.stats.events_seen > 0


def _at_heads(run: RunningTask, sim: VTGateSim, shards: list[str] | None = None) -> bool:
    proc, sink = run.task.processor, run.task.sink
    if proc is None or sink is None or proc.position is None or sink.pending:
        return False
    at = {sg.shard: sg.gtid for sg in proc.position}
    heads = sim.positions(KS)
    return at == {s: heads[s] for s in (shards or heads)}


def _offsets(
    broker: KafkaBroker, cfg: WorkerConfig, partition: OffsetPartition, read_committed: bool = False
) -> list[dict[str, str]]:
    """Every offset record the task wrote, oldest first, as {shard: gtid}."""
    key = offset_record_key(cfg.name, partition)
    records = [r for r in consume_all(broker.bootstrap, cfg.kafka.offsets_topic, read_committed) if r.key == key]
    return [{sg.shard: sg.gtid for sg in OffsetValue.from_bytes(r.value or b"").vgtid} for r in records]


def _changes(broker: KafkaBroker, topic: str, read_committed: bool = False) -> list[tuple[str, str, int, str | None]]:
    """(shard, op, id, email) of every change record in topic order per partition; tombstones skipped."""
    out = []
    for r in consume_all(broker.bootstrap, topic, read_committed):
        if r.value is None:
            continue
        p = json.loads(r.value)["payload"]
        row = p["after"] or p["before"]
        out.append((p["source"]["shard"], p["op"], row["id"], row["email"]))
    return out


def _n(gtid: str) -> int:
    """N of ``MySQL56/<uuid>:1-N`` (or ``:1``)."""
    return int(gtid.rsplit(":", 1)[1].rsplit("-", 1)[-1])


def _insert(sim: VTGateSim, ids: range) -> None:
    for i in ids:
        sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}')", KS)


def test_single_task_continues_from_old_shards_through_the_journal(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, KS)
    topic = f"{cfg.topic_prefix}.{KS}.customer"
    partition = OffsetPartition(cfg.topic_prefix)
    with running_task(cfg) as run:
        _wait_for(lambda: _streaming(run), "the stream to start at current", run)
        _insert(sim, range(1, 7))
        _wait_for(lambda: _at_heads(run, sim), "the first changes", run)
        assert run.stop().exit_code == exitcodes.OK
    before_reshard = sim.positions(KS)
    assert _offsets(kafka_broker, cfg, partition)[-1] == before_reshard

    # While the worker is down: changes on the old shards, the split, changes on the new shards.
    _insert(sim, range(7, 13))
    sim.execute("UPDATE customer SET email = 'one' WHERE id = 1", KS)
    sim.execute("DELETE FROM customer WHERE id = 2", KS)
    old_heads = sim.positions(KS)
    journal = sim.reshard(KS, NEW)
    assert sorted(p.shard for p in journal.participants) == OLD
    _insert(sim, range(13, 21))
    sim.execute("UPDATE customer SET email = 'seven' WHERE id = 7", KS)

    with running_task(cfg) as run:
        _wait_for(lambda: _at_heads(run, sim, NEW), "the new shards' heads", run)
        assert run.stop().exit_code == exitcodes.OK

    # Offsets: old shards (at most up to the journal), then only the new shards; never a mix.
    stored = _offsets(kafka_broker, cfg, partition)
    assert stored[-1] == {s: sim.position(KS, s) for s in NEW}
    assert all(set(o) in (set(OLD), set(NEW)) for o in stored), stored
    assert all(_n(o[s]) <= _n(old_heads[s]) for o in stored if set(o) == set(OLD) for s in OLD), (stored, old_heads)

    # Records: every change exactly once, in order; those made before the cutover come from the
    # old shards, the ones after it from the new shards; the reshard's row copy is not replayed.
    by_id: dict[int, list[tuple[str, str | None, str]]] = {}
    for shard, op, i, email in _changes(kafka_broker, topic):
        by_id.setdefault(i, []).append((op, email, "old" if shard in OLD else "new" if shard in NEW else shard))
    expected = {i: [("c", f"u{i}", "old" if i <= 12 else "new")] for i in range(1, 21)}
    expected[1].append(("u", "one", "old"))
    expected[2].append(("d", "u2", "old"))
    expected[7].append(("u", "seven", "new"))
    assert by_id == expected
    diff = compare(materialise(consume_all(kafka_broker.bootstrap, topic)), sim.source_truth(KS, "customer"),
                   "id", ["id", "email"])
    assert diff.empty, diff.summary()


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
def test_per_task_split_stops_at_the_journal_for_reassignment(
    sim: VTGateSim, kafka_broker: KafkaBroker, eos: bool
) -> None:
    # Exactly-once too: no record carries the target positions, so they go in an offset-only
    # Kafka transaction before the task exits (the next generation starts from them).
    cfg = worker_config(kafka_broker, sim.address, KS, extra={
        "vitess.offset.storage.per.task": "true", "tasks.max": "2",
        "shardcdc.task.id": "0", "shardcdc.task.count": "2", "shardcdc.task.generation": "0",
        "shardcdc.task.shards": "-80", "shardcdc.task.prev.count": "1",
        **({"exactly.once.support": "required", "poll.interval.ms": "100"} if eos else {}),
    })
    topic = f"{cfg.topic_prefix}.{KS}.customer"
    partition = OffsetPartition.for_task(cfg.topic_prefix, 0, 2, 0)
    with running_task(cfg) as run:
        _wait_for(lambda: _streaming(run), "the stream to start at current", run)
        _insert(sim, range(1, 7))
        _wait_for(lambda: _at_heads(run, sim, ["-80"]), "the first changes", run)
        assert run.stop().exit_code == exitcodes.OK
    _insert(sim, range(7, 13))
    old_head = sim.position(KS, "-80")
    journal = sim.reshard(KS, NEW)
    _insert(sim, range(13, 21))

    with running_task(cfg) as run:
        result = run.wait(30)
    assert result.exit_code == exitcodes.REASSIGNMENT_NEEDED, result
    # The task read its old shard up to the journal, then stored the journal's target positions.
    stored = _offsets(kafka_broker, cfg, partition, read_committed=eos)
    targets = {g.shard: g.gtid for g in journal.shard_gtids}
    assert stored[-1] == targets
    assert all(set(o) == {"-80"} and _n(o["-80"]) <= _n(old_head) for o in stored[:-1]), stored
    ids = sorted(i for shard, op, i, _ in _changes(kafka_broker, topic, read_committed=eos))
    on_80 = [i for i in range(1, 13) if _shard_of(sim, i) == "-80"]
    assert ids == on_80  # ids 1-12 of -80, once each; nothing from after the cutover


def test_a_single_per_task_task_stops_at_the_journal_too(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    # The operator's tasks always run in per-task mode, and it plans every generation's shards
    # from the journals its workers report: a lone task must report one rather than follow it.
    cfg = worker_config(kafka_broker, sim.address, KS, extra={
        "vitess.offset.storage.per.task": "true", "tasks.max": "1",
        "shardcdc.task.id": "0", "shardcdc.task.count": "1", "shardcdc.task.generation": "0",
        "shardcdc.task.shards": ",".join(OLD), "shardcdc.task.prev.count": "1",
    })
    partition = OffsetPartition.for_task(cfg.topic_prefix, 0, 1, 0)
    with running_task(cfg) as run:
        _wait_for(lambda: _at_heads(run, sim), "the stream positioned at the heads", run)
        _insert(sim, range(1, 5))
        _wait_for(lambda: _at_heads(run, sim), "the first changes", run)
        assert run.stop().exit_code == exitcodes.OK
    journal = sim.reshard(KS, NEW)
    with running_task(cfg) as run:
        result = run.wait(30)
    assert result.exit_code == exitcodes.REASSIGNMENT_NEEDED, result
    stored = _offsets(kafka_broker, cfg, partition)[-1]
    assert stored == {sg.shard: sg.gtid for sg in result.position}
    targets = {g.shard: g.gtid for g in journal.shard_gtids}
    assert set(stored) & set(NEW) and all(stored[s] == targets[s] for s in set(stored) & set(NEW)), (stored, targets)


def test_a_supervised_task_waits_at_the_journal_until_stopped(
        sim: VTGateSim, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the operator a Deployment restarts an exited worker: restarted after the journal, it
    resumed from its offset (the target shards), streamed them beside the next generation and
    lost the journal from its status document before the operator read it. Supervised, it waits
    (live, not ready) with the journal in its status, and exits 10 when stopped."""
    from cdcworker.observability.health import liveness, readiness

    monkeypatch.setenv(exitcodes.SUPERVISED_ENV, "1")
    cfg = worker_config(kafka_broker, sim.address, KS, extra={
        "vitess.offset.storage.per.task": "true", "tasks.max": "1",
        "shardcdc.task.id": "0", "shardcdc.task.count": "1", "shardcdc.task.generation": "0",
        "shardcdc.task.shards": ",".join(OLD), "shardcdc.task.prev.count": "1",
    })
    with running_task(cfg) as run:
        _wait_for(lambda: _at_heads(run, sim), "the stream positioned at the heads", run)
        sim.reshard(KS, NEW)
        _wait_for(lambda: run.task.metrics is not None and run.task.metrics.state == "reassignment_needed",
                  "the journal reported", run)
        tm = run.task.metrics
        assert run.thread.is_alive() and run.result is None  # waiting, not exited
        assert liveness(tm, now=tm.clock() + 10 * tm.liveness_timeout_s).ok and not readiness(tm).ok
        status = tm.status()
        assert status["state"] == "reassignment_needed" and status["journal"]
        result = run.stop()
    assert result.exit_code == exitcodes.REASSIGNMENT_NEEDED


def _shard_of(sim: VTGateSim, i: int) -> str:
    return keyrange.shard_for_keyspace_id(OLD, keyrange.hash_keyspace_id(i))


def test_deleted_old_shards_fail_with_what_happened_and_what_to_do(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, KS)
    partition = OffsetPartition(cfg.topic_prefix)
    with running_task(cfg) as run:
        _wait_for(lambda: _streaming(run), "the stream to start at current", run)
        _insert(sim, range(1, 5))
        _wait_for(lambda: _at_heads(run, sim), "the first changes", run)
        assert run.stop().exit_code == exitcodes.OK
    stored_before = _offsets(kafka_broker, cfg, partition)
    _insert(sim, range(5, 9))  # on the old shards: lost with them
    sim.reshard(KS, NEW, delete_old=True)

    with running_task(cfg) as run:
        result = run.wait(30)
    assert result.exit_code == exitcodes.FAILED
    assert result.reason.startswith(
        "the stored position names shard commerce/-80, which no longer exists: the keyspace was resharded while "
        "this worker was not streaming and the old shards were deleted"
    ), result.reason
    assert "To continue, take a new snapshot" in result.reason
    assert "shard provided in VGTID, -80, not found in the commerce keyspace" in result.reason
    # Nothing retried, nothing stored: the old position stays for whoever decides what to do.
    assert _offsets(kafka_broker, cfg, partition) == stored_before
