"""Native equivalents of the Vitess connector's size-reducing SMTs.

Debezium applies them to every ``SourceRecord`` after it is built; we apply their effect while
building, so nothing is serialized twice:

* ``FilterTransactionTopicRecords`` drops every record whose key and value schemas are the
  transaction metadata schemas, i.e. the BEGIN/END records. → ``TransactionMonitor`` does not build
  them (``TxMetaOptions.emit_boundaries=False``); counters and offsets are unaffected.
* ``RemoveField`` (``field_names``, full dotted paths such as ``transaction.id``) removes non-struct
  fields from the value schema and payload; struct fields themselves are never removed, only
  descended into, and every struct schema is rebuilt with only its name, version and optionality.
  → ``remove_fields_schema`` / ``remove_fields_payload`` for generic values, and the ``exclude``
  argument of ``transaction_block_schema`` / ``transaction_block_payload`` for the hot path.
* ``UseLocalVgtid`` replaces ``source.vgtid`` of records that have a ``source`` block (data and
  schema-change events, not transaction or heartbeat records, not tombstones) by the VGTID of
  ``source.shard`` alone. → ``local_vgtid_json`` builds the text once per (VGTID, shard).
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets.vgtid import Vgtid

if TYPE_CHECKING:
    from cdcworker.config.model import WorkerConfig

__all__ = [
    "SizeReduction",
    "block_exclusions",
    "local_vgtid_json",
    "remove_fields_payload",
    "remove_fields_schema",
]


@functools.lru_cache(maxsize=512)
def local_vgtid_json(vgtid_json: str, shard: str) -> str:
    """``Vgtid.of(vgtid).getLocalVgtid(shard).toString()``: a one-element VGTID, same field layout."""
    sg = Vgtid.from_json(vgtid_json).get(shard)
    if sg is None:
        # Debezium fails here too (List.of(null) throws).
        raise ValueError(f"shard {shard!r} is not in the VGTID {vgtid_json}")
    return Vgtid((sg,)).to_json()


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def remove_fields_schema(
    schema: JsonMapping, paths: Collection[str], _prefix: str = ""
) -> JsonObject:
    """A struct schema (JsonConverter JSON form) as ``RemoveField`` rebuilds it."""
    fields = []
    for f in schema["fields"]:
        full = _path(_prefix, f["field"])
        if f["type"] == "struct":
            fields.append(remove_fields_schema(f, paths, full))
        elif full not in paths:
            fields.append(f)
    out: JsonObject = {"type": "struct", "fields": fields, "optional": schema["optional"]}
    # SchemaBuilder.struct().version(v).name(n): doc, parameters and default are not carried over.
    if schema.get("name") is not None:
        out["name"] = schema["name"]
    if schema.get("version") is not None:
        out["version"] = schema["version"]
    if "field" in schema:
        out["field"] = schema["field"]
    return out


def remove_fields_payload(
    value: JsonMapping, schema: JsonMapping, paths: Collection[str], _prefix: str = ""
) -> JsonObject:
    """The payload of a struct under the *original* ``schema``, with ``paths`` removed."""
    out: JsonObject = {}
    for f in schema["fields"]:
        name = f["field"]
        full = _path(_prefix, name)
        v = value.get(name)
        if f["type"] == "struct":
            out[name] = None if v is None else remove_fields_payload(v, f, paths, full)
        elif full not in paths:
            out[name] = v
    return out


def block_exclusions(paths: Collection[str], block: str = "transaction") -> frozenset[str]:
    """Names of the ``transaction`` block fields that ``RemoveField`` paths remove."""
    head = block + "."
    return frozenset(p[len(head) :] for p in paths if p.startswith(head) and "." not in p[len(head) :])


@dataclass(frozen=True, slots=True)
class SizeReduction:
    """The three SMTs as flags (built from ``transforms.*``)."""

    filter_transaction_records: bool = False
    remove_fields: frozenset[str] = frozenset()
    use_local_vgtid: bool = False

    @classmethod
    def from_config(cls, cfg: WorkerConfig) -> SizeReduction:
        t = cfg.transforms
        return cls(t.filter_transaction_topic_records, frozenset(t.remove_fields), t.use_local_vgtid)

    @property
    def transaction_block_exclusions(self) -> frozenset[str]:
        return block_exclusions(self.remove_fields)

    def source_vgtid(self, vgtid_json: str, shard: str) -> str:
        """The ``source.vgtid`` text to write for an event of ``shard``."""
        return local_vgtid_json(vgtid_json, shard) if self.use_local_vgtid else vgtid_json
