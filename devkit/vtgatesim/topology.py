"""Keyspaces, shards and the vschema (a `hash` vindex column per sharded table)."""

from __future__ import annotations

import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from vtgatesim import keyrange

from .binlog import Binlog
from .store import ShardStore

CELL = "zone1"


@dataclass
class Shard:
    keyspace: str
    name: str
    tablet_uid: int
    server_uuid: str
    serving: bool = True
    deleted: bool = False
    store: ShardStore = field(default_factory=ShardStore)
    binlog: Binlog = field(init=False)
    # Cleared while the tablet throttler holds the shard's vstreamers (VTGateSim.throttle).
    unthrottled: threading.Event = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.binlog = Binlog(self.server_uuid)
        self.unthrottled = threading.Event()
        self.unthrottled.set()

    @property
    def key_range(self) -> keyrange.KeyRange:
        return keyrange.parse_shard(self.name)

    def contains(self, ksid: bytes) -> bool:
        return self.name == "0" or self.key_range.contains(ksid)

    @property
    def database(self) -> str:
        return "vt_" + self.keyspace


@dataclass
class Keyspace:
    name: str
    sharded: bool
    shards: dict[str, Shard] = field(default_factory=dict)
    vindex_columns: dict[str, str] = field(default_factory=dict)  # table (lower) -> column
    default_vindex_column: str = "id"
    sequences: dict[str, int] = field(default_factory=dict)

    def serving_shards(self) -> list[Shard]:
        names = keyrange.sort_shards(n for n, s in self.shards.items() if s.serving and not s.deleted)
        return [self.shards[n] for n in names]

    def vindex_column(self, table: str) -> str:
        return self.vindex_columns.get(table.lower(), self.default_vindex_column)

    def shard_for_value(self, value: Any) -> Shard:
        """Route a vindex column value to its serving shard (hash vindex on integers)."""
        serving = self.serving_shards()
        if not self.sharded:
            return serving[0]
        ksid = keyspace_id(value)
        for s in serving:
            if s.contains(ksid):
                return s
        raise LookupError(f"no serving shard for keyspace id {ksid.hex()}")


def keyspace_id(value: Any) -> bytes:
    """The hash vindex: integers via DES (as Vitess); other values are hashed via their integer form."""
    if isinstance(value, bytes | bytearray):
        value = value.decode()
    return keyrange.hash_keyspace_id(int(value))


class Topology:
    def __init__(self) -> None:
        self.keyspaces: dict[str, Keyspace] = {}
        self.lock = threading.RLock()  # the cluster write lock: DML, DDL, snapshots, resharding
        self._next_uid = 100

    def new_uuid(self, seed: str) -> str:
        return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"vtgatesim/{seed}/{self._next_uid}"))

    def add_shard(self, ks: Keyspace, name: str, serving: bool = True) -> Shard:
        keyrange.parse_shard(name)
        uid = self._next_uid
        self._next_uid += 100
        shard = Shard(keyspace=ks.name, name=name, tablet_uid=uid,
                      server_uuid=self.new_uuid(f"{ks.name}/{name}"), serving=serving)
        ks.shards[name] = shard
        return shard

    def create_keyspace(self, name: str, shards: list[str] | int | None = None,
                        vindex_column: str = "id", vindex_columns: dict[str, str] | None = None) -> Keyspace:
        if name in self.keyspaces:
            raise ValueError(f"keyspace {name} already exists")
        if shards is None or shards == 1 or shards == ["0"]:
            names = ["0"]
        elif isinstance(shards, int):
            names = keyrange.even_shard_names(shards)
        else:
            names = list(shards)
        sharded = names != ["0"]
        if sharded and not keyrange.covers(names):
            raise ValueError(f"shards {names} do not cover the keyspace")
        ks = Keyspace(name=name, sharded=sharded, default_vindex_column=vindex_column,
                      vindex_columns={k.lower(): v for k, v in (vindex_columns or {}).items()})
        for n in names:
            self.add_shard(ks, n)
        self.keyspaces[name] = ks
        return ks

    def keyspace(self, name: str) -> Keyspace:
        try:
            return self.keyspaces[name]
        except KeyError:
            raise LookupError(f"keyspace {name} not found") from None

    def shard(self, keyspace: str, shard: str) -> Shard:
        ks = self.keyspace(keyspace)
        s = ks.shards.get(shard)
        if s is None or s.deleted:
            raise LookupError(f"shard {keyspace}/{shard} not found")
        return s
