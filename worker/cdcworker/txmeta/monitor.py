"""Transaction boundaries and the per-event ``transaction`` block (Debezium's ``TransactionMonitor``).

The streaming loop drives one ``TransactionMonitor`` per task::

    rec = mon.begin(txn_id, ts_ms, shard)       # at BEGIN: BEGIN record, or None
    block = mon.on_event("-80.ks.t")            # per data record (not tombstones): block or None
    end = mon.end(ts_ms)                        # at COMMIT: END record + the offset fields it carries
    mon.offset_fields()                         # the fields to store with any other record

(the streaming loop calls ``begin_value`` and ``finish``, the same without building records, and
writes the blocks with ``native_blocks``/``count_events`` in its C loop).

Semantics follow Debezium core's ``TransactionMonitor``/``TransactionContext`` plus the Vitess
ordered context:

* the transaction id is the transaction's full VGTID JSON; BEGIN/END go to the transaction topic
  with key ``{id}`` and no explicit partition (the key decides it);
* ``data_collection`` ids are ``<shard>.<keyspace>.<table>`` (Debezium's ``TableId`` with the shard
  as catalog); ``total_order`` / ``data_collection_order`` count data records from 1; END lists
  ``data_collections`` in Java ``HashMap`` iteration order;
* the ordered factory adds ``transaction_epoch`` (``EpochProvider``) and ``transaction_rank`` (the
  rank of the transaction shard's GTID);
* offsets carry ``transaction_id`` and ``transaction_data_collection_order_<id>`` counters while a
  transaction is open (and in the END record's offset), plus ``transaction_epoch`` and
  ``connector_generation`` with the ordered factory.

Restart: if the restored ``transaction_id`` equals the first BEGIN (the stream replays the
transaction whose records were partly delivered), no BEGIN is emitted and the counters continue.
The restored counters say how many data records of that transaction were already delivered;
``on_event`` returns ``None`` for those (per data collection, in stream order) so the loop drops
them and the numbering stays exactly what a consumer saw before the restart.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from cdcworker.events import native
from cdcworker.events.encoder import OutRecord
from cdcworker.events.jsonfmt import dumps
from cdcworker.jsontypes import JsonMapping, JsonObject, JsonValue
from cdcworker.offsets.javacompat import java_hashmap_order
from cdcworker.offsets.value import TRANSACTION_COUNT_PREFIX, TRANSACTION_ID_KEY, VGTID_KEY, OffsetValue
from cdcworker.offsets.vgtid import Vgtid
from cdcworker.txmeta.epoch import EpochProvider, unrankable
from cdcworker.txmeta.rank import decimal_json_bytes, rank
from cdcworker.txmeta.schemas import transaction_key_schema, transaction_value_schema
from cdcworker.txmeta.transforms import block_exclusions, remove_fields_payload, remove_fields_schema

if TYPE_CHECKING:
    from cdcworker.config.model import WorkerConfig

__all__ = [
    "EndResult",
    "TransactionMonitor",
    "TxMetaOptions",
    "TxOffsetFields",
    "data_collection_id",
    "transaction_block_payload",
]

Headers = list[tuple[str, bytes]]


def data_collection_id(shard: str, keyspace: str, table: str) -> str:
    """Debezium's data collection id for Vitess rows: ``TableId(shard, keyspace, table).toString()``."""
    return f"{shard}.{keyspace}.{table}"


def transaction_block_payload(
    transaction_id: str,
    total_order: int,
    data_collection_order: int,
    *,
    epoch: int | None = None,
    rank_value: str | int | None = None,
    exclude: Collection[str] = (),
) -> JsonObject:
    """The ``transaction`` block as a dict (pass ``epoch`` and ``rank_value`` for the ordered factory;
    ``rank_value`` already in JsonConverter form, see ``rank.decimal_json``)."""
    items: list[tuple[str, JsonValue]] = [
        ("id", transaction_id),
        ("total_order", total_order),
        ("data_collection_order", data_collection_order),
    ]
    if epoch is not None:
        items.append(("transaction_epoch", epoch))
        items.append(("transaction_rank", rank_value))
    return {k: v for k, v in items if k not in exclude}


