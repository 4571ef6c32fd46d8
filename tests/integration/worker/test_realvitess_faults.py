"""Streaming real Vitess v24 through faults (issue 27, test 2): a worker SIGKILLed in the middle of
a 20 000-row transaction (one VTGate transaction, 10 000 rows a shard, several VStream messages), a
restarted worker that resumes from its stored MariaDB position, then ``ALTER TABLE … ADD COLUMN``
through VTGate while it streams, and writes that use the new column. At-least-once and exactly-once:
the topic materialised equals the source (the new column included), exactly-once with no change
delivered twice."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import grpc
import pytest
from polling import wait_for
from realvitess_fixtures import (
    COLUMNS,
    KEYSPACE,
    Worker,
    Writer,
    topic_equals_source,
    worker_props,
    write_properties,
)

from cdcoperator.local.children import stop_group
from localkafka import KafkaBroker
from realvitess import VTGateClient, VTTestServer
from realvitess.client import VTGateError

pytestmark = pytest.mark.realvitess

EXACTLY_ONCE = {"exactly.once.support": "required", "poll.interval.ms": "100"}
BIG_ROWS, PER_STATEMENT = 20_000, 500
FIRST_BIG_ID = 1_000_000


def _big_transaction(client: VTGateClient, table: str) -> None:
    """BIG_ROWS inserts in one VTGate transaction (both shards)."""
    statements = []
    for first in range(FIRST_BIG_ID, FIRST_BIG_ID + BIG_ROWS, PER_STATEMENT):
        rows = ", ".join(f"({i}, 'big{i}', {i % 997}, {i % 10000 / 100:.2f})" for i in range(first, first + PER_STATEMENT))
        statements.append(f"insert into {table} (id, name, qty, price) values {rows}")
    client.transaction(statements, KEYSPACE, timeout=300)


def _add_column(client: VTGateClient, table: str) -> None:
    """``ALTER TABLE … ADD COLUMN`` through VTGate, then until VTGate's schema tracking knows it."""
    client.execute(f"alter table {table} add column note varchar(32)", KEYSPACE)

    def known() -> bool:
        try:
            client.execute(f"select note from {table} limit 1", KEYSPACE)
        except VTGateError as exc:
            raise AssertionError(exc.message) from None
        return True

    wait_for(known, timeout=60, what=f"VTGate to know {table}.note", period=0.5)


@pytest.mark.parametrize(("table", "extra"), [("big_alo", {}), ("big_eos", EXACTLY_ONCE)],
                         ids=["at-least-once", "exactly-once"])
def test_killed_mid_transaction_then_a_column_added_mid_stream(
    real_vitess: VTTestServer, kafka_broker: KafkaBroker, tmp_path: Path, table: str, extra: dict[str, str]
) -> None:
    prefix, committed = f"rf{uuid.uuid4().hex[:8]}", bool(extra)
    config, log = tmp_path / "worker.properties", tmp_path / "worker.log"
    write_properties(config, worker_props(kafka_broker, real_vitess, prefix, table, **extra))
    with real_vitess.client() as client:
        writer = Writer(client, table, seed=5 + len(extra))
        writer.insert(50)  # the copy phase's rows
        worker = Worker(config, log)
        try:
            wait_for(worker.streaming, timeout=180, what="the worker streaming", period=0.2)
            writer.run(30)
            topic_equals_source(kafka_broker, client, prefix, table, committed)
            before = wait_for(lambda: worker.sent() > 0 and worker.sent(), timeout=30, what="records_sent")
            _big_transaction(client, table)
            # SIGKILL once part of the big transaction is sent: the rest, and (exactly-once) the
            # open Kafka transaction, are lost with the process; the next one resumes before it.
            seen = wait_for(lambda: (n := worker.sent()) >= before + 2000 and n, timeout=180,
                            what="part of the big transaction sent", period=0.01)
            os.killpg(worker.proc.pid, signal.SIGKILL)
            assert seen < before + BIG_ROWS, f"the kill came after the whole transaction: {seen - before} sent"
        finally:
            stop_group(worker.proc, kill=True)
        writer.run(20)  # while no worker runs
        worker = Worker(config, log)
        try:
            wait_for(worker.streaming, timeout=180, what="the restarted worker streaming", period=0.2)
            writer.run(20)
            _add_column(client, table)  # mid-stream: DDL, then FIELD events with the new column
            client.execute(f"insert into {table} (id, name, qty, price, note) values "
                           f"(2000001, 'after', 1, 1.00, 'new1'), (2000002, 'after', 2, 2.00, 'new2')", KEYSPACE)
            client.execute(f"update {table} set note = concat('n', id) where id < 40", KEYSPACE)
            client.execute(f"update {table} set note = 'bulk' where id between {FIRST_BIG_ID} and {FIRST_BIG_ID + 9}",
                           KEYSPACE)
            writer.run(20)
            state = topic_equals_source(kafka_broker, client, prefix, table, committed, columns=(*COLUMNS, "note"))
            os.killpg(worker.proc.pid, signal.SIGTERM)
            assert worker.proc.wait(60) == 0, log.read_text()[-3000:]
        except (AssertionError, RuntimeError, grpc.RpcError):
            print(log.read_text()[-4000:])
            raise
        finally:
            stop_group(worker.proc, kill=True)
    rows = state.by_column("id")
    assert rows[2000001]["note"] == "new1" and rows[FIRST_BIG_ID]["note"] == "bulk"
    assert sum(1 for i in rows if FIRST_BIG_ID <= i < FIRST_BIG_ID + BIG_ROWS) == BIG_ROWS
    if committed:
        assert state.duplicates == 0, f"{state.duplicates} changes delivered twice with exactly-once"
