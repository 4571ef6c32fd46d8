"""The ``source`` block of a change event (``io.debezium.connector.vitess.Source``).

Field order follows the connector's struct maker on top of Debezium core's common
source schema: version, connector, name, ts_ms, snapshot, db, sequence, ts_us, ts_ns,
keyspace, table, shard, vgtid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import orjson

from cdcworker.events.jsonfmt import dumps, json_string_body
from cdcworker.events.types import as_field, connect_schema
from cdcworker.jsontypes import JsonObject

SOURCE_SCHEMA_NAME = "io.debezium.connector.vitess.Source"
# Debezium core's SnapshotRecord values, lower-cased, in declaration order.
SNAPSHOT_ALLOWED = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"


def source_schema() -> JsonObject:
    """Connect schema of the source block (JsonConverter key order)."""
    s = "string"
    fields = [
        as_field(connect_schema(s, False), "version"),
        as_field(connect_schema(s, False), "connector"),
        as_field(connect_schema(s, False), "name"),
        as_field(connect_schema("int64", False), "ts_ms"),
        as_field(
            connect_schema(s, True, "io.debezium.data.Enum", 1, {"allowed": SNAPSHOT_ALLOWED}, default="false"),
            "snapshot",
        ),
        as_field(connect_schema(s, False), "db"),
        as_field(connect_schema(s, True), "sequence"),
        as_field(connect_schema("int64", True), "ts_us"),
        as_field(connect_schema("int64", True), "ts_ns"),
        as_field(connect_schema(s, False), "keyspace"),
        as_field(connect_schema(s, False), "table"),
        as_field(connect_schema(s, False), "shard"),
        as_field(connect_schema(s, False), "vgtid"),
    ]
    return {"type": "struct", "fields": fields, "optional": False, "name": SOURCE_SCHEMA_NAME, "version": 1}


@dataclass
class SourceContext:
    """Per-transaction facts for the source block; create one per BEGIN/VGTID change.

    ``commit_seconds`` is the COMMIT event's timestamp (whole seconds): Debezium stamps
    every row of the transaction with it. ``vgtid`` is the JSON text of the *current*
    VGTID (including ``table_p_ks`` during a copy).
    """

    keyspace: str
    shard: str
    commit_seconds: int
    vgtid: str
    snapshot: str | None = None  # None: unset, as the Vitess connector leaves it while streaming
    _cache: dict[str, orjson.Fragment] = field(default_factory=dict, repr=False)
    # The VGTID as a JSON string body, when the caller has it (StreamProcessor joins it from
    # each shard's); else made once by vgtid_body().
    vgtid_escaped: bytes | None = field(default=None, repr=False)

    def fragment(self, version: str, logical_name: str, table: str, unset_snapshot: str | None = "false") -> orjson.Fragment:
        """The source block as pre-serialized JSON, cached per table for this context.

        ``unset_snapshot``: what an unset ``snapshot`` is written as. JsonConverter writes a null
        field as its schema default ("false") unless ``value.converter.replace.null.with.default``
        is false; then it stays null (Debezium 3.5's bytes, tests/conformance/worker/test_conformance_debezium.py).
        """
        frag = self._cache.get(table)
        if frag is None:
            s = self.commit_seconds
            snapshot = unset_snapshot if self.snapshot is None else self.snapshot
            template = source_template(version, logical_name, snapshot, self.keyspace, table, self.shard)
            frag = orjson.Fragment(template % (s * 1000, s * 1_000_000, s * 1_000_000_000, self.vgtid_body()))
            self._cache[table] = frag
        return frag

    def vgtid_body(self) -> bytes:
        """The VGTID (the block's last field) as a JSON string body, made once per context: over
        64 shards it is ~7 KB of escaped quotes, which the JSON writer and its escape fix-up
        (``fix_escapes``) took ~10 us per transaction to go through."""
        body = self.vgtid_escaped
        if body is None:
            body = self.vgtid_escaped = json_string_body(self.vgtid)
        return body

    def source_parts(self, version: str, logical_name: str, table: str, unset_snapshot: str | None = "false") -> tuple[bytes, ...]:
        """``fragment``'s block as ``source_parts`` (the native producer writes the times and the
        VGTID body between them: ``Producer.send_rows_src``)."""
        snapshot = unset_snapshot if self.snapshot is None else self.snapshot
        return source_parts(version, logical_name, snapshot, self.keyspace, table, self.shard)


@functools.lru_cache(maxsize=4096)
def source_parts(version: str, logical_name: str, snapshot: str | None, keyspace: str, table: str, shard: str) -> tuple[bytes, ...]:
    """The source block's bytes in five parts, around its ts_ms, ts_us, ts_ns and the VGTID's
    JSON string body: only those change from one transaction to the next. Each string is
    written by ``dumps``, as the whole block was."""
    return (b'{"version":' + dumps(version) + b',"connector":"vitess","name":' + dumps(logical_name) + b',"ts_ms":',
            b',"snapshot":' + dumps(snapshot) + b',"db":"","sequence":null,"ts_us":',
            b',"ts_ns":',
            b',"keyspace":' + dumps(keyspace) + b',"table":' + dumps(table) + b',"shard":' + dumps(shard) + b',"vgtid":"',
            b'"}')


@functools.lru_cache(maxsize=4096)
def source_template(version: str, logical_name: str, snapshot: str | None, keyspace: str, table: str, shard: str) -> bytes:
    """``source_parts`` joined by ``%d`` for ts_ms, ts_us and ts_ns and ``%b`` for the VGTID's
    JSON string body, each part's ``%`` doubled: a commit formats one template instead of
    serialising a dict through ``dumps`` and its escape fix-up (with the envelope tails' own
    change, 46 -> 32 us per one-row transaction: bench/processor_micro.py --per-txn 1)."""
    p = [part.replace(b"%", b"%%") for part in source_parts(version, logical_name, snapshot, keyspace, table, shard)]
    return p[0] + b"%d" + p[1] + b"%d" + p[2] + b"%d" + p[3] + b"%b" + p[4]
