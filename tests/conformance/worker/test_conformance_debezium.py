"""Differential conformance: the real Debezium Vitess connector and shardcdc on the same workload.

One VTGate test server, two brokers (one per connector), one Kafka Connect standalone process
(Debezium Vitess from Maven Central, ``make debezium``) and one shardcdc task per pair. Each pair
streams one keyspace with the same settings, connector name and topic prefix on both sides (see
``PAIRS``): streaming from ``current`` on a two-shard keyspace, a VStream-copy snapshot on an
unsharded one, the non-default type modes, and transaction metadata.

Every record is compared byte for byte per topic and partition, in order: topic, partition, key,
value and headers, after masking only what docs/conformance.md lists and justifies (envelope
processing timestamps and the per-run ``__debezium.context.runId`` value).
Known shardcdc bugs are ``xfail(strict=True)`` with the reason; docs/conformance.md has the details.

Determinism: the workload runs one statement at a time and waits until every VStream the test
server serves has queued that commit (``_streams_caught_up``), so both connectors see the same
event sequence and the same VGTIDs.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource
from connectstandalone import ConnectStandalone, debezium_home, vitess_connector_config
from worker_fixtures import RunningTask, running_task, worker_config

from cdcworker.config import WorkerConfig
from cdcworker.config.properties import (
    DEFAULT_TOPIC_NAMING_STRATEGY,
    JSON_CONVERTER,
    PROPERTIES,
    TABLE_TOPIC_NAMING_STRATEGY,
    PropType,
)
from localkafka import ConsumedRecord, KafkaBroker, consume_all, create_topics
from vtgatesim import VTGateSim

PARTITIONS = 3  # > 1 so the key -> partition mapping (murmur2) is compared too

TABLES = ["bit_types", "num_types", "orders", "str_types", "time_types", "uk_only"]
DDL = [
    "CREATE TABLE num_types (id BIGINT NOT NULL, ti TINYINT, tb TINYINT(1), si SMALLINT, mi MEDIUMINT, i INT,"
    " bi BIGINT, tiu TINYINT UNSIGNED, siu SMALLINT UNSIGNED, miu MEDIUMINT UNSIGNED, iu INT UNSIGNED,"
    " biu BIGINT UNSIGNED, yr YEAR, f FLOAT, d DOUBLE, dc DECIMAL(12,4), PRIMARY KEY (id))",
    "CREATE TABLE str_types (id BIGINT NOT NULL, c CHAR(4), vc VARCHAR(64) NOT NULL, tx TEXT,"
    " vcb VARCHAR(16) COLLATE utf8mb4_bin, bn BINARY(4), vb VARBINARY(16), bl BLOB,"
    " e ENUM('small','medium','large'), s SET('a','b','c'), j JSON, lat VARCHAR(8) CHARACTER SET latin1,"
    " PRIMARY KEY (id))",
    "CREATE TABLE time_types (id BIGINT NOT NULL, dt DATE, dtm DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6),"
    " ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL, tm TIME, tm6 TIME(6), PRIMARY KEY (id))",
    "CREATE TABLE orders (id BIGINT NOT NULL, line INT NOT NULL, sku VARCHAR(16), total DECIMAL(10,2),"
    " PRIMARY KEY (id, line))",
    "CREATE TABLE bit_types (id BIGINT NOT NULL, b1 BIT(1), b12 BIT(12), b64 BIT(64), note VARCHAR(8),"
    " PRIMARY KEY (id))",
    # no primary key: the key is the first unique key (reference §6)
    "CREATE TABLE uk_only (id BIGINT NOT NULL, code VARCHAR(8) NOT NULL, note VARCHAR(8), UNIQUE KEY uk_code (code))",
]
BIT_COLUMNS = ("b1", "b12", "b64")

# In `commerce` (hash vindex on id) each statement touches ONE shard: ids 1 2 3 5 9 10 13 15 16 17
# 21 hash to -80 and 4 6 7 8 11 12 14 18 19 20 to 80-. A statement spanning shards commits one
# transaction per shard at once, and VTGate interleaves shard streams in arrival order, so two
# VStreams may see them in either order (docs/conformance.md, "Cross-shard interleaving").

# Present before the connectors start: copied by the snapshot pair, ignored by the streaming pair.
SEED = [
    "INSERT INTO num_types VALUES (1, -128, 1, -32768, -8388608, -2147483648, -9223372036854775808, 255, 65535,"
    " 16777215, 4294967295, 18446744073709551615, 2024, 1.5, -2.25e100, 12345678.1234)",
    "INSERT INTO num_types (id, i) VALUES (2, 20), (3, 30), (5, 50)",
    "INSERT INTO str_types VALUES (1, 'ab', 'h\u00e9llo w\u00f6rld \u2713', 'long text', 'BinColl', x'00ff10',"
    " x'deadbeef', x'0001020304', 'medium', 'a,c', '{\"k\": [1, 2.5, \"x\"], \"n\": null}', 'caf\u00e9')",
    "INSERT INTO time_types VALUES (1, '2024-02-29', '2024-02-29 13:14:15', '2024-02-29 13:14:15.123',"
    " '1999-12-31 23:59:59.999999', '2020-02-13 01:02:03', '2038-01-19 03:14:07.654321', '-838:59:59',"
    " '12:34:56.789012')",
    "INSERT INTO orders VALUES (1, 1, 'x', 9.99), (1, 2, 'y', 19.99), (2, 1, 'z', 0.01)",
    "INSERT INTO bit_types VALUES (1, b'1', b'101010101010', x'8000000000000001', 'one')",
    "INSERT INTO uk_only VALUES (1, 'one', NULL), (2, 'two', 'x')",
]

# Run while all four connectors stream, one statement at a time: SEED then CHANGES in `commerce`,
# CHANGES in `archive` (which already holds SEED).
CHANGES = [
    "INSERT INTO num_types VALUES (10, 127, 0, 32767, 8388607, 2147483647, 9223372036854775807, 0, 0, 0, 0, 0,"
    " 1901, -0.5, 3.141592653589793, -0.0001)",
    "INSERT INTO num_types (id) VALUES (11), (12), (14), (18), (19)",  # multi-row transaction
    "UPDATE num_types SET i = 7, dc = 1.5 WHERE id >= 11",  # multi-row update
    "UPDATE num_types SET tb = 0, biu = 9223372036854775808, f = 1e-7, d = 1e22 WHERE id = 1",
    "INSERT INTO str_types VALUES (2, '', 'x', NULL, 'x', x'00', x'', x'', 'large', '', '[]', ''),"
    " (3, 'abcd', 'quote \\' and \\\\ backslash', 'tab\\tnew\\nline', NULL, NULL, NULL, NULL, NULL, 'a,b,c',"
    " '{\"a\": {\"b\": true}}', NULL)",
    "INSERT INTO str_types (id, vc, e, s, j) VALUES (4, 'on 80-', 'small', 'b', '[\"\u00e9\", -1.25]')",
    "UPDATE str_types SET e = 'small', s = 'b', j = '{\"v\": 1e3}' WHERE id = 1",
    "INSERT INTO time_types VALUES (2, '0000-00-00', '0000-00-00 00:00:00', NULL, NULL, NULL, NULL, NULL, NULL),"
    " (3, '1970-01-01', '1970-01-01 00:00:00', '1970-01-01 00:00:00.001', '2000-01-01 00:00:00.000001',"
    " '1970-01-01 00:00:01', '1999-12-31 23:59:59.5', '00:00:00', '-00:00:00.000001')",
    "INSERT INTO time_types (id, dt, ts) VALUES (4, '1900-01-01', '2038-01-19 03:14:07')",
    "UPDATE time_types SET tm = '838:59:59', dt = '9999-12-31' WHERE id = 1",
    "INSERT INTO bit_types VALUES (4, b'0', b'000000000001', x'ffffffffffffffff', 'four'), (6, NULL, NULL, NULL, NULL)",
    "UPDATE bit_types SET b1 = b'0', note = 'uno' WHERE id = 1",
    "UPDATE orders SET line = 3 WHERE id = 1 AND line = 2",  # primary-key update
    "DELETE FROM orders WHERE id = 2",
    "DELETE FROM num_types WHERE id IN (12, 14, 18)",  # multi-row delete
    "DELETE FROM str_types WHERE id = 2",
    "DELETE FROM bit_types WHERE id = 6",
    "INSERT INTO uk_only VALUES (3, 'three', 'y')",
    "UPDATE uk_only SET note = 'z' WHERE id = 1",
    "UPDATE uk_only SET code = 'deux' WHERE id = 2",  # unique-key (= record key) update
    "DELETE FROM uk_only WHERE id = 3",
]


@dataclass(frozen=True)
class Pair:
    """One comparison: Debezium and shardcdc streaming one keyspace with the same settings.

    Both use the same connector name and topic prefix, on two brokers: the prefix is part of every
    key (schema name ``<prefix>.<ks>.<table>.Key``), so only equal prefixes give equal key bytes
    and so comparable partitions.
    """

    name: str
    keyspace: str
    prefix: str
    settings: dict[str, str]

    @property
    def transactions(self) -> bool:
        """Whether the pair writes ``<prefix>.transaction`` (FilterTransactionTopicRecords drops it)."""
        filtered = any(v.endswith(".FilterTransactionTopicRecords") for k, v in self.settings.items()
                       if k.startswith("transforms.") and k.endswith(".type"))
        return self.settings.get("provide.transaction.metadata") == "true" and not filtered

    @property
    def topics(self) -> list[str]:
        tx = [f"{self.prefix}.transaction"] if self.transactions else []
        if self.settings.get("topic.naming.strategy") == TABLE_NAMING:  # <prefix>.<table>
            return [f"{self.prefix}.{t}" for t in TABLES] + tx
        if self.settings.get("topic.naming.strategy") == DEFAULT_NAMING:  # <prefix>.<shard>.<table>
            return [f"{self.prefix}.{shard}.{t}" for shard in KEYSPACES[self.keyspace] for t in TABLES] + tx
        return [f"{self.prefix}.{self.keyspace}.{t}" for t in TABLES] + tx


TABLE_NAMING, DEFAULT_NAMING = TABLE_TOPIC_NAMING_STRATEGY, DEFAULT_TOPIC_NAMING_STRATEGY
JSON = JSON_CONVERTER  # per-connector converter settings need the class too
_RUN = uuid.uuid4().hex[:6]  # fresh topic names on the session broker
PAIRS = [
    Pair("streaming", "commerce", f"stream{_RUN}", {"snapshot.mode": "never"}),
    Pair("snapshot", "archive", f"snap{_RUN}", {"snapshot.mode": "initial"}),
    # the non-default type modes, on the same workload as `streaming`
    Pair("modes1", "commerce", f"modesa{_RUN}", {
        "snapshot.mode": "never", "decimal.handling.mode": "precise", "time.precision.mode": "connect",
        "bigint.unsigned.handling.mode": "long", "binary.handling.mode": "hex", "tombstones.on.delete": "false",
    }),
    Pair("modes2", "commerce", f"modesb{_RUN}", {
        "snapshot.mode": "never", "decimal.handling.mode": "double", "time.precision.mode": "isostring",
        "bigint.unsigned.handling.mode": "precise", "binary.handling.mode": "base64-url-safe",
    }),
    Pair("modes3", "commerce", f"modesc{_RUN}", {
        "snapshot.mode": "never", "decimal.handling.mode": "string", "time.precision.mode": "adaptive_time_microseconds",
        "binary.handling.mode": "base64",
    }),
    # event shaping: source types in the schema, key columns, masking and truncation, skipped updates
    Pair("events1", "commerce", f"events{_RUN}", {
        "snapshot.mode": "never", "column.propagate.source.type": "commerce\\.num_types\\..*",
        "datatype.propagate.source.type": "DATETIME,VARCHAR", "message.key.columns": "commerce.uk_only:id",
        "column.mask.with.4.chars": "commerce.str_types.c", "column.truncate.to.3.chars": "commerce.str_types.tx",
        "skipped.operations": "u", "event.processing.failure.handling.mode": "warn",
    }),
    Pair("events2", "commerce", f"eventsb{_RUN}", {
        "snapshot.mode": "never", "event.processing.failure.handling.mode": "skip", "skipped.operations": "none",
        "vitess.tablet.type": "RDONLY",
        "vitess.offset.storage.per.task": "true", "vitess.offset.storage.task.key.gen": "0", "vitess.prev.num.tasks": "1",
    }),
    # the three size-reducing single message transforms, Debezium's real SMTs in Connect (without
    # tombstones: Debezium's RemoveField fails the task on one, NPE on its null schema; docs/conformance.md)
    Pair("smt", "commerce", f"smt{_RUN}", {
        "snapshot.mode": "never", "provide.transaction.metadata": "true", "tombstones.on.delete": "false",
        "transforms": "filter,remove,local",
        "transforms.filter.type": "io.debezium.connector.vitess.transforms.FilterTransactionTopicRecords",
        "transforms.remove.type": "io.debezium.connector.vitess.transforms.RemoveField",
        "transforms.remove.field_names": "transaction.id",
        "transforms.local.type": "io.debezium.connector.vitess.transforms.UseLocalVgtid",
    }),
    # Avro name adjustment (a `-` in the prefix is what it rewrites: into every schema name, so into
    # every key's bytes) and the remaining values of the enumerated settings (docs/conformance.md, "Every
    # setting value"); the test server serves every tablet type alike. Not PRIMARY: Debezium 3.5 fails on it
    Pair("names1", "commerce", f"adj-{_RUN}", {
        "snapshot.mode": "never", "schema.name.adjustment.mode": "avro", "field.name.adjustment.mode": "avro",
        "event.processing.failure.handling.mode": "ignore", "include.unknown.datatypes": "true",
        "bigint.unsigned.handling.mode": "string", "binary.handling.mode": "bytes", "tombstones.on.delete": "true",
        "provide.transaction.metadata": "false", "extended.headers.enabled": "true", "vitess.tablet.type": "REPLICA",
        "topic.naming.strategy": TABLE_NAMING, "vitess.exclude.keyspace.from.table.name": "true",
        "key.converter": JSON, "value.converter": JSON, "key.converter.decimal.format": "NUMERIC",
        "value.converter.decimal.format": "NUMERIC", "vitess.stream.keyspace.heartbeats": "true",
        "vitess.grpc.default.load.balancing.policy": "round_robin",
    }),
    Pair("names2", "commerce", f"uni-{_RUN}", {
        "snapshot.mode": "never", "schema.name.adjustment.mode": "avro_unicode",
        "field.name.adjustment.mode": "avro_unicode", "event.processing.failure.handling.mode": "fail",
        "include.unknown.datatypes": "false", "extended.headers.enabled": "false", "vitess.tablet.type": "MASTER",
        "vitess.exclude.empty.shards": "true",
        "override.datetime.to.nullable": "true", "vitess.stop_on_reshard": "true",
        "key.converter": JSON, "value.converter": JSON, "key.converter.decimal.format": "BASE64",
        "value.converter.decimal.format": "BASE64", "key.converter.replace.null.with.default": "false",
        "value.converter.replace.null.with.default": "false", "vitess.grpc.default.load.balancing.policy": "pick_first",
        "provide.transaction.metadata": "true", "vitess.inherit.epoch": "true",
        "transaction.metadata.factory":
            "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory",
    }),
    # records without the schema envelope
    Pair("noschema", "commerce", f"nosch{_RUN}", {
        "snapshot.mode": "never", "key.converter": JSON, "value.converter": JSON,
        "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
    }),
    # DefaultTopicNamingStrategy: a known difference (KNOWN_DIFFERENCES), alone so nothing else hides behind it
    # one topic per shard and table (TableId.databaseParts: the Vitess TableId's catalog is the shard)
    Pair("topicsdef", "commerce", f"tdef{_RUN}", {"snapshot.mode": "never", "topic.naming.strategy": DEFAULT_NAMING}),
    # transaction metadata: the `transaction` block and the <prefix>.transaction topic
    Pair("txmeta", "commerce", f"txmeta{_RUN}", {"snapshot.mode": "never", "provide.transaction.metadata": "true"}),
    Pair("txorder", "commerce", f"txorder{_RUN}", {
        "snapshot.mode": "never", "provide.transaction.metadata": "true",
        "transaction.metadata.factory":
            "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory",
    }),
]
PAIRS_BY_NAME = {p.name: p for p in PAIRS}
KEYSPACES = {"commerce": ["-80", "80-"], "archive": ["0"]}


# ---------------------------------------------------------------------------------------------
# synchronisation
def _wait_for(predicate: Callable[[], object], timeout: float, what: str, on_timeout: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_timeout()}")
        time.sleep(0.05)  # polling a condition (streams / topics), not a delay standing in for one


def _streams_caught_up(sim: VTGateSim, expected_streams: int) -> bool:
    """Every VStream has queued everything committed so far (and no copy is in progress)."""
    with sim.streams_lock:
        streams = list(sim.streams)
    if len(streams) != expected_streams:
        return False
    for vs in streams:
        with vs.lock:
            got = [(sg.keyspace, sg.shard, sg.gtid, bool(sg.table_pks)) for sg in vs.sgtids]
        for ks, shard, gtid, copying in got:
            if copying or gtid != sim.position(ks, shard):
                return False
    return True


def _worker_done(sim: VTGateSim, run: RunningTask, keyspace: str) -> bool:
    """The task's committed position is the head of every shard and Kafka acknowledged everything."""
    proc, sink = run.task.processor, run.task.sink
    if proc is None or sink is None or proc.position is None:
        return False
    at = {sg.shard: sg.gtid for sg in proc.position.shard_gtids}
    return at == sim.positions(keyspace) and sink.pending == 0


