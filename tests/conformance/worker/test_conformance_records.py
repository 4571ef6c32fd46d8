"""Differential conformance of heartbeat and schema-change records against the real Debezium Vitess connector.

The same harness as ``test_conformance_debezium.py`` (whose helpers this module imports): one
VTGate test server, Debezium in one Kafka Connect standalone process writing to its own broker,
shardcdc tasks writing to the session broker, same connector names and topic prefixes, and a
workload that runs one statement at a time until every VStream has queued it. Two pairs on the
two-shard keyspace ``commerce`` (``snapshot.mode=never``):

- ``heartbeat``: ``heartbeat.interval.ms=1000``: records on ``__debezium-heartbeat.<prefix>``;
- ``ddl``: ``include.schema.changes=true``: DDL records on ``<prefix>`` (one per shard), and the
  data records of a table whose columns change by ``ALTER TABLE ... ADD COLUMN`` shard by shard
  (so for a while the two shards have different value schemas) and of a table created after start.

The DDL runs on one shard at a time (``commerce/-80``, then ``commerce/80-``), as an online schema
change does: a statement on both shards at once would commit on both together and the two VStream
clients could receive the two DDL events in either order, each with the other shard's position of
that moment in ``source.vgtid`` (docs/conformance.md, "Cross-shard interleaving").

Compared byte for byte: key, value, partition and headers, after the masks docs/conformance.md
justifies: the envelope processing timestamps (data records), the ``ts_ms`` processing time of
heartbeat and schema-change values (each checked to be a wall-clock time of this run before it is
masked) and the per-run ``__debezium.context.runId``. How many heartbeats each side writes, and
when, depends on timers; every heartbeat is checked for its key, schema and a position the
workload passed through, in order, and the heartbeats of the idle source before and after the
workload are compared byte for byte.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from connectstandalone import ConnectStandalone, debezium_home, vitess_connector_config
from test_conformance_debezium import (
    Norm,
    _streams_caught_up,
    _streams_state,
    _wait_for,
    _worker_done,
    compare,
    normalise,
    start_shardcdc_tasks,
)
from worker_fixtures import worker_config

from localkafka import ConsumedRecord, KafkaBroker, consume_all, create_topics
from vtgatesim import VTGateSim

PARTITIONS = 3  # heartbeats and schema changes go to partition 0 explicitly: > 1 checks that
KEYSPACE = "commerce"
SHARDS = ["-80", "80-"]
TABLES = ["customer", "items"]
DDL = ["CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(64), PRIMARY KEY (id))"]
_RUN = uuid.uuid4().hex[:6]

# ids 1 2 3 5 9 10 13 15 hash to -80, 4 6 7 8 11 12 14 to 80- (hash vindex on id). While the
# shards' columns differ, statements that use them are sent to their shard.
WORKLOAD: list[tuple[str, str]] = [
    ("INSERT INTO customer (id, email) VALUES (1, 'a@x.io')", KEYSPACE),
    ("INSERT INTO customer (id, email) VALUES (4, 'd@x.io')", KEYSPACE),
    ("ALTER TABLE customer ADD COLUMN age INT", f"{KEYSPACE}/-80"),
    ("INSERT INTO customer (id, email, age) VALUES (2, 'b@x.io', 42)", KEYSPACE),  # -80: with age
    ("INSERT INTO customer (id, email) VALUES (6, 'f@x.io')", f"{KEYSPACE}/80-"),  # 80-: not yet
    ("UPDATE customer SET age = 7 WHERE id = 1", f"{KEYSPACE}/-80"),
    ("/* the other shard */ ALTER TABLE `customer` ADD COLUMN age INT", f"{KEYSPACE}/80-"),
    ("UPDATE customer SET age = 8, email = 'dd@x.io' WHERE id = 4", KEYSPACE),
    # several columns, a qualified name (Debezium's DdlMetadataExtractor reads the table after the dot)
    ("ALTER TABLE commerce.customer ADD COLUMN note VARCHAR(8), ADD COLUMN score DECIMAL(6,2)", f"{KEYSPACE}/-80"),
    ("ALTER TABLE `commerce`.`customer` ADD note VARCHAR(8), ADD COLUMN score DECIMAL(6,2)", f"{KEYSPACE}/80-"),
    ("UPDATE customer SET note = 'n', score = 1.5 WHERE id IN (1, 2)", KEYSPACE),
    ("INSERT INTO customer (id, email, age, note, score) VALUES (7, 'g@x.io', 1, NULL, -0.25)", KEYSPACE),
    # a table created after the start
    ("CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR(16), PRIMARY KEY (id))", f"{KEYSPACE}/-80"),
    ("CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR(16), PRIMARY KEY (id))", f"{KEYSPACE}/80-"),
    ("INSERT INTO items (id, name) VALUES (3, 'x')", KEYSPACE),
    ("INSERT INTO items (id, name) VALUES (8, 'y')", KEYSPACE),
    ("DELETE FROM customer WHERE id = 2", KEYSPACE),
    ("DELETE FROM items WHERE id = 8", KEYSPACE),
]


@dataclass(frozen=True)
class Pair:
    name: str
    prefix: str
    settings: dict[str, str]

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.prefix}"

    @property
    def topics(self) -> list[str]:
        return [f"{self.prefix}.{KEYSPACE}.{t}" for t in TABLES] + [self.prefix, self.heartbeat_topic]


PAIRS = [
    Pair("heartbeat", f"hb{_RUN}", {"snapshot.mode": "never", "heartbeat.interval.ms": "1000"}),
    Pair("ddl", f"ddl{_RUN}", {"snapshot.mode": "never", "include.schema.changes": "true"}),
]
PAIR = {p.name: p for p in PAIRS}


def _vgtid(positions: dict[str, str]) -> str:
    """The VGTID JSON both connectors write for these shard positions (no copy in progress)."""
    return json.dumps(
        [{"keyspace": KEYSPACE, "shard": s, "gtid": g, "table_p_ks": []} for s, g in sorted(positions.items())],
        separators=(",", ":"),
    )


@dataclass
class Run:
    records: dict[tuple[str, str], list[ConsumedRecord]]  # (side "dbz"/"ours", pair) -> records
    positions: list[str]  # the VGTIDs the workload passed through, in order
    started_ms: int
    ended_ms: int
    connect_log: str


def _heartbeats(broker: KafkaBroker, pair: Pair) -> list[ConsumedRecord]:
    return consume_all(broker.bootstrap, pair.heartbeat_topic, timeout=10)


def _last_heartbeat_at(broker: KafkaBroker, pair: Pair, vgtid: str) -> bool:
    beats = _heartbeats(broker, pair)
    return bool(beats) and beats[-1].value is not None and json.loads(beats[-1].value)["payload"]["vgtid"] == vgtid


@pytest.fixture(scope="module")
def run(kafka_broker: KafkaBroker, debezium_kafka_broker: KafkaBroker) -> Iterator[Run]:
    home = debezium_home()
    if not (home / ".complete").is_file():
        raise RuntimeError(f"Debezium jars missing in {home}: run `make debezium` first")
    started_ms = time.time_ns() // 1_000_000
    with ExitStack() as stack:
        brokers = {"dbz": debezium_kafka_broker, "ours": kafka_broker}
        sim = stack.enter_context(VTGateSim())
        sim.create_keyspace(KEYSPACE, SHARDS, ddl=DDL)
        for broker in brokers.values():
            create_topics(broker.bootstrap, [t for p in PAIRS for t in p.topics], partitions=PARTITIONS)
        configs = [
            worker_config(kafka_broker, sim.address, KEYSPACE, p.prefix, {**p.settings, "shardcdc.metrics.port": "0"})
            for p in PAIRS
        ]
        tasks = start_shardcdc_tasks(stack, kafka_broker, configs)
        connect = ConnectStandalone(
            debezium_kafka_broker.bootstrap,
            [vitess_connector_config(cfg.name, p.prefix, sim.address, KEYSPACE, p.settings)
             for cfg, p in zip(configs, PAIRS, strict=True)],
        )
        stack.callback(connect.close)
        connect.start(timeout=120)

        def state() -> str:
            beats = {side: [r.value for r in _heartbeats(b, PAIR["heartbeat"])[-2:]] for side, b in brokers.items()}
            return f"{_streams_state(sim)}\nlast heartbeats: {beats}\n{connect.tail()}"

        streams = 2 * len(PAIRS)
        _wait_for(lambda: _streams_caught_up(sim, streams), 60, "every VStream to start", state)
        hb = PAIR["heartbeat"]
        positions = [_vgtid(sim.positions(KEYSPACE))]
        # The idle source before the first change: a first heartbeat on both sides (Debezium's
        # names the start position of one shard only, see test_first_heartbeat_...).
        _wait_for(lambda: _heartbeats(debezium_kafka_broker, hb), 30, "Debezium's first heartbeat", state)
        _wait_for(functools.partial(_last_heartbeat_at, kafka_broker, hb, positions[0]), 30, "a first heartbeat", state)
        for stmt, target in WORKLOAD:
            sim.execute(stmt, target)
            _wait_for(lambda: _streams_caught_up(sim, streams), 30, f"the streams to deliver: {stmt}", state)
            positions.append(_vgtid(sim.positions(KEYSPACE)))
        for task in tasks:
            _wait_for(functools.partial(_worker_done, sim, task, KEYSPACE), 30, "shardcdc to finish", state)
        # Idle again: both sides beat at the head position.
        for broker in brokers.values():
            _wait_for(functools.partial(_last_heartbeat_at, broker, hb, positions[-1]), 30, "an idle heartbeat", state)
        records: dict[tuple[str, str], list[ConsumedRecord]] = {}
        for p in PAIRS:
            data = [t for t in p.topics if t != p.heartbeat_topic]
            ours = consume_all(kafka_broker.bootstrap, data)
            deadline = time.monotonic() + 30
            while len(dbz := consume_all(debezium_kafka_broker.bootstrap, data)) < len(ours) and time.monotonic() < deadline:
                connect.check()
                time.sleep(0.2)  # polling the topics: Debezium offers no other progress signal
            records[("ours", p.name)] = ours + _heartbeats(kafka_broker, p)
            records[("dbz", p.name)] = dbz + _heartbeats(debezium_kafka_broker, p)
        connect.check()
        yield Run(records, positions, started_ms, time.time_ns() // 1_000_000, connect.tail(200))


# ---------------------------------------------------------------------------------------------
# the processing-time masks (docs/conformance.md)
_HEARTBEAT_TS = re.compile(rb',"ts_ms":(\d+)\}\}\Z')
_SCHEMA_CHANGE_TS = re.compile(rb'\},"ts_ms":(\d+),"databaseName":')


def _mask_ts(run: Run, value: bytes, pattern: re.Pattern[bytes]) -> bytes:
    m = pattern.search(value)
    assert m is not None, value
    ts = int(m.group(1))
    assert run.started_ms - 1000 <= ts <= run.ended_ms + 1000, f"ts_ms {ts} is not a time of this run"
    return value[: m.start(1)] + b"0" + value[m.end(1):]


def _norm(run: Run, rec: ConsumedRecord) -> Norm:
    if rec.topic.startswith("__debezium-heartbeat.") and rec.value is not None:
        value = _mask_ts(run, rec.value, _HEARTBEAT_TS)
        return Norm(rec.topic, rec.partition, rec.key, value, tuple(rec.headers), "")
    if "." not in rec.topic and rec.value is not None:  # <prefix>: schema changes
        value = _mask_ts(run, rec.value, _SCHEMA_CHANGE_TS)
        return normalise(dataclasses.replace(rec, value=value))
    return normalise(rec)


def _records(run: Run, side: str, pair: str, topic: str) -> list[Norm]:
    return [_norm(run, r) for r in run.records[(side, pair)] if r.topic == topic]


def _assert_same(dbz: list[Norm], ours: list[Norm], what: str) -> None:
    assert dbz, f"Debezium wrote nothing for {what}"
    problems = compare(dbz, ours)
    assert not problems, f"{len(problems)} difference(s) for {what}:\n\n" + "\n\n".join(problems[:12])


# ---------------------------------------------------------------------------------------------
# schema changes
def test_schema_change_records_are_byte_identical_to_debezium(run: Run) -> None:
    """One record per DDL and shard on ``<prefix>``, partition 0, key ``SchemaChangeKey``, value
    ``SchemaChangeValue`` with the DDL's source block (its own timestamp, shard, VGTID, table)."""
    p = PAIR["ddl"]
    dbz = _records(run, "dbz", p.name, p.prefix)
    ours = _records(run, "ours", p.name, p.prefix)
    ddl_count = sum(1 for stmt, _ in WORKLOAD if not stmt.startswith(("INSERT", "UPDATE", "DELETE")))
    assert len(ours) == ddl_count, [r.value for r in ours]
    assert {r.partition for r in ours} == {0}
    _assert_same(dbz, ours, "the schema-change topic")


