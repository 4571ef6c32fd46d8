"""event.processing.failure.handling.mode against the real broker and the VTGate simulator."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from worker_fixtures import commerce_sim, running_task, wait_positioned, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcworker import exitcodes
from cdcworker.events import EncoderConfig
from cdcworker.filters import EventConversionError, FailureHandler
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.sink import KafkaSink
from cdcworker.streaming import Features, StreamProcessor
from localkafka import KafkaBroker, consume_all
from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2
from vtgatesim import VTGateSim
from vtgatesim.faults import FaultPlan

DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email TEXT, PRIMARY KEY (id))",
]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim(DDL) as s:
        yield s


# --- a value that does not parse: crafted VStream responses, real Kafka ---------------------------

_T = binlogdata_pb2.VEventType
_GTID = "MySQL56/0b7e9d2a-1111-2222-3333-444455556666:1-7"


def _txn(rows: list[tuple[bytes, bytes]]) -> vtgate_pb2.VStreamResponse:
    fields = [
        query_pb2.Field(name="id", type=query_pb2.INT64, flags=1 | 2, column_type="bigint"),
        query_pb2.Field(name="n", type=query_pb2.INT64, flags=0, column_type="bigint"),
    ]
    fe = binlogdata_pb2.FieldEvent(table_name="ks.t", fields=fields, keyspace="ks", shard="-80")
    changes = [
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[len(a), len(b)], values=a + b)) for a, b in rows
    ]
    vgtid = binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="ks", shard="-80", gtid=_GTID)])
    events = [
        binlogdata_pb2.VEvent(type=_T.BEGIN, timestamp=1700000000, keyspace="ks", shard="-80"),
        binlogdata_pb2.VEvent(type=_T.FIELD, field_event=fe, keyspace="ks", shard="-80"),
        binlogdata_pb2.VEvent(
            type=_T.ROW,
            row_event=binlogdata_pb2.RowEvent(table_name="ks.t", row_changes=changes, keyspace="ks", shard="-80"),
            keyspace="ks",
            shard="-80",
        ),
        binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=vgtid, keyspace="ks", shard="-80"),
        binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=1700000000, keyspace="ks", shard="-80"),
    ]
    return vtgate_pb2.VStreamResponse(events=events)


def _processor(broker: KafkaBroker, mode: str, prefix: str) -> tuple[StreamProcessor, KafkaSink]:
    sink = KafkaSink({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 1})
    start = Vgtid((ShardGtid("ks", "-80", "MySQL56/0b7e9d2a-1111-2222-3333-444455556666:1-6"),))
    features = Features(failures=FailureHandler(mode))
    return StreamProcessor(EncoderConfig(prefix), sink, start, features=features), sink


@pytest.mark.parametrize("mode", ["warn", "skip"])
def test_bad_value_is_skipped_and_its_neighbours_kept(kafka_broker: KafkaBroker, mode: str) -> None:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    processor, sink = _processor(kafka_broker, mode, prefix)
    processor.process(_txn([(b"1", b"10"), (b"2", b"not-a-number"), (b"3", b"30")]))
    sink.flush()
    assert processor._failures.skipped == 1
    records = consume_all(kafka_broker.bootstrap, f"{prefix}.ks.t")
    assert [json.loads(r.value)["payload"]["after"] for r in records] == [{"id": 1, "n": 10}, {"id": 3, "n": 30}]
    assert processor.position.to_json() == json.dumps([{"keyspace": "ks", "shard": "-80", "gtid": _GTID, "table_p_ks": []}], separators=(",", ":"))


def test_bad_value_in_fail_mode_names_its_offset(kafka_broker: KafkaBroker) -> None:
    processor, _ = _processor(kafka_broker, "fail", f"f{uuid.uuid4().hex[:8]}")
    with pytest.raises(EventConversionError) as info:
        processor.process(_txn([(b"1", b"10"), (b"2", b"x")]))
    msg = str(info.value)
    assert "keyspace=ks shard=-80 table=t" in msg
    assert f'"gtid":"{_GTID}"' in msg
    assert "invalid literal for int()" in msg


# --- the vstreamer's anonymised columns (@1, @2): the simulator's fault -----------------------------


def test_anonymised_columns_in_fail_mode_reconnect_and_lose_nothing(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x')", "commerce")
    sim.inject(FaultPlan(anonymise_columns=True))
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial"})
    with running_task(cfg) as run:
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 1, what="the copied row")
        sim.execute("INSERT INTO customer (id, email) VALUES (2, 'b@x')", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 2, what="2 records")
        reconnects = sum(run.task.metrics.reconnects.values())
        result = run.stop()
    assert result.exit_code == exitcodes.OK
    assert reconnects >= 1
    records = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in records) == [1, 2]


def test_anonymised_columns_in_warn_mode_skip_only_that_table(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    sim.inject(FaultPlan(anonymise_columns=True))
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"event.processing.failure.handling.mode": "warn"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x')", "commerce")
        _wait_for(lambda: run.task.metrics is not None and run.task.metrics.erroneous >= 2, what="FIELD and ROW skipped")
        assert run.thread.is_alive()  # the task keeps streaming
        result = run.stop()
    assert result.exit_code == exitcodes.OK


# --- records over the producer's max.request.size ---------------------------------------------------


@pytest.mark.parametrize("producer", ["native", "confluent"])
@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_oversized_record_follows_the_mode(sim: VTGateSim, kafka_broker: KafkaBroker, mode: str, producer: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if producer == "confluent":  # the path without the native producer (nativesink.native_sinks)
        monkeypatch.setenv("SHARDCDC_NATIVE", "encoder")
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={"producer.max.request.size": "4000", "event.processing.failure.handling.mode": mode},
    )
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute_transaction(
            [
                "INSERT INTO customer (id, email) VALUES (1, 'small')",
                "INSERT INTO customer (id, email) VALUES (4, '" + "x" * 5000 + "')",
                "INSERT INTO customer (id, email) VALUES (5, 'small too')",
            ],
            "commerce",
        )
        if mode == "fail":
            result = run.wait(60)
        else:
            _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 2, what="2 records")
            result = run.stop()
    if mode == "fail":
        assert result.exit_code == exitcodes.FAILED
        assert "exceeds the producer's max.request.size" in result.reason
        assert "table=customer" in result.reason and "vgtid=[" in result.reason
        return
    assert result.exit_code == exitcodes.OK
    records = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in records) == [1, 5]


# --- records the broker refuses (topic max.message.bytes < record, producer limit larger) -----------


@pytest.mark.parametrize("producer", ["native", "confluent"])
@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_record_refused_by_the_broker_follows_the_mode(sim: VTGateSim, kafka_broker: KafkaBroker, mode: str, producer: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if producer == "confluent":  # the path without the native producer (nativesink.native_sinks)
        monkeypatch.setenv("SHARDCDC_NATIVE", "encoder")
    """MSG_SIZE_TOO_LARGE in a delivery report: warn drops that record only, fail names the offset.

    Each statement waits for the previous record's delivery report, so the big record is alone
    in its produce batch (Kafka refuses whole batches; a neighbour refused with it is never dropped).
    """
    from localkafka import create_topics

    # Uncompressed, so the broker sees the record's own size (lz4, the default, shrinks it below the limit).
    extra = {"event.processing.failure.handling.mode": mode, "producer.compression.type": "none"}
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra=extra)
    topic = f"{cfg.topic_prefix}.commerce.customer"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1, config={"max.message.bytes": "6000"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)

        def delivered(n: int) -> bool:
            sink = run.task.sink
            return sink is not None and sink.records_sent >= n and (sink.durable_position() is not None and sink.pending == 0)

        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'before')", "commerce")
        _wait_for(lambda: delivered(1), what="the first record")
        sim.execute("INSERT INTO customer (id, email) VALUES (4, '" + "x" * 7000 + "')", "commerce")
        if mode == "fail":
            result = run.wait(60)
        else:
            _wait_for(lambda: delivered(2) and run.task.extras.failures.skipped == 1, what="the big record's refusal")
            assert run.task.extras.failures.topic_limit(topic) == 6000  # read from the broker: neighbours are told apart
            sim.execute("INSERT INTO customer (id, email) VALUES (5, 'after')", "commerce")
            head = sim.positions("commerce")
            _wait_for(lambda: delivered(3) and {sg.shard: sg.gtid for sg in run.task.sink.durable_position()} == head,
                      what="the last record and the offset at the head")
            result = run.stop()
    if mode == "fail":
        assert result.exit_code == exitcodes.FAILED
        assert "Kafka rejected 1 record(s) (records before offset [" in result.reason
        assert "too large" in result.reason.lower()
        return
    assert result.exit_code == exitcodes.OK, result.reason
    records = consume_all(kafka_broker.bootstrap, topic)
    assert [json.loads(r.value)["payload"]["after"]["id"] for r in records] == [1, 5]


class _Refused:
    def __init__(self, size: int) -> None:
        self._value = b"x" * size

    def topic(self) -> str:
        return "p.commerce.orders"

    def partition(self) -> int:
        return 0

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value


@pytest.mark.parametrize("mode", ["warn", "skip"])
def test_a_refused_record_is_dropped_only_when_it_alone_exceeds_the_topic_limit(mode: str) -> None:
    from confluent_kafka import KafkaError

    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    limits: dict[str, int | None] = {"p.commerce.orders": 6000}
    handler = FailureHandler(mode, topic_limit=lambda topic: limits[topic])
    assert handler.on_delivery_error(too_large, _Refused(10_000)) is True  # the oversized one: dropped
    assert handler.on_delivery_error(too_large, _Refused(500)) is False  # a neighbour in its batch: kept as an error
    # The limit cannot be read (no DescribeConfigs right, a timeout): nothing can be told apart,
    # so nothing is dropped and the task stops at the record instead of losing it.
    limits["p.commerce.orders"] = None
    assert handler.on_delivery_error(too_large, _Refused(10_000)) is False
    assert handler.on_delivery_error(too_large, _Refused(500)) is False
    assert handler.skipped == 1
