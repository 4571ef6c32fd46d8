"""Hot path: ROW changes → Kafka records (topic, key bytes, value bytes, headers).

A ``TablePlan`` is compiled once per FIELD event. It holds one converter per column,
the key column names, the topic and the pre-serialized schemas, so that encoding a row
is: slice the values by ``lengths``, convert, build two small dicts and let orjson write
them with the schema JSON spliced in as a fragment.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from cdcworker.events import native
from cdcworker.events.jsonfmt import dumps, fix_escapes
from cdcworker.events.schema import TableSchemas, build_schemas, select_key_columns
from cdcworker.events.source import SourceContext
from cdcworker.events.topics import TopicNaming
from cdcworker.events.types import ColumnCodec, Converter, FieldLike, TypeOptions, plan_column
from cdcworker.jsontypes import JsonObject

# source.version: the Debezium release whose records ours are byte-identical to
# (tests/conformance/worker/test_conformance_debezium.py; docs/conformance.md says why this value).
DEBEZIUM_VERSION = "3.5.0.Final"
# Module.name() of the Vitess connector: Debezium's __debezium.context.connectorName header.
CONNECTOR_PLUGIN_NAME = "vitess"
PK_UPDATE_NEWKEY = "__debezium.newkey"
PK_UPDATE_OLDKEY = "__debezium.oldkey"
CONTEXT_HEADER_PREFIX = "__debezium.context."

Headers = list[tuple[str, bytes]]


class OutRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers


class RowLike(Protocol):
    lengths: Sequence[int]
    values: bytes


class TablePlanner(Protocol):
    """Plans a table instead of ``TablePlan.from_field`` (``cdcworker.filters.FilterPolicy``:
    column options, skipped operations, name adjustment)."""

    def plan(self, keyspace: str, shard: str, table: str, topic: str, fields: Sequence[FieldLike],
             codecs: Sequence[ColumnCodec | None], key_indexes: Sequence[int], cfg: EncoderConfig) -> TablePlan: ...


class RowChangeLike(Protocol):
    def HasField(self, name: str) -> bool: ...

    @property
    def before(self) -> RowLike: ...

    @property
    def after(self) -> RowLike: ...


class FieldEventLike(Protocol):
    table_name: str
    keyspace: str
    shard: str
    enum_set_string_values: bool

    @property
    def fields(self) -> Sequence[FieldLike]: ...


# Transaction metadata hook: data collection id -> the record's ``transaction`` block (None: drop it).
TxBlocks = Callable[[str], "orjson.Fragment | None"]


class ColumnCountMismatch(ValueError):
    """A ROW does not have as many columns as the table's last FIELD event."""


def new_run_id(now_ms: int | None = None) -> str:
    """A task run's id, made as Debezium's ``UUIDUtils.generateNewUUID``: a version-7 UUID.

    48 bits of Unix milliseconds, version 7, 12 random bits, the RFC 4122 variant, 62 random
    bits; one per task run (``CdcSourceTaskContext.runId``), rendered by ``UUID.toString``.
    """
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    msb = ((ms << 16) & 0xFFFF_FFFF_FFFF_0000) | 0x7000 | (secrets.randbits(12))
    lsb = (1 << 63) | secrets.randbits(62)
    return str(uuid.UUID(int=(msb << 64) | lsb))


def context_headers(
    logical_name: str, task_id: str, connector_name: str = CONNECTOR_PLUGIN_NAME, run_id: str | None = None
) -> Headers:
    """``__debezium.context.*`` headers, values as Connect's SimpleHeaderConverter writes strings.

    Order and sources as ``DebeziumHeaderProducer.contextHeaders``: ``topic.prefix``, the task
    id, the connector *plugin* name (``vitess``, not the ``name`` property) and the run id.
    """
    items = [
        ("connectorLogicalName", logical_name),
        ("taskId", task_id),
        ("connectorName", connector_name),
    ]
    if run_id is not None:
        items.append(("runId", run_id))
    return [(CONTEXT_HEADER_PREFIX + k, v.encode()) for k, v in items]