@pytest.mark.parametrize("table", TABLES)
def test_data_records_across_schema_changes_are_byte_identical(run: Run, table: str) -> None:
    """The value schema follows each shard's columns from the first event after its DDL."""
    for pair in PAIRS:
        topic = f"{pair.prefix}.{KEYSPACE}.{table}"
        _assert_same(_records(run, "dbz", pair.name, topic), _records(run, "ours", pair.name, topic), topic)


def test_value_schema_changes_with_each_shards_ddl(run: Run) -> None:
    """What the comparison above covers, pinned: per shard, the columns of each customer record."""
    p = PAIR["ddl"]
    got = []
    for r in _records(run, "ours", p.name, f"{p.prefix}.{KEYSPACE}.customer"):
        if r.value is None:
            continue
        doc = json.loads(r.value)
        after = next(f for f in doc["schema"]["fields"] if f["field"] == "after")
        got.append((r.shard, doc["payload"]["op"], [f["field"] for f in after["fields"]]))
    base, aged, full = ["id", "email"], ["id", "email", "age"], ["id", "email", "age", "note", "score"]
    assert sorted(got) == sorted([
        ("-80", "c", base), ("80-", "c", base), ("-80", "c", aged), ("80-", "c", base), ("-80", "u", aged),
        ("80-", "u", aged), ("-80", "u", full), ("-80", "u", full), ("80-", "c", full), ("-80", "d", full),
    ])


