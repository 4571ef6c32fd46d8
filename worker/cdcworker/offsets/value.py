"""The offset value: the JSON object Connect stores for a partition.

Debezium's ``VitessOffsetContext.getOffset`` fills a ``HashMap`` with ``vgtid`` (the restart VGTID
as a JSON *string*) and ``TransactionContext.store`` adds ``transaction_id`` (only while a
transaction is open) and ``transaction_data_collection_order_<id>`` counters; the ordered
transaction metadata factory adds ``transaction_epoch`` and ``connector_generation``. Connect writes
the map with ``JsonConverter`` in ``HashMap`` order, e.g.::

    {"vgtid":"[{\\"keyspace\\":\\"ks\\",\\"shard\\":\\"-80\\",\\"gtid\\":\\"MySQL56/...\\",\\"table_p_ks\\":[]}]"}

A parsed value keeps every field and its position, so re-serializing gives the same bytes; only the
fields we change move to where Java would put them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdcworker.jsontypes import JsonMapping, JsonValue
from cdcworker.offsets.javacompat import jackson_bytes, java_hashmap_order
from cdcworker.offsets.vgtid import ShardGtid, Vgtid
from cdcworker.textcut import quote

__all__ = [
    "TRANSACTION_COUNT_PREFIX",
    "TRANSACTION_EPOCH_KEY",
    "TRANSACTION_ID_KEY",
    "VGTID_KEY",
    "Checkpoint",
    "OffsetValue",
    "offset_value_at",
    "with_offset_fields",
]

VGTID_KEY = "vgtid"
TRANSACTION_ID_KEY = "transaction_id"
TRANSACTION_COUNT_PREFIX = "transaction_data_collection_order_"
TRANSACTION_EPOCH_KEY = "transaction_epoch"


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """An offset map with its field order (which fixes its bytes)."""

    fields: JsonMapping

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        vgtid: Vgtid,
        transaction_id: str | None = None,
        collection_counts: Mapping[str, int] | None = None,
        extra: Iterable[tuple[str, JsonValue]] = (),
    ) -> OffsetValue:
        """The value Debezium would write: fields put in its order into a Java ``HashMap``.

        ``collection_counts`` maps data collection ids (``<shard>.<keyspace>.<table>``) to event
        counts; Debezium copies them from its own ``HashMap``, so they are put in that order.
        """
        items: list[tuple[str, JsonValue]] = [(VGTID_KEY, vgtid.to_json())]
        if transaction_id is not None:
            items.append((TRANSACTION_ID_KEY, transaction_id))
        if collection_counts:
            for name in java_hashmap_order(collection_counts):
                items.append((TRANSACTION_COUNT_PREFIX + name, collection_counts[name]))
        items.extend(extra)
        values = dict(items)
        return cls({k: values[k] for k in java_hashmap_order(k for k, _ in items)})

    @classmethod
    def from_bytes(cls, data: bytes) -> OffsetValue:
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON (cut short?), nested too deep
            raise ValueError(f"the value is not JSON ({exc}): {quote(bytes(data))}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"the value is not a JSON object: {quote(bytes(data))}")
        if any(isinstance(v, float) for v in parsed.values()):
            raise ValueError("offset value holds a floating point number; not a Vitess offset")
        return cls(parsed)

    # -- access --------------------------------------------------------------------------------

    @property
    def vgtid_text(self) -> str | None:
        value = self.fields.get(VGTID_KEY)
        return value if isinstance(value, str) else None

    @property
    def vgtid(self) -> Vgtid:
        text = self.vgtid_text
        if text is None:
            raise ValueError(f"{VGTID_KEY!r} must be a string holding a JSON list of shard positions, got "
                             f"{quote(self.fields.get(VGTID_KEY))}")
        return Vgtid.from_json(text)

    @property
    def transaction_id(self) -> str | None:
        value = self.fields.get(TRANSACTION_ID_KEY)
        return value if isinstance(value, str) else None

    @property
    def collection_counts(self) -> dict[str, int]:
        n = len(TRANSACTION_COUNT_PREFIX)
        return {k[n:]: v for k, v in self.fields.items() if k.startswith(TRANSACTION_COUNT_PREFIX)}

    # -- updates -------------------------------------------------------------------------------

    def with_vgtid(self, vgtid: Vgtid) -> OffsetValue:
        """The same fields with a new ``vgtid`` (its position is unchanged: the key set is)."""
        fields = dict(self.fields)
        if VGTID_KEY in fields:
            fields[VGTID_KEY] = vgtid.to_json()
            return OffsetValue(fields)
        return OffsetValue.build(vgtid, extra=list(fields.items()))

    def with_fields(self, extra: Iterable[tuple[str, JsonValue]]) -> OffsetValue:
        """These fields plus ``extra`` (replacing same-named ones), in Java ``HashMap`` order as
        Connect would write them. Used for shardcdc's own fields (e.g. ``shardcdc_backfill``), which a
        Debezium consumer of the offsets topic ignores: it reads only the keys it knows."""
        items = {**self.fields, **dict(extra)}
        return OffsetValue({k: items[k] for k in java_hashmap_order(items)})

    # -- bytes ---------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return jackson_bytes(self.fields)


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint(Vgtid):
    """A commit point that carries more than its VGTID: the transaction-metadata fields Debezium
    stores in the same offset (``transaction_id`` and counters of the transaction that ended
    there, ``transaction_epoch`` / ``connector_generation`` with the ordered factory).

    It is a ``Vgtid`` everywhere else (resume position, ``/status``), so the sink and the task
    handle it as any position; only ``offset_value_at`` looks at the extra fields.
    """

    transaction_id: str | None = None
    collection_counts: tuple[tuple[str, int], ...] = ()
    extra: tuple[tuple[str, JsonValue], ...] = ()

    def __post_init__(self) -> None:
        """No check: a checkpoint takes the entries of a position that is already a ``Vgtid``
        (one per transaction with transaction metadata; the duplicate-shard check ran there)."""

    @classmethod
    def at(
        cls,
        shard_gtids: tuple[ShardGtid, ...],
        transaction_id: str | None,
        collection_counts: tuple[tuple[str, int], ...],
        extra: tuple[tuple[str, JsonValue], ...],
    ) -> Checkpoint:
        """``Checkpoint(...)`` for the streaming loop (one per transaction): the same object,
        its slots set directly instead of through the frozen ``__init__``'s generic setattr."""
        c = _new(cls)
        _set_shard_gtids(c, shard_gtids)
        _set_transaction_id(c, transaction_id)
        _set_collection_counts(c, collection_counts)
        _set_extra(c, extra)
        return c