@dataclass(frozen=True)
class EncoderConfig:
    """Settings the encoder needs; the worker builds this once from its configuration."""

    logical_name: str  # topic.prefix; also source.name
    naming: TopicNaming | None = None
    types: TypeOptions = field(default_factory=TypeOptions)
    key_schemas_enable: bool = True  # key.converter.schemas.enable
    value_schemas_enable: bool = True  # value.converter.schemas.enable
    tombstones_on_delete: bool = True
    replace_null_with_default: bool = True  # value.converter.replace.null.with.default
    headers: tuple[tuple[str, bytes], ...] = ()  # e.g. context_headers(...)
    version: str = DEBEZIUM_VERSION
    # The envelope's ``transaction`` block schema when transaction metadata changes it
    # (ordered factory, RemoveField); None = Debezium's default block.
    tx_block_schema: JsonObject | None = None
    # cdcworker.filters.FilterPolicy when column options / skipped operations / name adjustment
    # are configured: it plans the table instead (once per FIELD; None = no per-row cost at all).
    policy: TablePlanner | None = None

    def topic_naming(self) -> TopicNaming:
        return self.naming or TopicNaming(self.logical_name)


def _strip_keyspace(table_name: str, keyspace: str) -> str:
    # VTGate prefixes "<keyspace>." unless exclude_keyspace_from_table_name is set.
    prefix = keyspace + "."
    return table_name[len(prefix):] if keyspace and table_name.startswith(prefix) else table_name


Decoder = Callable[[Sequence[int], bytes], JsonObject]


def _compile_decoder(names: Sequence[str | None], convs: Sequence[Converter | None]) -> Decoder:
    """Generate a straight-line decoder for one table (no per-column loop on the hot path).

    Column names only appear as ``repr()`` string literals and converters as default
    arguments, so the generated source never contains untrusted code.
    """
    n = len(names)
    if n == 0:
        return lambda lengths, values: {}
    lines = [f"def decode(lengths, values, {', '.join(f'c{i}=c{i}' for i in range(n) if convs[i])}):".replace(", )", ")")]
    unpack = ", ".join(f"l{i}" for i in range(n))
    lines.append(f"    {unpack}{',' if n == 1 else ''} = lengths")
    lines.append("    p = 0")
    items = []
    for i, (name, conv) in enumerate(zip(names, convs, strict=True)):
        last = i == n - 1
        if conv is None:
            # Dropped column: still skip its bytes.
            if not last:
                lines.append(f"    if l{i} > 0: p += l{i}")
            continue
        lines.append(f"    if l{i} < 0: v{i} = None")
        lines.append("    else:")
        lines.append(f"        v{i} = c{i}(values[p:p + l{i}])")
        if not last:
            lines.append(f"        p += l{i}")
        items.append(f"{name!r}: v{i}")
    lines.append("    return {" + ", ".join(items) + "}")
    src = "\n".join(lines)
    namespace: JsonObject = {f"c{i}": c for i, c in enumerate(convs) if c is not None}
    exec(compile(src, "<cdcworker.events decoder>", "exec"), namespace)
    decode: Callable[[Sequence[int], bytes], JsonObject] = namespace["decode"]  # what src defines
    return decode


def _compile_key(names: Sequence[str]) -> Callable[[JsonObject], JsonObject]:
    """The key payload builder (literal keys: no comprehension frame per row)."""
    if not names:
        return lambda data: {}
    body = ", ".join(f"{n!r}: data[{n!r}]" for n in names)
    fn: Callable[[JsonObject], JsonObject] = eval(f"lambda data: {{{body}}}", {})
    return fn


def _envelope_tail(source: orjson.Fragment, transaction: bytes, op: str, now_ns: int) -> bytes:
    """``,"source":…,"transaction":…,"op":…,"ts_ms":…,"ts_us":…,"ts_ns":…}`` of an envelope.

    The source block is already in Jackson's escapes (``SourceContext.fragment`` writes it with
    ``jsonfmt.dumps``) and the rest is ASCII without backslashes, so only ``transaction`` is
    fixed: scanning the whole tail again cost ~6 us per transaction over 64 shards (a VGTID of
    ~7 KB, full of escaped quotes)."""
    return _tail_head(source) + fix_escapes(transaction) + _tail_end(op, now_ns)


def _tail_head(source: orjson.Fragment) -> bytes:
    """``,"source":…,"transaction":``: the envelope tail up to the transaction block."""
    return b',"source":' + orjson.dumps(source) + b',"transaction":'


