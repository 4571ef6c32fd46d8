"""Schema-change records for VStream DDL events (``include.schema.changes``).

As the Vitess connector emits them: one record per DDL event — VStream delivers a DDL once per
shard, so one per shard — on the schema change topic (``<topic.prefix>``, or
``override.schema.change.topic`` with ``TableTopicNamingStrategy``), Kafka partition 0:

* key ``io.debezium.connector.vitess.SchemaChangeKey`` v1 ``{databaseName}`` = the keyspace;
* value ``io.debezium.connector.vitess.SchemaChangeValue`` v1 ``{source, ts_ms, databaseName,
  schemaName, ddl, tableChanges}``: the Vitess ``source`` block with the DDL's own timestamp, shard,
  the current VGTID and the table named in the statement; ``ts_ms`` the processing time;
  ``schemaName`` null; ``ddl`` the statement; ``tableChanges`` always ``[]`` (the connector builds
  the event without a ``Table``), though its schema describes Debezium's ``Change`` structs;
* the ``__debezium.context.*`` headers of the data records (the processor adds them), unlike
  heartbeat and transaction records (``tests/conformance/worker/test_conformance_records.py``).

The table is found like ``DdlMetadataExtractor``: comments removed, whitespace collapsed, the first
``(CREATE|ALTER|TRUNCATE|DROP|RENAME) TABLE <name>`` match, ``ks.t`` → ``t``, backticks dropped,
``<UNKNOWN>`` when nothing matches.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from cdcworker.events.encoder import DEBEZIUM_VERSION, OutRecord
from cdcworker.events.jsonfmt import dumps
from cdcworker.events.source import SourceContext, source_schema
from cdcworker.events.types import as_field, connect_schema
from cdcworker.jsontypes import JsonObject

__all__ = [
    "SCHEMA_CHANGE_PARTITION",
    "UNKNOWN_TABLE",
    "SchemaChangeEmitter",
    "ddl_operation_and_table",
    "schema_change_key_schema",
    "schema_change_record",
    "schema_change_value_schema",
]

SCHEMA_CHANGE_PARTITION = 0
UNKNOWN_TABLE = "<UNKNOWN>"
CONNECTOR_NAME = "vitess"

_TABLE_RE = re.compile(r"(CREATE|ALTER|TRUNCATE|DROP|RENAME)\s+TABLE\s+([\w`.]+)", re.IGNORECASE | re.ASCII)
_BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)
# Java's '.' stops at any line terminator, not only '\n'.
_LINE_COMMENT_RE = re.compile("(--|#)[^\n\r\u0085\u2028\u2029]*?(\r?\n|$)")
_SPACE_RE = re.compile(r"\s+", re.ASCII)


def _java_trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def ddl_operation_and_table(statement: str) -> tuple[str, str]:
    """(``CREATE``/``ALTER``/``TRUNCATE``/``DROP``, table) as ``DdlMetadataExtractor`` reads them;
    ``("ALTER", "<UNKNOWN>")`` when the statement names no table (RENAME counts as ALTER)."""
    cleaned = _BLOCK_COMMENT_RE.sub("", statement)
    cleaned = _LINE_COMMENT_RE.sub("", cleaned)
    cleaned = _java_trim(_SPACE_RE.sub(" ", cleaned))
    m = _TABLE_RE.search(cleaned)
    if m is None:
        return "ALTER", UNKNOWN_TABLE
    op = m.group(1).upper()
    if op == "RENAME":
        op = "ALTER"
    name = m.group(2)
    if "." in name:
        parts = [p for p in name.split(".")]
        while parts and parts[-1] == "":
            parts.pop()  # Java's split drops trailing empty strings
        # Debezium takes the second part ("ks.t" -> "t"); with none it fails, we keep the name.
        name = parts[1] if len(parts) > 1 else (parts[0] if parts else name)
    return op, name.replace("`", "")


def _str_array(optional: bool) -> JsonObject:
    return {"type": "array", "items": connect_schema("string", False), "optional": optional}


def _change_schema() -> JsonObject:
    """Debezium core's ``SchemaFactory.schemaHistoryChangeSchema``."""
    s, i32, b = "string", "int32", "boolean"
    column = {
        "type": "struct",
        "fields": [
            as_field(connect_schema(s, False), "name"),
            as_field(connect_schema(i32, False), "jdbcType"),
            as_field(connect_schema(i32, True), "nativeType"),
            as_field(connect_schema(s, False), "typeName"),
            as_field(connect_schema(s, True), "typeExpression"),
            as_field(connect_schema(s, True), "charsetName"),
            as_field(connect_schema(i32, True), "length"),
            as_field(connect_schema(i32, True), "scale"),
            as_field(connect_schema(i32, False), "position"),
            as_field(connect_schema(b, True), "optional"),
            as_field(connect_schema(b, True), "autoIncremented"),
            as_field(connect_schema(b, True), "generated"),
            as_field(connect_schema(s, True), "comment"),
            as_field(connect_schema(s, True), "defaultValueExpression"),
            as_field(_str_array(True), "enumValues"),
        ],
        "optional": False,
        "name": "io.debezium.connector.schema.Column",
        "version": 1,
    }
    table = {
        "type": "struct",
        "fields": [
            as_field(connect_schema(s, True), "defaultCharsetName"),
            as_field(_str_array(True), "primaryKeyColumnNames"),
            as_field({"type": "array", "items": column, "optional": False}, "columns"),
            as_field(connect_schema(s, True), "comment"),
        ],
        "optional": True,
        "name": "io.debezium.connector.schema.Table",
        "version": 1,
    }
    return {
        "type": "struct",
        "fields": [
            as_field(connect_schema(s, False), "type"),
            as_field(connect_schema(s, False), "id"),
            as_field(table, "table"),
        ],
        "optional": False,
        "name": "io.debezium.connector.schema.Change",
        "version": 1,
    }


