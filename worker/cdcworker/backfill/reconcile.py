"""Merge a chunk read with the changes between its watermarks (pure; the DBLog/Flink CDC step).

The chunk was read by one consistent statement at some point S with ``low <= S <= high``. The
changes of the window ``(low, high]`` are applied to it in commit order, as upserts and deletes
restricted to the chunk's key range: for every key the last change of the window wins, and a key
without changes in the window keeps its row from the read. Changes in ``(low, S]`` are already in
the read; re-applying them is harmless because a later change (or the read itself) always follows.
The result is exactly the range's state at ``high``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from cdcworker.backfill.spec import Key


class RowLike(Protocol):
    @property
    def lengths(self) -> Sequence[int]: ...

    @property
    def values(self) -> bytes: ...


R = TypeVar("R")


class KeyReader:
    """Reads the primary key of a raw row (``query.Row``: lengths + concatenated values).

    Integral key columns become ``int``, others ``str``: the same values the chunk bounds hold.
    MySQL's text and the binlog rendering agree for these types, so chunk rows and window rows
    yield equal keys for the same row.
    """

    __slots__ = ("_cols",)

    def __init__(self, indexes: Sequence[int], integral: Sequence[bool]) -> None:
        self._cols = tuple(zip(indexes, integral, strict=True))

    def __call__(self, row: RowLike) -> Key:
        lengths = row.lengths
        values = row.values
        out: list[int | str] = []
        for idx, integral in self._cols:
            start = 0
            for n in lengths[:idx]:
                if n > 0:
                    start += n
            n = lengths[idx]
            if n < 0:
                raise ValueError("primary-key column is NULL")
            raw = values[start : start + n]
            out.append(int(raw) if integral else raw.decode("utf-8", "surrogateescape"))
        return tuple(out)


@dataclass
class Merged(Generic[R]):
    """``kept``: rows of the read no change touched; ``changed``: final after-images of keys the
    window changed (in range). Together: the range at the high watermark."""

    kept: list[R] = field(default_factory=list)
    changed: list[R] = field(default_factory=list)
    removed: int = 0  # rows of the read deleted (or moved away) within the window

    @property
    def rows(self) -> int:
        return len(self.kept) + len(self.changed)


def reconcile(
    read: Iterable[R],
    window: Iterable[tuple[R | None, R | None]],
    key_of: Callable[[R], Key],
    in_range: Callable[[Key], bool],
) -> Merged[R]:
    """Apply the window's (before, after) changes, in order, to the read."""
    final: dict[Key, R | None] = {}
    for before, after in window:
        if before is not None:
            k = key_of(before)
            if in_range(k):
                final[k] = None
        if after is not None:
            k = key_of(after)
            if in_range(k):
                final[k] = after
    out: Merged[R] = Merged()
    if not final:
        out.kept = list(read)
        return out
    kept = out.kept
    for row in read:
        k = key_of(row)
        if k in final:
            if final[k] is None:
                out.removed += 1
            continue
        kept.append(row)
    out.changed = [r for r in final.values() if r is not None]
    return out
