"""Resharding: copy rows to target shards by keyspace id, switch writes, journal the sources."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from vitessapi import binlogdata_pb2
from vtgatesim import keyrange

from . import binlog as bl
from .executor import ShardTxn
from .schema import TableSchema
from .topology import keyspace_id

if TYPE_CHECKING:
    from .sim import VTGateSim


def reshard(sim: VTGateSim, keyspace: str, targets: list[str], delete_old: bool = False) -> binlogdata_pb2.Journal:
    """Split or merge the serving shards of `keyspace` into `targets` (a full, non-overlapping cover)."""
    topo = sim.topo
    with topo.lock:
        ks = topo.keyspace(keyspace)
        sources = ks.serving_shards()
        if not keyrange.covers(targets):
            raise ValueError(f"target shards {targets} do not cover the keyspace")
        if sorted(targets) == sorted(s.name for s in sources):
            raise ValueError("target shards equal the source shards")
        new = []
        for name in keyrange.sort_shards(targets):
            if name in ks.shards and not ks.shards[name].deleted:
                raise ValueError(f"shard {keyspace}/{name} already exists")
            new.append(topo.add_shard(ks, name, serving=False))
        ks.sharded = targets != ["0"]
        # 1. schema and rows (VReplication copy: one transaction per table per target)
        tables: list[TableSchema] = sorted(sources[0].store.tables.values(), key=lambda t: t.name)
        for t in new:
            for schema in tables:
                t.store.create_table(TableSchema(name=schema.name, columns=list(schema.columns), pk=list(schema.pk),
                                                 unique_keys=list(schema.unique_keys), keys=list(schema.keys),
                                                 version=schema.version))
        for schema in tables:
            vcol = schema.index(ks.vindex_column(schema.name)) if ks.sharded else None
            txns = {t.name: ShardTxn(t) for t in new}
            for src in sources:
                for row in src.store.all_rows(src.store.tables[schema.name.lower()]):
                    dest = new[0]
                    if vcol is not None:
                        ksid = keyspace_id(row[vcol])
                        dest = next(t for t in new if t.contains(ksid))
                    tschema = dest.store.tables[schema.name.lower()]
                    dest.store.insert(tschema, row)
                    txns[dest.name].record(tschema, None, row)
            for t in new:
                txns[t.name].commit()
        # 2. switch writes, 3. journal on every source
        for s in sources:
            s.serving = False
        for t in new:
            t.serving = True
        # Each target primary is a new tablet whose _vt.vreplication ids start at 1, with one
        # Reshard stream per overlapping source shard.
        streams = {t.name: list(range(1, 1 + sum(keyrange.overlaps(s.key_range, t.key_range) for s in sources)))
                   for t in new}
        journal = binlogdata_pb2.Journal(
            id=hash_streams(keyspace, streams),
            migration_type=binlogdata_pb2.SHARDS,
            # the Match of the streams' filter rules: a Reshard stream copies "/.*" (in its keyrange)
            tables=["/.*"],
            shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=keyspace, shard=t.name, gtid=t.binlog.position) for t in new],
            participants=[binlogdata_pb2.KeyspaceShard(keyspace=keyspace, shard=n)
                          for n in keyrange.sort_shards(s.name for s in sources)],
            # source_workflows lists the other VReplication workflows running on the source shards
            # (StreamMigrator.StopStreams); the simulator runs none.
        )
        now = int(time.time())
        for s in sources:
            j = binlogdata_pb2.Journal()
            j.CopyFrom(journal)
            j.local_position = s.binlog.position
            s.binlog.append(bl.JOURNAL, now, journal=j, database="_vt")
        if delete_old:
            delete_shards(sim, keyspace, [s.name for s in sources])
        ks.sequences.clear()
        return journal


def hash_streams(target_keyspace: str, streams: dict[str, list[int]]) -> int:
    """workflow.HashStreams, the journal id: 64-bit FNV-1 over the target keyspace and the sorted
    "shard:uid" of every stream of the migration, top bit dropped. It differs per migration
    (other target shards), so a VStream can tell successive reshards' journals apart."""
    h = 0xCBF29CE484222325
    for b in (target_keyspace + "".join(sorted(f"{s}:{u}" for s, uids in streams.items() for u in uids))).encode():
        h = ((h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF) ^ b
    return h & 0x7FFFFFFFFFFFFFFF


def delete_shards(sim: VTGateSim, keyspace: str, names: list[str]) -> None:
    with sim.topo.lock:
        ks = sim.topo.keyspace(keyspace)
        for n in names:
            s = ks.shards[n]
            if s.serving:
                raise ValueError(f"shard {keyspace}/{n} is serving")
            s.deleted = True
            s.binlog.close()
