"""Column-level options, compiled once per FIELD event into the table's plan.

``column.include.list`` / ``column.exclude.list``, ``column.truncate.to.N.chars``,
``column.mask.with.N.chars``, ``message.key.columns``, ``column.propagate.source.type`` /
``datatype.propagate.source.type``, ``field.name.adjustment.mode`` and ``skipped.operations`` all
act on a column (or an operation) that is known when the FIELD event arrives. ``FilterPolicy.plan``
rewrites the column codecs (wrapped converter, extra schema parameters, new name, dropped) and
the key columns before the plan is built, so encoding a row costs nothing extra. Only two options
need per-row work, and only for the tables they touch: a key column excluded from the value (the
key still carries it, as in Debezium) and skipped operations; those tables get a ``FilteredTablePlan``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from cdcworker.events import native
from cdcworker.events.encoder import PK_UPDATE_NEWKEY, PK_UPDATE_OLDKEY, EncoderConfig, TablePlan
from cdcworker.events.schema import build_schemas
from cdcworker.events.types import (
    BINARY,
    BLOB,
    CHAR,
    DATETIME,
    ENUM,
    JSON,
    SET,
    TEXT,
    TIME,
    TIMESTAMP,
    VARBINARY,
    VARCHAR,
    ColumnCodec,
    FieldLike,
)
from cdcworker.filters.names import NameAdjustment, adjuster
from cdcworker.filters.tables import TableFilter
from cdcworker.jsontypes import JsonObject, JsonValue

if TYPE_CHECKING:
    from cdcworker.config import BehaviourConfig, FilterConfig

Patterns = tuple[re.Pattern[str], ...]

# Debezium's PropagateSourceTypeToSchemaParameter parameters, in the order it sets them (then the
# column name). The Vitess connector's columns carry the VStream type name (VARCHAR, INT64, ...);
# the temporal types also a length (their fractional-second precision, FIELD ``decimals``).
TYPE_NAME_PARAMETER = "__debezium.source.column.type"
TYPE_LENGTH_PARAMETER = "__debezium.source.column.length"
COLUMN_NAME_PARAMETER = "__debezium.source.column.name"
# MaskStrings replaces values (NULL included) only of character JDBC types; the Vitess connector
# maps these VStream types to Types.VARCHAR (VitessType.resolve). Binary types keep their value.
_MASKABLE_TYPES = {VARCHAR, CHAR, TEXT, ENUM, SET, JSON}
_BINARY_TYPES = {BLOB, VARBINARY, BINARY}
_TEMPORAL_TYPES = {DATETIME, TIMESTAMP, TIME}
_OPS = ("c", "u", "d")


@dataclass
class FilterStats:
    """Events dropped by table filters and skipped operations (Debezium's NumberOfEventsFiltered)."""

    filtered: int = 0


def _type_name(field_type: int) -> str:
    from vitessapi import query_pb2

    try:
        return str(query_pb2.Type.Name(field_type))
    except ValueError:
        return str(field_type)


def _with_parameters(schema: JsonObject, extra: dict[str, str]) -> JsonObject:
    """Add schema parameters keeping JsonConverter's member order (parameters before default)."""
    params = dict(schema.get("parameters") or {})
    params.update(extra)
    out: JsonObject = {}
    for k in ("type", "optional", "name", "version"):
        if k in schema:
            out[k] = schema[k]
    out["parameters"] = params
    for k, v in schema.items():
        if k not in out:
            out[k] = v
    return out


def _java_truncate(n: int) -> Callable[[JsonValue], JsonValue]:
    """``String.substring(0, n)``: Java counts UTF-16 code units, so astral characters count twice."""

    def cut(v: object) -> JsonValue:
        if not isinstance(v, str) or len(v) * 2 <= n:
            return v
        if v.isascii() or all(ord(c) < 0x10000 for c in v):
            return v if len(v) <= n else v[:n]
        units = v.encode("utf-16-le")
        if len(units) <= 2 * n:
            return v
        return units[: 2 * n].decode("utf-16-le", "ignore")

    return cut


def _java_truncate_bytes(n: int) -> Callable[[JsonValue], JsonValue]:
    """Truncation of a binary column in ``bytes`` mode (its values are base64 text here): Debezium
    cuts the value to ``n`` bytes (seen against 3.5.0: ``BINARY(4) x'00ff1000'`` → ``x'00ff10'``).
    In the other binary modes the emitted text is cut like any string."""

    def cut(v: object) -> JsonValue:
        if not isinstance(v, str) or len(v) * 3 // 4 <= n:
            return v
        raw = base64.b64decode(v)
        return v if len(raw) <= n else base64.b64encode(raw[:n]).decode()

    return cut


def _mask(value: str) -> Callable[[JsonValue], JsonValue]:
    def mask(_v: object) -> str:
        return value  # NULL included: MaskingValueConverter ignores its input

    return mask


@dataclass(frozen=True, slots=True)
class _Mapping:
    """What Debezium's one matching ColumnMapper does to a column's value field."""

    schema: JsonObject
    value: Callable[[JsonValue], JsonValue] | None = None  # applied to the converted value (None: unchanged)
    nulls: bool = False  # ``value`` also replaces NULL (masking)


class CaptureFilter(Protocol):
    """What the stream processor asks of the table filter (``FilterPolicy`` is the implementation):
    is a table captured, and where dropped events are counted (NumberOfEventsFiltered)."""

    stats: FilterStats

    def captures(self, keyspace: str, table: str) -> bool: ...


@dataclass
class FilterPolicy:
    """Table, column and operation options of one connector, ready to be applied per FIELD."""

    tables: TableFilter = field(default_factory=TableFilter)
    column_include: Patterns = ()
    column_exclude: Patterns = ()
    truncate: tuple[tuple[int, Patterns], ...] = ()
    mask: tuple[tuple[int, Patterns], ...] = ()
    # message.key.columns: (table regex, column regexes in the configured order)
    key_columns: tuple[tuple[re.Pattern[str], Patterns], ...] = ()
    propagate_columns: Patterns = ()
    propagate_types: Patterns = ()
    skipped_operations: frozenset[str] = frozenset()
    schema_name_mode: str = "none"
    field_name_mode: str = "none"
    stats: FilterStats = field(default_factory=FilterStats)

    @classmethod
    def from_config(cls, filters: FilterConfig, behaviour: BehaviourConfig) -> FilterPolicy:
        """From ``WorkerConfig.filters`` and ``.behaviour``."""
        return cls(
            tables=TableFilter(tuple(filters.table_include), tuple(filters.table_exclude)),
            column_include=tuple(filters.column_include),
            column_exclude=tuple(filters.column_exclude),
            truncate=tuple(filters.column_truncate),
            mask=tuple(filters.column_mask),
            key_columns=tuple((t, tuple(cols)) for t, cols in filters.message_key_columns),
            propagate_columns=tuple(filters.column_propagate_source_type),
            propagate_types=tuple(filters.datatype_propagate_source_type),
            skipped_operations=frozenset(o for o in filters.skipped_operations if o in _OPS),
            schema_name_mode=behaviour.schema_name_adjustment_mode,
            field_name_mode=behaviour.field_name_adjustment_mode,
        )

    @property
    def touches_columns(self) -> bool:
        return bool(
            self.column_include
            or self.column_exclude
            or self.truncate
            or self.mask
            or self.key_columns
            or self.propagate_columns
            or self.propagate_types
            or self.skipped_operations
            or self.schema_name_mode != NameAdjustment.NONE
            or self.field_name_mode != NameAdjustment.NONE
        )

    def captures(self, keyspace: str, table: str) -> bool:
        return self.tables.included(keyspace, table)

    # --- per FIELD event ------------------------------------------------------------------------

    def _key_indexes(self, names: tuple[str, ...], fields: Sequence[FieldLike], default: list[int]) -> list[int]:
        """``message.key.columns``: the columns in the configured order (Debezium's CustomKeyMapper)."""
        for table_re, cols in self.key_columns:
            if any(table_re.fullmatch(n) for n in names):
                chosen: list[int] = []
                for c in cols:
                    chosen.extend(i for i, f in enumerate(fields) if c.fullmatch(f.name) and i not in chosen)
                if chosen:
                    return chosen
        return default

    def plan(
        self,
        keyspace: str,
        shard: str,
        table: str,
        topic: str,
        fields: Sequence[FieldLike],
        codecs: Sequence[ColumnCodec | None],
        key_indexes: Sequence[int],
        cfg: EncoderConfig,
    ) -> TablePlan:
        """The table's plan with every column option applied."""
        # Debezium matches column options against the TableId with and without the shard
        # (the connector's catalog): "ks.t.col" and "<shard>.ks.t.col".
        prefixes = (f"{keyspace}.{table}.", f"{shard}.{keyspace}.{table}.")
        out: list[ColumnCodec | None] = list(codecs)  # decoding (and key) codecs
        value_schemas: dict[int, JsonObject] = {}  # value-only schema changes of key columns
        post: list[tuple[str, Callable[[JsonValue], JsonValue], bool]] = []  # value-only per-row changes
        hidden: list[str] = []
        native_ok = True  # the native row encoder can still be used (FilteredTablePlan)
        keys = list(key_indexes)
        if self.key_columns:
            keys = self._key_indexes((f"{keyspace}.{table}", f"{shard}.{keyspace}.{table}"), fields, keys)
        rename = adjuster(self.field_name_mode)
        for i, (f, codec) in enumerate(zip(fields, codecs, strict=True)):
            if codec is None:
                continue
            names = tuple(p + f.name for p in prefixes)
            if (self.column_include and not _any(self.column_include, names)) or _any(self.column_exclude, names):
                if i not in keys:
                    out[i] = None  # the decoder skips its bytes
                    continue
                hidden.append(codec.name)  # the key keeps it; the value does not
            m = self._mapping(f, names, prefixes, codec)
            if m is None:
                continue
            if i in keys:
                # Keys are built without column mappers (TableSchemaBuilder): the option acts on
                # the value only, after the key was made from the plain value.
                value_schemas[i] = m.schema
                if m.value is not None:
                    post.append((codec.name, m.value, m.nulls))
                    native_ok = False
            elif m.nulls and m.value is not None:
                # Masking: the converter masks values; NULL never reaches a converter, so the
                # plan also masks NULLs in the row images.
                out[i] = replace(codec, convert=_const_conv(m.value(None)), schema=m.schema)
                post.append((codec.name, m.value, True))
            else:
                conv = codec.convert if m.value is None else _then(codec.convert, m.value)
                out[i] = replace(codec, convert=conv, schema=m.schema)
        if rename is not None:
            out = [replace(c, name=rename(c.name)) if c is not None else None for c in out]
            hidden = [rename(h) for h in hidden]
            post = [(rename(n), fn, nulls) for n, fn, nulls in post]
        schema_rename = adjuster(self.schema_name_mode)
        base = schema_rename(topic) if schema_rename is not None else topic
        if hidden or self.skipped_operations or base != topic or post or value_schemas:
            value_codecs = [
                replace(c, schema=value_schemas[i]) if c is not None and i in value_schemas else c
                for i, c in enumerate(out)
            ]
            return FilteredTablePlan(
                keyspace, shard, table, topic, out, keys, cfg,
                hidden=tuple(hidden), skipped=self.skipped_operations, stats=self.stats, schema_base=base,
                value_codecs=value_codecs, post=tuple(post), native_ok=native_ok and not hidden,
            )
        return TablePlan(keyspace, shard, table, topic, out, keys, cfg)

    def _mapping(
        self, f: FieldLike, names: tuple[str, ...], prefixes: tuple[str, ...], codec: ColumnCodec
    ) -> _Mapping | None:
        """Debezium's ColumnMappers: the FIRST matching rule wins, in the order truncate rules,
        mask rules, ``column.propagate.source.type``, ``datatype.propagate.source.type``."""
        schema = codec.schema
        ftype = int(f.type)
        # Column.length(): only the temporal types carry one (their precision) in the Vitess connector.
        length = int(f.decimals) if ftype in _TEMPORAL_TYPES else -1
        for n, pats in self.truncate:
            if _any(pats, names):
                if not (length < 0 or length > n):
                    return None  # TruncateStrings: truncation impossible, no parameter
                cut: Callable[[JsonValue], JsonValue] | None = None
                if ftype in _BINARY_TYPES and schema.get("type") == "bytes":
                    cut = _java_truncate_bytes(n)
                elif schema.get("type") == "string":
                    cut = _java_truncate(n)
                return _Mapping(_with_parameters(schema, {"truncateLength": str(n)}), cut)
        for n, pats in self.mask:
            if _any(pats, names):
                masked = _with_parameters(schema, {"masked": "true"})
                if ftype in _MASKABLE_TYPES and schema.get("type") == "string":
                    return _Mapping(masked, _mask("*" * n), nulls=True)
                return _Mapping(masked)
        if self.propagate_columns or self.propagate_types:
            tname = _type_name(ftype).upper()
            types = tuple(p + tname for p in prefixes)  # "<ks>.<t>.<TYPE>" (ColumnMappers.mapByDatatype)
            if _any(self.propagate_columns, names) or _any(self.propagate_types, types):
                params = {TYPE_NAME_PARAMETER: tname}
                if length >= 0:
                    params[TYPE_LENGTH_PARAMETER] = str(length)
                params[COLUMN_NAME_PARAMETER] = f.name
                return _Mapping(_with_parameters(schema, params))
        return None


def _any(patterns: Patterns, names: tuple[str, ...]) -> bool:
    return any(p.fullmatch(n) for p in patterns for n in names)


def _const_conv(value: object) -> Callable[[bytes], JsonValue]:
    def conv(_raw: bytes) -> JsonValue:
        return value

    return conv


def converter_codes() -> tuple[Any, Any, Any]:  # Any: code objects (types.CodeType), compared by identity
    """The code of the column-option converters (a constant, a chain, a truncation), by which the
    native encoder recognises them (``events.native``)."""
    then = _then(_const_conv(None), _java_truncate(1))
    return _const_conv(None).__code__, then.__code__, _java_truncate(1).__code__


def _then(first: Callable[[bytes], JsonValue], then: Callable[[JsonValue], JsonValue]) -> Callable[[bytes], JsonValue]:
    def conv(raw: bytes) -> JsonValue:
        return then(first(raw))

    return conv


class FilteredTablePlan(TablePlan):
    """A plan for a table that needs per-row work: hidden key columns, value-only column
    mappings (masking, mapped key columns), skipped operations, or an adjusted schema name."""

    __slots__ = ("_hidden", "_post", "_skipped", "_stats")

    def __init__(
        self,
        keyspace: str,
        shard: str,
        table: str,
        topic: str,
        codecs: Sequence[ColumnCodec | None],
        key_indexes: Sequence[int],
        cfg: EncoderConfig,
        *,
        hidden: tuple[str, ...],
        skipped: frozenset[str],
        stats: FilterStats,
        schema_base: str,
        value_codecs: Sequence[ColumnCodec | None] | None = None,
        post: tuple[tuple[str, Callable[[JsonValue], JsonValue], bool], ...] = (),
        native_ok: bool = False,
    ) -> None:
        super().__init__(keyspace, shard, table, topic, codecs, key_indexes, cfg)
        self._hidden = hidden
        self._skipped = skipped
        self._stats = stats
        self._post = post
        shown = value_codecs if value_codecs is not None else self.codecs
        kept = [c for c in shown if c is not None and c.name not in hidden]
        key_cols = [c for i in key_indexes if (c := self.codecs[i]) is not None]
        self.schemas = build_schemas(schema_base, kept, key_cols, cfg.tx_block_schema)
        self._set_prefixes(cfg)
        # Only masks of value columns: their converters mask, and the native program's OP_CONST
        # masks NULLs too, so its images are exact and send_rows' C loop can write them.
        if native_ok and all(nulls for _, _, nulls in post):
            self._native = native.program(self._names, self._convs, key_indexes, self._key_prefix)

    @property
    def sends_natively(self) -> bool:
        """Skipped operations are decided per record in ``encode_change``: not in the C loop."""
        return self._native is not None and not self._skipped

    def _image(self, row: JsonObject) -> JsonObject:
        hidden = self._hidden
        if hidden:
            row = {k: v for k, v in row.items() if k not in hidden}
        elif self._post:
            row = dict(row)  # the key was (or will be) built from the unmapped values
        for name, fn, nulls in self._post:
            v = row.get(name)
            if v is not None or nulls:
                row[name] = fn(v)
        return row

    def _value(self, before: Any, after: Any, *args: Any, **kwargs: Any) -> bytes:  # Any: passed on unchanged to TablePlan's method of the same name
        if self._hidden or self._post:
            if before is not None:
                before = self._image(before)
            if after is not None:
                after = self._image(after)
        return super()._value(before, after, *args, **kwargs)

    def encode_change(self, rc: Any, *args: Any, **kwargs: Any) -> list[Any]:  # Any: passed on unchanged to TablePlan's method of the same name
        out = super().encode_change(rc, *args, **kwargs)
        skipped = self._skipped
        if not skipped or not out:
            return out
        has_before = rc.HasField("before")
        has_after = rc.HasField("after")
        if has_after and not has_before:
            op = args[2] if len(args) > 2 else kwargs.get("insert_op", "c")
            drop = op in skipped  # snapshot reads ("r") are never skipped
        elif has_before and not has_after:
            drop = "d" in skipped
        else:
            first = out[0].headers
            if not first or first[0][0] not in (PK_UPDATE_NEWKEY, PK_UPDATE_OLDKEY):
                drop = "u" in skipped
            else:
                # Key change: delete (+ tombstone) then create, each skippable on its own (Debezium core).
                keep = []
                for rec in out:
                    op = "d" if rec.headers[0][0] == PK_UPDATE_NEWKEY else "c"
                    if op in skipped:
                        if rec.value is not None:
                            self._stats.filtered += 1
                    else:
                        keep.append(rec)
                return keep
        if drop:
            self._stats.filtered += 1
            return []
        return out