def play_workload(sim: VTGateSim, keyspace: str, statements: list[str], tasks: list[RunningTask], streams: int,
                  state: Callable[[], str], start_timeout: float = 60.0) -> None:
    """Every VStream started; each statement run alone until every stream queued it; then every
    shardcdc task processed up to the head and Kafka acknowledged everything."""
    _wait_for(lambda: _streams_caught_up(sim, streams), start_timeout, "every VStream to start", state)
    for stmt in statements:
        sim.execute(stmt, keyspace)
        _wait_for(lambda: _streams_caught_up(sim, streams), 30, f"the streams to deliver: {stmt}", state)
    for task in tasks:
        _wait_for(functools.partial(_worker_done, sim, task, keyspace), 30, "shardcdc to finish", state)


def read_both(ours_bootstrap: str, dbz_bootstrap: str, topics: list[str], check: Callable[[], None],
              read_committed: bool = False, wait: float = 30.0) -> tuple[list[ConsumedRecord], list[ConsumedRecord]]:
    """(shardcdc's, Debezium's) records of the topics. Debezium may legitimately write a different
    number of records (the comparison then shows which): wait a bounded time for as many."""
    ours = consume_all(ours_bootstrap, topics, read_committed=read_committed)
    deadline = time.monotonic() + wait
    while (len(dbz := consume_all(dbz_bootstrap, topics, read_committed=read_committed)) < len(ours)
           and time.monotonic() < deadline):
        check()
        time.sleep(0.2)  # polling the topics: Debezium offers no other progress signal
    return ours, dbz


