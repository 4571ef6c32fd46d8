"""Shared pytest fixtures: a real Kafka broker per test session, and throwaway brokers on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from localkafka import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One single-node KRaft broker shared by the whole test session (started lazily on first use)."""
    broker = KafkaBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def fresh_kafka_broker() -> Iterator[Callable[[], KafkaBroker]]:
    """A factory for private brokers a test may stop, kill and restart; all are closed afterwards."""
    brokers: list[KafkaBroker] = []

    def make() -> KafkaBroker:
        broker = KafkaBroker()
        brokers.append(broker)
        broker.start()
        return broker

    try:
        yield make
    finally:
        for broker in brokers:
            broker.close()
