"""One shard's data: an in-memory SQLite database holding the rows in their stored form.

The executor computes before/after images and calls the row primitives here; SQLite evaluates
WHERE clauses, ordering and limits. All access happens under the shard lock.

Next to the rows, each table with a primary key keeps a cache of its rows' ``query.Row`` encodings
(MySQL text, framed as ``QueryResult.rows`` entries as Execute/StreamExecute send them), keyed by the stored primary-key value(s). Every
write drops the keys it touches and bumps ``writes``; a reader that rendered rows outside the lock
adds them only if no write happened since its read (``cache_rows``), so the cache never holds a
rendering of a row other than the current one. MySQL serves such reads from its buffer pool at
memory speed; the cache is what keeps the simulator's query path from being the bottleneck.
A table keyed by one INTEGER column whose rows are all cached also gets a key index once it is
read twice without a change in between (``ordered_rows``), so a backfill chunk's range read is a
slice, as an index range scan is in MySQL.
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from .schema import TableSchema


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ShardStore:
    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=MEMORY")  # OFF would make ROLLBACK a no-op
        self.conn.execute("PRAGMA synchronous=OFF")
        self.tables: dict[str, TableSchema] = {}  # lower-case name -> schema
        self.sidecar: dict[str, TableSchema] = {}  # _vt tables (heartbeat), invisible to SQL
        self.row_cache: dict[str, dict[Any, bytes]] = {}  # lower-case table -> pk key -> query.Row bytes
        self.writes = 0  # bumped (under cache_lock) by every write: readers' cache validity check
        self.cache_lock = threading.Lock()
        # lower-case table -> (writes, cache size, schema) at the last look, whether the key index
        # was built at that state, and the index (None: some row was not cached).
        self._ordered: dict[str, tuple[tuple[int, int, int], bool, tuple[list[int], list[bytes]] | None]] = {}

    # -- encoded-row cache
    ROW_CACHE_LIMIT = 1_000_000  # rows per store; beyond it reads render without caching

    @staticmethod
    def pk_key(schema: TableSchema) -> Callable[[Sequence[Any]], Any]:
        """The cache key of a full stored row: its PK value (one column) or tuple of values."""
        return operator.itemgetter(*schema.pk_indexes)

    def _touch(self, schema: TableSchema, rows: Iterable[Sequence[Any] | None] = (), drop: bool = False) -> None:
        """A write to `schema`'s table: forget the cached encodings of `rows` (full stored rows)."""
        with self.cache_lock:
            self.writes += 1
            name = schema.name.lower()
            self._ordered.pop(name, None)  # stale now: free it
            if drop or not schema.pk:
                self.row_cache.pop(name, None)
                return
            cache = self.row_cache.get(name)
            if not cache:
                return
            key = self.pk_key(schema)
            for r in rows:
                if r is not None:
                    cache.pop(key(r), None)

    def cached_rows(self, schema: TableSchema) -> dict[Any, bytes]:
        """The table's cache (read without locking: entries are only ever valid or absent)."""
        return self.row_cache.get(schema.name.lower()) or {}

    def cache_rows(self, schema: TableSchema, seen_writes: int, items: dict[Any, bytes]) -> None:
        """Add encodings rendered from rows read when ``writes == seen_writes``, unless a write
        happened since (the rows may be stale) or the cache is full."""
        if not schema.pk or not items:
            return
        with self.cache_lock:
            if self.writes != seen_writes or self.tables.get(schema.name.lower()) is not schema:
                return
            cache = self.row_cache.setdefault(schema.name.lower(), {})
            if sum(len(c) for c in self.row_cache.values()) + len(items) <= self.ROW_CACHE_LIMIT:
                cache.update(items)

    def ordered_rows(self, schema: TableSchema) -> tuple[list[int], list[bytes]] | None:
        """Every row's key, ascending, and its cached encoding, for a table keyed by one INTEGER
        column (its SQLite rowid) whose rows are all in the cache: a range read is then two
        bisections and a slice, as an index range scan over a warm buffer pool is in MySQL.

        Built from one key scan on the second look at an unchanged table (no write, no new cache
        entry since the first), so a table under writes, or one being read cold chunk by chunk,
        keeps the per-read path instead of rescanning all its keys per read. None otherwise.
        Caller holds the cluster lock."""
        name = schema.name.lower()
        cache = self.row_cache.get(name)
        if not cache:
            return None
        stamp = (self.writes, len(cache), id(schema))
        last = self._ordered.get(name)
        if last is None or last[0] != stamp:
            self._ordered[name] = (stamp, False, None)  # first look at this state
            return None
        if last[1]:
            return last[2]
        pk = q(schema.pk[0])
        keys = [k for (k,) in self.conn.execute(f"SELECT {pk} FROM {q(schema.name)} ORDER BY {pk}")]
        get = cache.get
        rows = [get(k) for k in keys]
        ordered = None if None in rows else (keys, cast(list[bytes], rows))
        self._ordered[name] = (stamp, True, ordered)
        return ordered

    def table(self, name: str) -> TableSchema | None:
        return self.tables.get(name.lower())

    def _coldef(self, schema: TableSchema, i: int) -> str:
        c = schema.columns[i]
        decl = f"{q(c.name)} {c.ct.storage}"
        if c.ct.storage == "TEXT" and c.ct.charset != 63:
            decl += " COLLATE NOCASE"  # approximates utf8mb4_0900_ai_ci ordering and uniqueness
        return decl

    def create_table(self, schema: TableSchema) -> None:
        cols = ", ".join(self._coldef(schema, i) for i in range(len(schema.columns)))
        pk = f", PRIMARY KEY ({', '.join(q(c) for c in schema.pk)})" if schema.pk else ""  # else: SQLite rowid
        self.conn.execute(f"CREATE TABLE {q(schema.name)} ({cols}{pk})")
        for kname, kcols in schema.unique_keys:
            self.conn.execute(
                f"CREATE UNIQUE INDEX {q(schema.name + '__' + kname)} ON {q(schema.name)} "
                f"({', '.join(q(c) for c in kcols)})"
            )
        self.tables[schema.name.lower()] = schema
        self._touch(schema, drop=True)

    def add_columns(self, schema: TableSchema, start: int) -> None:
        self._touch(schema, drop=True)
        for i in range(start, len(schema.columns)):
            c = schema.columns[i]
            self.conn.execute(f"ALTER TABLE {q(schema.name)} ADD COLUMN {self._coldef(schema, i)}")
            if c.has_default and isinstance(c.default, int | float | str | bytes):
                self.conn.execute(f"UPDATE {q(schema.name)} SET {q(c.name)} = ?", (c.default,))

    def drop_table(self, name: str) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {q(name)}")
        self.tables.pop(name.lower(), None)
        with self.cache_lock:
            self.writes += 1
            self.row_cache.pop(name.lower(), None)
            self._ordered.pop(name.lower(), None)

    # -- row primitives (stored values, in column order)
    def select_sql(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def get_by_pk(self, schema: TableSchema, pk: Sequence[Any]) -> tuple[Any, ...] | None:
        where = " AND ".join(f"{q(c)} = ?" for c in schema.pk)
        cols = ", ".join(q(c.name) for c in schema.columns)
        row = self.conn.execute(f"SELECT {cols} FROM {q(schema.name)} WHERE {where}", list(pk)).fetchone()
        return tuple(row) if row is not None else None

    def find_unique(self, schema: TableSchema, row: Sequence[Any]) -> tuple[str, tuple[Any, ...]] | None:
        """The first existing row that conflicts with `row` on the PK or a unique key: (key, row)."""
        keys = [("PRIMARY", schema.pk)] if schema.pk else []
        keys += schema.unique_keys
        cols = ", ".join(q(c.name) for c in schema.columns)
        for kname, kcols in keys:
            vals = [row[schema.index(c)] for c in kcols]
            if any(v is None for v in vals):
                continue
            where = " AND ".join(f"{q(c)} = ?" for c in kcols)
            hit = self.conn.execute(f"SELECT {cols} FROM {q(schema.name)} WHERE {where}", vals).fetchone()
            if hit is not None:
                return kname, tuple(hit)
        return None

    def insert(self, schema: TableSchema, row: Sequence[Any]) -> None:
        self._touch(schema, (row,))
        cols = ", ".join(q(c.name) for c in schema.columns)
        marks = ", ".join("?" * len(schema.columns))
        self.conn.execute(f"INSERT INTO {q(schema.name)} ({cols}) VALUES ({marks})", list(row))

    def insert_many(self, schema: TableSchema, rows: Sequence[Sequence[Any]]) -> None:
        self._touch(schema, rows)
        cols = ", ".join(q(c.name) for c in schema.columns)
        marks = ", ".join("?" * len(schema.columns))
        self.conn.executemany(f"INSERT INTO {q(schema.name)} ({cols}) VALUES ({marks})", [list(r) for r in rows])

    def _identify(self, schema: TableSchema, old: Sequence[Any]) -> tuple[str, list[Any]]:
        """WHERE clause for exactly the row `old`: by primary key, else one row with that whole image."""
        if schema.pk:
            return " AND ".join(f"{q(c)} = ?" for c in schema.pk), [old[i] for i in schema.pk_indexes]
        same = " AND ".join(f"{q(c.name)} IS ?" for c in schema.columns)
        return f"rowid = (SELECT rowid FROM {q(schema.name)} WHERE {same} LIMIT 1)", list(old)

    def update(self, schema: TableSchema, old: Sequence[Any], new: Sequence[Any]) -> None:
        self._touch(schema, (old, new))
        sets = ", ".join(f"{q(c.name)} = ?" for c in schema.columns)
        where, params = self._identify(schema, old)
        self.conn.execute(f"UPDATE {q(schema.name)} SET {sets} WHERE {where}", [*new, *params])

    def delete(self, schema: TableSchema, old: Sequence[Any]) -> None:
        self._touch(schema, (old,))
        where, params = self._identify(schema, old)
        self.conn.execute(f"DELETE FROM {q(schema.name)} WHERE {where}", params)

    def all_rows(self, schema: TableSchema) -> list[tuple[Any, ...]]:
        cols = ", ".join(q(c.name) for c in schema.columns)
        order = ", ".join(q(c) for c in schema.copy_key)
        return [tuple(r) for r in self.conn.execute(f"SELECT {cols} FROM {q(schema.name)} ORDER BY {order}")]

    def rows_after(self, schema: TableSchema, lastpk: Sequence[Any] | None) -> list[tuple[Any, ...]]:
        """Rows in copy-key order with key > lastpk (the copy-phase snapshot read)."""
        cols = ", ".join(q(c.name) for c in schema.columns)
        order = ", ".join(q(c) for c in schema.copy_key)
        sql = f"SELECT {cols} FROM {q(schema.name)}"
        params: list[Any] = []
        if lastpk is not None:
            sql += f" WHERE ({order}) > ({', '.join('?' * len(schema.copy_key))})"
            params = list(lastpk)
        return [tuple(r) for r in self.conn.execute(sql + f" ORDER BY {order}", params)]

    def begin(self) -> None:
        self.conn.execute("BEGIN")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
