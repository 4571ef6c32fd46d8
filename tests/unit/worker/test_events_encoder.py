"""Record sequences: create/update/delete, tombstones, primary-key changes, key selection."""

from __future__ import annotations

import pytest
from events_fixtures import NOT_NULL, PRI_KEY, UNIQUE_KEY, delete, field, field_event, insert, update

from cdcworker.events import EncoderConfig, OutRecord, SourceContext, TablePlan, TopicNaming
from cdcworker.events.encoder import ColumnCountMismatch, context_headers

NOW_NS = 1559033904863497147
VGTID = (
    '[{"keyspace":"commerce","shard":"80-","gtid":"MariaDB/0-54610504-47"},'
    '{"keyspace":"commerce","shard":"-80","gtid":"MariaDB/0-1592148-45"}]'
)

# The seed document's customers example (Vitess_server / commerce / customers, shard -80),
# in JsonConverter's compact form, with the layout of a Debezium 3.x record.
CUSTOMERS_KEY = (
    b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,'
    b'"name":"Vitess_server.commerce.customers.Key"},"payload":{"id":1}}'
)
CUSTOMERS_VALUE_STRUCT = (
    b'{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},'
    b'{"type":"string","optional":false,"field":"first_name"},{"type":"string","optional":false,"field":"last_name"},'
    b'{"type":"string","optional":false,"field":"email"}],"optional":true,"name":"Vitess_server.commerce.customers.Value",'
)
CUSTOMERS_ENVELOPE_SCHEMA = (
    b'{"type":"struct","fields":['
    + CUSTOMERS_VALUE_STRUCT + b'"field":"before"},'
    + CUSTOMERS_VALUE_STRUCT + b'"field":"after"},'
    b'{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},'
    b'{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},'
    b'{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum",'
    b'"version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},'
    b'"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},'
    b'{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},'
    b'{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"keyspace"},'
    b'{"type":"string","optional":false,"field":"table"},{"type":"string","optional":false,"field":"shard"},'
    b'{"type":"string","optional":false,"field":"vgtid"}],"optional":false,"name":"io.debezium.connector.vitess.Source",'
    b'"version":1,"field":"source"},'
    b'{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},'
    b'{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],'
    b'"optional":true,"name":"event.block","version":1,"field":"transaction"},'
    b'{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},'
    b'{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}],'
    b'"optional":false,"name":"Vitess_server.commerce.customers.Envelope","version":2}'
)
SOURCE = (
    b'{"version":"3.5.0.Final","connector":"vitess","name":"Vitess_server","ts_ms":1559033904000,"snapshot":"false",'
    b'"db":"","sequence":null,"ts_us":1559033904000000,"ts_ns":1559033904000000000,"keyspace":"commerce",'
    b'"table":"customers","shard":"-80","vgtid":"[{\\"keyspace\\":\\"commerce\\",\\"shard\\":\\"80-\\",'
    b'\\"gtid\\":\\"MariaDB/0-54610504-47\\"},{\\"keyspace\\":\\"commerce\\",\\"shard\\":\\"-80\\",'
    b'\\"gtid\\":\\"MariaDB/0-1592148-45\\"}]"}'
)
ANNE = b'{"id":1,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"}'
ANNE_MARIE = b'{"id":1,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"}'
ANNE_2 = b'{"id":2,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"}'
TAIL = b',"transaction":null,"op":"%s","ts_ms":1559033904863,"ts_us":1559033904863497,"ts_ns":1559033904863497147}'
CTX_HEADERS = [
    ("__debezium.context.connectorLogicalName", b"Vitess_server"),
    ("__debezium.context.taskId", b"0"),
    ("__debezium.context.connectorName", b"inventory-connector"),
]


def payload(before: bytes, after: bytes, op: str) -> bytes:
    return b'{"before":' + before + b',"after":' + after + b',"source":' + SOURCE + TAIL % op.encode()


def with_schema(p: bytes) -> bytes:
    return b'{"schema":' + CUSTOMERS_ENVELOPE_SCHEMA + b',"payload":' + p + b"}"


def customers_plan(schemas: bool = True, tombstones: bool = True, headers: bool = True) -> TablePlan:
    cfg = EncoderConfig(
        logical_name="Vitess_server",
        key_schemas_enable=schemas,
        value_schemas_enable=schemas,
        tombstones_on_delete=tombstones,
        headers=tuple(context_headers("Vitess_server", "0", "inventory-connector")) if headers else (),
    )
    fe = field_event(
        "commerce.customers",
        [
            field("id", "INT32", "int", 49667),  # NOT_NULL|PRI_KEY|AUTO_INCREMENT|PART_KEY|NUM
            field("first_name", "VARCHAR", "varchar(255)", NOT_NULL),
            field("last_name", "VARCHAR", "varchar(255)", NOT_NULL),
            field("email", "VARCHAR", "varchar(255)", NOT_NULL),
        ],
    )
    return TablePlan.compile(fe, cfg)


