"""Misshapen signals are refused with one clear line; the task streams on and acts on later signals.

Issue 28, cases 1 and 2: an ``execute-snapshot`` whose ``additional-conditions`` holds strings
raised AttributeError out of the dispatcher (the worker crash-looped on the same signal), and a
Kafka signal with ``"data": [1]`` raised TypeError in the Kafka channel's thread, which died: every
later signal was ignored without a word. Every shape below is refused by ``signals.document``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from worker_fixtures import caught_up, commerce_sim, running_task, wait_positioned, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcworker.signals import Signal, SignalDispatcher, SignalError, signal_from_kafka, signal_from_row
from cdcworker.snapshot import SnapshotRequest
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))",
    "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))",
]

# (data of an execute-snapshot signal, what the refusal names)
BAD_SNAPSHOT_DATA: list[tuple[Any, str]] = [
    ({"data-collections": ["commerce.customer"], "additional-conditions": ["x"]}, '"additional-conditions"[0]'),
    ({"data-collections": ["commerce.customer"], "additional-conditions": "id > 1"}, '"additional-conditions" must'),
    ({"data-collections": ["commerce.customer"], "additional-conditions": [{"data-collection": 5, "filter": "a"}]},
     '"data-collection" must'),
    ({"data-collections": ["commerce.customer"], "additional-conditions": [{"data-collection": "commerce.customer"}]},
     ".filter must"),
    ({"data-collections": ["commerce.customer"], "additional-condition": ["id > 1"]}, '"additional-condition" must'),
    ({"data-collections": ["commerce.customer"], "additional-condition": "1; drop table t"}, "single WHERE"),
    ({"data-collections": [1, 2]}, '"data-collections" must'),
    ({"data-collections": {"a": 1}}, '"data-collections" must'),
    ({"data-collections": []}, "non-empty"),
    ({"data-collections": ["commerce.customer"], "type": ["blocking"]}, '"type" must'),
    ({"data-collections": ["commerce.customer"], "type": "sideways"}, '"type" must'),
]


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused" in r.getMessage() and r.levelno == logging.WARNING]


class _Engine:
    def __init__(self) -> None:
        self.started: list[SnapshotRequest] = []
        self.cancelled: list[tuple[str, ...]] = []

    def start(self, request: SnapshotRequest) -> None:
        self.started.append(request)

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        self.cancelled.append(data_collections)


@pytest.mark.parametrize(("data", "named"), BAD_SNAPSHOT_DATA, ids=[n for _, n in BAD_SNAPSHOT_DATA])
def test_a_misshapen_execute_snapshot_is_refused_with_one_line(data: Any, named: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    engine = _Engine()
    d = SignalDispatcher(engine)
    with caplog.at_level(logging.INFO, logger="cdcworker.signals"):
        d.dispatch(Signal("s1", "execute-snapshot", data))
        d.dispatch(Signal("s2", "execute-snapshot", {"data-collections": ["ks.t"]}))
    refusals = _refusals(caplog)
    assert len(refusals) == 1 and "signal s1 (execute-snapshot) from the source channel refused" in refusals[0]
    assert named in refusals[0]
    assert [s.id for s in d.handled] == ["s2"] and [r.id for r in engine.started] == ["s2"]


@pytest.mark.parametrize("data", [{"data-collections": 7}, {"data-collections": [None]}])
def test_a_misshapen_stop_snapshot_is_refused(data: Any, caplog: pytest.LogCaptureFixture) -> None:
    engine = _Engine()
    d = SignalDispatcher(engine)
    with caplog.at_level(logging.WARNING, logger="cdcworker.signals"):
        d.dispatch(Signal("s1", "stop-snapshot", data))
    assert len(_refusals(caplog)) == 1 and engine.cancelled == [] and d.handled == []


@pytest.mark.parametrize(("value", "named"), [
    (b'{"type":"execute-snapshot","data":[1]}', "data must be a JSON object, got a list [1]"),
    (b'{"type":"execute-snapshot","data":7}', "data must be a JSON object, got a number 7"),
    (b'{"type":"execute-snapshot","data":"[1]"}', "data must be a JSON object, got a list"),
    (b'{"type":"execute-snapshot","data":"{not json"}', "data is not JSON"),
    (b"[1, 2]", "the record value must be a JSON object"),
    (b"not json at all", "the record value is not JSON"),
    (b'{"type": "log", "data": {"message": "\xff"}}', "not UTF-8"),
    (b"[" * 100_000, "nested too deeply"),
])
def test_a_misshapen_kafka_record_is_a_signal_error(value: bytes, named: str) -> None:
    with pytest.raises(SignalError) as exc:
        signal_from_kafka(b"p", value, "p", 3)
    assert named in str(exc.value) and len(str(exc.value)) < 400


def test_a_signal_row_with_a_list_for_data_is_a_signal_error() -> None:
    with pytest.raises(SignalError, match="data must be a JSON object"):
        signal_from_row({"id": 1, "type": "execute-snapshot", "data": "[1]"})
    with pytest.raises(SignalError, match="data must be a JSON object, got a number"):
        signal_from_row({"id": 1, "type": "execute-snapshot", "data": 12})


def test_a_long_value_is_cut_in_the_refusal() -> None:
    with pytest.raises(SignalError) as exc:
        signal_from_row({"id": 1, "type": "log", "data": json.dumps(["x" * 8_000_000])})
    assert len(str(exc.value)) < 200 and f"... ({8_000_000 + 4} bytes)" in str(exc.value)  # ['x...x']


# --- end to end: the worker streams on, later signals work ----------------------------------------


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim(DDL, customers=6) as s:
        yield s


def _ids(broker: KafkaBroker, topic: str, op: str) -> list[int]:
    payloads = [json.loads(r.value)["payload"] for r in consume_all(broker.bootstrap, topic) if r.value]
    return sorted(p["after"]["id"] for p in payloads if p["op"] == op)


def test_signal_table_bad_signal_is_refused_and_the_worker_streams_on(
        sim: VTGateSim, kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"signal.data.collection": "commerce.dbz_signal"})
    bad = json.dumps({"data-collections": ["commerce.customer"], "additional-conditions": ["x"]})
    good = json.dumps({"data-collections": ["commerce.customer"]})
    with caplog.at_level(logging.INFO, logger="cdcworker.signals"), running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{bad}')", "commerce")
        sim.execute("INSERT INTO dbz_signal (id, type, data) VALUES (2, 'execute-snapshot', '[1]')", "commerce")
        for i in range(100, 110):  # rows on both shards, after the bad signals
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'live{i}@x.io')", "commerce")
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (3, 'execute-snapshot', '{good}')", "commerce")
        _wait_for(lambda: run.task.extras.engine.completed == ["3"], what="the valid signal's snapshot")
        _wait_for(lambda: caught_up(sim, run), what="every shard caught up")
        assert run.thread.is_alive(), "the worker stopped"
        handled = [s.id for s in run.task.extras.dispatcher.handled]
        status = run.task.metrics.status()["signals"]  # what /status and `shardcdc status` show
        result = run.stop()
    assert result.exit_code == 0
    assert handled == ["3"]
    refusals = _refusals(caplog)
    assert len(refusals) == 2, refusals
    assert '"additional-conditions"[0] must be an object' in refusals[0]
    assert status["refused"] == 2 and "data must be a JSON object, got a list [1]" in status["last_refused"]
    assert "data must be a JSON object, got a list [1]" in refusals[1]
    assert _ids(kafka_broker, f"{cfg.topic_prefix}.commerce.customer", "c") == list(range(100, 110))


def test_kafka_bad_signals_leave_the_channel_alive(
        sim: VTGateSim, kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce",
                        extra={"signal.enabled.channels": "source,kafka", "table.include.list": r"commerce\.customer"})
    prefix = cfg.topic_prefix
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    key = prefix.encode()
    bad = [b'{"type":"execute-snapshot","data":[1]}',
           json.dumps({"type": "execute-snapshot", "data": {"data-collections": ["commerce.customer"],
                                                              "additional-conditions": ["x"]}}).encode(),
           b"{truncated",
           b"\xff\xfe"]
    for value in bad:
        producer.produce(f"{prefix}-signal", value, key)
    producer.flush(30)
    with caplog.at_level(logging.INFO, logger="cdcworker.signals"), running_task(cfg) as run:
        _wait_for(lambda: len(_refusals(caplog)) == len(bad), what="every bad record refused")
        wait_positioned(sim, run)
        good = {"id": "good", "type": "execute-snapshot", "data": {"data-collections": ["commerce.customer"],
                "additional-conditions": [{"data-collection": "commerce.customer", "filter": "id > 4"}]}}
        producer.produce(f"{prefix}-signal", json.dumps(good).encode(), key)
        producer.flush(30)
        _wait_for(lambda: run.task.extras.engine.completed == ["good"], what="the later valid signal's snapshot")
        assert run.thread.is_alive()
        handled = [s.id for s in run.task.extras.dispatcher.handled]
        refused = run.task.metrics.signals_refused
        result = run.stop()
    assert result.exit_code == 0
    assert handled == ["good"] and refused == len(bad)
    assert _ids(kafka_broker, f"{prefix}.commerce.customer", "r") == [5, 6]
