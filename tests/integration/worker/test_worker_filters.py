"""Table/column filters and column options: VStream rules, exact records from the real worker."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from worker_fixtures import commerce_sim, running_task, wait_positioned, worker_config
from worker_fixtures import wait_for as _wait_for

from cdcworker.filters import adjust_avro, adjust_avro_unicode, complement_regex, vstream_rules
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim


def _rx(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


def _vt_match(rules: tuple[tuple[str, str], ...], table: str) -> bool:
    """The vstreamer's rule match: first rule wins, '/' rules are unanchored searches."""
    for match, _ in rules:
        if match.startswith("/"):
            if re.search(match.strip("/"), table):
                return True
        elif match == table:
            return True
    return False


def test_include_list_becomes_one_anchored_regex_rule() -> None:
    rules = vstream_rules("commerce", _rx(r"commerce\.customer", "commerce.orders_.*", r"other\.x"), ())
    assert rules == (("/(?i)^(?:(?:customer)|(?:orders_.*))$", ""),)
    assert [t for t in ("customer", "Customer", "orders_2024", "customers", "audit", "x") if _vt_match(rules, t)] == [
        "customer", "Customer", "orders_2024"
    ]


def test_exclude_list_becomes_a_complement_regex_and_unsafe_patterns_fall_back() -> None:
    rules = vstream_rules("commerce", (), _rx(r"commerce\.audit", "commerce.audit_log"), always=("signals",))
    assert rules[0] == ("/^signals$", "")
    names = ("audit", "AUDIT", "audit_log", "audit_lo", "audit_logs", "aud", "customer", "", "signals", "b-audit")
    assert [n for n in names if _vt_match(rules, n)] == ["audit_lo", "audit_logs", "aud", "customer", "", "signals", "b-audit"]
    assert not re.search(complement_regex(["a"]), "A")
    # Lookahead (not RE2) and a regex keyspace half cannot be pushed down: every table is asked for.
    assert vstream_rules("commerce", _rx(r"commerce\.(?!audit).*"), ()) == (("/.*", ""),)
    assert vstream_rules("commerce", _rx(r".*\.customer"), ()) == (("/.*", ""),)
    assert vstream_rules("commerce", (), _rx(r"commerce\.audit_\d+")) == (("/.*", ""),)
    assert vstream_rules("commerce", (), ()) == (("/.*", ""),)


def test_avro_name_adjustment() -> None:
    assert adjust_avro("p.commerce.my-table.Value") == "p.commerce.my_table.Value"
    assert adjust_avro("1st-col") == "_st_col"
    assert adjust_avro_unicode("my-col_x") == "my_u002dcol_u005fx"


DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), name VARCHAR(64), secret VARCHAR(64), "
    "PRIMARY KEY (id))",
    "CREATE TABLE audit (id BIGINT NOT NULL, what VARCHAR(64), PRIMARY KEY (id))",
]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim(DDL) as s:
        yield s


