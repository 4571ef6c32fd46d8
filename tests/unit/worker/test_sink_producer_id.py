"""An exactly-once sink's producer id: retried in short calls, a stop honoured, a timeout one line."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdcworker.kafkaerrors import KafkaAccessError, ProducerIdTimeout
from cdcworker.sink import TransactionalSink


class _Coordinator:
    """init_transactions as Kafka's coordinator answers it: CONCURRENT_TRANSACTIONS ``busy`` times."""

    def __init__(self, busy: int, clock: list[float], retriable: bool = True) -> None:
        self.busy = busy
        self.clock = clock
        self.retriable = retriable
        self.calls: list[float] = []

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(timeout)
        self.clock[0] += timeout  # librdkafka retried within the call until its timeout
        if len(self.calls) <= self.busy:
            raise KafkaException(KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "concurrent operation ongoing",
                                            retriable=self.retriable))

    def produce(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("nothing is produced here")


def _sink(coordinator: _Coordinator, timeout: float = 30.0, stop_after: int | None = None) -> TransactionalSink:
    class Sink(TransactionalSink):
        def _make_producer(self, config: dict[str, object]) -> _Coordinator:
            return coordinator

    return Sink({"transactional.id": "shop-task0"}, lambda producer, position: None, timeout=timeout,
                clock=lambda: coordinator.clock[0],
                stopping=lambda: stop_after is not None and len(coordinator.calls) >= stop_after)


def test_a_busy_coordinator_is_asked_again_in_short_calls_until_it_answers() -> None:
    coordinator = _Coordinator(busy=40, clock=[0.0])
    _sink(coordinator, timeout=60.0)
    assert len(coordinator.calls) == 41  # 40 s of CONCURRENT_TRANSACTIONS: more than one 30 s call would wait
    assert max(coordinator.calls) <= 1.0


def test_a_stop_while_waiting_for_the_producer_id_ends_the_wait_at_once() -> None:
    coordinator = _Coordinator(busy=1000, clock=[0.0])
    with pytest.raises(InterruptedError, match="before Kafka gave the transactional producer its id"):
        _sink(coordinator, stop_after=3)
    assert len(coordinator.calls) == 3


def test_no_producer_id_in_time_is_one_line_naming_the_transactional_id() -> None:
    coordinator = _Coordinator(busy=1000, clock=[0.0])
    with pytest.raises(ProducerIdTimeout) as info:
        _sink(coordinator, timeout=5.0)
    message = str(info.value)
    assert "'shop-task0'" in message and "within 5s" in message and "\n" not in message
    assert 5 <= len(coordinator.calls) <= 6


def test_a_non_retriable_refusal_is_not_retried() -> None:
    coordinator = _Coordinator(busy=1, clock=[0.0], retriable=False)
    with pytest.raises(KafkaException):
        _sink(coordinator)
    assert len(coordinator.calls) == 1


class _RefusedCoordinator(_Coordinator):
    """A transaction coordinator whose re-authentication was refused: EndTxn fails both ways with
    librdkafka's local _AUTHENTICATION, before its error callback reported the refusal."""

    def __init__(self) -> None:
        super().__init__(busy=0, clock=[0.0])
        self.ends: list[str] = []

    def begin_transaction(self) -> None:
        pass

    def poll(self, timeout: float) -> int:
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self.ends.append("commit")
        raise KafkaException(KafkaError(KafkaError._AUTHENTICATION, "EndTxn commit failed: Local: Authentication failure",
                                        txn_requires_abort=True))

    def abort_transaction(self, timeout: float) -> None:
        self.ends.append("abort")
        raise KafkaException(KafkaError(KafkaError._AUTHENTICATION, "EndTxn abort failed: Local: Authentication failure"))


def test_a_commit_refused_for_the_login_stops_with_the_access_error_not_a_raw_kafka_exception() -> None:
    """Seen in CI: the commit's refusal came before the error callback's, the abort after it was
    refused too and its KafkaException ended the task's thread with no result."""
    coordinator = _RefusedCoordinator()
    sink = _sink(coordinator)
    sink.commit_point("after the first transaction")
    with pytest.raises(KafkaAccessError, match=r"authentication failed for the producer .*EndTxn commit failed"):
        sink.commit()
    assert coordinator.ends == ["commit"]  # no abort: it cannot reach the coordinator either
    assert sink.durable_position() is None


def test_an_abort_refused_for_the_login_stops_with_the_access_error() -> None:
    coordinator = _RefusedCoordinator()
    sink = _sink(coordinator)
    sink._begin()
    sink.records_sent += 3  # three records of a Vitess transaction whose end has not arrived
    with pytest.raises(KafkaAccessError, match=r"authentication failed for the producer .*EndTxn abort failed"):
        sink.rewind("handed over")
    assert coordinator.ends == ["abort"]
