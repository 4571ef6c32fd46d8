"""List, reset and alter one connector's records in a Kafka Connect offsets topic.

Shared by ``shardcdc offsets`` and the operator's ``shardcdc.io/offsets`` annotation. Planning is
pure (records in, ``Change`` list out) so what will change can be shown before anything is written;
:func:`apply_changes` is the only I/O. The exchange format is Kafka Connect's REST offsets document
(KIP-875, ``GET/PATCH /connectors/<name>/offsets``)::

    {"offsets": [{"partition": {"server": "orders", "task_key": "task0_2_1"},
                  "offset": {"vgtid": "[{\\"keyspace\\":...}]"}}]}

so a listed document can be edited and fed back (``offset: null`` deletes a partition's offset),
and documents move between shardcdc and a Connect cluster running Debezium.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets.handback import plan_handback as plan
from cdcworker.offsets.handback import shardcdc_positions
from cdcworker.offsets.keys import (
    OffsetPartition,
    TaskKey,
    offset_record_key,
    parse_offset_record_key,
    partition_from_map,
)
from cdcworker.offsets.migration import MigrationError, lookup_in
from cdcworker.offsets.store import OffsetStoreError
from cdcworker.offsets.value import OffsetValue
from cdcworker.offsets.vgtid import ShardGtid

if TYPE_CHECKING:
    from cdcworker.offsets.handback import HandBack, ShardcdcGeneration
    from cdcworker.offsets.store import OffsetStore

__all__ = [
    "Change",
    "OffsetEntry",
    "OffsetsError",
    "apply_changes",
    "connect_document",
    "entries",
    "plan_alter",
    "plan_handback",
    "plan_reset",
    "plan_set_shards",
]


class OffsetsError(ValueError):
    """A request that cannot be planned (the message says what to fix)."""


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """One live offset record of a connector."""

    key: bytes
    partition: OffsetPartition
    value: bytes

    @property
    def task_key(self) -> TaskKey | None:
        if self.partition.task_key is None:
            return None
        try:
            return TaskKey.parse(self.partition.task_key)
        except ValueError:
            return None

    @property
    def offset(self) -> OffsetValue:
        return OffsetValue.from_bytes(self.value)

    def positions(self) -> list[ShardGtid]:
        try:
            return list(self.offset.vgtid)
        except ValueError:
            return []

    def sort_key(self) -> tuple[int, int, str, str]:
        tk = self.task_key
        return (tk.gen if tk else -1, tk.task_id if tk else -1, self.partition.server, self.partition.task_key or "")


@dataclass(frozen=True, slots=True)
class Change:
    """One record to write: ``new`` None is a tombstone (delete)."""

    key: bytes
    partition: OffsetPartition
    old: bytes | None
    new: bytes | None

    def describe(self) -> str:
        where = self.partition.task_key or "(connector-wide)"
        where = f"server={self.partition.server} {where}"
        if self.new is None:
            return f"delete  {where}: {_short(self.old)}"
        if self.old is None:
            return f"create  {where}: {_short(self.new)}"
        return f"change  {where}: {_short(self.old)} -> {_short(self.new)}"


def _short(value: bytes | None) -> str:
    if value is None:
        return "-"
    try:
        vgtid = OffsetValue.from_bytes(value).vgtid
    except ValueError:
        return value.decode("utf-8", "replace")[:120]
    return ", ".join(f"{sg.shard}@{sg.gtid or '(copy)'}{'+copy' if sg.table_p_ks else ''}" for sg in vgtid)


def entries(records: Mapping[bytes, bytes], connector: str) -> list[OffsetEntry]:
    """The connector's records (Vitess partitions only), ordered by generation, task, server."""
    out: list[OffsetEntry] = []
    for key, value in records.items():
        try:
            name, pmap = parse_offset_record_key(key)
        except ValueError:
            continue
        partition = partition_from_map(pmap) if name == connector else None
        if partition is not None:
            out.append(OffsetEntry(key, partition, value))
    return sorted(out, key=OffsetEntry.sort_key)


def connect_document(items: Iterable[OffsetEntry]) -> JsonObject:
    """Kafka Connect's ``GET /connectors/<name>/offsets`` body for these records."""
    return {"offsets": [{"partition": e.partition.as_map(), "offset": json.loads(e.value)} for e in items]}


def plan_reset(records: Mapping[bytes, bytes], connector: str) -> list[Change]:
    """Tombstones for every offset of the connector: the next start begins as ``snapshot.mode`` says."""
    return [Change(e.key, e.partition, e.value, None) for e in entries(records, connector)]