@dataclass(frozen=True)
class TxMetaOptions:
    """What the monitor needs from the configuration."""

    topic: str
    ordered: bool = False
    emit_boundaries: bool = True  # False: FilterTransactionTopicRecords
    remove_fields: frozenset[str] = frozenset()  # RemoveField paths
    key_schemas_enable: bool = True
    value_schemas_enable: bool = True
    decimal_numeric: bool = False  # value.converter.decimal.format=NUMERIC
    connector_generation: int = 0
    initial_epochs: Mapping[str, int] = field(default_factory=dict)
    inherit_epoch: bool = False
    headers: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def from_config(cls, cfg: WorkerConfig, headers: Sequence[tuple[str, bytes]] = ()) -> TxMetaOptions:
        return cls(
            topic=cfg.topics.transaction_topic,
            ordered=cfg.transactions.ordered,
            emit_boundaries=not cfg.transforms.filter_transaction_topic_records,
            remove_fields=frozenset(cfg.transforms.remove_fields),
            key_schemas_enable=cfg.converters.key_schemas_enable,
            value_schemas_enable=cfg.converters.value_schemas_enable,
            decimal_numeric=cfg.converters.value_decimal_format.upper() == "NUMERIC",
            connector_generation=cfg.source.connector_generation,
            initial_epochs=dict(cfg.source.shard_epoch_map),
            inherit_epoch=cfg.source.inherit_epoch,
            headers=tuple(headers),
        )


class TxOffsetFields(NamedTuple):
    """The transaction part of an offset value; ``to_offset`` combines it with a VGTID."""

    transaction_id: str | None = None
    collection_counts: Mapping[str, int] = MappingProxyType({})
    extra: tuple[tuple[str, JsonValue], ...] = ()

    def to_offset(self, vgtid: Vgtid) -> OffsetValue:
        return OffsetValue.build(vgtid, self.transaction_id, self.collection_counts, self.extra)


class EndResult(NamedTuple):
    record: OutRecord | None  # None when filtered or when no transaction was open
    offset: TxOffsetFields  # what Debezium stores with the END record


def _ended_at(transaction_id: str, stored_vgtid: object) -> bool:
    """The restored offset was stored at the END of the transaction it names: its restart VGTID
    is that transaction's own VGTID, so nothing of it is replayed. Only an offset stored inside a
    transaction (restart VGTID before it, as Debezium's per-record offsets are) resumes one; an
    END offset must not, or the next transaction that is streamed before its COMMIT (identified
    by the position before it, the same VGTID) would be taken for a replay: no BEGIN, and its
    first records dropped as already delivered."""
    if not isinstance(stored_vgtid, str):
        return False
    try:
        ended, restart = Vgtid.from_json(transaction_id), Vgtid.from_json(stored_vgtid)
    except (ValueError, KeyError, TypeError):
        return False  # an id that is not a VGTID cannot be the restart position
    return _positions(ended) == _positions(restart)


def _positions(v: Vgtid) -> set[tuple[str, str, str]]:
    return {(sg.keyspace, sg.shard, sg.gtid) for sg in v}


def _resume_point(restored: JsonMapping) -> tuple[str | None, dict[str, int], str | None]:
    """The transaction a restored offset was stored inside (its id, the data records of each
    collection already delivered, and its shard if one shard holds them all), or nothing when the
    offset names no transaction or was stored at its END (``_ended_at``)."""
    tx = restored.get(TRANSACTION_ID_KEY)
    if not isinstance(tx, str) or _ended_at(tx, restored.get(VGTID_KEY)):
        return None, {}, None
    n = len(TRANSACTION_COUNT_PREFIX)
    counts = {k[n:]: int(v) for k, v in restored.items() if k.startswith(TRANSACTION_COUNT_PREFIX)}
    # Data collection ids are <shard>.<keyspace>.<table> (shard names have no dot).
    shards = {k.split(".", 1)[0] for k in counts}
    return tx, counts, shards.pop() if len(shards) == 1 else None


def _epoch_provider(opts: TxMetaOptions, restored: JsonMapping | None,
                    start_vgtid: Vgtid | str | None) -> EpochProvider | None:
    """The ordered factory's epochs (None without it), restored from the offset; the first epoch is
    computed against where the stream starts, so that is required."""
    if not opts.ordered:
        return None
    if start_vgtid is None:
        raise ValueError("ordered transaction metadata needs the start VGTID")
    return EpochProvider.restore(
        restored,
        start_vgtid,
        connector_generation=opts.connector_generation,
        initial_epochs=opts.initial_epochs,
        inherit=opts.inherit_epoch,
    )


