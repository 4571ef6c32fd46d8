"""Generation changes of a quiet keyspace: every task stores its offset under its own key.

A task of a new generation finds no offset of its own and starts from the previous generation's
(every one of its keys must exist, as in Debezium). If its shards then stay idle, its position never
moves; unless it stores where it started, the generation after it fails with "No offset found" for
its key, and only editing offsets by hand gets the connector going again. Here a keyspace with no
traffic goes through two task-count changes (1 -> 2 -> 1), each generation stopped without a single
change, in at-least-once and exactly-once mode; every change made before stays exactly once and no
change is missed after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from polling import wait_for
from worker_fixtures import (
    CUSTOMER_DDL,
    caught_up,
    insert_customers,
    running_task,
    wait_positioned,
    worker_config,
)

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.offsets import OffsetPartition, OffsetValue, offset_record_key
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

KS = "commerce"
SHARDS = ["-80", "80-"]
EOS = {"exactly.once.support": "required", "poll.interval.ms": "100"}


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace(KS, SHARDS, ddl=[CUSTOMER_DDL])
        yield s


def _task(base: WorkerConfig, broker: KafkaBroker, sim: VTGateSim, task: int, tasks: int, gen: int, prev: int,
          shards: list[str], extra: dict[str, str]) -> WorkerConfig:
    return worker_config(broker, sim.address, KS, prefix=base.topic_prefix, extra={
        "vitess.offset.storage.per.task": "true", "tasks.max": str(tasks),
        "shardcdc.task.id": str(task), "shardcdc.task.count": str(tasks), "shardcdc.task.generation": str(gen),
        "shardcdc.task.shards": ",".join(shards), "shardcdc.task.prev.count": str(prev), **extra,
    })


def _stored(broker: KafkaBroker, cfg: WorkerConfig, task: int, tasks: int, gen: int, eos: bool) -> dict[str, str] | None:
    """The last offset stored under ``task<task>_<tasks>_<gen>``, as {shard: gtid}."""
    key = offset_record_key(cfg.name, OffsetPartition.for_task(cfg.topic_prefix, task, tasks, gen))
    values = [r.value for r in consume_all(broker.bootstrap, cfg.kafka.offsets_topic, eos) if r.key == key]
    return {sg.shard: sg.gtid for sg in OffsetValue.from_bytes(values[-1]).vgtid} if values and values[-1] else None


def _run_idle(sim: VTGateSim, cfg: WorkerConfig) -> None:
    """Start the task, let it open its stream, and stop it: nothing happens on its shards."""
    with running_task(cfg) as run:
        wait_positioned(sim, run, KS)
        result = run.stop()
    assert result.exit_code == exitcodes.OK, result


def _run_last_generation(sim: VTGateSim, broker: KafkaBroker, cfg: WorkerConfig, ids: range, eos: bool) -> None:
    """Run a one-task generation over both shards with some changes; it stores the heads."""
    with running_task(cfg) as run:
        wait_positioned(sim, run, KS)
        insert_customers(sim, ids, KS)
        wait_for(lambda: caught_up(sim, run, KS), what=f"generation {cfg.task.generation}'s changes")
        after = sim.positions(KS)
        assert run.stop().exit_code == exitcodes.OK
    assert _stored(broker, cfg, 0, 1, cfg.task.generation, eos) == after


def _ids(broker: KafkaBroker, topic: str, eos: bool) -> list[int]:
    return sorted(json.loads(r.value)["payload"]["after"]["id"]
                  for r in consume_all(broker.bootstrap, topic, eos) if r.value is not None)


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
def test_two_scale_changes_of_an_idle_keyspace_need_no_hand_edits(
    sim: VTGateSim, kafka_broker: KafkaBroker, eos: bool
) -> None:
    extra = EOS if eos else {}
    base = worker_config(kafka_broker, sim.address, KS)
    topic = f"{base.topic_prefix}.{KS}.customer"
    # Generation 0: one task over both shards, some changes, stopped at the heads.
    gen0 = _task(base, kafka_broker, sim, 0, 1, 0, 1, SHARDS, extra)
    with running_task(gen0) as run:
        wait_positioned(sim, run, KS)
        insert_customers(sim, range(1, 9), KS)
        wait_for(lambda: caught_up(sim, run, KS), what="the first changes")
        heads = sim.positions(KS)
        assert run.stop().exit_code == exitcodes.OK
    assert _stored(kafka_broker, gen0, 0, 1, 0, eos) == heads

    # Generation 1: two tasks; the keyspace stays idle, so neither position moves.
    for i, shard in enumerate(SHARDS):
        cfg = _task(base, kafka_broker, sim, i, 2, 1, 1, [shard], extra)
        _run_idle(sim, cfg)
        assert _stored(kafka_broker, cfg, i, 2, 1, eos) == {shard: heads[shard]}

    # Generation 2: back to one task. It needs both keys of generation 1 and resumes at the heads.
    gen2 = _task(base, kafka_broker, sim, 0, 1, 2, 2, SHARDS, extra)
    _run_last_generation(sim, kafka_broker, gen2, range(9, 13), eos)
    assert _ids(kafka_broker, topic, eos) == list(range(1, 13))  # each change once: nothing replayed, nothing missed


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_task_that_never_started_does_not_block_the_next_generation(
    sim: VTGateSim, kafka_broker: KafkaBroker, eos: bool
) -> None:
    """Scaling to two tasks whose second pod is never scheduled, then back to one: the operator's
    generation chain (``shardcdc.task.history``) lets the new task take the second shard from
    generation 0, where it still is, instead of failing on the missing ``task1_2_1`` key (Debezium
    needs a hand-written offset for it)."""
    extra = EOS if eos else {}
    base = worker_config(kafka_broker, sim.address, KS)
    topic = f"{base.topic_prefix}.{KS}.customer"
    gen0 = _task(base, kafka_broker, sim, 0, 1, 0, 1, SHARDS, extra)
    with running_task(gen0) as run:
        wait_positioned(sim, run, KS)
        insert_customers(sim, range(1, 9), KS)
        wait_for(lambda: caught_up(sim, run, KS), what="generation 0's changes")
        assert run.stop().exit_code == exitcodes.OK

    # Generation 1: only task 0 (-80) ever runs; both shards change meanwhile.
    gen1 = _task(base, kafka_broker, sim, 0, 2, 1, 1, SHARDS[:1], extra)
    with running_task(gen1) as run:
        wait_positioned(sim, run, KS)
        insert_customers(sim, range(9, 17), KS)
        wait_for(lambda: run.task.processor is not None and run.task.processor.position is not None
                 and run.task.processor.position.shard_gtids[0].gtid == sim.positions(KS)["-80"]
                 and run.task.sink is not None and run.task.sink.pending == 0, what="generation 1's -80 changes")
        assert run.stop().exit_code == exitcodes.OK
    assert _stored(kafka_broker, gen1, 1, 2, 1, eos) is None

    gen2 = _task(base, kafka_broker, sim, 0, 1, 2, 2, SHARDS, {**extra, "shardcdc.task.history": "1:2,0:1"})
    _run_last_generation(sim, kafka_broker, gen2, range(17, 21), eos)
    assert _ids(kafka_broker, topic, eos) == list(range(1, 21))  # 80-'s generation-1 changes once, by generation 2