def schema_change_key_schema() -> JsonObject:
    return {
        "type": "struct",
        "fields": [as_field(connect_schema("string", False), "databaseName")],
        "optional": False,
        "name": f"io.debezium.connector.{CONNECTOR_NAME}.SchemaChangeKey",
        "version": 1,
    }


def schema_change_value_schema() -> JsonObject:
    return {
        "type": "struct",
        "fields": [
            as_field(source_schema(), "source"),
            as_field(connect_schema("int64", False), "ts_ms"),
            as_field(connect_schema("string", True), "databaseName"),
            as_field(connect_schema("string", True), "schemaName"),
            as_field(connect_schema("string", True), "ddl"),
            as_field({"type": "array", "items": _change_schema(), "optional": False}, "tableChanges"),
        ],
        "optional": False,
        "name": f"io.debezium.connector.{CONNECTOR_NAME}.SchemaChangeValue",
        "version": 1,
    }


@functools.cache
def _key_prefix() -> bytes:
    return b'{"schema":' + dumps(schema_change_key_schema()) + b',"payload":'


@functools.cache
def _value_prefix() -> bytes:
    return b'{"schema":' + dumps(schema_change_value_schema()) + b',"payload":'


def schema_change_record(
    topic: str,
    logical_name: str,
    keyspace: str,
    shard: str,
    statement: str,
    event_seconds: int,
    vgtid: str,
    now_ms: int,
    *,
    key_schemas_enable: bool = True,
    value_schemas_enable: bool = True,
    version: str = DEBEZIUM_VERSION,
    headers: Sequence[tuple[str, bytes]] = (),
) -> OutRecord:
    """The record for one DDL event of ``shard`` (send it to ``SCHEMA_CHANGE_PARTITION``).

    ``keyspace`` is the configured keyspace (``vitess.keyspace``); ``event_seconds`` the DDL event's
    timestamp; ``vgtid`` the ``source.vgtid`` text (the current VGTID, or its local form with
    ``UseLocalVgtid``); ``now_ms`` the processing time.
    """
    _, table = ddl_operation_and_table(statement)
    source = SourceContext(keyspace, shard, event_seconds, vgtid).fragment(version, logical_name, table)
    key_body = dumps({"databaseName": keyspace})
    value_body = dumps(
        {
            "source": source,
            "ts_ms": now_ms,
            "databaseName": keyspace,
            "schemaName": None,
            "ddl": statement,
            "tableChanges": [],
        }
    )
    key = _key_prefix() + key_body + b"}" if key_schemas_enable else key_body
    value = _value_prefix() + value_body + b"}" if value_schemas_enable else value_body
    return OutRecord(topic, key, value, list(headers))


class SchemaChangeEmitter:
    """``include.schema.changes`` for one task: the settings of ``schema_change_record`` bound once."""

    __slots__ = ("_headers", "key_schemas_enable", "keyspace", "logical_name", "topic", "value_schemas_enable", "version")

    def __init__(
        self,
        topic: str,
        logical_name: str,
        keyspace: str,
        *,
        key_schemas_enable: bool = True,
        value_schemas_enable: bool = True,
        version: str = DEBEZIUM_VERSION,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        self.topic = topic
        self.logical_name = logical_name
        self.keyspace = keyspace
        self.key_schemas_enable = key_schemas_enable
        self.value_schemas_enable = value_schemas_enable
        self.version = version
        self._headers = tuple(headers)

    def record(self, shard: str, statement: str, event_seconds: int, vgtid: str, now_ms: int) -> OutRecord:
        return schema_change_record(
            self.topic,
            self.logical_name,
            self.keyspace,
            shard,
            statement,
            event_seconds,
            vgtid,
            now_ms,
            key_schemas_enable=self.key_schemas_enable,
            value_schemas_enable=self.value_schemas_enable,
            version=self.version,
            headers=self._headers,
        )