class TransactionMonitor:
    """Transaction bookkeeping of one task (not thread-safe; owned by the streaming loop)."""

    def __init__(
        self,
        opts: TxMetaOptions,
        restored: JsonMapping | None = None,
        start_vgtid: Vgtid | str | None = None,
    ) -> None:
        """``restored``: the task's stored offset fields; ``start_vgtid``: where the stream starts
        (needed with the ordered factory: the first epoch is computed against it)."""
        self.opts = opts
        self._exclude = block_exclusions(opts.remove_fields)
        self._top_exclude = frozenset(p for p in opts.remove_fields if "." not in p)
        self.transaction_id: str | None = None
        self.counts: dict[str, int] = {}
        self.total = 0
        self.epoch: int | None = None
        self.rank: int | None = None
        self._skip: dict[str, int] = {}
        self._skip_total = 0
        self._resume_id: str | None = None
        self._restored_counts: dict[str, int] = {}
        # The shard of the transaction to resume (None: unknown). With several shards, another
        # shard's transaction can start at the same VGTID and so carry the same id; only the
        # interrupted shard's replay may skip the records counted before.
        self._resume_shard: str | None = None
        self._shard = ""  # the open transaction's shard
        # BEGIN and END records: the key of the open transaction's (made at BEGIN), their topic
        # and headers (one list, read and never changed by the sinks). Read by the streaming loop.
        self.boundary_key = b""
        self.boundary_topic = opts.topic
        self.boundary_headers = list(opts.headers)
        self._id_json = b""
        # END's data_collections in Java HashMap order, per set of collections (few distinct sets).
        self._orders: dict[tuple[str, ...], list[tuple[str, bytes]]] = {}
        # Per transaction: the block cut at its counters (native_blocks) and, made on first use by
        # block_bytes only, as a %-template for (total_order, data_collection_order).
        self._template: bytes | None = None
        self._native_parts: tuple[tuple[bytes, ...], int, int] = ((b"",), 0, 0)  # native_blocks
        self._shape_block()
        # The epoch fields of the offset, per epoch map (the map object changes only on a reshard
        # or a host change; it is stored with every commit point).
        self._epoch_items: tuple[object, tuple[tuple[str, JsonValue], ...]] = (None, ())
        if restored:
            self._resume_id, self._restored_counts, self._resume_shard = _resume_point(restored)
        self.epochs: EpochProvider | None = _epoch_provider(opts, restored, start_vgtid)
        self._build_wire_parts()
        # END after the records of one data collection (nearly every transaction): its tail as a
        # %-template for (event_count, the collection's event_count, ts_ms), per collection.
        self._end_tails: dict[str, bytes] = {}

    def _shape_block(self) -> None:
        """The per-event block's shape, fixed by RemoveField for the task's life: which counters it
        holds (how many, and which goes in each cut), whether it names the transaction and its
        epoch and rank. Computed once here so the per-event code only concatenates."""
        ex = self._exclude
        counters = [n for n in ("total_order", "data_collection_order") if n not in ex]
        self._numbers = len(counters)
        self._with_id = "id" not in ex
        self._with_epoch = "transaction_epoch" not in ex
        self._with_rank = "transaction_rank" not in ex
        self._first_label = b'"' + counters[0].encode() + b'":' if counters else b""
        self._later_cuts: tuple[bytes, ...] = (b',"data_collection_order":',) if len(counters) == 2 else ()
        self._slots = (1 if counters[0] == "total_order" else 2, 2 if len(counters) == 2 else 0) if counters else (0, 0)

    def _build_wire_parts(self) -> None:
        """The constant bytes of the BEGIN/END keys and values (schema envelopes, heads and tails)
        and whether the native BEGIN can build them: fixed by the options, so made once per task
        rather than per transaction. Needs the block shape (``_shape_block``) first."""
        opts = self.opts
        self._key_schema = transaction_key_schema()
        value_schema = transaction_value_schema()
        if self._top_exclude:
            value_schema = remove_fields_schema(value_schema, opts.remove_fields)
        self._value_schema_orig = transaction_value_schema()
        self._key_prefix = (
            b'{"schema":' + dumps(self._key_schema) + b',"payload":' if opts.key_schemas_enable else b""
        )
        self._value_prefix = (
            b'{"schema":' + dumps(value_schema) + b',"payload":' if opts.value_schemas_enable else b""
        )
        close = b"}" if self._value_prefix else b""
        self._key_head = self._key_prefix + b'{"id":'
        self._key_tail = b"}}" if self._key_prefix else b"}"
        self._begin_head = self._value_prefix + b'{"status":"BEGIN","id":'
        self._begin_tail = b',"event_count":null,"data_collections":null,"ts_ms":%d}' + close
        self._end_head = self._value_prefix + b'{"status":"END","id":'
        self._close = close
        # The native BEGIN (``_rowenc.tx_begin``) covers Debezium's full block shape: the id, both
        # counters (total_order first), and with the ordered factory the epoch and the rank.
        full_block = self._with_id and self._slots == (1, 2) and (not opts.ordered or (self._with_epoch and self._with_rank))
        self._native_begin = native.rowenc.tx_begin if native.enabled() and full_block and not self._top_exclude else None
        self._begin_shape = (
            self._key_head, self._key_tail, self._begin_head, b"}" + close, b"," + self._first_label,
            opts.decimal_numeric, opts.emit_boundaries,
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def in_progress(self) -> bool:
        return self.transaction_id is not None

    @property
    def replay_pending(self) -> int:
        """Data records of a resumed transaction still to be dropped as already delivered."""
        return self._skip_total

    def offset_fields(self) -> TxOffsetFields:
        """Transaction fields of the offset as of now (``TransactionContext.store`` + epochs)."""
        return TxOffsetFields(self.transaction_id, dict(self.counts), self._epoch_fields())

    def _epoch_fields(self) -> tuple[tuple[str, JsonValue], ...]:
        if self.epochs is None:
            return ()
        epochs = self.epochs.epochs
        seen, extra = self._epoch_items
        if seen is not epochs:
            extra = tuple(self.epochs.offset_items(self.opts.connector_generation))
            self._epoch_items = (epochs, extra)
        return extra

    # -- events ------------------------------------------------------------------------------

    def begin(self, *args: Any, **kwargs: Any) -> OutRecord | None:  # Any: the C extension's begin function and its argument shape (cdcworker._rowenc, no stubs)
        """A BEGIN: start counting; the BEGIN record, or None (filtered, or a resumed transaction).
        The arguments are ``begin_value``'s."""
        value = self.begin_value(*args, **kwargs)
        return None if value is None else self._out(value)

    def begin_value(
        self,
        transaction_id: str,
        ts_ms: int,
        shard: str,
        vgtid: Vgtid | str | None = None,
        id_json: bytes | None = None,
    ) -> bytes | None:
        """``begin`` as the BEGIN record's value only (the streaming loop: its topic, key and
        headers are ``boundary_topic``, ``boundary_key`` and ``boundary_headers``), or None.

        ``vgtid`` is the transaction's VGTID (defaults to ``transaction_id``, which is its JSON);
        ``id_json`` the id as a JSON string when the caller has it (``dumps(transaction_id)``).
        """
        resumed = False
        self._shard = shard
        # Only the interrupted shard's first BEGIN after a restart can resume.
        if self._resume_id is not None and (self._resume_shard is None or self._resume_shard == shard):
            resumed = self._resume_id == transaction_id
            restored_counts = self._restored_counts if resumed else {}
            self._restored_counts = {}
            self._resume_id = self._resume_shard = None
            self.counts = dict(restored_counts)
            self.total = self._skip_total = sum(restored_counts.values())
            self._skip = dict(restored_counts)
        else:  # nearly every BEGIN: nothing to skip (end() and interrupt() emptied _skip)
            self.counts = {}
            self.total = self._skip_total = 0
            if id_json is not None and self._native_begin is not None and type(vgtid) is Vgtid:
                value = self._begin_natively(transaction_id, ts_ms, shard, vgtid, id_json)
                if value is not False:
                    return value  # type: ignore[return-value]
        self.transaction_id = transaction_id
        if id_json is None:
            id_json = dumps(transaction_id)
        self._id_json = id_json
        self.boundary_key = self._key_head + id_json + self._key_tail
        order_parts: list[bytes] = []  # the ordered factory's fields after the counters
        if self.epochs is not None:
            v = vgtid if vgtid is not None else transaction_id
            parsed = v if isinstance(v, Vgtid) else Vgtid.from_json(v)
            self.epoch = self.epochs.epoch(shard, parsed)
            sg = parsed.get(shard)
            assert sg is not None  # epoch() checked it
            try:
                self.rank = rank(sg.gtid)
            except ValueError as exc:  # Debezium's rank provider fails the task too
                raise unrankable(exc, sg.gtid) from exc
            if self._with_epoch:
                order_parts.append(b'"transaction_epoch":%d' % self.epoch)
            if self._with_rank:
                order_parts.append(b'"transaction_rank":' + decimal_json_bytes(self.rank, self.opts.decimal_numeric))
        self._compile_template(order_parts)
        if resumed or not self.opts.emit_boundaries:
            return None
        if not self._top_exclude:
            # The common case as bytes (same as dumping the dict below, field for field).
            return self._begin_head + id_json + self._begin_tail % ts_ms
        return self._value(
            {
                "status": "BEGIN",
                "id": transaction_id,
                "event_count": None,
                "data_collections": None,
                "ts_ms": ts_ms,
            }
        )

    def on_event(self, data_collection: str) -> orjson.Fragment | None:
        """Count one data record; its ``transaction`` block as pre-serialized JSON, or None when the
        record was already delivered before a restart (drop it, and its tombstone)."""
        block = self.block_bytes(data_collection)
        return None if block is None else orjson.Fragment(block)

    def block_bytes(self, data_collection: str) -> bytes | None:
        """``on_event`` as plain JSON bytes (the streaming hot loop splices them in directly)."""
        if self.transaction_id is None:
            raise ValueError(f"data event for {data_collection} outside a transaction")
        if self._skip_total:
            left = self._skip.get(data_collection, 0)
            if left:
                self._skip[data_collection] = left - 1
                self._skip_total -= 1
                return None
        self.total = total = self.total + 1
        counts = self.counts
        order = counts[data_collection] = counts.get(data_collection, 0) + 1
        template = self._template
        if template is None:
            parts = self._native_parts[0]
            template = self._template = b"%d".join(p.replace(b"%", b"%%") for p in parts) if len(parts) > 1 else parts[0]
        if self._numbers == 2:
            return template % (total, order)
        if self._numbers == 0:
            return template
        return template % (order if "total_order" in self._exclude else total)

    def _begin_natively(
        self, transaction_id: str, ts_ms: int, shard: str, vgtid: Vgtid, id_json: bytes
    ) -> bytes | bool | None:
        """``begin``'s common case in one C call; False when the Python path has to decide."""
        epochs = self.epochs
        if epochs is None:
            out = self._native_begin(self._begin_shape, id_json, ts_ms, None, None, None, None)  # type: ignore[misc]
        else:
            out = epochs.begin_natively(self._native_begin, self._begin_shape, id_json, ts_ms, vgtid, shard)  # type: ignore[arg-type]
        if out is None:
            return False
        value: bytes | bool | None  # the C call's record value (see _native_begin)
        self.epoch, self.rank, self.boundary_key, value, head, tail = out
        self.transaction_id = transaction_id
        self._id_json = id_json
        self._template = None
        self._native_parts = ((head, *self._later_cuts, tail), 1, 2)
        return value

    def native_blocks(self, data_collection: str) -> tuple[tuple[bytes, ...], int, int, int, int] | None:
        """``block_bytes`` for the C loop of ``TablePlan.send_rows``: the block template cut at its
        counters, which counter goes in each cut (1 total_order, 2 data_collection_order, 0 none)
        and both counters before the next record (``count_events`` moves them afterwards). None
        while records of a resumed transaction are being dropped: those take ``block_bytes``."""
        if self._skip_total or self.transaction_id is None:
            return None
        parts, first, second = self._native_parts
        return parts, first, second, self.total, self.counts.get(data_collection, 0)

    def count_events(self, data_collection: str, n: int) -> None:
        """``n`` records of ``data_collection`` went out with the blocks ``native_blocks`` described."""
        if n:
            self.total += n
            self.counts[data_collection] = self.counts.get(data_collection, 0) + n

    def _compile_template(self, order_parts: list[bytes]) -> None:
        """The block of this transaction cut at its counters (once per BEGIN): the literal bytes
        around ``total_order`` and ``data_collection_order``, whichever RemoveField keeps, and
        ``order_parts`` (epoch, rank) after them."""
        self._template = None
        if not self._numbers:
            fields = ([b'"id":' + self._id_json] if self._with_id else []) + order_parts
            self._native_parts = ((b"{" + b",".join(fields) + b"}",), 0, 0)
            return
        head = b'{"id":' + self._id_json + b"," + self._first_label if self._with_id else b"{" + self._first_label
        tail = (b"," + b",".join(order_parts) + b"}") if order_parts else b"}"
        first, second = self._slots
        self._native_parts = ((head, *self._later_cuts, tail), first, second)

    def end(self, ts_ms: int) -> EndResult:
        """A COMMIT: the END record (if a transaction was open) and the offset it carries."""
        counts = self.counts
        value, transaction_id, _, extra = self.finish(ts_ms)
        return EndResult(None if value is None else self._out(value), TxOffsetFields(transaction_id, counts, extra))

    def finish(self, ts_ms: int) -> tuple[bytes | None, str | None, tuple[tuple[str, int], ...], tuple[tuple[str, JsonValue], ...]]:
        """``end`` for the streaming loop, once per transaction without building records: the END
        record's value (None: filtered, or no transaction open) and the offset fields it carries
        (transaction id, counters per data collection, epoch fields), as ``Checkpoint`` takes them."""
        transaction_id = self.transaction_id
        counts = self.counts
        value = None
        if transaction_id is not None and self.opts.emit_boundaries:
            value = self._end_value(ts_ms)
        extra = self._epoch_fields()
        self.transaction_id = None
        self.counts = {}
        self.total = self._skip_total = 0
        if self._skip:
            self._skip = {}
        self.epoch = self.rank = None
        return value, transaction_id, tuple(counts.items()), extra

    def interrupt(self, delivered: bool) -> None:
        """The stream broke inside the open transaction; VTGate will replay it from its start.

        ``delivered``: the records counted so far stay in Kafka (at-least-once producer), so the
        replay must not repeat BEGIN and must skip them, continuing the numbering (as after a
        restart from an offset stored mid-transaction). Otherwise they were discarded (an aborted
        Kafka transaction) and the transaction starts over.
        """
        if self.transaction_id is None:
            return
        if delivered:
            self._resume_id = self.transaction_id
            self._resume_shard = self._shard
            self._restored_counts = dict(self.counts)
        else:
            self._resume_id = self._resume_shard = None
            self._restored_counts = {}
        self.transaction_id = None
        self.counts = {}
        self.total = 0
        self._skip = {}
        self._skip_total = 0

    # -- records -----------------------------------------------------------------------------

    def _out(self, value: bytes) -> OutRecord:
        return OutRecord(self.boundary_topic, self.boundary_key, value, list(self.boundary_headers))

    def _end_value(self, ts_ms: int) -> bytes:
        counts = self.counts
        if self._top_exclude:
            collections = [{"data_collection": k, "event_count": counts[k]} for k in java_hashmap_order(counts)]
            return self._value(
                {
                    "status": "END",
                    "id": self.transaction_id,
                    "event_count": self.total,
                    "data_collections": collections,
                    "ts_ms": ts_ms,
                }
            )
        if len(counts) == 1:  # one data collection: a cached tail per collection
            ((name, n),) = counts.items()
            tail = self._end_tails.get(name)
            if tail is None:
                if len(self._end_tails) > 256:
                    self._end_tails.clear()
                tail = self._end_tails[name] = (
                    b',"event_count":%d,"data_collections":[{"data_collection":'
                    + dumps(name).replace(b"%", b"%%")
                    + b',"event_count":%d}],"ts_ms":%d}'
                    + self._close
                )
            return self._end_head + self._id_json + tail % (self.total, n, ts_ms)
        # The same bytes as dumping the dict above, field for field; data_collections in Java
        # HashMap order, built once per set of collections.
        names = tuple(counts)
        order = self._orders.get(names)
        if order is None:
            order = self._orders[names] = [(k, b'{"data_collection":' + dumps(k).replace(b"%", b"%%") + b',"event_count":%d}') for k in java_hashmap_order(counts)]
            if len(self._orders) > 256:
                self._orders.clear()
        body = b'{"status":"END",%s,"event_count":%d,"data_collections":[%s],"ts_ms":%d}' % (
            b'"id":' + self._id_json, self.total, b",".join(t % counts[k] for k, t in order), ts_ms
        )
        return self._raw_value(body)

    def _raw_value(self, body: bytes) -> bytes:
        return self._value_prefix + body + b"}" if self._value_prefix else body

    def _value(self, value: JsonObject) -> bytes:
        if self._top_exclude:
            value = remove_fields_payload(value, self._value_schema_orig, self.opts.remove_fields)
        return self._raw_value(dumps(value))
