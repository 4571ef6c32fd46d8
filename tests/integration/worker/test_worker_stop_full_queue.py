"""A stop while Kafka's local queue is full and the broker is away ends the task promptly.

The worker's back-pressure point is a send waiting for room in librdkafka's queue. With the broker
down that wait only ended when the queued records timed out (``message.timeout.ms``, 5 minutes by
default): SIGTERM set the stop flag but nothing looked at it, and Kubernetes killed the pod after
its grace period. Now a stop interrupts the wait (``KafkaSink.interrupt``; the native producer
checks it in its C loop), the final flush and offset write share the shutdown grace, the task ends
within it, and its position is never past what Kafka acknowledged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from worker_fixtures import caught_up, commerce_sim, running_task, wait_for, wait_positioned, worker_config

from cdcworker import exitcodes
from cdcworker.task import TaskResult, WorkerTask
from localkafka import KafkaBroker


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
@pytest.mark.parametrize("native", [True, False], ids=["native-sink", "confluent-kafka-sink"])
def test_stop_while_the_queue_is_full_and_the_broker_is_down(
        fresh_kafka_broker: Callable[[], KafkaBroker], monkeypatch: pytest.MonkeyPatch, native: bool, eos: bool) -> None:
    if not native:
        monkeypatch.setenv("SHARDCDC_NATIVE", "encoder")  # the native row encoder, confluent-kafka's producer
    broker = fresh_kafka_broker()
    with commerce_sim() as sim:
        cfg = worker_config(broker, sim.address, "commerce", extra={
            "producer.queue.buffering.max.messages": "20",  # a queue that fills at once
            # The records would wait minutes (exactly-once: at most transaction.timeout.ms, 60 s).
            "producer.message.timeout.ms": "60000" if eos else "600000",
            "shardcdc.shutdown.grace.ms": "2000",
            **({"exactly.once.support": "required", "poll.interval.ms": "100"} if eos else {}),
        })
        task = WorkerTask(cfg)
        done: dict[str, TaskResult] = {}
        thread = threading.Thread(target=lambda: done.setdefault("result", task.run()), daemon=True)
        thread.start()
        run = type("Run", (), {"task": task})()
        wait_positioned(sim, run)  # type: ignore[arg-type]
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'before@x.io')", "commerce")
        wait_for(lambda: caught_up(sim, run), what="the first row acknowledged")  # type: ignore[arg-type]
        durable = task.sink.durable
        assert durable is not None

        broker.stop(kill=True)
        values = ", ".join(f"({i}, 'u{i}@x.io')" for i in range(2, 202))
        sim.execute(f"INSERT INTO customer (id, email) VALUES {values}", "commerce")
        sink = task.sink
        assert sink is not None
        wait_for(lambda: sink.pending >= 20, what="the local queue full")

        task.stop("SIGTERM")
        thread.join(30)
        assert not thread.is_alive(), "the task did not stop while its send waited for room in the queue"
    result = done["result"]
    # Kafka is away. At-least-once: the queued records are not acknowledged within the grace (or,
    # with them, the last offset record is not stored); the task says so and fails, so it is
    # restarted and replays from the stored offset. Exactly-once: the open Kafka transaction is
    # simply not committed (it holds part of a Vitess transaction), a clean stop.
    if eos:
        assert result.exit_code == exitcodes.OK or "Kafka transaction" in result.reason, result
    else:
        assert result.exit_code == exitcodes.FAILED, result
        assert "not acknowledged by Kafka within 2.0s" in result.reason or result.reason.startswith(
            "stopped without storing the offset"), result
    # Nothing the broker never acknowledged is behind the position the task ends with.
    assert json.loads(result.position.to_json()) == json.loads(durable.to_json())


def test_stop_ends_the_task_when_the_stream_reader_misses_the_cancel(
        kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop()`` cancels the VStream call, but the reader thread can miss that and wait in gRPC for
    ever while the stream is idle (a full-suite run caught it: every thread's stack showed the
    reader in ``grpc._channel._next`` and the loop idling). The loop now leaves the stream on its
    own once stopped, as the CANCELLED error would have it do: the cancel is made to get lost here."""
    from cdcworker.source import reader

    monkeypatch.setattr(reader.ResponseReader, "cancel", lambda self: None)  # the cancel never arrives
    with commerce_sim() as sim:
        cfg = worker_config(kafka_broker, sim.address, "commerce")
        with running_task(cfg) as run:
            wait_positioned(sim, run)  # caught up, the stream idle
            result = run.stop(timeout=30)
        assert result.exit_code == exitcodes.OK, result.reason
        assert result.position is not None
        assert {sg.shard: sg.gtid for sg in result.position} == sim.positions("commerce")
