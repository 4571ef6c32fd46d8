"""Connect schemas of transaction metadata, in JsonConverter's key order.

* Transaction topic key: ``io.debezium.connector.common.TransactionMetadataKey`` v1 ``{id}``.
* Transaction topic value: ``io.debezium.connector.common.TransactionMetadataValue`` v1 with fields
  ``status``, ``id``, ``event_count`` (optional), ``data_collections`` (optional array of the optional
  struct ``event.collection`` v1 ``{data_collection, event_count}``) and ``ts_ms`` — that order, so a
  BEGIN value is ``{"status":"BEGIN","id":…,"event_count":null,"data_collections":null,"ts_ms":…}``.
* The ``transaction`` block of a data event: optional struct ``event.block`` v1 with ``id``,
  ``total_order``, ``data_collection_order``; the ordered factory adds ``transaction_epoch`` (int64)
  and ``transaction_rank`` (``org.apache.kafka.connect.data.Decimal`` with scale 0).
"""

from __future__ import annotations

from collections.abc import Collection

from cdcworker.events.types import as_field, connect_schema
from cdcworker.jsontypes import JsonObject

__all__ = [
    "DECIMAL_SCHEMA_NAME",
    "TRANSACTION_BLOCK_SCHEMA_NAME",
    "TRANSACTION_KEY_SCHEMA_NAME",
    "TRANSACTION_VALUE_SCHEMA_NAME",
    "transaction_block_schema",
    "transaction_key_schema",
    "transaction_value_schema",
]

TRANSACTION_KEY_SCHEMA_NAME = "io.debezium.connector.common.TransactionMetadataKey"
TRANSACTION_VALUE_SCHEMA_NAME = "io.debezium.connector.common.TransactionMetadataValue"
TRANSACTION_BLOCK_SCHEMA_NAME = "event.block"
EVENT_COUNT_COLLECTION_SCHEMA_NAME = "event.collection"
DECIMAL_SCHEMA_NAME = "org.apache.kafka.connect.data.Decimal"


def transaction_key_schema() -> JsonObject:
    return {
        "type": "struct",
        "fields": [as_field(connect_schema("string", False), "id")],
        "optional": False,
        "name": TRANSACTION_KEY_SCHEMA_NAME,
        "version": 1,
    }


def transaction_value_schema() -> JsonObject:
    per_collection = {
        "type": "struct",
        "fields": [
            as_field(connect_schema("string", False), "data_collection"),
            as_field(connect_schema("int64", False), "event_count"),
        ],
        "optional": True,
        "name": EVENT_COUNT_COLLECTION_SCHEMA_NAME,
        "version": 1,
    }
    return {
        "type": "struct",
        "fields": [
            as_field(connect_schema("string", False), "status"),
            as_field(connect_schema("string", False), "id"),
            as_field(connect_schema("int64", True), "event_count"),
            {"type": "array", "items": per_collection, "optional": True, "field": "data_collections"},
            as_field(connect_schema("int64", False), "ts_ms"),
        ],
        "optional": False,
        "name": TRANSACTION_VALUE_SCHEMA_NAME,
        "version": 1,
    }


def transaction_block_schema(ordered: bool = False, exclude: Collection[str] = ()) -> JsonObject:
    """The envelope's ``transaction`` field schema (without the ``"field"`` key).

    ``exclude`` names block fields removed by Debezium's ``RemoveField`` (``transaction.id`` →
    ``"id"``); that SMT rebuilds the struct with the same name, version and optionality.
    """
    candidates = [
        as_field(connect_schema("string", False), "id"),
        as_field(connect_schema("int64", False), "total_order"),
        as_field(connect_schema("int64", False), "data_collection_order"),
    ]
    if ordered:
        candidates.append(as_field(connect_schema("int64", False), "transaction_epoch"))
        candidates.append(
            as_field(connect_schema("bytes", False, DECIMAL_SCHEMA_NAME, 1, {"scale": "0"}), "transaction_rank")
        )
    fields = [f for f in candidates if f["field"] not in exclude]
    return {
        "type": "struct",
        "fields": fields,
        "optional": True,
        "name": TRANSACTION_BLOCK_SCHEMA_NAME,
        "version": 1,
    }
