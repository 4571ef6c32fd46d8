"""Schema-change records for DDL events: table extraction and exact bytes."""

from __future__ import annotations

import orjson
import pytest

from cdcworker.events.source import source_schema
from cdcworker.records.schema_change import (
    SCHEMA_CHANGE_PARTITION,
    ddl_operation_and_table,
    schema_change_record,
    schema_change_value_schema,
)

VGTID = '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/u:1-7","table_p_ks":[]}]'
VGTID_ESC = VGTID.replace('"', '\\"')


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("CREATE TABLE foo (id int)", ("CREATE", "foo")),
        ("alter table `foo` add column bar int", ("ALTER", "foo")),
        ("ALTER TABLE ks.foo ADD COLUMN bar", ("ALTER", "foo")),
        ("ALTER TABLE `ks`.`foo` ADD COLUMN bar", ("ALTER", "foo")),
        ("DROP TABLE foo", ("DROP", "foo")),
        ("TRUNCATE TABLE foo", ("TRUNCATE", "foo")),
        ("RENAME TABLE foo TO bar", ("ALTER", "foo")),
        ("/* gh-ost */ ALTER /* x */ TABLE foo ENGINE=InnoDB", ("ALTER", "foo")),
        ("-- note\nCREATE\n\tTABLE  foo (id int)", ("CREATE", "foo")),
        ("# c\nDROP TABLE foo", ("DROP", "foo")),
        ("CREATE VIEW v AS SELECT 1", ("ALTER", "<UNKNOWN>")),
        ("", ("ALTER", "<UNKNOWN>")),
    ],
)
def test_ddl_table_extraction(ddl: str, expected: tuple[str, str]) -> None:
    assert ddl_operation_and_table(ddl) == expected


def test_schema_change_record_without_schemas() -> None:
    rec = schema_change_record(
        "shop",
        "shop",
        "ks",
        "-80",
        "ALTER TABLE foo ADD COLUMN bar int",
        1700000000,
        VGTID,
        1700000005123,
        key_schemas_enable=False,
        value_schemas_enable=False,
        version="3.3.1.Final",
    )
    assert SCHEMA_CHANGE_PARTITION == 0
    assert rec.topic == "shop"
    assert rec.key == b'{"databaseName":"ks"}'
    assert (
        rec.value
        == (
            '{"source":{"version":"3.3.1.Final","connector":"vitess","name":"shop","ts_ms":1700000000000,'
            '"snapshot":"false","db":"","sequence":null,"ts_us":1700000000000000,"ts_ns":1700000000000000000,'
            '"keyspace":"ks","table":"foo","shard":"-80","vgtid":"' + VGTID_ESC + '"},'
            '"ts_ms":1700000005123,"databaseName":"ks","schemaName":null,'
            '"ddl":"ALTER TABLE foo ADD COLUMN bar int","tableChanges":[]}'
        ).encode()
    )


def test_schema_change_schemas() -> None:
    rec = schema_change_record("shop", "shop", "ks", "80-", "DROP TABLE t", 1, VGTID, 2)
    assert rec.key == (
        b'{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"databaseName"}],'
        b'"optional":false,"name":"io.debezium.connector.vitess.SchemaChangeKey","version":1},'
        b'"payload":{"databaseName":"ks"}}'
    )
    assert rec.value is not None
    value = orjson.loads(rec.value)
    schema = value["schema"]
    assert schema == schema_change_value_schema()
    assert [(f["field"], f["type"], f["optional"]) for f in schema["fields"]] == [
        ("source", "struct", False),
        ("ts_ms", "int64", False),
        ("databaseName", "string", True),
        ("schemaName", "string", True),
        ("ddl", "string", True),
        ("tableChanges", "array", False),
    ]
    assert schema["name"] == "io.debezium.connector.vitess.SchemaChangeValue"
    assert {k: v for k, v in schema["fields"][0].items() if k != "field"} == source_schema()
    change = schema["fields"][5]["items"]
    assert (change["name"], change["version"], [f["field"] for f in change["fields"]]) == (
        "io.debezium.connector.schema.Change",
        1,
        ["type", "id", "table"],
    )
    table = change["fields"][2]
    assert (table["name"], table["optional"], [f["field"] for f in table["fields"]]) == (
        "io.debezium.connector.schema.Table",
        True,
        ["defaultCharsetName", "primaryKeyColumnNames", "columns", "comment"],
    )
    column = table["fields"][2]["items"]
    assert [f["field"] for f in column["fields"]] == [
        "name",
        "jdbcType",
        "nativeType",
        "typeName",
        "typeExpression",
        "charsetName",
        "length",
        "scale",
        "position",
        "optional",
        "autoIncremented",
        "generated",
        "comment",
        "defaultValueExpression",
        "enumValues",
    ]
    assert column["fields"][14] == {
        "type": "array",
        "items": {"type": "string", "optional": False},
        "optional": True,
        "field": "enumValues",
    }
    assert value["payload"]["source"]["shard"] == "80-"
    assert value["payload"]["source"]["table"] == "t"