def start_shardcdc_tasks(stack: ExitStack, kafka_broker: KafkaBroker, configs: list[WorkerConfig]) -> list[RunningTask]:
    """Run one shardcdc task per config in this process, each streaming before this returns.

    Offsets topics are made up front: two tasks creating theirs at the same moment would race the
    broker's metadata (UNKNOWN_TOPIC_OR_PART while describing), which only slows the start down.
    """
    offsets_topics = list(dict.fromkeys(c.kafka.offsets_topic for c in configs))  # tasks may share one
    create_topics(kafka_broker.bootstrap, offsets_topics, config={"cleanup.policy": "compact"})
    _wait_for(lambda: _configs_visible(kafka_broker, offsets_topics), 30, "offsets topics to be describable")
    tasks = [stack.enter_context(running_task(cfg)) for cfg in configs]
    for cfg, task in zip(configs, tasks, strict=True):
        _wait_for(functools.partial(_task_started, task), 30, f"shardcdc task {cfg.topic_prefix} to stream")
        assert task.thread.is_alive(), f"shardcdc task {cfg.topic_prefix} ended: {task.result}"
    return tasks


def _task_started(run: RunningTask) -> bool:
    return run.task.processor is not None or not run.thread.is_alive()


def _streams_state(sim: VTGateSim) -> str:
    with sim.streams_lock:
        streams = list(sim.streams)
    lines = []
    for vs in streams:
        with vs.lock:
            lines.append(" ".join(f"{sg.keyspace}/{sg.shard}@{sg.gtid}{'+copy' if sg.table_pks else ''}"
                                  for sg in vs.sgtids))
    heads = {ks: sim.positions(ks) for ks in KEYSPACES if ks in sim.topo.keyspaces}  # other modules' keyspaces
    return f"streams: {lines}\nheads: {heads}"