def ctx() -> SourceContext:
    return SourceContext(keyspace="commerce", shard="-80", commit_seconds=1559033904, vgtid=VGTID)


ANNE_ROW = (b"1", b"Anne", b"Kretchmar", b"annek@noanswer.org")
ANNE_MARIE_ROW = (b"1", b"Anne Marie", b"Kretchmar", b"annek@noanswer.org")
ANNE_2_ROW = (b"2", b"Anne", b"Kretchmar", b"annek@noanswer.org")


def test_create_matches_seed_example() -> None:
    plan = customers_plan()
    assert plan.topic == "Vitess_server.commerce.customers"
    assert plan.encode_change(insert(*ANNE_ROW), ctx(), NOW_NS) == [
        OutRecord("Vitess_server.commerce.customers", CUSTOMERS_KEY, with_schema(payload(b"null", ANNE, "c")), CTX_HEADERS)
    ]


def test_create_without_schemas() -> None:
    plan = customers_plan(schemas=False, headers=False)
    assert plan.encode_change(insert(*ANNE_ROW), ctx(), NOW_NS) == [
        OutRecord("Vitess_server.commerce.customers", b'{"id":1}', payload(b"null", ANNE, "c"), [])
    ]


def test_unset_snapshot_stays_null_without_replace_null_with_default() -> None:
    """value.converter.replace.null.with.default=false: JsonConverter leaves the unset source.snapshot
    null instead of writing its schema default "false" (Debezium 3.5's bytes; conformance pair names2)."""
    plan = customers_plan(schemas=False)
    plan.unset_snapshot = None  # what EncoderConfig(replace_null_with_default=False) sets
    [rec] = plan.encode_change(insert(*ANNE_ROW), ctx(), NOW_NS)
    assert rec.value == payload(b"null", ANNE, "c").replace(b'"snapshot":"false"', b'"snapshot":null')
    assert b'"snapshot":null' in rec.value


def test_snapshot_read_op_when_asked() -> None:
    [rec] = customers_plan(schemas=False).encode_change(insert(*ANNE_ROW), ctx(), NOW_NS, insert_op="r")
    assert rec.value == payload(b"null", ANNE, "r")


def test_update_same_key() -> None:
    recs = customers_plan().encode_change(update(ANNE_ROW, ANNE_MARIE_ROW), ctx(), NOW_NS)
    assert recs == [
        OutRecord("Vitess_server.commerce.customers", CUSTOMERS_KEY, with_schema(payload(ANNE, ANNE_MARIE, "u")), CTX_HEADERS)
    ]


def test_delete_then_tombstone_with_same_key_and_headers() -> None:
    recs = customers_plan().encode_change(delete(*ANNE_MARIE_ROW), ctx(), NOW_NS)
    assert recs == [
        OutRecord("Vitess_server.commerce.customers", CUSTOMERS_KEY, with_schema(payload(ANNE_MARIE, b"null", "d")), CTX_HEADERS),
        OutRecord("Vitess_server.commerce.customers", CUSTOMERS_KEY, None, CTX_HEADERS),
    ]


def test_delete_without_tombstone() -> None:
    recs = customers_plan(schemas=False, tombstones=False, headers=False).encode_change(delete(*ANNE_ROW), ctx(), NOW_NS)
    assert recs == [OutRecord("Vitess_server.commerce.customers", b'{"id":1}', payload(ANNE, b"null", "d"), [])]


def test_primary_key_update_is_delete_tombstone_create_with_headers() -> None:
    recs = customers_plan(schemas=False).encode_change(update(ANNE_ROW, ANNE_2_ROW), ctx(), NOW_NS)
    topic = "Vitess_server.commerce.customers"
    del_headers = [("__debezium.newkey", b'{"id":2}'), *CTX_HEADERS]
    assert recs == [
        OutRecord(topic, b'{"id":1}', payload(ANNE, b"null", "d"), del_headers),
        OutRecord(topic, b'{"id":1}', None, del_headers),
        OutRecord(topic, b'{"id":2}', payload(b"null", ANNE_2, "c"), [("__debezium.oldkey", b'{"id":1}'), *CTX_HEADERS]),
    ]


def test_primary_key_update_without_tombstones() -> None:
    recs = customers_plan(schemas=False, tombstones=False, headers=False).encode_change(
        update(ANNE_ROW, ANNE_2_ROW), ctx(), NOW_NS
    )
    assert [(r.key, r.value is None, r.headers) for r in recs] == [
        (b'{"id":1}', False, [("__debezium.newkey", b'{"id":2}')]),
        (b'{"id":2}', False, [("__debezium.oldkey", b'{"id":1}')]),
    ]