def plan_alter(records: Mapping[bytes, bytes], connector: str, document: JsonMapping) -> list[Change]:
    """Changes that make the connector's offsets what a Connect offsets document says.

    Partitions not named in the document are left alone (Connect's PATCH semantics); an ``offset``
    of null deletes that partition's record. Offsets must hold a parsable ``vgtid``.
    """
    items = document.get("offsets")
    if not isinstance(items, list):
        raise OffsetsError('an offsets document is {"offsets": [{"partition": {...}, "offset": {...}}, ...]}')
    changes: list[Change] = []
    seen: set[bytes] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("partition"), Mapping):
            raise OffsetsError(f"offsets[{i}]: needs a 'partition' object")
        partition = partition_from_map(dict(item["partition"]))
        if partition is None:
            raise OffsetsError(f"offsets[{i}].partition is not a Vitess partition "
                               f"({{'server': ..., 'task_key': ...}}): {dict(item['partition'])}")
        key = offset_record_key(connector, partition)
        if key in seen:
            raise OffsetsError(f"offsets[{i}]: partition {partition.as_map()} is listed twice")
        seen.add(key)
        offset = item.get("offset")
        new: bytes | None
        if offset is None:
            new = None
        elif isinstance(offset, Mapping):
            value = OffsetValue(dict(offset))
            try:
                value.vgtid  # noqa: B018  (validates)
            except ValueError as exc:
                raise OffsetsError(f"offsets[{i}].offset: {exc}") from None
            new = value.to_bytes()
        else:
            raise OffsetsError(f"offsets[{i}].offset must be an object or null")
        old = records.get(key)
        if old != new:
            changes.append(Change(key, partition, old, new))
    return changes


def plan_set_shards(records: Mapping[bytes, bytes], connector: str, positions: Mapping[str, str]) -> list[Change]:
    """Move shards to new GTIDs in the newest generation's records that hold them.

    Each shard must appear in exactly one record of that generation (the task streaming it); its
    copy state (``table_p_ks``) is dropped, since a copy cannot resume at a different GTID.
    """
    mine = [e for e in entries(records, connector) if e.positions()]
    if not mine:
        raise OffsetsError(f"connector {connector!r} has no offsets to change; nothing to set")
    newest = max(e.task_key.gen if e.task_key else -1 for e in mine)
    current = [e for e in mine if (e.task_key.gen if e.task_key else -1) == newest]
    changes: list[Change] = []
    missing = set(positions)
    for e in current:
        vgtid = e.offset.vgtid
        updates = [ShardGtid(sg.keyspace, sg.shard, positions[sg.shard]) for sg in vgtid if sg.shard in positions]
        if not updates:
            continue
        missing -= {u.shard for u in updates}
        new = e.offset.with_vgtid(vgtid.update(updates)).to_bytes()
        if new != e.value:
            changes.append(Change(e.key, e.partition, e.value, new))
    if missing:
        held = sorted({sg.shard for e in current for sg in e.positions()})
        raise OffsetsError(f"shards {', '.join(sorted(missing))} are not in the offsets of generation {newest} "
                           f"(it holds {', '.join(held) or 'none'})")
    return changes


def plan_handback(records: Mapping[bytes, bytes], connector: str, server: str, recorded: ShardcdcGeneration | None,
                  *, per_task: bool, tasks_max: int) -> tuple[list[Change], HandBack]:
    """The records that hand shardcdc's positions back to Debezium (``offsets.handback``) and the
    settings Debezium needs; only new records, or the plain server key without per-task offsets."""

    task_keys = [tk for e in entries(records, connector) if e.partition.server == server and (tk := e.task_key)]
    gens: dict[int, set[int]] = {}
    for tk in task_keys:
        gens.setdefault(tk.gen, set()).add(tk.task_count)
    try:
        positions, values = shardcdc_positions(lookup_in(records, connector), server, recorded, gens)
        handback = plan(positions, values, server=server, task_keys=task_keys, per_task=per_task, tasks_max=tasks_max,
                        above=recorded.generation if recorded is not None else -1)
    except MigrationError as exc:
        raise OffsetsError(str(exc)) from None
    changes = []
    for partition, value in handback.records:
        key, new = offset_record_key(connector, partition), value.to_bytes()
        if records.get(key) != new:
            changes.append(Change(key, partition, records.get(key), new))
    return changes, handback


def apply_changes(store: OffsetStore, changes: Sequence[Change], timeout: float = 30.0) -> None:
    """Write the changes and wait until Kafka acknowledged every one (at-least-once, like Connect)."""

    producer = store.own_producer()
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for ch in changes:
        producer.produce(store.topic, key=ch.key, value=ch.new, partition=store.partition_for(ch.key),
                         on_delivery=delivered)
    if producer.flush(timeout):
        raise OffsetStoreError(f"offset changes not acknowledged within {timeout}s")
    if errors:
        raise OffsetStoreError(f"offset changes not written: {errors[0]}")
    for ch in changes:
        store.remember(ch.key, ch.new)