def _configs_visible(broker: KafkaBroker, topics: list[str]) -> bool:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    try:
        for fut in admin.describe_configs(resources).values():
            fut.result(10)
    except KafkaException:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# the run (once per module: Kafka Connect takes ~15 s to start)
@dataclass
class Run:
    records: dict[tuple[str, str], list[ConsumedRecord]]  # (side "dbz"/"ours", pair name) -> records
    connect_log: str  # the last lines
    connect_problems: list[str]  # every WARN/ERROR line Connect and Debezium logged


@pytest.fixture(scope="module")
def run(kafka_broker: KafkaBroker, debezium_kafka_broker: KafkaBroker) -> Iterator[Run]:
    home = debezium_home()
    if not (home / ".complete").is_file():
        raise RuntimeError(f"Debezium jars missing in {home}: run `make debezium` first")
    with ExitStack() as stack:
        brokers = {"dbz": debezium_kafka_broker, "ours": kafka_broker}
        sim = stack.enter_context(VTGateSim())
        for ks, shards in KEYSPACES.items():
            sim.create_keyspace(ks, shards, ddl=DDL)
        for stmt in SEED:
            sim.execute(stmt, "archive")
        for broker in brokers.values():
            create_topics(broker.bootstrap, [t for p in PAIRS for t in p.topics], partitions=PARTITIONS)

        # Two tasks in one process: no fixed-port metrics endpoint (shardcdc.metrics.port=0 disables it).
        configs = [
            worker_config(kafka_broker, sim.address, p.keyspace, p.prefix, {**p.settings, "shardcdc.metrics.port": "0"})
            for p in PAIRS
        ]
        tasks = start_shardcdc_tasks(stack, kafka_broker, configs)

        connect = ConnectStandalone(
            debezium_kafka_broker.bootstrap,
            [vitess_connector_config(cfg.name, p.prefix, sim.address, p.keyspace, p.settings)
             for cfg, p in zip(configs, PAIRS, strict=True)],
        )
        stack.callback(connect.close)
        connect.start(timeout=120)
        def state() -> str:
            return _streams_state(sim) + "\n" + connect.tail()

        _wait_for(lambda: _streams_caught_up(sim, 2 * len(PAIRS)), 60, "all four VStreams to start and copy", state)

        steps = [(stmt, ["commerce"]) for stmt in SEED] + [(stmt, ["commerce", "archive"]) for stmt in CHANGES]
        for stmt, keyspaces in steps:
            for ks in keyspaces:
                sim.execute(stmt, ks)
            _wait_for(lambda: _streams_caught_up(sim, 2 * len(PAIRS)), 30, f"the streams to deliver: {stmt}", state)

        # shardcdc: processed up to the head and Kafka acknowledged all; Debezium: count the topics.
        for p, task in zip(PAIRS, tasks, strict=True):
            _wait_for(functools.partial(_worker_done, sim, task, p.keyspace), 30, f"shardcdc {p.name} to finish")
        records = {}
        for p in PAIRS:
            ours = consume_all(kafka_broker.bootstrap, p.topics)
            # Debezium may legitimately write a different number of records; then the comparison
            # shows which. Wait for as many a bounded time, then compare what is there.
            deadline = time.monotonic() + 30
            while len(dbz := consume_all(debezium_kafka_broker.bootstrap, p.topics)) < len(ours) and time.monotonic() < deadline:
                connect.check()
                time.sleep(0.2)  # polling the topics: Debezium offers no other progress signal
            records[("ours", p.name)] = ours
            records[("dbz", p.name)] = dbz
        connect.check()
        problems = [ln for ln in connect.log_path.read_text(errors="replace").splitlines() if "] WARN " in ln or "] ERROR " in ln]
        yield Run(records=records, connect_log=connect.tail(200), connect_problems=problems)