# ---------------------------------------------------------------------------------------------
# heartbeats
def test_idle_heartbeats_are_byte_identical_to_debezium(run: Run) -> None:
    """The last heartbeat (idle source at the head, after a COMMIT), byte for byte once ``ts_ms``
    is masked: topic, partition 0, key, value (``vgtid`` = the head of both shards), headers."""
    p = PAIR["heartbeat"]
    dbz = _records(run, "dbz", p.name, p.heartbeat_topic)
    ours = _records(run, "ours", p.name, p.heartbeat_topic)
    assert dbz and ours
    assert json.loads(ours[-1].value or b"")["payload"]["vgtid"] == run.positions[-1]
    problems = compare([dbz[-1]], [ours[-1]])
    assert not problems, "the idle heartbeat differs:\n" + "\n".join(problems)


def _vgtid_of(beat: Norm) -> str:
    return str(json.loads(beat.value or b"")["payload"]["vgtid"])


def test_first_heartbeat_is_the_documented_difference(run: Run) -> None:
    """docs/conformance.md, "Heartbeat position after OTHER and DDL events": on a start from
    ``current`` VTGate sends each shard's position with an OTHER event; Debezium rotates its offset
    on OTHER (the offset keeps the VGTID *before* the event), so its first heartbeats name the shard
    whose OTHER came second as ``"current"``. shardcdc's offset, and so its heartbeat, is the
    resolved position of both shards. Everything but ``vgtid`` is byte-identical."""
    p = PAIR["heartbeat"]
    dbz, ours = (_records(run, side, p.name, p.heartbeat_topic)[0] for side in ("dbz", "ours"))
    start = {sg["shard"]: sg["gtid"] for sg in json.loads(run.positions[0])}
    assert _vgtid_of(ours) == run.positions[0]
    dbz_gtids = {sg["shard"]: sg["gtid"] for sg in json.loads(_vgtid_of(dbz))}
    assert sorted(dbz_gtids.values()) == sorted([start[s] for s in dbz_gtids if dbz_gtids[s] != "current"] + ["current"])
    same_vgtid = Norm(dbz.topic, dbz.partition, dbz.key, (dbz.value or b"").replace(
        json.dumps(_vgtid_of(dbz)).encode(), json.dumps(_vgtid_of(ours)).encode()), dbz.headers, dbz.shard)
    assert not compare([same_vgtid], [ours])


@pytest.mark.parametrize("side", ["dbz", "ours"])
def test_every_heartbeat_carries_a_position_of_the_workload(run: Run, side: str) -> None:
    """How many heartbeats, and when, depends on timers; what each one says does not: the same
    key, schema and headers on both sides, partition 0, and a position the source passed through
    (for Debezium also the half-resolved start, see above), never going back."""
    p = PAIR["heartbeat"]
    beats = _records(run, side, p.name, p.heartbeat_topic)
    reference = _records(run, "dbz", p.name, p.heartbeat_topic)[-1]
    assert reference.value is not None
    schema_part = reference.value[: reference.value.index(b',"payload":')]
    assert {b.partition for b in beats} == {0}
    assert {b.key for b in beats} == {reference.key}
    assert {b.headers for b in beats} == {reference.headers}
    order = {v: i for i, v in enumerate(run.positions)}
    seen = []
    for b in beats:
        assert b.value is not None and b.value.startswith(schema_part), b.value
        vgtid = _vgtid_of(b)
        if side == "dbz" and '"gtid":"current"' in vgtid:
            seen.append(0)
            continue
        assert vgtid in order, vgtid
        seen.append(order[vgtid])
    assert seen == sorted(seen), seen
