"""Shared pytest fixtures: a real Kafka broker per test session, and throwaway brokers on demand."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdcoperator.local.ports import PORT_RANGE_ENV, below_ephemeral
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


# -- parallel workers (`make test` runs pytest-xdist, --dist loadfile) -------------------------------

def worker_port_range(worker: str, count: int, low: int, high: int) -> str:
    """Worker ``gw<i>``'s own slice of [low, high): two workers never choose the same port between
    its choice and a child's bind (cdcoperator.local.ports only keeps apart its own process's)."""
    i, width = int(worker.removeprefix("gw")), (high - low) // count
    return f"{low + i * width}-{low + (i + 1) * width}"


if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) and not os.environ.get(PORT_RANGE_ENV):
    os.environ[PORT_RANGE_ENV] = worker_port_range(_worker, int(os.environ["PYTEST_XDIST_WORKER_COUNT"]),
                                                   *below_ephemeral())


def xdist_scope(nodeid: str) -> str:
    """The group a test runs in under ``make test``'s workers: its file, or "realvitess"."""
    path = nodeid.split("::", 1)[0]
    return "realvitess" if "realvitess" in path else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile``, but every file with "realvitess" in its name in one group: they share the
    session's real Vitess (vttestserver over MariaDB, ~1 minute to start) or run a cluster of their
    own, and two of those side by side would only fight for the cores. (xdist's ``loadgroup`` marks
    would say it per test, but xdist 3.8 renames node ids through a field pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # Files in collection order (conformance, e2e, integration, unit): the longest groups (the kind
    # e2e, the real-Vitess files) start early and the unit files fill the tail. xdist's default puts
    # the files with most tests first, which left the 9-minute kind e2e (2 tests) for last.
    config.option.loadscopereorder = False

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return FileScheduling(config, log)


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