# ---------------------------------------------------------------------------------------------
# normalisation: the only masks applied (each justified in docs/conformance.md)
# `}}` closes payload and record; a lone `}` the payload without a schema (value.converter.schemas.enable=false)
_ENVELOPE_TS = re.compile(rb',"op":"([cud])","ts_ms":(\d+),"ts_us":(\d+),"ts_ns":(\d+)\}(\}?)\Z')
_UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


@dataclass(frozen=True)
class Norm:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    shard: str

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}] shard={self.shard or '-'}"


def _payload(data: bytes) -> Any:
    """A record's payload, with or without the schema envelope (``*.converter.schemas.enable``)."""
    doc = json.loads(data)
    return doc["payload"] if isinstance(doc, dict) and doc.keys() == {"schema", "payload"} else doc


def normalise(rec: ConsumedRecord) -> Norm:
    value = rec.value
    shard = ""
    if value is not None:
        m = _ENVELOPE_TS.search(value)
        if m is not None:
            ts_ms, ts_us, ts_ns = (int(g) for g in m.group(2, 3, 4))
            # one processing instant at three precisions
            assert ts_us // 1000 == ts_ms and ts_ns // 1000 == ts_us, m.group(0)
            value = value[: m.start()] + b',"op":"' + m.group(1) + b'","ts_ms":0,"ts_us":0,"ts_ns":0}' + m.group(5)
        shard = (_payload(value).get("source") or {}).get("shard", "")  # BEGIN/END have no source
    headers = []
    for hk, hv in rec.headers:
        if hk == "__debezium.context.runId" and hv is not None and _UUID.match(hv.decode()):
            hv = b"<run-id>"
        headers.append((hk, hv))
    return Norm(rec.topic, rec.partition, rec.key, value, tuple(headers), shard)



# ---------------------------------------------------------------------------------------------
# comparison and readable diffs
def _pretty(data: bytes | None) -> list[str]:
    if data is None:
        return ["<null>"]
    try:
        return json.dumps(json.loads(data), indent=1, ensure_ascii=False).splitlines()
    except ValueError:
        return [repr(data)]


