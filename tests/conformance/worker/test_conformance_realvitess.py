"""Differential conformance on real Vitess v24 (over MariaDB 10.11): the real Debezium Vitess
connector and shardcdc side by side on the session's vttestserver (``real_vitess``).

Every pair of ``test_conformance_debezium.PAIRS`` (so every handling-mode value compared there on
the test server) runs here on the same tables, statements, masks and byte-for-byte comparison,
with three adjustments for the real source (docs/conformance.md, "On real Vitess"):

- **One stream per shard.** vttestserver keeps every shard in one ``mariadbd``, so each shard's
  VStream carries every transaction of the server (an empty BEGIN/VGTID/COMMIT for another
  shard's), and which of two shards' events VTGate hands a client first is a race: a record's
  ``source.vgtid`` would name the other shard's position before or after the same commit at
  random. Each pair therefore runs one connector per shard (``vitess.shard``) on each side; both
  write the pair's topics, and the comparison is per topic, partition and shard.
- **Explicit start positions.** The ``snapshot.mode=never`` pairs start at the MariaDB GTID the
  server had before the seed rows (``vitess.vgtid``), not at ``current``: both sides then stream
  the same transactions whenever their stream opens, and Debezium is shown to accept a
  ``MariaDB/<domain>-<server>-<seq>`` start position. The ``snapshot`` pair copies the seed rows
  (VStream copy, ``table_p_ks`` in ``source.vgtid``) before the workload runs.
- ``table.include.list`` names this module's tables (the session's keyspace holds other tests' tables).
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from connectstandalone import ConnectStandalone, debezium_home, vitess_connector_config
from test_conformance_debezium import (
    _RUN,
    BIT_COLUMNS,
    CHANGES,
    DDL,
    PAIRS,
    PARTITIONS,
    SEED,
    TABLES,
    VALUE_TABLES,
    Norm,
    Pair,
    _payload,
    _wait_for,
    _without_bits,
    compare,
    normalise,
    read_both,
    start_shardcdc_tasks,
)
from worker_fixtures import RunningTask, running_task, worker_config

from localkafka import ConsumedRecord, KafkaBroker, consume_all, create_topics
from realvitess import VTGateClient, VTTestServer
from realvitess.client import VTGateError
from realvitess.single import hash_vschema

pytestmark = pytest.mark.realvitess

KEYSPACE = "commerce"
_RV = uuid.uuid4().hex[:6]  # fresh topic names on the session broker (the test-server module's differ)
INCLUDE = ",".join(f"{KEYSPACE}.{t}" for t in TABLES)


ORDERED_FACTORY = "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory"
# Ordered transaction metadata ranks MySQL56 GTID sets only, on both sides: `txorder` is run on its
# own and both fail (test_ordered_metadata_fails_on_mariadb_positions); `names2` keeps its other
# settings here with the default factory.
ORDERED_ONLY = ("transaction.metadata.factory", "vitess.inherit.epoch")


def _on_real_vitess(p: Pair) -> Pair:
    settings = {k: v for k, v in p.settings.items() if p.name != "names2" or k not in ORDERED_ONLY}
    if settings.get("vitess.tablet.type") == "REPLICA":  # vttestserver has no REPLICA tablet: both sides
        settings["vitess.tablet.type"] = "MASTER"  # retry "failed to find a REPLICA tablet" forever
    return Pair(p.name, KEYSPACE, p.prefix.replace(_RUN, _RV), {**settings, "table.include.list": INCLUDE})


RV_PAIRS = [_on_real_vitess(p) for p in PAIRS if p.name != "txorder"]
RV_BY_NAME = {p.name: p for p in RV_PAIRS}
TXORDER = _on_real_vitess(next(p for p in PAIRS if p.name == "txorder"))
assert TXORDER.settings["transaction.metadata.factory"] == ORDERED_FACTORY


@dataclass(frozen=True)
class Side:
    """One connector of a pair on one shard: its name and settings (the same on both sides)."""

    pair: Pair
    shard: str
    settings: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.pair.prefix}-{'lo' if self.shard.startswith('-') else 'hi'}"


def connectors(pairs: list[Pair], shards: list[str], start: dict[str, str]) -> list[Side]:
    """A connector per pair and shard: the shard named, and the pre-seed position of that shard as
    the start of a pair that does not copy (``start``: shard -> ``MariaDB/...`` GTID)."""
    out = []
    for p in pairs:
        for shard in shards:
            # Debezium registers its JMX metrics by topic prefix: a second connector of the prefix
            # in the JVM waits for the name (and then fails) unless tagged apart.
            extra = {"vitess.shard": shard, "custom.metric.tags": f"stream={shard}"}
            if p.settings.get("snapshot.mode") == "never":
                extra["vitess.vgtid"] = json.dumps([{"keyspace": KEYSPACE, "shard": shard, "gtid": start[shard]}])
            out.append(Side(p, shard, {**p.settings, **extra}))
    return out


# ---------------------------------------------------------------------------------------------
# the real source
def create_tables(vt: VTTestServer) -> None:
    """The conformance tables on every shard (vtcombo has no ApplySchema), a ``hash`` vindex on
    ``id`` each, and VTGate's schema tracking knowing them."""
    with vt.client() as c:
        for shard in vt.shards:
            for ddl in DDL:
                c.execute(ddl, f"{KEYSPACE}:{shard}")
        for t in TABLES:
            c.execute(f"alter vschema on {KEYSPACE}.{t} add vindex hash(id) using hash", KEYSPACE)
        vt.reload_schema()
        for t in TABLES:
            _wait_for(lambda t=t: _answers(c, f"select * from {t} limit 1"), 60, f"VTGate to know table {t}")
    assert hash_vschema(TABLES)["tables"]  # the same vindex the session's own tables use


