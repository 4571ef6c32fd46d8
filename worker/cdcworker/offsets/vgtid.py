"""The VGTID position: one gtid per shard plus the copy state (``table_p_ks``) of each shard.

The JSON form is the one Debezium stores as the ``vgtid`` offset field (``Vgtid.toString``)::

    [{"keyspace":"ks","shard":"-80","gtid":"MySQL56/uuid:1-114","table_p_ks":[]},...]

Field order is fixed and ``table_p_ks`` is always written. A copy entry is
``{"table_name":"t","lastpk":{"fields":[{"name":"id","type":"INT64","charset":63,"flags":49667}],
"rows":[{"lengths":["2"],"values":"10"}]}}``: the type is the ``query.Type`` enum name, lengths are
decimal strings and ``values`` is the raw row bytes as a UTF-8 string.

Debezium decodes ``values`` with ``toStringUtf8``, which turns bytes that are not UTF-8 into
U+FFFD and so corrupts binary primary keys. We keep the exact bytes instead: undecodable bytes are
written as ``\\udcXX`` escapes (Python's surrogateescape), which read back to the same bytes here.
Valid UTF-8 (everything Debezium can write) is written exactly as Debezium writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcworker.jsontypes import JsonMapping, JsonObject, JsonValue
from cdcworker.offsets.javacompat import escapes_only_quotes, jackson_dumps
from cdcworker.textcut import quote

if TYPE_CHECKING:
    from vitessapi import binlogdata_pb2

__all__ = ["CURRENT_GTID", "EMPTY_GTID", "LastPK", "PKField", "PKRow", "ShardGtid", "TableLastPK", "Vgtid"]

CURRENT_GTID = "current"  # start at the current position of the shard
EMPTY_GTID = ""  # start with a full copy of the shard (VStream copy)

_INT32 = 1 << 32


def _decode_values(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _encode_values(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ValueError(f"lastpk row values hold an unpaired surrogate: {text!r}") from exc


def _require(obj: JsonMapping, key: str, kind: type | tuple[type, ...], where: str) -> JsonValue:
    if key not in obj:
        raise ValueError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    return value


@dataclass(frozen=True, slots=True)
class PKField:
    """One primary-key column of a ``lastpk``: Debezium keeps name, type name, charset and flags."""

    name: str
    type: str  # query.Type enum name, e.g. "INT64"
    charset: int
    flags: int  # uint32 on the wire; Java writes it as a signed int

    def to_json(self) -> JsonObject:
        flags = self.flags - _INT32 if self.flags >= 1 << 31 else self.flags
        return {"name": self.name, "type": self.type, "charset": self.charset, "flags": flags}

    @classmethod
    def from_json(cls, obj: object) -> PKField:
        if not isinstance(obj, dict):
            raise ValueError(f"lastpk field must be an object, got {quote(obj)}")
        return cls(
            name=_require(obj, "name", str, "lastpk field"),
            type=_require(obj, "type", str, "lastpk field"),
            charset=_require(obj, "charset", int, "lastpk field"),
            flags=_require(obj, "flags", int, "lastpk field") & 0xFFFFFFFF,
        )


@dataclass(frozen=True, slots=True)
class PKRow:
    """One row of a ``lastpk``: per-column lengths (-1 = NULL) and the concatenated values."""

    lengths: tuple[int, ...]
    values: bytes

    def to_json(self) -> JsonObject:
        return {"lengths": [str(n) for n in self.lengths], "values": _decode_values(self.values)}

    @classmethod
    def from_json(cls, obj: object) -> PKRow:
        if not isinstance(obj, dict):
            raise ValueError(f"lastpk row must be an object, got {quote(obj)}")
        lengths = _require(obj, "lengths", list, "lastpk row")
        try:
            parsed = tuple(int(n) for n in lengths)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"lastpk row: bad lengths {quote(lengths)}") from exc
        return cls(lengths=parsed, values=_encode_values(_require(obj, "values", str, "lastpk row")))


@dataclass(frozen=True, slots=True)
class LastPK:
    """The last copied primary key of a table (a ``query.QueryResult`` with fields and rows only)."""

    fields: tuple[PKField, ...] = ()
    rows: tuple[PKRow, ...] = ()

    def to_json(self) -> JsonObject:
        return {"fields": [f.to_json() for f in self.fields], "rows": [r.to_json() for r in self.rows]}

    @classmethod
    def from_json(cls, obj: object) -> LastPK:
        if obj is None:  # Debezium would fail on this; treat as "no row copied yet"
            return cls()
        if not isinstance(obj, dict):
            raise ValueError(f"lastpk must be an object, got {quote(obj)}")
        fields = obj.get("fields") or []
        rows = obj.get("rows") or []
        return cls(tuple(PKField.from_json(f) for f in fields), tuple(PKRow.from_json(r) for r in rows))


@dataclass(frozen=True, slots=True)
class TableLastPK:
    """Copy progress of one table on one shard."""

    table_name: str
    lastpk: LastPK = field(default_factory=LastPK)

    def to_json(self) -> JsonObject:
        return {"table_name": self.table_name, "lastpk": self.lastpk.to_json()}

    @classmethod
    def from_json(cls, obj: object) -> TableLastPK:
        if not isinstance(obj, dict):
            raise ValueError(f"table_p_ks entry must be an object, got {quote(obj)}")
        return cls(_require(obj, "table_name", str, "table_p_ks entry"), LastPK.from_json(obj.get("lastpk")))


@dataclass(frozen=True, slots=True)
class ShardGtid:
    """Position of one shard. ``gtid`` may be ``"current"`` or ``""`` (copy) as a start request."""

    keyspace: str
    shard: str
    gtid: str
    table_p_ks: tuple[TableLastPK, ...] = ()

    @property
    def copying(self) -> bool:
        """True when resuming from here runs (or continues) a VStream copy."""
        return self.gtid == EMPTY_GTID or bool(self.table_p_ks)

    def to_json(self) -> JsonObject:
        return {
            "keyspace": self.keyspace,
            "shard": self.shard,
            "gtid": self.gtid,
            "table_p_ks": [t.to_json() for t in self.table_p_ks],
        }

    @classmethod
    def from_json(cls, obj: object) -> ShardGtid:
        if not isinstance(obj, dict):
            raise ValueError(f"shard gtid must be an object, got {quote(obj)}")
        where = "shard gtid"
        # Offsets written before DBZ-7050 have no table_p_ks; Jackson reads that as an empty list.
        tpks = obj.get("table_p_ks") or []
        if not isinstance(tpks, list):
            raise ValueError(f"{where}: 'table_p_ks' must be a list")
        return cls(
            keyspace=_require(obj, "keyspace", str, where),
            shard=_require(obj, "shard", str, where),
            gtid=_require(obj, "gtid", str, where),
            table_p_ks=tuple(TableLastPK.from_json(t) for t in tpks),
        )

    # -- protobuf ------------------------------------------------------------------------------

    def to_proto(self) -> binlogdata_pb2.ShardGtid:
        from vitessapi import binlogdata_pb2, query_pb2

        pb = binlogdata_pb2.ShardGtid(keyspace=self.keyspace, shard=self.shard, gtid=self.gtid)
        for tpk in self.table_p_ks:
            entry = pb.table_p_ks.add(table_name=tpk.table_name)
            # Debezium always sets lastpk (an empty QueryResult when nothing was copied yet).
            entry.lastpk.SetInParent()
            for f in tpk.lastpk.fields:
                entry.lastpk.fields.add(
                    name=f.name, type=query_pb2.Type.Value(f.type), charset=f.charset, flags=f.flags
                )
            for r in tpk.lastpk.rows:
                entry.lastpk.rows.add(lengths=list(r.lengths), values=r.values)
        return pb

    @classmethod
    def from_proto(cls, pb: binlogdata_pb2.ShardGtid) -> ShardGtid:
        from vitessapi import query_pb2

        tpks = []
        for t in pb.table_p_ks:
            lastpk = LastPK(
                tuple(
                    PKField(f.name, query_pb2.Type.Name(f.type), f.charset, f.flags) for f in t.lastpk.fields
                ),
                tuple(PKRow(tuple(r.lengths), bytes(r.values)) for r in t.lastpk.rows),
            )
            tpks.append(TableLastPK(t.table_name, lastpk))
        return cls(pb.keyspace, pb.shard, pb.gtid, tuple(tpks))


_ENTRY_HEADS: dict[tuple[str, str], str] = {}


def entry_json(keyspace: str, shard: str, gtid: str) -> str:
    """``jackson_dumps(ShardGtid(keyspace, shard, gtid).to_json())`` without copy progress: the
    one home of a position entry's JSON text. Its ``{"keyspace":…,"shard":…,"gtid":`` head is
    written once per shard (a commit moves one shard's GTID; offsets and heartbeats write a
    64-shard VGTID whose entries rarely move), and a GTID set needs no JSON writer."""
    head = _ENTRY_HEADS.get((keyspace, shard))
    if head is None:
        if len(_ENTRY_HEADS) >= 4096:
            _ENTRY_HEADS.clear()
        head = _ENTRY_HEADS[(keyspace, shard)] = jackson_dumps({"keyspace": keyspace, "shard": shard})[:-1] + ',"gtid":'
    quoted = '"' + gtid + '"' if '"' not in gtid and escapes_only_quotes(gtid) else jackson_dumps(gtid)
    return head + quoted + ',"table_p_ks":[]}'


def _entry_json(sg: ShardGtid) -> str:
    """``jackson_dumps(sg.to_json())``."""
    if sg.table_p_ks:
        return jackson_dumps(sg.to_json())
    return entry_json(sg.keyspace, sg.shard, sg.gtid)


@dataclass(frozen=True, slots=True)
class Vgtid:
    """An ordered list of shard positions (order is kept: it is part of the stored bytes)."""

    shard_gtids: tuple[ShardGtid, ...] = ()

    def __post_init__(self) -> None:
        sgs = self.shard_gtids  # built once or more per transaction: keep the check cheap
        if len(sgs) > 1 and len({(sg.shard, sg.keyspace) for sg in sgs}) != len(sgs):
            raise ValueError(f"duplicate shard in VGTID: {[sg.shard for sg in sgs]}")

    @classmethod
    def trusted(cls, shard_gtids: tuple[ShardGtid, ...]) -> Vgtid:
        """A VGTID whose shards are known to be distinct (the previous VGTID's shards, in the same
        places): no duplicate check, which over 64 shards cost more than the rest of a commit."""
        v = object.__new__(cls)
        object.__setattr__(v, "shard_gtids", shard_gtids)
        return v

    # -- access --------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ShardGtid]:
        return iter(self.shard_gtids)

    def __len__(self) -> int:
        return len(self.shard_gtids)

    @property
    def shards(self) -> list[str]:
        return [sg.shard for sg in self.shard_gtids]

    def get(self, shard: str, keyspace: str | None = None) -> ShardGtid | None:
        for sg in self.shard_gtids:
            if sg.shard == shard and (keyspace is None or sg.keyspace == keyspace):
                return sg
        return None

    @property
    def copying(self) -> bool:
        """True when a restart from this VGTID triggers a VStream copy (Debezium's willTriggerVStreamCopy)."""
        return any(sg.copying for sg in self.shard_gtids)

    # -- updates -------------------------------------------------------------------------------

    def update(self, other: Vgtid | Iterable[ShardGtid]) -> Vgtid:
        """Positions of ``other`` replace those of the same (keyspace, shard); new shards are appended."""
        incoming = {(sg.keyspace, sg.shard): sg for sg in other}
        out = [incoming.pop((sg.keyspace, sg.shard), sg) for sg in self.shard_gtids]
        out.extend(incoming.values())
        return Vgtid(tuple(out))

    def only(self, shards: Iterable[str]) -> Vgtid:
        """The positions of the given shards, in this VGTID's order."""
        wanted = set(shards)
        return Vgtid(tuple(sg for sg in self.shard_gtids if sg.shard in wanted))

    def without_copy_state(self) -> Vgtid:
        """The same gtids with ``table_p_ks`` dropped (what Debezium's migration produces)."""
        return Vgtid(tuple(ShardGtid(sg.keyspace, sg.shard, sg.gtid) for sg in self.shard_gtids))

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> str:
        """Debezium's exact JSON text (``Vgtid.toString``): its entries' texts, each written once
        (``_entry_json``; offsets and heartbeats write a 64-shard VGTID whose entries rarely move)."""
        return "[" + ",".join([_entry_json(sg) for sg in self.shard_gtids]) + "]"

    @classmethod
    def from_json(cls, text: str | bytes) -> Vgtid:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"the VGTID is not valid JSON ({exc}): {quote(text)}") from None
        if not isinstance(data, list):
            raise ValueError(f"the VGTID must be a JSON list of shard positions ([{{\"keyspace\", \"shard\", "
                             f"\"gtid\"}}, ...]), got a {type(data).__name__}: {quote(data)}")
        return cls(tuple(ShardGtid.from_json(item) for item in data))

    @classmethod
    def of(cls, keyspace: str, gtids: Mapping[str, str] | Sequence[tuple[str, str]]) -> Vgtid:
        """Build from ``shard -> gtid`` pairs of one keyspace, in the given order."""
        pairs = gtids.items() if isinstance(gtids, Mapping) else gtids
        return cls(tuple(ShardGtid(keyspace, shard, gtid) for shard, gtid in pairs))

    # -- protobuf ------------------------------------------------------------------------------

    def to_proto(self) -> binlogdata_pb2.VGtid:
        from vitessapi import binlogdata_pb2

        return binlogdata_pb2.VGtid(shard_gtids=[sg.to_proto() for sg in self.shard_gtids])

    @classmethod
    def from_proto(cls, pb: binlogdata_pb2.VGtid) -> Vgtid:
        return cls(tuple(ShardGtid.from_proto(sg) for sg in pb.shard_gtids))

    def __str__(self) -> str:
        return self.to_json()