def test_filters_and_column_options_give_exact_records(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={
            "table.include.list": r"commerce\.customer,commerce\.orders_.*",
            "column.exclude.list": r"commerce\.customer\.secret",
            "column.truncate.to.5.chars": r"commerce\.customer\.email",
            "column.mask.with.3.chars": r"commerce\.customer\.name",
            # Only the first matching column option applies (Debezium's ColumnMappers): email is
            # truncated and gets no source-type parameters; id is not a key field of the mapper.
            "column.propagate.source.type": r"commerce\.customer\.(email|id)",
            "skipped.operations": "u",
        },
    )
    prefix = cfg.topic_prefix
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        assert run.task.rules == (("/(?i)^(?:(?:customer)|(?:orders_.*))$", ""),)
        sim.execute("INSERT INTO audit (id, what) VALUES (1, 'ignored')", "commerce")
        sim.execute("INSERT INTO customer (id, email, name, secret) VALUES (1, 'alice@x.io', 'Alice', 's1')", "commerce")
        sim.execute("UPDATE customer SET email = 'bob@y.io' WHERE id = 1", "commerce")  # skipped: u
        sim.execute("INSERT INTO customer (id, email, name, secret) VALUES (2, NULL, NULL, 's2')", "commerce")
        # A table created after the start matches the regex rule: no restart needed (unlike Debezium).
        sim.execute("CREATE TABLE orders_2024 (id BIGINT NOT NULL, total BIGINT, PRIMARY KEY (id))", "commerce")
        sim.execute("INSERT INTO orders_2024 (id, total) VALUES (7, 70)", "commerce")
        sim.execute("DELETE FROM customer WHERE id = 1", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 5, what="5 records")
        processor = run.task.processor
        assert processor is not None
        # Only included tables' rows crossed the network: 5 row changes (the audit row never came).
        assert processor.stats.rows_seen == 5
        filtered = run.task.metrics.events_filtered
        result = run.stop()
    assert result.exit_code == 0
    assert filtered == 1  # the skipped update
    customer = consume_all(kafka_broker.bootstrap, f"{prefix}.commerce.customer")
    values = [json.loads(r.value) if r.value else None for r in customer]
    assert [(v["payload"]["op"] if v else None) for v in values] == ["c", "c", "d", None]
    assert [v["payload"]["after"] for v in values[:2]] == [
        {"id": 1, "email": "alice", "name": "***"},
        {"id": 2, "email": None, "name": "***"},  # a masked NULL is masked too
    ]
    assert values[2]["payload"]["before"] == {"id": 1, "email": "bob@y", "name": "***"}
    value_schema = values[0]["schema"]["fields"][1]
    id_params = {"__debezium.source.column.type": "INT64", "__debezium.source.column.name": "id"}
    assert value_schema["fields"] == [
        {"type": "int64", "optional": False, "parameters": id_params, "field": "id"},
        {"type": "string", "optional": True, "parameters": {"truncateLength": "5"}, "field": "email"},
        {"type": "string", "optional": True, "parameters": {"masked": "true"}, "field": "name"},
    ]
    # Keys are built without column mappers: no parameters on the key's id.
    assert json.loads(customer[0].key)["schema"]["fields"] == [{"type": "int64", "optional": False, "field": "id"}]
    orders = consume_all(kafka_broker.bootstrap, f"{prefix}.commerce.orders_2024")
    assert [json.loads(r.value)["payload"]["after"] for r in orders] == [{"id": 7, "total": 70}]
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10).topics
    assert f"{prefix}.commerce.audit" not in topics


def test_exclude_list_key_columns_and_message_key_columns(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={
            "table.exclude.list": r"commerce\.audit",
            # The key column stays in the key but leaves the value, as in Debezium.
            "column.exclude.list": r"commerce\.customer\.id,commerce\.customer\.secret",
            "message.key.columns": "commerce.customer:id,email",
            "field.name.adjustment.mode": "avro",
            "schema.name.adjustment.mode": "avro",
        },
    )
    prefix = cfg.topic_prefix
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        assert run.task.rules[0][0].startswith("/(?is)^(?:")
        sim.execute("INSERT INTO audit (id, what) VALUES (1, 'ignored')", "commerce")
        sim.execute("INSERT INTO customer (id, email, name, secret) VALUES (3, 'c@z.io', 'Carol', 's3')", "commerce")
        _wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 1, what="1 record")
        assert run.task.processor is not None and run.task.processor.stats.rows_seen == 1
        result = run.stop()
    assert result.exit_code == 0
    (rec,) = consume_all(kafka_broker.bootstrap, f"{prefix}.commerce.customer")
    key = json.loads(rec.key)
    assert key == {
        "schema": {
            "type": "struct",
            "fields": [
                {"type": "int64", "optional": False, "field": "id"},
                {"type": "string", "optional": True, "field": "email"},
            ],
            "optional": False,
            "name": f"{prefix}.commerce.customer.Key",
        },
        "payload": {"id": 3, "email": "c@z.io"},
    }
    value = json.loads(rec.value)
    assert value["payload"]["after"] == {"email": "c@z.io", "name": "Carol"}
    assert value["schema"]["name"] == f"{prefix}.commerce.customer.Envelope"


