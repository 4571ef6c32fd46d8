"""Shared pytest fixtures: a real Kafka broker per test session, and throwaway brokers on demand."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localkafka import KafkaBroker

# Test files live in tests/<tier>/<package>/ (scripts/test_tiers.py); some import shared constants from
# another test module by name (from test_backfill_operator import SPARK_CRD), as they did when tests/
# was flat. Every tier's package folder goes on sys.path, whatever pytest collects first (file names
# are unique across the tiers: pytest's default import mode refuses duplicates).
for _folder in sorted(Path(__file__).parent.glob("*/*")):
    if _folder.is_dir() and _folder.parent.name in ("unit", "integration", "conformance", "e2e"):
        sys.path.append(str(_folder))

# py4j says "Closing down clientserver connection" at INFO from a gateway's __del__ at interpreter
# exit, after pytest has closed the stream a test's logging handler wrote to: a "--- Logging error ---"
# traceback after the summary of every whole run. Its INFO lines say nothing a test needs.
logging.getLogger("py4j").setLevel(logging.WARNING)


def _started_broker() -> Iterator[KafkaBroker]:
    broker = KafkaBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One single-node KRaft broker shared by the whole test session (started lazily on first use)."""
    yield from _started_broker()


@pytest.fixture(scope="session")
def debezium_kafka_broker() -> Iterator[KafkaBroker]:
    """The broker Debezium writes to in the conformance comparisons (its topics have the names of
    shardcdc's, which go to ``kafka_broker``); shared by the session like that one: every pair's topic
    prefix is its own."""
    yield from _started_broker()


@pytest.fixture(scope="session")
def secure_kafka_broker() -> Iterator[KafkaBroker]:
    """A broker whose extra listeners check passwords (SASL PLAIN, SCRAM-SHA-512) and serve TLS
    (``kafka_security_fixtures`` has the user and the CA's helpers); shared by the session."""
    from kafka_security_fixtures import PASSWORD, USER

    from localkafka import BrokerSecurity

    broker = KafkaBroker(security=BrokerSecurity({USER: PASSWORD}))
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


@pytest.fixture(scope="session")
def real_vitess() -> Iterator[object]:
    """Real Vitess v24 (vttestserver over MariaDB 10.11): keyspace ``commerce`` over ``-80, 80-``
    with the tables of ``realvitess_fixtures`` (started once per session, on first use, ~1 minute)."""
    from realvitess_fixtures import start_commerce

    with start_commerce() as vt:
        yield vt