def _answers(c: VTGateClient, sql: str) -> bool:
    try:
        c.execute(sql, KEYSPACE)
    except VTGateError:
        return False
    return True


def _executed(c: VTGateClient, stmt: str) -> bool:
    """Run ``stmt``; False while VTGate's schema tracking does not know the table's columns yet
    (an INSERT without a column list: VT09004), so the caller polls."""
    try:
        c.execute(stmt, KEYSPACE)
    except VTGateError as exc:
        if "VT09004" not in exc.message:
            raise
        return False
    return True


def positions(vt: VTTestServer) -> dict[str, str]:
    """Each shard's current position in VStream's notation (one ``mariadbd`` holds every shard)."""
    with vt.client() as c:
        out = {}
        for shard in vt.shards:
            pos = c.rows("select @@global.gtid_binlog_pos as p", f"{KEYSPACE}:{shard}")[0]["p"]
            assert pos, f"no GTID position on {shard}"
            out[shard] = f"MariaDB/{pos.decode()}"
    return out


def _task_at(run: RunningTask, head: dict[str, str]) -> bool:
    proc, sink = run.task.processor, run.task.sink
    if proc is None or sink is None or proc.position is None:
        return False
    at = {sg.shard: sg.gtid for sg in proc.position.shard_gtids}
    return bool(at) and all(head[s] == g for s, g in at.items()) and sink.pending == 0


def _copied(run: RunningTask) -> bool:
    proc = run.task.processor
    return proc is not None and proc.position is not None and not any(sg.copying for sg in proc.position.shard_gtids)


# ---------------------------------------------------------------------------------------------
# the run (once per module: one Connect process with every connector)
@dataclass
class Run:
    records: dict[tuple[str, str], list[ConsumedRecord]]  # (side "dbz"/"ours", pair name) -> records
    connect_log: str
    start: dict[str, str]  # shard -> the streaming pairs' start position
    ordered: dict[str, str]  # side -> how its `txorder` connector ended (Debezium: the task's trace)