_new = object.__new__
_set_shard_gtids = Vgtid.__dict__["shard_gtids"].__set__
_set_transaction_id = Checkpoint.__dict__["transaction_id"].__set__
_set_collection_counts = Checkpoint.__dict__["collection_counts"].__set__
_set_extra = Checkpoint.__dict__["extra"].__set__


def offset_value_at(position: Vgtid) -> OffsetValue:
    """The offset value to store for a durable position (a plain ``Vgtid`` or a ``Checkpoint``)."""
    if isinstance(position, Checkpoint):
        return OffsetValue.build(
            Vgtid(position.shard_gtids), position.transaction_id, dict(position.collection_counts), position.extra
        )
    return OffsetValue.build(position)


def with_offset_fields(position: Vgtid, fields: tuple[tuple[str, JsonValue], ...], owned: frozenset[str]) -> Vgtid:
    """``position`` whose extra offset fields named in ``owned`` are exactly ``fields`` (the
    others, e.g. transaction metadata's, kept). The same object when nothing changes, so a task
    without such state pays one tuple check per commit point."""
    if isinstance(position, Checkpoint):
        extra = position.extra
        if not fields and not any(k in owned for k, _ in extra):
            return position
        kept = tuple(kv for kv in extra if kv[0] not in owned)
        return Checkpoint(position.shard_gtids, position.transaction_id, position.collection_counts, kept + fields)
    if not fields:
        return position
    return Checkpoint(position.shard_gtids, extra=fields)