def test_masked_columns_keep_the_native_encoder_and_mask_nulls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table with masks only keeps the native row encoder; NULLs are masked in its images,
    giving the same bytes as the Python path (tested here with the encoder switched off)."""
    from cdcworker.events import EncoderConfig, SourceContext, TablePlan, native
    from cdcworker.filters import FilterPolicy
    from vitessapi import binlogdata_pb2, query_pb2

    # The equality below needs both paths: the extension is built by `make setup` (make native).
    assert native.available(), "the native row encoder is not built: run `make native`"
    monkeypatch.delenv(native.ENV, raising=False)
    fe = binlogdata_pb2.FieldEvent(
        table_name="ks.t", keyspace="ks", shard="-80",
        fields=[
            query_pb2.Field(name="id", type=query_pb2.INT64, flags=1 | 2, column_type="bigint"),
            query_pb2.Field(name="c", type=query_pb2.VARCHAR, flags=0, column_type="varchar(8)"),
            query_pb2.Field(name="n", type=query_pb2.VARCHAR, flags=0, column_type="varchar(8)"),
        ],
    )
    policy = FilterPolicy(mask=((3, (re.compile(r"ks\.t\.(c|n)"),)),))
    cfg = EncoderConfig("p", policy=policy)

    def records() -> tuple[bool, list[tuple[bytes | None, bytes | None]]]:
        plan = TablePlan.compile(fe, cfg)
        rows = [(b"1", b"x", None), (b"2", None, b"y,\"n\":null")]
        out = []
        for vals in rows:
            row = query_pb2.Row(lengths=[-1 if v is None else len(v) for v in vals], values=b"".join(v for v in vals if v))
            for rec in plan.encode_change(binlogdata_pb2.RowChange(after=row), SourceContext("ks", "-80", 1, "[]"), 1, "c"):
                out.append((rec.key, rec.value))
        return plan._native is not None, out

    used_native, fast = records()
    monkeypatch.setenv(native.ENV, "0")
    used_python, slow = records()
    assert used_native and not used_python
    assert fast == slow
    afters = [json.loads(v)["payload"]["after"] for _, v in fast if v]
    assert afters == [{"id": 1, "c": "***", "n": "***"}, {"id": 2, "c": "***", "n": "***"}]


@pytest.mark.parametrize("mode", ["initial", "initial_only"])
def test_an_initial_snapshot_with_no_table_to_copy_streams_on(sim: VTGateSim, kafka_broker: KafkaBroker, mode: str) -> None:
    # VTGate refuses a copy whose filter matches no table ("stream needs a position or a table to
    # copy"), and Debezium then retries forever. Nothing to copy is an empty snapshot: the worker
    # streams on from the shards' current positions, and picks the table up once it exists.
    cfg = worker_config(kafka_broker, sim.address, "commerce",
                        extra={"snapshot.mode": mode, "table.include.list": r"commerce\.later_.*"})
    topic = f"{cfg.topic_prefix}.commerce.later_1"
    with running_task(cfg) as run:
        if mode == "initial_only":
            result = run.wait(60)
            assert result.exit_code == 0 and "initial snapshot completed" in result.reason, result
            return
        wait_positioned(sim, run)
        sim.execute("CREATE TABLE later_1 (id BIGINT NOT NULL, v BIGINT, PRIMARY KEY (id))", "commerce")
        sim.execute("INSERT INTO later_1 (id, v) VALUES (1, 10)", "commerce")
        _wait_for(lambda: run.task.processor is not None and run.task.processor.stats.records_sent >= 1,
                  what="the new table's row")
        assert run.stop().exit_code == 0
    records = [json.loads(r.value)["payload"] for r in consume_all(kafka_broker.bootstrap, topic) if r.value]
    assert [(p["op"], p["after"]) for p in records] == [("c", {"id": 1, "v": 10})]