@pytest.fixture(scope="module")
def run(kafka_broker: KafkaBroker, debezium_kafka_broker: KafkaBroker, real_vitess: VTTestServer) -> Iterator[Run]:
    if not (debezium_home() / ".complete").is_file():
        raise RuntimeError(f"Debezium jars missing in {debezium_home()}: run `make debezium` first")
    vt = real_vitess
    create_tables(vt)
    start = positions(vt)
    with vt.client() as c:
        for stmt in SEED:
            _wait_for(lambda stmt=stmt: _executed(c, stmt), 60, f"VTGate to take {stmt[:40]}")
    sides = connectors(RV_PAIRS, list(vt.shards), start)
    with ExitStack() as stack:
        for broker in (debezium_kafka_broker, kafka_broker):
            create_topics(broker.bootstrap, [t for p in RV_PAIRS for t in p.topics], partitions=PARTITIONS)
        configs = [worker_config(kafka_broker, vt.vtgate, KEYSPACE, s.pair.prefix, {
            **s.settings, "name": s.name, "offset.storage.topic": f"offsets-{_RV}", "shardcdc.metrics.port": "0",
        }) for s in sides]
        tasks = start_shardcdc_tasks(stack, kafka_broker, configs)
        connect = ConnectStandalone(debezium_kafka_broker.bootstrap, [
            vitess_connector_config(s.name, s.pair.prefix, vt.vtgate, KEYSPACE, s.settings) for s in sides])
        stack.callback(connect.close)
        connect.start(timeout=240)
        copying = [p for p in RV_PAIRS if p.settings.get("snapshot.mode") == "initial"]
        for side, task in zip(sides, tasks, strict=True):
            if side.pair in copying:
                _wait_for(lambda task=task: _copied(task), 120, f"shardcdc {side.name} to copy", connect.tail)
        for p in copying:  # the copy's records, on both sides, before any change is made
            _wait_for(lambda p=p: _same_count(kafka_broker, debezium_kafka_broker, p, connect), 120, f"{p.name}'s copy", connect.tail)
        with vt.client() as c:
            for stmt in CHANGES:
                c.execute(stmt, KEYSPACE)
        head = positions(vt)
        for side, task in zip(sides, tasks, strict=True):
            _wait_for(lambda task=task: _task_at(task, head), 120, f"shardcdc {side.name} to reach {head}", connect.tail)
        records = {}
        for p in RV_PAIRS:
            records[("ours", p.name)], records[("dbz", p.name)] = read_both(
                kafka_broker.bootstrap, debezium_kafka_broker.bootstrap, p.topics, connect.check, wait=60)
        connect.check()
        ordered = run_ordered(stack, kafka_broker, connect, vt, start)
        yield Run(records, connect.tail(200), start, ordered)


def run_ordered(stack: ExitStack, broker: KafkaBroker, connect: ConnectStandalone, vt: VTTestServer,
                start: dict[str, str]) -> dict[str, str]:
    """``txorder`` from the pre-seed position on one shard, on both sides, after the compared run
    (Debezium's connector added over Connect's REST API, so its failure cannot stop the rest)."""
    side = connectors([TXORDER], [vt.shards[0]], start)[0]
    cfg = vitess_connector_config(side.name, TXORDER.prefix, vt.vtgate, KEYSPACE, side.settings)
    req = urllib.request.Request(f"{connect.rest_url}/connectors/{side.name}/config", method="PUT",
                                 data=json.dumps(cfg).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30):
        pass
    task = stack.enter_context(running_task(worker_config(broker, vt.vtgate, KEYSPACE, TXORDER.prefix, {
        **side.settings, "name": side.name, "offset.storage.topic": f"offsets-{_RV}", "shardcdc.metrics.port": "0",
    })))
    ours = task.wait(120)

    def dbz_evidence() -> str:
        """Debezium's task trace once FAILED, or the stack it logged for the txorder stream
        (the exception is thrown on the gRPC thread; the task may stay RUNNING, streaming nothing)."""
        status = connect.status(side.name) or {}
        trace = next((t.get("trace", "") for t in status.get("tasks", []) if t.get("state") == "FAILED"), "")
        log = connect.log_path.read_text(errors="replace")
        return trace or ("\n".join(ln for ln in log.splitlines() if "Gtid" in ln or "Caused by" in ln)
                         if "Gtid.parseGtid" in log else "")

    _wait_for(dbz_evidence, 120, f"Debezium's {side.name} to fail on the MariaDB GTID", connect.tail)
    return {"dbz": dbz_evidence(), "ours": f"exit {ours.exit_code}: {ours.reason}"}


def _same_count(ours: KafkaBroker, dbz: KafkaBroker, p: Pair, connect: ConnectStandalone) -> bool:
    connect.check()
    n = len(consume_all(ours.bootstrap, p.topics))
    return n > 0 and len(consume_all(dbz.bootstrap, p.topics)) == n


