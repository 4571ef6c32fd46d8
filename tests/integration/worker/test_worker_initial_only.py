"""snapshot.mode=initial_only: copy the tables (VStream copy), store the position, stop before streaming.

As Debezium defines the mode (the PostgreSQL connector's snapshot.mode table): the connector takes
the snapshot and stops before streaming any change; a snapshot interrupted before it completed is
taken up again (here resumed from ``table_p_ks``, as the Vitess connector resumes copies) and the
task then stops; once complete, a restart copies nothing and streams nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from worker_fixtures import running_task, wait_for, worker_config

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.offsets import OffsetPartition, OffsetValue, offset_record_key
from localkafka import KafkaBroker, consume_all
from vtgatesim import FaultPlan, VTGateSim

DDL = ["CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(64), PRIMARY KEY (id))"]
DONE = "snapshot.mode=initial_only: the initial snapshot completed"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    # Small copy batches: each holds a few rows, so a copy can be interrupted between them.
    with VTGateSim(packet_size=64) as s:
        s.create_keyspace("commerce", ["-80", "80-"], ddl=DDL)
        for i in range(1, 41):
            s.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'c{i}@x')", "commerce")
        yield s


def _stored(broker: KafkaBroker, cfg: WorkerConfig) -> list[bytes]:
    """The task's offset records, oldest first."""
    key = offset_record_key(cfg.name, OffsetPartition(cfg.topic_prefix))
    return [r.value or b"" for r in consume_all(broker.bootstrap, cfg.kafka.offsets_topic) if r.key == key]


def _ids(broker: KafkaBroker, topic: str) -> list[int]:
    return [json.loads(r.value)["payload"]["after"]["id"] for r in consume_all(broker.bootstrap, topic)]


def test_copies_stores_the_position_and_stops_without_streaming(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial_only"})
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        result = run.wait(60)
    assert (result.exit_code, result.reason) == (exitcodes.OK, DONE)
    assert result.position is not None and not result.position.copying
    records = consume_all(kafka_broker.bootstrap, topic)
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in records) == list(range(1, 41))
    assert {json.loads(r.value)["payload"]["op"] for r in records} == {"c"}  # Debezium's copy rows
    stored = _stored(kafka_broker, cfg)
    final = OffsetValue.from_bytes(stored[-1])
    # The position where every shard's copy ended: the source's GTIDs, no copy state left.
    assert {sg.shard: (sg.gtid, sg.table_p_ks) for sg in final.vgtid} == {
        shard: (gtid, ()) for shard, gtid in sim.positions("commerce").items()
    }

    # Changes after the snapshot are not streamed, and a restart copies nothing again.
    sim.execute("INSERT INTO customer (id, email) VALUES (41, 'late@x')", "commerce")
    with running_task(cfg) as run:
        result = run.wait(60)
    assert (result.exit_code, result.reason) == (exitcodes.OK, DONE + " earlier (stored offset)")
    assert sorted(_ids(kafka_broker, topic)) == list(range(1, 41))
    assert OffsetValue.from_bytes(_stored(kafka_broker, cfg)[-1]).vgtid == final.vgtid


def test_an_interrupted_copy_resumes_then_stops(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial_only"})
    topic = f"{cfg.topic_prefix}.commerce.customer"
    plan = sim.inject(FaultPlan(stall_after_events=40))  # mid-copy: the stream stops sending
    with running_task(cfg) as run:
        wait_for(plan.stalled.is_set, what="the copy to stall")

        def copy_durable() -> bool:
            sink = run.task.sink
            return sink is not None and sink.durable is not None and any(sg.table_p_ks for sg in sink.durable)

        wait_for(copy_durable, what="a copy batch durable")
        result = run.stop()
    assert result.exit_code == exitcodes.OK
    interrupted = OffsetValue.from_bytes(_stored(kafka_broker, cfg)[-1]).vgtid
    assert interrupted.copying and any(sg.table_p_ks for sg in interrupted)
    copied_before = len(_ids(kafka_broker, topic))
    assert 0 < copied_before < 40

    with running_task(cfg) as run:
        result = run.wait(60)
    assert (result.exit_code, result.reason) == (exitcodes.OK, DONE)
    ids = _ids(kafka_broker, topic)
    # Resumed after the stored last PK: every row once (copy batches end at commit points).
    assert Counter(ids) == Counter(range(1, 41))
    final = OffsetValue.from_bytes(_stored(kafka_broker, cfg)[-1]).vgtid
    assert {sg.shard: (sg.gtid, sg.table_p_ks) for sg in final} == {
        shard: (gtid, ()) for shard, gtid in sim.positions("commerce").items()
    }


def test_supervised_task_waits_completed_instead_of_exiting(
        sim: VTGateSim, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the operator a Deployment restarts an exited worker: a finished initial_only snapshot
    would crash-loop with status 0. Supervised, the task reports ``completed`` (ready and live with
    no loop turning) and waits for its stop, then exits 0."""
    from cdcworker.observability.health import liveness, readiness

    monkeypatch.setenv(exitcodes.SUPERVISED_ENV, "1")
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial_only"})
    with running_task(cfg) as run:
        wait_for(lambda: run.task.metrics is not None and run.task.metrics.state == "completed",
                 what="state completed")
        tm = run.task.metrics
        assert run.thread.is_alive() and run.result is None
        assert readiness(tm).ok and liveness(tm, now=tm.clock() + 10 * tm.liveness_timeout_s).ok
        assert tm.status()["state"] == "completed" and tm.status()["reason"] == DONE
        result = run.stop()
    assert (result.exit_code, result.reason, result.done) == (exitcodes.OK, DONE, True)
    assert sorted(_ids(kafka_broker, f"{cfg.topic_prefix}.commerce.customer")) == list(range(1, 41))


def test_a_snapshot_whose_last_records_fail_is_not_done(
    sim: VTGateSim, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy ended, but the final flush found records Kafka refused: the snapshot is not
    complete, so the task fails (and is restarted from its durable position) instead of reporting
    done and never running again."""
    import cdcworker.stages.connect as task_module
    from cdcworker.sink import SinkError

    alo, eos = task_module.sink_classes()

    class RefusingFlush(alo):  # type: ignore[misc, valid-type]
        def flush(self, timeout: float = 30.0) -> object:
            super().flush(timeout)
            raise SinkError("1 record refused by Kafka: MSG_SIZE_TOO_LARGE")

    monkeypatch.setattr(task_module, "sink_classes", lambda: (RefusingFlush, eos))
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial_only"})
    with running_task(cfg) as run:
        result = run.wait(60)
    assert (result.exit_code, result.done) == (exitcodes.FAILED, False)
    assert "MSG_SIZE_TOO_LARGE" in result.reason