def _plan(fields: list, schemas: bool = True) -> TablePlan:
    cfg = EncoderConfig(logical_name="srv", key_schemas_enable=schemas, value_schemas_enable=schemas)
    return TablePlan.compile(field_event("t", fields, keyspace="ks", shard="0"), cfg)


def _ctx() -> SourceContext:
    return SourceContext(keyspace="ks", shard="0", commit_seconds=1, vgtid="[]")


def test_table_without_keys_has_null_key() -> None:
    plan = _plan([field("a", "INT32", "int"), field("b", "VARCHAR", "varchar(5)")])
    assert plan.schemas.key is None
    recs = plan.encode_change(delete(b"1", b"x"), _ctx(), NOW_NS)
    assert [(r.key, r.value is None) for r in recs] == [(None, False), (None, True)]
    [rec] = plan.encode_change(insert(b"1", b"x"), _ctx(), NOW_NS)
    assert rec.key is None


def test_unique_key_fallback_uses_first_unique_column() -> None:
    plan = _plan([
        field("a", "INT32", "int"),
        field("code", "VARCHAR", "varchar(8)", NOT_NULL | UNIQUE_KEY),
        field("other", "INT32", "int", UNIQUE_KEY),
    ])
    [rec] = plan.encode_change(insert(b"7", b"AB-1", b"9"), _ctx(), NOW_NS)
    assert rec.key == (
        b'{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"code"}],"optional":false,'
        b'"name":"srv.ks.t.Key"},"payload":{"code":"AB-1"}}'
    )


def test_primary_key_wins_over_unique_and_keeps_column_order() -> None:
    plan = _plan(
        [
            field("tenant", "INT64", "bigint", NOT_NULL | PRI_KEY),
            field("email", "VARCHAR", "varchar(8)", NOT_NULL | UNIQUE_KEY),
            field("id", "INT32", "int", NOT_NULL | PRI_KEY),
        ],
        schemas=False,
    )
    [rec] = plan.encode_change(insert(b"5", b"e@x", b"9"), _ctx(), NOW_NS)
    assert rec.key == b'{"tenant":5,"id":9}'


def test_column_count_mismatch_raises() -> None:
    plan = _plan([field("a", "INT32", "int", NOT_NULL | PRI_KEY)])
    with pytest.raises(ColumnCountMismatch):
        plan.encode_change(insert(b"1", b"2"), _ctx(), NOW_NS)


def test_anonymised_column_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="Illegal prefix '@' for column: @1"):
        _plan([field("@1", "INT32", "int")])


def test_table_topic_naming_strategy_names_schemas_after_topic() -> None:
    cfg = EncoderConfig(
        logical_name="srv",
        naming=TopicNaming.from_strategy("srv", "io.debezium.connector.vitess.TableTopicNamingStrategy"),
        value_schemas_enable=False,
    )
    plan = TablePlan.compile(field_event("ks.orders", [field("id", "INT32", "int", NOT_NULL | PRI_KEY)], keyspace="ks"), cfg)
    assert plan.topic == "srv.orders"
    [rec] = plan.encode_change(insert(b"3"), _ctx(), NOW_NS)
    assert rec.topic == "srv.orders"
    assert rec.key == (
        b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,'
        b'"name":"srv.orders.Key"},"payload":{"id":3}}'
    )


def test_source_block_follows_context_per_transaction() -> None:
    plan = customers_plan(schemas=False, headers=False)
    later = SourceContext(keyspace="commerce", shard="80-", commit_seconds=1559033999, vgtid="[]")
    [rec] = plan.encode_change(insert(*ANNE_ROW), later, NOW_NS)
    assert rec.value is not None
    assert (
        b'"source":{"version":"3.5.0.Final","connector":"vitess","name":"Vitess_server","ts_ms":1559033999000,'
        b'"snapshot":"false","db":"","sequence":null,"ts_us":1559033999000000,"ts_ns":1559033999000000000,'
        b'"keyspace":"commerce","table":"customers","shard":"80-","vgtid":"[]"}'
    ) in rec.value


def test_envelope_timestamps_default_to_now() -> None:
    import time

    plan = customers_plan(schemas=False, headers=False)
    before = time.time_ns()
    [rec] = plan.encode_change(insert(*ANNE_ROW), ctx())
    after = time.time_ns()
    assert rec.value is not None
    ts_ns = int(rec.value.rsplit(b'"ts_ns":', 1)[1].rstrip(b"}"))
    assert before <= ts_ns <= after