# ---------------------------------------------------------------------------------------------
# comparison per shard: two connectors of a pair write the same partitions, each in its own order
def _shard_of(r: Norm, last: dict[tuple[str, bytes | None], str]) -> str:
    """A record's shard: its ``source.shard``; a tombstone's is its key's last record's; a
    transaction record's is the shard in its VGTID id."""
    if r.value is None:
        return last.get((r.topic, r.key), "")
    if r.shard:
        last[(r.topic, r.key)] = r.shard
        return r.shard
    payload = _payload(r.value)
    ids = json.loads(payload["id"]) if isinstance(payload, dict) and "id" in payload else []
    return ",".join(sorted({sg["shard"] for sg in ids}))


def by_shard(records: list[Norm]) -> dict[str, list[Norm]]:
    out: dict[str, list[Norm]] = defaultdict(list)
    last: dict[tuple[str, bytes | None], str] = {}
    for r in records:
        out[_shard_of(r, last)].append(r)
    return out


def compare_per_shard(dbz: list[Norm], ours: list[Norm]) -> list[str]:
    a, b = by_shard(dbz), by_shard(ours)
    problems = []
    for shard in sorted(set(a) | set(b)):
        problems += [f"shard {shard or '?'}: {p}" for p in compare(a.get(shard, []), b.get(shard, []))]
    return problems


# In a copy record's `source.vgtid` (one with `table_p_ks`) the shard's GTID is where the copy's
# consistent snapshot was taken: when that side's stream started. Real Vitess writes its own sidecar
# tables now and then, so the two sides' copies may start a few transactions apart (docs/conformance.md,
# "On real Vitess"). Only that GTID is masked, after checking it is a MariaDB GTID.
_COPY_GTID = re.compile(rb'\\"gtid\\":\\"MariaDB/[0-9]+-[0-9]+-[0-9]+\\",\\"table_p_ks\\":\[\{')


def _copy_masked(r: Norm) -> Norm:
    if r.value is None or b'table_p_ks\\":[{' not in r.value:  # streaming records have `"table_p_ks":[]`
        return r
    value, n = _COPY_GTID.subn(rb'\\"gtid\\":\\"<copy-start>\\",\\"table_p_ks\\":[{', r.value)
    assert n == 1, f"a copy record whose VGTID is not one MariaDB shard GTID: {r.value[:400]!r}"
    return Norm(r.topic, r.partition, r.key, value, r.headers, r.shard)


def _records(run: Run, side: str, pair: str, table: str) -> list[Norm]:
    return [_copy_masked(normalise(r)) for r in run.records[(side, pair)] if r.topic.endswith(f".{table}")]


# ---------------------------------------------------------------------------------------------
# the tests
@pytest.mark.parametrize(("pair", "table"), [pytest.param(p.name, t, id=f"{p.name}-{t}")
                                             for p in RV_PAIRS for t in VALUE_TABLES])
def test_records_are_byte_identical_to_debezium_on_real_vitess(run: Run, pair: str, table: str) -> None:
    """Topic, partition, key, value and every header (run id masked), byte for byte, in order per shard."""
    dbz, ours = _records(run, "dbz", pair, table), _records(run, "ours", pair, table)
    assert dbz, f"Debezium wrote nothing for {pair}/{table}; Connect log:\n{run.connect_log}"
    problems = compare_per_shard(dbz, ours)
    assert not problems, f"{len(problems)} difference(s) for {pair}/{table}:\n\n" + "\n\n".join(problems[:12])


@pytest.mark.parametrize("pair", [p.name for p in RV_PAIRS if p.transactions])
def test_transaction_topic_is_byte_identical_on_real_vitess(run: Run, pair: str) -> None:
    dbz, ours = _records(run, "dbz", pair, "transaction"), _records(run, "ours", pair, "transaction")
    assert dbz, f"Debezium wrote no transaction records for {pair}"
    problems = compare_per_shard(dbz, ours)
    assert not problems, f"{len(problems)} difference(s):\n\n" + "\n\n".join(problems[:12])