def _first_byte_diff(a: bytes | None, b: bytes | None) -> str:
    if a is None or b is None:
        return f"debezium={a!r}\nshardcdc={b!r}"
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo = max(0, i - 60)
    return f"first differing byte at {i}:\n  debezium: ...{a[lo:i + 80]!r}\n  shardcdc: ...{b[lo:i + 80]!r}"


def _short(r: Norm) -> str:
    """A record in one line: key payload, op, before/after payloads."""
    key = _payload(r.key) if r.key else None
    if r.value is None:
        return f"key={key} tombstone"
    p = _payload(r.value)
    return f"key={key} op={p['op']} before={p['before']} after={p['after']}"


def _diff_record(i: int, d: Norm, o: Norm, context_headers: bool) -> str | None:
    out = []
    if (d.topic, d.partition) != (o.topic, o.partition):
        out.append(f"  placement: debezium={d.describe()} shardcdc={o.describe()}")
    for what, a, b in (("key", d.key, o.key), ("value", d.value, o.value)):
        if a != b:
            body = "\n".join(difflib.unified_diff(_pretty(a), _pretty(b), "debezium", "shardcdc", lineterm="", n=2))
            if not body:  # same JSON, different bytes (number formatting, escaping, field order)
                body = _first_byte_diff(a, b)
            out.append(f"  {what} differs:\n{body}")
    dh, oh = _headers(d, context_headers), _headers(o, context_headers)
    if dh != oh:
        out.append(f"  headers differ:\n    debezium={dh}\n    shardcdc={oh}")
    if not out:
        return None
    return f"record #{i} {d.describe()}:\n" + "\n".join(out)


def _headers(r: Norm, context: bool) -> tuple[tuple[str, bytes | None], ...]:
    if context:
        return r.headers
    return tuple(h for h in r.headers if not h[0].startswith("__debezium.context."))


