"""What a backfill run is: its inputs (``BackfillSpec``) and its unit of work (``Chunk``).

Both are plain frozen data with a JSON form, because they cross process boundaries: the Spark
driver ships chunk descriptors (never rows) to executors, and chunk identities are the keys of
the progress topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from cdcworker.jsontypes import JsonMapping, JsonObject

# A primary-key value as it travels in descriptors and the progress topic (JSON-safe).
KeyValue = int | str
Key = tuple[KeyValue, ...]

DEFAULT_CHUNK_SIZE = 8096  # Flink CDC's snapshot.split.size
DEFAULT_MAX_CHUNKS = 4096  # per shard and table; larger tables get larger chunks


@dataclass(frozen=True)
class BackfillSpec:
    """Inputs of one run.

    ``properties``/``config_files`` are the connector's configuration (the worker's loader reads
    them on every executor, so ``${file:...}`` secrets resolve there and never travel in the
    job). ``tables`` are regexes matched against ``table`` or ``keyspace.table`` (as Debezium's
    ``data-collections``); ``conditions`` maps a table name (or regex) to an
    ``additional-condition`` SQL expression.
    """

    run_id: str
    tables: tuple[str, ...]
    properties: Mapping[str, str] = field(default_factory=dict)
    config_files: tuple[str, ...] = ()
    conditions: Mapping[str, str] = field(default_factory=dict)
    shards: tuple[str, ...] = ()  # empty: every serving shard of the keyspace
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_chunks: int = DEFAULT_MAX_CHUNKS
    max_concurrent_chunks_per_shard: int = 2
    rows_per_second_per_shard: float = 0.0  # 0: unthrottled
    progress_topic: str = ""  # default: "<topic.prefix>.backfill-progress"
    # The hand-shake: read a shard's chunks only once its worker announced the hold (``held``
    # marker). Set by the operator, whose connectors have workers; a standalone run has none.
    await_holds: bool = False
    hold_timeout_seconds: float = 600.0
    epoch: int = 0  # the attempt generation (set by ``run_backfill`` from the progress topic)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", self.run_id):
            raise ValueError(f"run id {self.run_id!r}: 1-63 letters, digits, '.', '_' or '-'")
        if not self.tables:
            raise ValueError("a backfill needs at least one table pattern")
        if self.chunk_size < 1 or self.max_chunks < 1 or self.max_concurrent_chunks_per_shard < 1:
            raise ValueError("chunk_size, max_chunks and max_concurrent_chunks_per_shard must be >= 1")
        if self.hold_timeout_seconds <= 0:
            raise ValueError("hold_timeout_seconds must be > 0")
        for pattern in (*self.tables, *self.conditions):
            re.compile(pattern)

    def matches(self, keyspace: str, table: str) -> bool:
        return any(re.fullmatch(p, table) or re.fullmatch(p, f"{keyspace}.{table}") for p in self.tables)

    def condition_for(self, keyspace: str, table: str) -> str | None:
        for pattern, cond in self.conditions.items():
            if pattern in (table, f"{keyspace}.{table}") or re.fullmatch(pattern, table) or re.fullmatch(
                pattern, f"{keyspace}.{table}"
            ):
                return cond
        return None

    def with_(self, **changes: Any) -> BackfillSpec:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        return replace(self, **changes)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "run_id": self.run_id,
                "tables": list(self.tables),
                "properties": dict(self.properties),
                "config_files": list(self.config_files),
                "conditions": dict(self.conditions),
                "shards": list(self.shards),
                "chunk_size": self.chunk_size,
                "max_chunks": self.max_chunks,
                "max_concurrent_chunks_per_shard": self.max_concurrent_chunks_per_shard,
                "rows_per_second_per_shard": self.rows_per_second_per_shard,
                "progress_topic": self.progress_topic,
                "await_holds": self.await_holds,
                "hold_timeout_seconds": self.hold_timeout_seconds,
                "epoch": self.epoch,
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> BackfillSpec:
        d = orjson.loads(data)
        return cls(
            run_id=d["run_id"],
            tables=tuple(d["tables"]),
            properties=d.get("properties", {}),
            config_files=tuple(d.get("config_files", ())),
            conditions=d.get("conditions", {}),
            shards=tuple(d.get("shards", ())),
            chunk_size=int(d.get("chunk_size", DEFAULT_CHUNK_SIZE)),
            max_chunks=int(d.get("max_chunks", DEFAULT_MAX_CHUNKS)),
            max_concurrent_chunks_per_shard=int(d.get("max_concurrent_chunks_per_shard", 2)),
            rows_per_second_per_shard=float(d.get("rows_per_second_per_shard", 0.0)),
            progress_topic=d.get("progress_topic", ""),
            await_holds=bool(d.get("await_holds", False)),
            hold_timeout_seconds=float(d.get("hold_timeout_seconds", 600.0)),
            epoch=int(d.get("epoch", 0)),
        )


def _key(v: Sequence[KeyValue] | None) -> Key | None:
    return None if v is None else tuple(v)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One primary-key range of one table on one shard: ``lo <= pk < hi`` (None = unbounded).

    The first chunk of a table is unbounded below and the last unbounded above, so the chunks of
    a (shard, table) partition the whole key space: every key, including keys inserted while the
    run goes on, belongs to exactly one chunk (the hand-off relies on it).
    """

    run_id: str
    keyspace: str
    shard: str
    table: str
    index: int
    pk: tuple[str, ...]
    lo: Key | None
    hi: Key | None
    condition: str | None = None
    estimated_rows: int = 0

    @property
    def ident(self) -> tuple[str, str, str, int]:
        return (self.run_id, self.shard, self.table, self.index)

    def progress_key(self) -> bytes:
        """Key of this chunk's record in the progress topic (compacted: one record per chunk)."""
        return orjson.dumps([self.run_id, self.keyspace, self.shard, self.table, self.index])

    def contains(self, key: Key) -> bool:
        """``lo <= key < hi`` in Python tuple order (= SQL row-constructor order for integer keys)."""
        return (self.lo is None or key >= self.lo) and (self.hi is None or key < self.hi)

    def to_dict(self) -> JsonObject:
        return {
            "run_id": self.run_id,
            "keyspace": self.keyspace,
            "shard": self.shard,
            "table": self.table,
            "index": self.index,
            "pk": list(self.pk),
            "lo": None if self.lo is None else list(self.lo),
            "hi": None if self.hi is None else list(self.hi),
            "condition": self.condition,
            "estimated_rows": self.estimated_rows,
        }

    @classmethod
    def from_dict(cls, d: JsonMapping) -> Chunk:
        return cls(
            run_id=d["run_id"],
            keyspace=d["keyspace"],
            shard=d["shard"],
            table=d["table"],
            index=int(d["index"]),
            pk=tuple(d["pk"]),
            lo=_key(d.get("lo")),
            hi=_key(d.get("hi")),
            condition=d.get("condition"),
            estimated_rows=int(d.get("estimated_rows", 0)),
        )

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: bytes | str) -> Chunk:
        return cls.from_dict(orjson.loads(data))