@pytest.mark.parametrize("pair", [p.name for p in RV_PAIRS])
def test_bit_columns_are_the_only_difference_on_real_vitess(run: Run, pair: str) -> None:
    """As on the test server: Debezium 3.5.0.Final drops BIT columns (or mangles them as unknown
    types), shardcdc maps them; the rest of each record is identical."""
    def stripped(rs: list[Norm]) -> list[Norm]:
        return [Norm(r.topic, r.partition, r.key, None if r.value is None else _without_bits(r.value), r.headers,
                     r.shard) for r in rs]

    dbz, ours = _records(run, "dbz", pair, "bit_types"), _records(run, "ours", pair, "bit_types")
    assert dbz and len(dbz) == len(ours)
    if RV_BY_NAME[pair].settings.get("include.unknown.datatypes") != "true":
        assert all(r.value is None or b'"b1"' not in r.value for r in dbz), "Debezium now emits BIT columns"
    problems = compare_per_shard(stripped(dbz), stripped(ours))
    assert not problems, "\n\n".join(problems[:12])
    created = {p["after"]["id"]: p["after"] for r in ours if r.value and (p := _payload(r.value))["op"] in ("c", "r")}
    assert {c: created[1][c] for c in BIT_COLUMNS} == {"b1": True, "b12": "Cqo=", "b64": "gAAAAAAAAAE="}


def test_both_connectors_wrote_every_change_on_real_vitess(run: Run) -> None:
    counts = {f"{side}:{pair}": sum(1 for r in v if not r.topic.endswith(".transaction"))
              for (side, pair), v in run.records.items()}
    for p in RV_PAIRS:
        assert counts[f"dbz:{p.name}"] == counts[f"ours:{p.name}"] > 0, counts
        shards = {normalise(r).shard for r in run.records[("dbz", p.name)] if r.value}
        assert shards >= {"-80", "80-"}, f"{p.name}: both shards' connectors wrote ({shards})"


def _vgtids(records: list[ConsumedRecord]) -> list[list[dict[str, Any]]]:
    out = []
    for r in records:
        payload = _payload(r.value) if r.value else None
        if isinstance(payload, dict) and isinstance(payload.get("source"), dict):
            out.append(json.loads(payload["source"]["vgtid"]))
    return out


def test_debezium_reads_mariadb_positions(run: Run) -> None:
    """Debezium 3.5.0.Final streams from a ``MariaDB/<domain>-<server>-<seq>`` start position and
    writes MariaDB GTIDs in ``source.vgtid``, one shard per connector, as shardcdc does."""
    assert all(g.startswith("MariaDB/") for g in run.start.values()), run.start
    for side in ("dbz", "ours"):
        vgtids = _vgtids(run.records[(side, "streaming")])
        assert vgtids and all(len(v) == 1 and v[0]["gtid"].startswith("MariaDB/0-") for v in vgtids), side
        seqs = {v[0]["shard"]: int(v[0]["gtid"].rsplit("-", 1)[1]) for v in vgtids}
        assert all(seqs[s] > int(run.start[s].rsplit("-", 1)[1]) for s in seqs), (side, seqs, run.start)


def test_the_copy_was_compared(run: Run) -> None:
    """The ``snapshot`` pair's records include the VStream copy (``table_p_ks`` progress in
    ``source.vgtid``) on both sides, for every seeded table."""
    for side in ("dbz", "ours"):
        copied = {t["table_name"] for v in _vgtids(run.records[(side, "snapshot")]) for t in v[0].get("table_p_ks") or []}
        assert copied == set(TABLES), (side, copied)


def test_ordered_metadata_fails_on_mariadb_positions(run: Run) -> None:
    """``VitessOrderedTransactionMetadataFactory`` on MariaDB GTIDs: Debezium 3.5.0.Final's ``Gtid``
    parser expects MySQL56 sets (``<uuid>:<from>-<to>``) and fails its task at the first
    transaction; shardcdc fails too, with Debezium's message and one line saying what to change
    (docs/conformance.md, "On real Vitess")."""
    dbz = run.ordered["dbz"]
    assert "ArrayIndexOutOfBoundsException: Index 1 out of bounds for length 1" in dbz and "Gtid.parseGtid" in dbz, dbz[:2000]
    ours = run.ordered["ours"]
    assert ours.startswith("exit 1: Error parsing GTID: MariaDB/0-") and "use the default transaction.metadata.factory" in ours
    assert "\n" not in ours and "Traceback" not in ours
