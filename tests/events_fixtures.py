"""Builders for FIELD/ROW protobuf messages used by the tests/test_events_*.py files."""

from __future__ import annotations

from collections.abc import Sequence

from vitessapi import binlogdata_pb2, query_pb2

NOT_NULL = 1
PRI_KEY = 2
UNIQUE_KEY = 4


def field(name: str, type_name: str, column_type: str, flags: int = 0, decimals: int = 0, length: int = 0) -> query_pb2.Field:
    return query_pb2.Field(
        name=name,
        type=query_pb2.Type.Value(type_name),
        column_type=column_type,
        flags=flags,
        decimals=decimals,
        column_length=length,
    )


def field_event(
    table: str,
    fields: Sequence[query_pb2.Field],
    keyspace: str = "commerce",
    shard: str = "-80",
    enum_set_string_values: bool = True,
) -> binlogdata_pb2.FieldEvent:
    return binlogdata_pb2.FieldEvent(
        table_name=table,
        fields=fields,
        keyspace=keyspace,
        shard=shard,
        enum_set_string_values=enum_set_string_values,
    )


def row(*values: bytes | None) -> query_pb2.Row:
    lengths = [-1 if v is None else len(v) for v in values]
    return query_pb2.Row(lengths=lengths, values=b"".join(v for v in values if v is not None))


def insert(*values: bytes | None) -> binlogdata_pb2.RowChange:
    return binlogdata_pb2.RowChange(after=row(*values))


def delete(*values: bytes | None) -> binlogdata_pb2.RowChange:
    return binlogdata_pb2.RowChange(before=row(*values))


def update(before: Sequence[bytes | None], after: Sequence[bytes | None]) -> binlogdata_pb2.RowChange:
    return binlogdata_pb2.RowChange(before=row(*before), after=row(*after))
