"""Splitting a table on one shard into primary-key chunks, and the SQL that reads them (pure).

As Flink CDC's ``MySqlChunkSplitter``: a single integer key whose values are dense enough
(distribution factor ``(max - min + 1) / rows`` within [0.05, 1000]) is cut into even ranges
computed from MIN/MAX/COUNT; anything else (composite or non-integer keys, skewed values) uses
split points read from the table, one small query per chunk, walking the key index. Both are
bounded: never more than ``max_chunks`` chunks per shard and table (the chunk size grows
instead), and the driver holds only the boundaries, never rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdcworker.backfill.spec import Chunk, Key

DENSE_LOWER = 0.05
DENSE_UPPER = 1000.0

Bounds = tuple[Key | None, Key | None]


@dataclass(frozen=True, slots=True)
class TableStats:
    """``COUNT(*)``, and ``MIN``/``MAX`` of the first key column (for the density check)."""

    rows: int
    min_value: Any = None  # Any: a column's value as VTGate returns it (int, str or bytes), bound back into SQL
    max_value: Any = None  # Any: a column's value as VTGate returns it (int, str or bytes), bound back into SQL


def effective_chunk_size(rows: int, chunk_size: int, max_chunks: int) -> int:
    """The chunk size that keeps the number of chunks within ``max_chunks``."""
    return max(chunk_size, math.ceil(rows / max_chunks)) if rows else chunk_size


def distribution_factor(min_value: int, max_value: int, rows: int) -> float:
    return (max_value - min_value + 1) / rows if rows else math.inf


def is_dense(stats: TableStats, integral_single_key: bool) -> bool:
    if not integral_single_key or stats.rows == 0:
        return False
    if not isinstance(stats.min_value, int) or not isinstance(stats.max_value, int):
        return False
    return DENSE_LOWER <= distribution_factor(stats.min_value, stats.max_value, stats.rows) <= DENSE_UPPER


def bounds_from_points(points: Sequence[Key]) -> list[Bounds]:
    """Split points ``p1 < p2 < ...`` -> ``[(None, p1), (p1, p2), ..., (pn, None)]``."""
    out: list[Bounds] = []
    lo: Key | None = None
    for p in points:
        out.append((lo, p))
        lo = p
    out.append((lo, None))
    return out


def even_points(stats: TableStats, chunk_size: int, max_chunks: int) -> list[Key]:
    """Even split points over ``[min, max]`` for a dense integer key."""
    lo, hi = int(stats.min_value), int(stats.max_value)
    span = hi - lo + 1
    size = effective_chunk_size(stats.rows, chunk_size, max_chunks)
    step = max(1, math.ceil(size * distribution_factor(lo, hi, stats.rows)), math.ceil(span / max_chunks))
    return [(v,) for v in range(lo + step, hi + 1, step)]


def query_points(next_point: Callable[[Key | None], Key | None], max_chunks: int) -> list[Key]:
    """Walk the key index: ``next_point(start)`` is the key ``chunk size`` rows after ``start``
    (from the beginning for None), or None past the end."""
    points: list[Key] = []
    start: Key | None = None
    while len(points) < max_chunks - 1:
        p = next_point(start)
        if p is None:
            break
        if start is not None and p <= start:  # cannot happen with a unique key; never loop
            raise ValueError(f"split point {p!r} does not advance past {start!r}")
        points.append(p)
        start = p
    return points


def make_chunks(
    run_id: str,
    keyspace: str,
    shard: str,
    table: str,
    pk: Sequence[str],
    bounds: Sequence[Bounds],
    rows: int,
    condition: str | None,
) -> list[Chunk]:
    per = math.ceil(rows / len(bounds)) if bounds else 0
    return [
        Chunk(run_id, keyspace, shard, table, i, tuple(pk), lo, hi, condition, per)
        for i, (lo, hi) in enumerate(bounds)
    ]


# --- SQL ------------------------------------------------------------------------------------


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _row(pk: Sequence[str]) -> str:
    cols = ", ".join(quote(c) for c in pk)
    return cols if len(pk) == 1 else f"({cols})"


def _params(prefix: str, n: int) -> str:
    names = ", ".join(f":{prefix}{i}" for i in range(n))
    return names if n == 1 else f"({names})"


def _binds(prefix: str, key: Key) -> dict[str, object]:
    return {f"{prefix}{i}": v for i, v in enumerate(key)}


def range_where(pk: Sequence[str], lo: Key | None, hi: Key | None, condition: str | None) -> tuple[str, dict[str, object]]:
    """``WHERE`` text (possibly empty) and bind variables for ``lo <= pk < hi AND (condition)``."""
    parts: list[str] = []
    binds: dict[str, object] = {}
    if lo is not None:
        parts.append(f"{_row(pk)} >= {_params('lo', len(pk))}")
        binds.update(_binds("lo", lo))
    if hi is not None:
        parts.append(f"{_row(pk)} < {_params('hi', len(pk))}")
        binds.update(_binds("hi", hi))
    if condition:
        parts.append(f"({condition})")
    return (" WHERE " + " AND ".join(parts) if parts else ""), binds


COMMENT = "/*vt+ WORKLOAD_NAME=shardcdc-backfill */ "


def chunk_select(chunk: Chunk) -> tuple[str, dict[str, object]]:
    """The chunk read: every column of the rows in the range (one consistent statement)."""
    where, binds = range_where(chunk.pk, chunk.lo, chunk.hi, chunk.condition)
    return f"{COMMENT}SELECT * FROM {quote(chunk.table)}{where}", binds


def stats_select(table: str, pk: Sequence[str], condition: str | None) -> tuple[str, dict[str, object]]:
    where, binds = range_where(pk, None, None, condition)
    first = quote(pk[0])
    return f"{COMMENT}SELECT COUNT(*), MIN({first}), MAX({first}) FROM {quote(table)}{where}", binds


def split_select(
    table: str, pk: Sequence[str], start: Key | None, offset: int, condition: str | None
) -> tuple[str, dict[str, object]]:
    """The key ``offset`` rows after ``start`` (inclusive) in key order."""
    where, binds = range_where(pk, start, None, condition)
    cols = ", ".join(quote(c) for c in pk)
    return f"{COMMENT}SELECT {cols} FROM {quote(table)}{where} ORDER BY {cols} LIMIT 1 OFFSET {int(offset)}", binds


def columns_select(table: str) -> str:
    """Column metadata only (the result's fields carry types and the primary-key flags)."""
    return f"{COMMENT}SELECT * FROM {quote(table)} LIMIT 0"
