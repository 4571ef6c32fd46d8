"""Exactly-once fencing: a second producer with the task's transactional.id (a zombie) stops the worker.

Kafka lets one producer per transactional.id commit: the newest ``init_transactions`` bumps the
epoch and aborts the older one's open transaction. The fenced worker must stop with a clear
message and commit nothing more; the next worker for the task fences the zombie in turn and
continues from the last committed offset, so ``read_committed`` consumers see every change once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from worker_fixtures import (
    RunningTask,
    commerce_sim,
    insert_customers,
    running_task,
    start_here,
    wait_for,
    worker_config,
)

from cdcworker import exitcodes
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim() as s:
        yield s


def test_a_zombie_producer_fences_the_worker_and_read_committed_sees_each_change_once(
    sim: VTGateSim, kafka_broker: KafkaBroker
) -> None:
    extra = {**start_here(sim), "exactly.once.support": "required", "poll.interval.ms": "50"}
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra=extra)
    topic = f"{cfg.topic_prefix}.commerce.customer"

    def committed_at_source(run: RunningTask) -> bool:
        sink = run.task.sink
        durable = sink.durable if sink is not None else None
        return durable is not None and {sg.shard: sg.gtid for sg in durable} == sim.positions("commerce")

    insert_customers(sim, range(1, 11))
    with running_task(cfg) as run:
        wait_for(lambda: committed_at_source(run), what="the first 10 changes committed")
        # The zombie: same transactional.id, newer epoch. It also leaves a transaction open.
        zombie = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": cfg.kafka.transactional_id})
        zombie.init_transactions(30)
        zombie.begin_transaction()
        zombie.produce(topic, b'{"zombie":true}', b"zombie")
        assert zombie.flush(30) == 0
        insert_customers(sim, range(11, 21))
        fenced = run.wait(60)
    assert fenced.exit_code == exitcodes.FAILED
    assert fenced.reason.startswith(
        f"fenced: another producer started with this task's transactional.id {cfg.kafka.transactional_id!r} "
        "(a second worker for the same task, such as a zombie); this worker stops without committing "
        "and the newer one continues from the last committed offset. Kafka: "
    ), fenced.reason
    before = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in before) == list(range(1, 11))  # nothing more

    # The next worker for the task fences the zombie (its open transaction is aborted) and goes on.
    with running_task(cfg) as run:
        wait_for(lambda: committed_at_source(run), what="the other 10 changes committed")
        result = run.stop()
    assert result.exit_code == exitcodes.OK, result.reason
    committed = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert Counter(r.key for r in committed)[b"zombie"] == 0
    assert Counter(json.loads(r.value)["payload"]["after"]["id"] for r in committed) == Counter(range(1, 21))
    # The zombie's record is in the log, in a transaction that was aborted.
    assert [r.value for r in consume_all(kafka_broker.bootstrap, topic) if r.key == b"zombie"] == [b'{"zombie":true}']