def _tail_end(op: str, now_ns: int) -> bytes:
    """``,"op":…,"ts_ms":…,"ts_us":…,"ts_ns":…}``: the envelope tail after the transaction block."""
    return b',"op":"' + op.encode() + b'","ts_ms":%d,"ts_us":%d,"ts_ns":%d}' % (now_ns // 1_000_000, now_ns // 1000, now_ns)


class TablePlan:
    """Everything needed to encode rows of one (keyspace, shard, table) FIELD definition."""

    __slots__ = (
        "_convs",
        "_decode",
        "_headers",
        "_key_names",
        "_key_of",
        "_key_prefix",
        "_names",
        "_native",
        "_row_close",
        "_row_prefix",
        "_send_tails",
        "_tail",
        "_tail_key",
        "_tombstones",
        "_value_prefix",
        "codecs",
        "data_collection",
        "keyspace",
        "logical_name",
        "ncols",
        "schemas",
        "shard",
        "table",
        "topic",
        "unset_snapshot",
        "version",
    )

    def __init__(
        self,
        keyspace: str,
        shard: str,
        table: str,
        topic: str,
        codecs: Sequence[ColumnCodec | None],
        key_indexes: Sequence[int],
        cfg: EncoderConfig,
    ) -> None:
        self.keyspace = keyspace
        self.shard = shard
        self.table = table
        self.topic = topic
        self.codecs = list(codecs)
        self.ncols = len(self.codecs)
        self.logical_name = cfg.logical_name
        self.version = cfg.version
        self.unset_snapshot = "false" if cfg.replace_null_with_default else None  # source.snapshot
        self._names = [c.name if c else None for c in self.codecs]
        self._convs = [c.convert if c else None for c in self.codecs]
        kept = [c for c in self.codecs if c is not None]
        key_cols = [c for i in key_indexes if (c := self.codecs[i]) is not None]
        self._key_names = tuple(c.name for c in key_cols)
        self.schemas: TableSchemas = build_schemas(topic, kept, key_cols, cfg.tx_block_schema)
        # Debezium's data collection id of Vitess rows (TableId with the shard as catalog).
        self.data_collection = f"{shard}.{keyspace}.{table}"
        self._set_prefixes(cfg)
        self._decode = _compile_decoder(self._names, self._convs)
        self._key_of = _compile_key(self._key_names)
        # Any: a per-batch cache key (the source Fragment, op, time)
        self._tail_key: tuple[Any, str, int] | None = None  # (source, op, now_ns) of _tail
        self._tail = b""
        # Any: a per-batch cache: the source Fragment, op and time, then the tails' bytes
        self._send_tails: tuple[Any, ...] = (None, None, 0)  # (source, insert_op, now_ns) + tails of send_rows
        self._tombstones = cfg.tombstones_on_delete
        self._headers: Headers = list(cfg.headers)
        # The native column program (events/native.py), only for plans that encode rows exactly
        # as this class does (subclasses that post-process images keep the Python path).
        cls = type(self)
        self._native = (
            native.program(self._names, self._convs, key_indexes, self._key_prefix)
            if cls._value is TablePlan._value and cls.decode is TablePlan.decode and cls._key is TablePlan._key
            else None
        )

    @classmethod
    def compile(cls, fe: FieldEventLike, cfg: EncoderConfig) -> TablePlan:
        """Plan a FIELD event; columns Debezium cannot map are dropped (unless configured)."""
        table = _strip_keyspace(fe.table_name, fe.keyspace)
        fields = list(fe.fields)
        for f in fields:
            if f.name.startswith("@"):
                # vstreamer anonymised the columns (DBZ-2836); Debezium fails the same way.
                raise ValueError(f"Illegal prefix '@' for column: {f.name}, from schema: {fe.keyspace}, table: {table}")
        codecs = [plan_column(f, bool(fe.enum_set_string_values), cfg.types) for f in fields]
        keys = select_key_columns([int(f.flags) for f in fields])
        topic = cfg.topic_naming().data_topic(fe.keyspace, table, fe.shard)
        if cfg.policy is not None:
            return cfg.policy.plan(fe.keyspace, fe.shard, table, topic, fields, codecs, keys, cfg)
        return cls(fe.keyspace, fe.shard, table, topic, codecs, keys, cfg)

    # --- hot path --------------------------------------------------------------------------

    def decode(self, row: RowLike) -> JsonObject:
        """Column name → converted value (None for NULL)."""
        lengths = row.lengths
        if len(lengths) != self.ncols:
            raise ColumnCountMismatch(
                f"{self.keyspace}/{self.shard} {self.table}: row has {len(lengths)} columns, FIELD has {self.ncols}"
            )
        return self._decode(lengths, row.values)

    def key(self, data: JsonObject) -> tuple[JsonObject | None, bytes | None]:
        """A decoded row's key: (its payload, the record key's bytes); (None, None) without a key."""
        return self._key(data)

    def _key(self, data: JsonObject) -> tuple[JsonObject | None, bytes | None]:
        if not self._key_names:
            return None, None
        kp = self._key_of(data)
        body = orjson.dumps(kp)
        if b"\\u00" in body:
            body = fix_escapes(body)
        return kp, self._key_prefix + body + b"}" if self._key_prefix else body

    def _value(
        self,
        before: JsonObject | None,
        after: JsonObject | None,
        op: str,
        source: orjson.Fragment,
        now_ns: int,
        transaction: orjson.Fragment | None = None,
    ) -> bytes:
        # Written as parts: only the row images are serialized per record; the rest of the
        # envelope (source block, op, processing timestamps) is the same for a whole batch and
        # cached. Byte-identical to dumping the envelope dict (orjson writes nested values the
        # same standalone; the source fragment already went through fix_escapes).
        if before is None:
            b = b"null"
        else:
            b = orjson.dumps(before)
            if b"\\u00" in b:
                b = fix_escapes(b)
        if after is None:
            a = b"null"
        else:
            a = orjson.dumps(after)
            if b"\\u00" in a:
                a = fix_escapes(a)
        return self._envelope(b, a, op, source, now_ns, transaction)

    def _envelope(
        self,
        b: bytes,
        a: bytes,
        op: str,
        source: orjson.Fragment,
        now_ns: int,
        transaction: orjson.Fragment | None,
    ) -> bytes:
        """The value record around serialized ``before``/``after`` images."""
        k = self._tail_key
        if k is None or k[0] is not source or k[1] != op or k[2] != now_ns:
            self._tail = _envelope_tail(source, b"null", op, now_ns)
            self._tail_key = (source, op, now_ns)
        tail = self._tail
        if transaction is not None:
            # Splice the block into the cached tail in place of its null (only op and the
            # timestamps follow it, so the last match is ours); the block is already escaped.
            i = tail.rindex(b',"transaction":null,"op":"') + 15
            tail = b"".join((tail[:i], orjson.dumps(transaction), tail[i + 4 :]))
        # The schema JSON was serialized once per table; only the payload is written per row.
        prefix = self._value_prefix
        if prefix:
            return b"".join((prefix, b'{"before":', b, b',"after":', a, tail, b"}"))
        return b"".join((b'{"before":', b, b',"after":', a, tail))

    def encode_change(
        self,
        rc: RowChangeLike | bytes,  # bytes: a serialized RowChange from the native scanner
        ctx: SourceContext,
        now_ns: int | None = None,
        insert_op: str = "c",
        tx: TxBlocks | None = None,
    ) -> list[OutRecord]:
        """Records for one RowChange: c / u / d (+ tombstone), or d + tombstone + c on a key change.

        ``insert_op`` is "c" (Debezium's Vitess connector emits copy rows as creates too)
        or "r" for callers that want snapshot reads marked. ``tx`` (transaction metadata) is
        called once per data record, in order, with ``data_collection``: its result is the
        record's ``transaction`` block, or None to drop the record (and its tombstone) as one
        already delivered before a restart.
        """
        if now_ns is None:
            now_ns = time.time_ns()
        source = ctx.fragment(self.version, self.logical_name, self.table, self.unset_snapshot)
        if self._native is not None:
            # One C call per row change: the serialized RowChange in, JSON images and keys out.
            images = self._native.encode(rc if isinstance(rc, bytes) else rc.SerializeToString())  # type: ignore[attr-defined]
            if images is not None:
                return self._native_records(images, source, now_ns, insert_op, tx)
        # Raw bytes from the VStream scanner (streaming.py): the Python path wants the message.
        change: RowChangeLike = _row_change(rc) if isinstance(rc, bytes) else rc
        has_before = change.HasField("before")
        has_after = change.HasField("after")
        topic = self.topic
        headers = self._headers
        block = None
        if has_after and not has_before:
            after = self.decode(change.after)
            _, key = self._key(after)
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            return [OutRecord(topic, key, self._value(None, after, insert_op, source, now_ns, block), headers)]
        if has_before and not has_after:
            before = self.decode(change.before)
            _, key = self._key(before)
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            out = [OutRecord(topic, key, self._value(before, None, "d", source, now_ns, block), headers)]
            if self._tombstones:
                out.append(OutRecord(topic, key, None, headers))
            return out
        if not has_before:
            return []
        before = self.decode(change.before)
        after = self.decode(change.after)
        old_kp, old_key = self._key(before)
        new_kp, new_key = self._key(after)
        # Compared as serialized keys: Java's Struct.equals semantics (Double.equals: -0.0 is
        # not 0.0), and a double outside [1e-3, 1e7) (an orjson.Fragment) compares by value.
        if old_key == new_key:
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            return [OutRecord(topic, new_key, self._value(before, after, "u", source, now_ns, block), headers)]
        # Primary-key change: delete (+ tombstone) under the old key, create under the new one.
        del_headers = [(PK_UPDATE_NEWKEY, self._header_key(new_kp)), *headers]
        create_headers = [(PK_UPDATE_OLDKEY, self._header_key(old_kp)), *headers]
        out = []
        if tx is None or (block := tx(self.data_collection)) is not None:
            out.append(OutRecord(topic, old_key, self._value(before, None, "d", source, now_ns, block), del_headers))
            if self._tombstones:
                out.append(OutRecord(topic, old_key, None, del_headers))
        if tx is not None and (block := tx(self.data_collection)) is None:
            return out
        out.append(OutRecord(topic, new_key, self._value(None, after, "c", source, now_ns, block), create_headers))
        return out

    def _native_records(
        self,
        images: tuple[bytes | None, bytes | None, bytes | None, bytes | None],
        source: orjson.Fragment,
        now_ns: int,
        insert_op: str,
        tx: TxBlocks | None,
    ) -> list[OutRecord]:
        """``encode_change`` over the native encoder's images (same records, same order)."""
        b, a, old_key, new_key = images
        topic = self.topic
        headers = self._headers
        block = None
        if b is None:
            if a is None:
                return []
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            return [OutRecord(topic, new_key, self._envelope(b"null", a, insert_op, source, now_ns, block), headers)]
        if a is None:
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            out = [OutRecord(topic, old_key, self._envelope(b, b"null", "d", source, now_ns, block), headers)]
            if self._tombstones:
                out.append(OutRecord(topic, old_key, None, headers))
            return out
        if old_key == new_key:
            if tx is not None and (block := tx(self.data_collection)) is None:
                return []
            return [OutRecord(topic, new_key, self._envelope(b, a, "u", source, now_ns, block), headers)]
        del_headers = [(PK_UPDATE_NEWKEY, self._key_payload(new_key)), *headers]
        create_headers = [(PK_UPDATE_OLDKEY, self._key_payload(old_key)), *headers]
        out = []
        if tx is None or (block := tx(self.data_collection)) is not None:
            out.append(OutRecord(topic, old_key, self._envelope(b, b"null", "d", source, now_ns, block), del_headers))
            if self._tombstones:
                out.append(OutRecord(topic, old_key, None, del_headers))
        if tx is not None and (block := tx(self.data_collection)) is None:
            return out
        out.append(OutRecord(topic, new_key, self._envelope(b"null", a, "c", source, now_ns, block), create_headers))
        return out

    def _set_prefixes(self, cfg: EncoderConfig) -> None:
        """The key's and the value's bytes before their payload (the schema wrappers) from
        ``self.schemas``, and the native record's: _row_prefix + before + ',"after":' + after +
        tail, the tail ending in _row_close (the wrapper's brace)."""
        key = self.schemas.key
        self._key_prefix = b'{"schema":' + dumps(key) + b',"payload":' if cfg.key_schemas_enable and key is not None else b""
        schemas = cfg.value_schemas_enable
        self._value_prefix = b'{"schema":' + dumps(self.schemas.envelope) + b',"payload":' if schemas else b""
        self._row_prefix = self._value_prefix + b'{"before":'
        self._row_close = b"}" if schemas else b""

    @property
    def sends_natively(self) -> bool:
        """``send_rows`` has a native fast path: exactly this class with a column program."""
        return self._native is not None and type(self) is TablePlan

    def _tails(self, source: orjson.Fragment, insert_op: str, now_ns: int) -> tuple[Any, ...]:  # Any: a per-batch cache: the source Fragment, op and time, then the tails' bytes
        """Per batch: the envelope tails of an insert and an update, whole and split where the
        ``transaction`` block goes, each with the record's closing brace."""
        t = self._send_tails
        if t[0] is source and t[1] == insert_op and t[2] == now_ns:
            return t
        # _envelope_tail's two halves around the transaction block: the source is copied once
        # per batch, not once per operation and again by slicing.
        close = self._row_close
        pre = _tail_head(source)
        parts: list[Any] = [source, insert_op, now_ns]  # Any: a per-batch cache: the source Fragment, op and time, then the tails' bytes
        for op in (insert_op, "u"):
            post = _tail_end(op, now_ns) + close
            parts += [pre + b"null" + post, pre, post]
        self._send_tails = t = tuple(parts)
        return t

    def _native_advance(
        self, producer: Any, rcs: Iterable[Any], t: tuple[Any, ...], prefix: bytes, with_tx: bool, tx_native: Any,  # Any: the native C producer or confluent-kafka's client (no common type)
    ) -> Callable[[int], int] | None:
        """Per batch: ``advance(i)``, which sends rows from ``i`` on in C and returns the index of
        the first row it hands back to ``send_rows``'s Python loop, or None without a native path.

        ``producer``: the native sink's producer (``nativesink``); its ``send_rows`` runs the
        insert/same-key-update branch in C (the same bytes either way:
        tests/integration/worker/test_worker_native_sink.py). With transaction metadata it needs
        ``tx_native``, the ``TransactionMonitor`` whose ``native_blocks`` describe the blocks.
        """
        if producer is None or type(rcs) is not list or (with_tx and tx_native is None):
            return None
        rows_c, program = producer.send_rows, self._native
        topic, headers, dc = self.topic, self._headers, self.data_collection
        tail_i, pre_i, post_i, tail_u, pre_u, post_u = t[3:]
        if not with_tx:
            return lambda i: rows_c(program, topic, rcs, i, prefix, tail_i, tail_u, headers)

        def advance(i: int) -> int:
            blocks = tx_native.native_blocks(dc)
            if blocks is None:  # a resumed transaction's replay: row by row in Python
                return i
            j: int = rows_c(program, topic, rcs, i, prefix, tail_i, tail_u, headers,
                            (pre_i, post_i, pre_u, post_u, *blocks))
            tx_native.count_events(dc, j - i)
            return j

        return advance

    def send_rows_native(self, producer: Any, rcs: Any, ctx: SourceContext, now_ns: int, insert_op: str) -> int:  # Any: the native C producer; serialized RowChanges or messages
        """``send_rows`` without transaction metadata, all in C: the tails too are written there
        (``Producer.send_rows_src``), which saved ~10 us of Python per transaction. The index of
        the first row it hands back (``send_rows`` sends ``rcs`` from there on)."""
        if type(rcs) is not list:
            return 0
        return producer.send_rows_src(  # type: ignore[no-any-return]
            self._native, self.topic, rcs, 0, self._row_prefix, self._headers,
            ctx.source_parts(self.version, self.logical_name, self.table, self.unset_snapshot), ctx.vgtid_body(),
            ctx.commit_seconds, insert_op, now_ns, self._row_close,
        )

    def send_rows(
        self,
        rcs: Iterable[Any],  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        source: orjson.Fragment,
        now_ns: int,
        insert_op: str,
        tx: TxBlocks | None,
        tx_bytes: Callable[[str], bytes | None] | None,
        send: Callable[[str, bytes | None, bytes | None, Headers], None],
        on_bad_row: Callable[[Exception], list[OutRecord]],
        on_bad_record: Callable[[OutRecord, Exception], None],
        producer: object = None,
        tx_native: object = None,
    ) -> None:
        """Encode and ``send`` the records of several row changes of this table, in order.

        The hot loop of the streaming stage: inserts and same-key updates (nearly every row) are
        written straight from the native images with the batch's prebuilt envelope tails and, with
        transaction metadata, the block bytes ``tx_bytes`` returns (``tx`` semantics: None drops
        the record); everything else goes through ``encode_change``'s exact path. Only for plans
        where ``sends_natively`` holds. ``rcs`` are serialized RowChanges or RowChange messages.
        ``producer`` and ``tx_native``: see ``_native_advance``.
        """
        enc = self._native.encode  # type: ignore[union-attr]
        t = self._tails(source, insert_op, now_ns)
        tail_i, pre_i, post_i, tail_u, pre_u, post_u = t[3:]
        prefix = self._row_prefix
        topic, headers, dc = self.topic, self._headers, self.data_collection
        join = b"".join
        advance = self._native_advance(producer, rcs, t, prefix, tx_bytes is not None, tx_native)
        n = len(rcs)  # type: ignore[arg-type]
        i = 0
        while True:
            if advance is not None:  # C sends from row i on; returns the first row it hands back
                i = advance(i)
            if i >= n:
                break
            rc = rcs[i]  # type: ignore[index]
            i += 1
            if type(rc) is not bytes:
                rc = rc.SerializeToString()
            value = None
            try:
                images = enc(rc)
                if images is None:
                    recs = self.encode_change(rc, _FixedSource(source), now_ns, insert_op, tx)  # type: ignore[arg-type]
                else:
                    b, a, old_key, new_key = images
                    if a is not None and (b is None or old_key == new_key):
                        if b is None:
                            b, tail, pre, post = b"null", tail_i, pre_i, post_i
                        else:
                            tail, pre, post = tail_u, pre_u, post_u
                        if tx_bytes is None:
                            value = join((prefix, b, b',"after":', a, tail))
                        else:
                            block = tx_bytes(dc)
                            if block is None:
                                continue  # delivered before a restart
                            value = join((prefix, b, b',"after":', a, pre, block, post))
                        recs = _NONE
                    else:
                        recs = self._native_records(images, source, now_ns, insert_op, tx)
            except Exception as exc:  # zero-cost until raised; the caller's failure mode decides
                recs = on_bad_row(exc)
            if value is not None:
                try:
                    send(topic, new_key, value, headers)
                except Exception as exc:
                    on_bad_record(OutRecord(topic, new_key, value, headers), exc)
                continue
            for rec in recs:
                try:
                    send(rec.topic, rec.key, rec.value, rec.headers)
                except Exception as exc:
                    on_bad_record(rec, exc)

    def _key_payload(self, key: bytes | None) -> bytes:
        # The key record without its schema wrapper: what _header_key writes for the same key.
        if key is None:
            return b"null"
        n = len(self._key_prefix)
        return key[n:-1] if n else key

    @staticmethod
    def _header_key(kp: JsonObject | None) -> bytes:
        # Kafka Connect's default SimpleHeaderConverter renders a Struct as compact JSON.
        return dumps(kp)


_NONE: list[OutRecord] = []  # send_rows: the record went out directly (never appended to)


class _FixedSource:
    """A ``SourceContext`` stand-in whose source block is already serialized (``send_rows``)."""

    __slots__ = ("_frag",)

    def __init__(self, frag: orjson.Fragment) -> None:
        self._frag = frag

    def fragment(self, version: str, logical_name: str, table: str, unset_snapshot: str | None = "false") -> orjson.Fragment:
        return self._frag


def _row_change(raw: bytes) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    from vitessapi import binlogdata_pb2

    return binlogdata_pb2.RowChange.FromString(raw)


def encode_all(plan: TablePlan, changes: Iterable[RowChangeLike], ctx: SourceContext) -> list[OutRecord]:
    """Convenience: all records of a ROW event's row changes, in order."""
    out: list[OutRecord] = []
    now = time.time_ns()
    for rc in changes:
        out.extend(plan.encode_change(rc, ctx, now))
    return out
