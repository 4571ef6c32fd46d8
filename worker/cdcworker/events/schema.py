"""Connect schemas for a table's key, value and envelope, built once per FIELD event."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdcworker.events.source import source_schema
from cdcworker.events.types import PRI_KEY_FLAG, UNIQUE_KEY_FLAG, ColumnCodec
from cdcworker.jsontypes import JsonObject

# Debezium 3.x envelope schema version (see a 3.1 JsonConverter record).
ENVELOPE_VERSION = 2


def select_key_columns(flags: Sequence[int]) -> list[int]:
    """Indexes of the key columns: all PRI_KEY_FLAG columns, else the first unique one, else none."""
    pk = [i for i, f in enumerate(flags) if f & PRI_KEY_FLAG]
    if pk:
        return pk
    for i, f in enumerate(flags):
        if f & UNIQUE_KEY_FLAG:
            return [i]
    return []


def _struct(columns: Sequence[ColumnCodec], optional: bool, name: str) -> JsonObject:
    fields = []
    for c in columns:
        f = dict(c.schema)
        f["field"] = c.name
        fields.append(f)
    return {"type": "struct", "fields": fields, "optional": optional, "name": name}


def transaction_block_schema() -> JsonObject:
    return {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
    }


@dataclass(frozen=True)
class TableSchemas:
    key: JsonObject | None
    value: JsonObject
    envelope: JsonObject


def build_schemas(
    schema_base: str,
    columns: Sequence[ColumnCodec],
    key_columns: Sequence[ColumnCodec],
    tx_block: JsonObject | None = None,
) -> TableSchemas:
    """Schemas named ``<base>.Key``, ``<base>.Value`` and ``<base>.Envelope``.

    ``tx_block`` replaces the ``transaction`` block schema (ordered metadata, ``RemoveField``)."""
    key = _struct(key_columns, False, f"{schema_base}.Key") if key_columns else None
    value = _struct(columns, True, f"{schema_base}.Value")
    before = dict(value)
    before["field"] = "before"
    after = dict(value)
    after["field"] = "after"
    source = source_schema()
    source["field"] = "source"
    tx = dict(tx_block) if tx_block is not None else transaction_block_schema()
    tx["field"] = "transaction"
    envelope = {
        "type": "struct",
        "fields": [
            before,
            after,
            source,
            tx,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
        "optional": False,
        "name": f"{schema_base}.Envelope",
        "version": ENVELOPE_VERSION,
    }
    return TableSchemas(key, value, envelope)
