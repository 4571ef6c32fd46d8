"""Differential conformance of the filter options against the real Debezium Vitess connector.

The same harness as ``test_conformance_debezium.py`` (whose helpers this module imports): one
VTGate test server, Debezium in one Kafka Connect standalone process writing to its own broker,
shardcdc tasks writing to the session broker, same connector names and topic prefixes, and a
workload that runs one statement at a time until every VStream has queued it. Each ``Pair`` here
combines several filter options so that one Connect run covers them all:

- ``tables``: ``table.include.list``, ``column.exclude.list`` (including a primary-key column),
  ``column.truncate.to.N.chars`` and ``column.mask.with.N.chars`` on string, binary, ENUM/SET,
  JSON and numeric columns (with NULLs), ``column.propagate.source.type``, ``message.key.columns``;
- ``columns``: ``table.exclude.list``, ``column.include.list`` (leaving out a primary-key column),
  ``skipped.operations=u``, ``datatype.propagate.source.type``;
- ``skipdel``: ``skipped.operations=c,d`` and a second truncate/mask length on the same table.

Records are compared per topic and partition, byte for byte (key, value, headers), after the
masks docs/conformance.md justifies. Differences that remain are listed in docs/conformance.md
("Filters") and, if they are shardcdc bugs, marked ``xfail(strict=True)`` here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from connectstandalone import ConnectStandalone, debezium_home, vitess_connector_config
from test_conformance_debezium import (
    CHANGES,
    DDL,
    SEED,
    TABLES,
    Norm,
    _streams_state,
    compare,
    normalise,
    play_workload,
    read_both,
    start_shardcdc_tasks,
)
from worker_fixtures import worker_config

from localkafka import ConsumedRecord, KafkaBroker, create_topics
from vtgatesim import VTGateSim

PARTITIONS = 3
KEYSPACE = "commerce"
_RUN = uuid.uuid4().hex[:6]


@dataclass(frozen=True)
class Pair:
    name: str
    prefix: str
    settings: dict[str, str]

    @property
    def topics(self) -> list[str]:
        return [f"{self.prefix}.{KEYSPACE}.{t}" for t in TABLES]

    @property
    def captured(self) -> list[str]:
        """Tables of the workload the include/exclude list keeps (anchored, case-insensitive)."""
        def patterns(key: str) -> list[re.Pattern[str]]:
            return [re.compile(p, re.IGNORECASE) for p in self.settings.get(key, "").split(",") if p]

        include, exclude = patterns("table.include.list"), patterns("table.exclude.list")
        names = {t: f"{KEYSPACE}.{t}" for t in TABLES}
        if include:
            return [t for t, n in names.items() if any(p.fullmatch(n) for p in include)]
        return [t for t, n in names.items() if not any(p.fullmatch(n) for p in exclude)]


PAIRS = [
    Pair("tables", f"ftab{_RUN}", {
        "table.include.list": r"commerce\.num_types,commerce\.str_types,commerce\.ord.*",
        "column.exclude.list": r"commerce\.num_types\.(f|bi),commerce\.orders\.line",
        "column.truncate.to.3.chars": r"commerce\.str_types\.(vc|tx|bn|j|e),commerce\.num_types\.dc,commerce\.orders\.sku",
        "column.mask.with.5.chars": r"commerce\.str_types\.(c|lat|s|bl|vb),commerce\.num_types\.i",
        "column.propagate.source.type":
            r"commerce\.num_types\.(ti|dc|yr|d),commerce\.str_types\.(vc|vcb),commerce\.orders\.total",
        "message.key.columns": "commerce.num_types:ti,id",
    }),
    Pair("columns", f"fcol{_RUN}", {
        "table.exclude.list": r"commerce\.str_types,commerce\.bit.*",
        "column.include.list": r"commerce\.num_types\.(id|i|dc|d|tiu),commerce\.time_types\..*,commerce\.orders\.(id|total)",
        "skipped.operations": "u",
        # A bare type name never matches: Debezium matches "<keyspace>.<table>.<TYPE>".
        "datatype.propagate.source.type": r"DECIMAL,.+\.DATETIME,.*INT64,commerce\.time_types\.TIME.*",
    }),
    Pair("skipdel", f"fskd{_RUN}", {
        "table.include.list": r"commerce\.str_types",
        "skipped.operations": "c,d",
        "column.truncate.to.1.chars": r"commerce\.str_types\.(vc|vb|bl)",
        "column.mask.with.2.chars": r"commerce\.str_types\.(tx|e|j)",
    }),
]


@dataclass
class Run:
    records: dict[tuple[str, str], list[ConsumedRecord]]  # (side, pair) -> records
    connect_log: str


@pytest.fixture(scope="module")
def run(kafka_broker: KafkaBroker, debezium_kafka_broker: KafkaBroker) -> Iterator[Run]:
    home = debezium_home()
    if not (home / ".complete").is_file():
        raise RuntimeError(f"Debezium jars missing in {home}: run `make debezium` first")
    with ExitStack() as stack:
        sim = stack.enter_context(VTGateSim())
        sim.create_keyspace(KEYSPACE, ["-80", "80-"], ddl=DDL)
        for broker in (debezium_kafka_broker, kafka_broker):
            create_topics(broker.bootstrap, [t for p in PAIRS for t in p.topics], partitions=PARTITIONS)
        configs = [
            worker_config(kafka_broker, sim.address, KEYSPACE, p.prefix,
                          {"snapshot.mode": "never", **p.settings, "shardcdc.metrics.port": "0"})
            for p in PAIRS
        ]
        tasks = start_shardcdc_tasks(stack, kafka_broker, configs)
        connect = ConnectStandalone(
            debezium_kafka_broker.bootstrap,
            [vitess_connector_config(cfg.name, p.prefix, sim.address, KEYSPACE, {"snapshot.mode": "never", **p.settings})
             for cfg, p in zip(configs, PAIRS, strict=True)],
        )
        stack.callback(connect.close)
        connect.start(timeout=120)

        def state() -> str:
            return _streams_state(sim) + "\n" + connect.tail()

        play_workload(sim, KEYSPACE, SEED + CHANGES, tasks, 2 * len(PAIRS), state)
        records: dict[tuple[str, str], list[ConsumedRecord]] = {}
        for p in PAIRS:
            ours, dbz = read_both(kafka_broker.bootstrap, debezium_kafka_broker.bootstrap, p.topics, connect.check)
            records[("ours", p.name)] = ours
            records[("dbz", p.name)] = dbz
        connect.check()
        yield Run(records, connect.tail(200))


def _records(run: Run, side: str, pair: str, table: str) -> list[Norm]:
    return [normalise(r) for r in run.records[(side, pair)] if r.topic.endswith(f".{table}")]


# Differences that are shardcdc bugs (docs/conformance.md, "Filters").
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}


def _cases() -> list[object]:
    out = []
    for p in PAIRS:
        for t in p.captured:
            reason = KNOWN_DIFFERENCES.get((p.name, t))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(p.name, t, id=f"{p.name}-{t}", marks=marks))
    return out


@pytest.mark.parametrize(("pair", "table"), _cases())
def test_filtered_records_are_byte_identical_to_debezium(run: Run, pair: str, table: str) -> None:
    """Topic, partition, key, value and headers, byte for byte, in order."""
    dbz = _records(run, "dbz", pair, table)
    ours = _records(run, "ours", pair, table)
    assert dbz, f"Debezium wrote nothing for {pair}/{table}; Connect log:\n{run.connect_log}"
    problems = compare(dbz, ours)
    assert not problems, f"{len(problems)} difference(s) for {pair}/{table}:\n\n" + "\n\n".join(problems[:12])


@pytest.mark.parametrize("pair", [p.name for p in PAIRS])
def test_filtered_tables_are_absent_on_both_sides(run: Run, pair: str) -> None:
    """Tables the include/exclude lists leave out: no record from either connector."""
    p = next(x for x in PAIRS if x.name == pair)
    for side in ("dbz", "ours"):
        written = sorted({r.topic.rsplit(".", 1)[1] for r in run.records[(side, pair)]})
        assert written == sorted(p.captured), f"{side} wrote {written}"
    assert set(p.captured) < set(TABLES)