def compare(dbz: list[Norm], ours: list[Norm], context_headers: bool = True) -> list[str]:
    """Per (topic, partition, shard): the same records in the same order, byte for byte.

    Records of different shards may interleave differently on a partition only if the shards'
    streams delivered them at different times; the synchronised workload rules that out, and the
    order is compared as a whole first. Returns readable differences (empty when identical).
    """
    problems: list[str] = []
    by_dbz: dict[tuple[str, int], list[Norm]] = defaultdict(list)
    by_ours: dict[tuple[str, int], list[Norm]] = defaultdict(list)
    for r in dbz:
        by_dbz[(r.topic, r.partition)].append(r)
    for r in ours:
        by_ours[(r.topic, r.partition)].append(r)
    for tp in sorted(set(by_dbz) | set(by_ours)):
        a, b = by_dbz.get(tp, []), by_ours.get(tp, [])
        if len(a) != len(b):
            problems.append(f"{tp[0]}[{tp[1]}]: debezium wrote {len(a)} records, shardcdc {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            diff = _diff_record(i, x, y, context_headers)
            if diff is not None:
                problems.append(f"{tp[0]}[{tp[1]}] {diff}")
        for i, x in enumerate(a[len(b):], len(b)):
            problems.append(f"{tp[0]}[{tp[1]}] record #{i} only from debezium: {_short(x)}")
        for i, y in enumerate(b[len(a):], len(a)):
            problems.append(f"{tp[0]}[{tp[1]}] record #{i} only from shardcdc: {_short(y)}")
    return problems


def _records(run: Run, side: str, pair: str, table: str) -> list[Norm]:
    return [normalise(r) for r in run.records[(side, pair)] if r.topic.endswith(f".{table}")]


# ---------------------------------------------------------------------------------------------
# the tests
VALUE_TABLES = [t for t in TABLES if t != "bit_types"]


# Differences that are bugs in shardcdc (docs/conformance.md has the bytes and Debezium's source): none now.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}


def _marks(pair: str, what: str) -> list[pytest.MarkDecorator]:
    reason = KNOWN_DIFFERENCES.get((pair, what))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


def _cases() -> list[object]:
    return [
        pytest.param(p.name, t, id=f"{p.name}-{t}", marks=_marks(p.name, t)) for p in PAIRS for t in VALUE_TABLES
    ]


@pytest.mark.parametrize(("pair", "table"), _cases())
def test_records_are_byte_identical_to_debezium(run: Run, pair: str, table: str) -> None:
    """Topic, partition, key, value and the PK-update headers, byte for byte, in order.

    The ``__debezium.context.*`` headers are compared in their own test below.
    """
    dbz = _records(run, "dbz", pair, table)
    ours = _records(run, "ours", pair, table)
    assert dbz, f"Debezium wrote nothing for {pair}/{table}; Connect log:\n{run.connect_log}"
    problems = compare(dbz, ours, context_headers=False)
    assert not problems, f"{len(problems)} difference(s) for {pair}/{table}:\n\n" + "\n\n".join(problems[:12])


def _without_bits(data: bytes) -> bytes:
    """A value with the BIT columns removed from the row schemas and row payloads, re-serialised."""
    doc = json.loads(data)
    for struct in doc["schema"]["fields"][:2] if "schema" in doc else []:  # before, after
        struct["fields"] = [f for f in struct["fields"] if f["field"] not in BIT_COLUMNS]
    payload = _payload(data) if "schema" not in doc else doc["payload"]
    if "schema" not in doc:
        doc = payload
    for side in ("before", "after"):
        if payload[side] is not None:
            payload[side] = {k: v for k, v in payload[side].items() if k not in BIT_COLUMNS}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def test_event_shaping_settings_take_effect(run: Run) -> None:
    """The ``events1`` settings change the records (so their equality with Debezium's means something):
    masked and truncated strings, source types in the schema, the chosen key column, no updates."""
    def docs(table: str) -> list[dict[str, Any]]:
        return [json.loads(r.value) for r in run.records[("dbz", "events1")] if r.topic.endswith(f".{table}") and r.value]

    strs = [d["payload"]["after"] for d in docs("str_types") if d["payload"]["after"]]
    assert {a["c"] for a in strs if a["c"] is not None} == {"****"}
    assert all(len(a["tx"]) <= 3 for a in strs if a["tx"] is not None) and any(a["tx"] for a in strs)
    num_fields = docs("num_types")[0]["schema"]["fields"][1]["fields"]
    assert all("__debezium.source.column.type" in (f.get("parameters") or {}) for f in num_fields)
    uk_keys = {r.key for r in run.records[("dbz", "events1")] if r.topic.endswith(".uk_only")}
    assert uk_keys and all(json.loads(k)["payload"].keys() == {"id"} for k in uk_keys if k)
    ops = {d["payload"]["op"] for table in VALUE_TABLES for d in docs(table)}
    assert "u" not in ops and {"c", "d"} <= ops


def test_name_adjustment_takes_effect(run: Run) -> None:
    """``names1``/``names2`` rewrite the prefix's ``-`` in Debezium's schema names (``avro``: ``_``;
    ``avro_unicode``: ``_u002d``, and ``_`` itself as ``_u005f``), so equal bytes compare the adjustment."""
    # names1 also has TableTopicNamingStrategy with vitess.exclude.keyspace.from.table.name: no keyspace
    for pair, name in (("names1", f"adj_{_RUN}.num_types.Key"), ("names2", f"uni_u002d{_RUN}.commerce.num_u005ftypes.Key")):
        records = [r for r in run.records[("dbz", pair)] if r.topic.endswith(".num_types") and r.key]
        assert records and {json.loads(r.key)["schema"]["name"] for r in records} == {name}, pair


def test_default_naming_writes_a_topic_per_shard(run: Run) -> None:
    """``topicsdef``: Debezium's records are on ``<prefix>.<shard>.<table>``, each on its own shard's topic
    (so equal bytes and placement above compare that naming, not an empty topic set)."""
    prefix = PAIRS_BY_NAME["topicsdef"].prefix
    for side in ("dbz", "ours"):
        records = [r for r in run.records[(side, "topicsdef")] if r.value]
        assert {r.topic.split(".")[1] for r in records} == set(KEYSPACES["commerce"]), side
        assert all(r.topic == f"{prefix}.{_payload(r.value)['source']['shard']}.{r.topic.split('.')[2]}"
                   for r in records), side


def test_schemaless_pair_has_no_envelope(run: Run) -> None:
    """``noschema``: Debezium's keys and values are bare payloads, so the bytes compared are those."""
    records = [r for r in run.records[("dbz", "noschema")] if r.value]
    assert records and not [r for r in records if b'"schema"' in r.value[:10] or (r.key and b'"schema"' in r.key[:10])]


def test_transforms_take_effect(run: Run) -> None:
    """The ``smt`` pair's transforms changed Debezium's records: no BEGIN/END records, no
    ``transaction.id``, and each record's ``source.vgtid`` holds its own shard only."""
    records = run.records[("dbz", "smt")]
    assert records and not [r for r in records if r.topic.endswith(".transaction")]
    for r in records:
        payload = json.loads(r.value)["payload"] if r.value else None
        if payload is not None:
            assert set(payload["transaction"]) == {"total_order", "data_collection_order"}
            assert [p["shard"] for p in json.loads(payload["source"]["vgtid"])] == [payload["source"]["shard"]]


@pytest.mark.parametrize(
    "pair", [pytest.param(p.name, marks=_marks(p.name, "transaction")) for p in PAIRS if p.transactions]
)
def test_transaction_topic_is_byte_identical_to_debezium(run: Run, pair: str) -> None:
    """BEGIN/END records on ``<prefix>.transaction``: key, value, partition and order."""
    dbz = _records(run, "dbz", pair, "transaction")
    ours = _records(run, "ours", pair, "transaction")
    assert dbz, f"Debezium wrote no transaction records for {pair}"
    problems = compare(dbz, ours, context_headers=False)
    assert not problems, f"{len(problems)} difference(s):\n\n" + "\n\n".join(problems[:12])


def _created_rows(records: list[Norm]) -> dict[int, dict[str, Any]]:
    payloads = [_payload(r.value) for r in records if r.value is not None]
    return {p["after"]["id"]: p["after"] for p in payloads if p["op"] == "c"}


@pytest.mark.parametrize("pair", [pytest.param(p.name, marks=_marks(p.name, "bit_types")) for p in PAIRS])
def test_bit_columns_are_the_only_difference(run: Run, pair: str) -> None:
    """Debezium 3.5.0.Final has no BIT mapping and drops BIT columns; shardcdc maps them (dbz#2191).

    Everything else of those records is identical: keys and placement byte for byte, values as
    JSON once the BIT fields are removed from ours (the table holds no floats, so re-serialising
    is exact).
    """
    dbz = _records(run, "dbz", pair, "bit_types")
    ours = _records(run, "ours", pair, "bit_types")
    assert dbz and len(dbz) == len(ours)
    stripped = [
        Norm(r.topic, r.partition, r.key, None if r.value is None else _without_bits(r.value), r.headers, r.shard)
        for r in ours
    ]
    canonical = [
        Norm(r.topic, r.partition, r.key, None if r.value is None else _without_bits(r.value), r.headers, r.shard)
        for r in dbz
    ]
    if PAIRS_BY_NAME[pair].settings.get("include.unknown.datatypes") == "true":
        # Then Debezium emits BIT as an unknown type: plain `bytes` of the value decoded as UTF-8 text,
        # so each byte that is not UTF-8 becomes U+FFFD (EF BF BD); docs/conformance.md, "BIT columns"
        dbz_created = _created_rows(dbz)
        assert {c: dbz_created[1][c] for c in BIT_COLUMNS} == {"b1": "AQ==", "b12": "Cu+/vQ==", "b64": "77+9AAAAAAAAAQ=="}
        assert {c: dbz_created[4][c] for c in BIT_COLUMNS} == {"b1": "AA==", "b12": "AAE=", "b64": "77+9" * 8}
    else:
        assert all(r.value is None or b'"b1"' not in r.value for r in dbz), "Debezium now emits BIT columns"
    problems = compare(canonical, stripped, context_headers=False)
    assert not problems, "\n\n".join(problems[:12])
    # and what shardcdc emits for them: BIT(1) boolean, BIT(n) big-endian bytes (base64 in JSON)
    created = _created_rows(ours)
    assert {c: created[1][c] for c in BIT_COLUMNS} == {"b1": True, "b12": "Cqo=", "b64": "gAAAAAAAAAE="}
    assert {c: created[4][c] for c in BIT_COLUMNS} == {"b1": False, "b12": "AAE=", "b64": "//////////8="}


@pytest.mark.parametrize("pair", [pytest.param(p.name, marks=_marks(p.name, "headers")) for p in PAIRS])
def test_context_headers_match_debezium(run: Run, pair: str) -> None:
    """``__debezium.context.*`` headers on every record, runId masked (a fresh UUID per task run).

    The run id itself: a version-7 UUID on both sides (Debezium's ``UUIDUtils.generateNewUUID``),
    one value for every record of a task run.
    """
    problems = []
    run_ids: dict[str, set[str]] = {"dbz": set(), "ours": set()}
    extended = PAIRS_BY_NAME[pair].settings.get("extended.headers.enabled", "true") == "true"
    for table in TABLES:
        dbz = _records(run, "dbz", pair, table)
        ours = _records(run, "ours", pair, table)
        for i, (d, o) in enumerate(zip(dbz, ours, strict=True)):
            if d.headers != o.headers:
                problems.append(f"{d.describe()} #{i}:\n  debezium={d.headers}\n  shardcdc={o.headers}")
        for side in run_ids:
            for r in run.records[(side, pair)]:
                if r.topic.endswith(f".{table}"):
                    run_ids[side].update(v.decode() for k, v in r.headers if k == "__debezium.context.runId" and v)
    assert not problems, f"{len(problems)} record(s) with different headers, e.g.:\n" + "\n".join(problems[:3])
    for side, ids in run_ids.items():
        if not extended:  # extended.headers.enabled=false: no context header at all on either side
            assert not [h for r in run.records[(side, pair)] for h, _ in r.headers if h.startswith("__debezium.context.")]
            continue
        assert len(ids) == 1, f"{side}: run ids {ids}"
        assert uuid.UUID(next(iter(ids))).version == 7, f"{side}: {ids}"


def test_both_connectors_wrote_every_change(run: Run) -> None:
    """Record counts per pair: the workload's changes, plus tombstones, PK-update triples, copies."""
    counts = {
        f"{side}:{pair}": sum(1 for r in v if not r.topic.endswith(".transaction"))
        for (side, pair), v in run.records.items()
    }
    for p in PAIRS:
        assert counts[f"dbz:{p.name}"] == counts[f"ours:{p.name}"] > 0, counts


def _settings_table() -> list[tuple[str, str, list[str]]]:
    """docs/conformance.md, "Every setting value": (property, value, pairs) per row."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "conformance.md").read_text()
    section = text.split("## Every setting value", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), re.findall(r"`([^`]+)`", cells[2])))
    return rows


def test_settings_table_covers_every_enumerated_value() -> None:
    """Every enum and boolean value of the worker's catalogue has a row, and every pair a row names
    runs that value (set, or unset where it is the catalogue default), so a new value fails here."""
    enumerated = {
        (p.name, v)
        for p in PROPERTIES.values() if p.type in (PropType.ENUM, PropType.BOOLEAN)
        for v in (p.allowed if p.type is PropType.ENUM else ("true", "false"))
    }
    rows = _settings_table()
    assert [r[:2] for r in rows if (r[0], r[1]) not in enumerated] == [], "rows for values the catalogue lacks"
    assert sorted(enumerated - {r[:2] for r in rows}) == [], "values missing from docs/conformance.md"
    for prop, value, pairs in rows:
        for name in pairs:
            setting = PAIRS_BY_NAME[name].settings.get(prop)
            runs = (setting if setting is not None else str(PROPERTIES[prop].default)).lower()
            assert runs == value.lower(), f"{prop}={value}: pair {name} runs {runs}"


def test_connect_runner_refuses_a_missing_installation(tmp_path: Path) -> None:
    """Without ``make debezium`` the runner says what to run instead of starting a broken JVM."""
    with pytest.raises(FileNotFoundError, match="make debezium"):
        ConnectStandalone("127.0.0.1:9", [{"name": "x"}], home=tmp_path)
