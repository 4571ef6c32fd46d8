"""Hand-off between a backfill and the live stream: which change events the worker emits (pure).

Phases, per shard (the state lives in the worker's offset value, see ``to_offset_field``):

``held``
    The backfill runs; the worker follows it and its stream keeps emitting every change, the
    backfilled tables' too. Suppressing them here would lose deletes: a key deleted before its
    chunk's read has no snapshot row, so a record the topic already held for it (from streaming
    before the run) would never be deleted. Emitting them costs only transient states: a change
    older than a key's snapshot row may land after it, and the catch-up re-emits every change
    after the row's high watermark, so the last record per key is right.
``catchup``
    Every chunk of the shard is done. The worker rewinds its stream to the smallest chunk high
    watermark of the held tables and, from there, emits a held table's change for key K if it is
    after the high watermark of K's own chunk (the chunk read already holds everything up to it)
    or after ``rejoin_at`` (the position the stream had reached: it was never emitted); changes of
    the other tables up to ``rejoin_at`` were emitted before the rewind and are not emitted again.
``joined``
    Once the stream passed every chunk high watermark and ``rejoin_at`` the rule emits everything:
    the state can be dropped.

Per key the topic then holds the snapshot row (state at its chunk's high watermark) followed by
every later change, in order. The rule is a pure function of (state, table, key, position), so a
crash in any phase resumes correctly from the stored offset and state.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdcworker.backfill.gtid import covers
from cdcworker.backfill.spec import Key

HELD, CATCHUP, JOINED = "held", "catchup", "joined"
OFFSET_FIELD = "shardcdc_backfill"


@dataclass(frozen=True)
class ChunkMark:
    """A finished chunk's key range and its high watermark."""

    lo: Key | None
    hi: Key | None
    high: str


@dataclass(frozen=True)
class TableMarks:
    """The chunk marks of one table on one shard; the chunks partition the key space."""

    marks: tuple[ChunkMark, ...]
    _los: tuple[Key, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, marks: Iterable[ChunkMark]) -> TableMarks:
        ordered = sorted(marks, key=lambda m: (m.lo is not None, m.lo or ()))
        if not ordered or ordered[0].lo is not None or ordered[-1].hi is not None:
            raise ValueError("chunk marks must cover the key space (first lo and last hi unbounded)")
        for a, b in itertools.pairwise(ordered):
            if a.hi != b.lo:
                raise ValueError(f"chunk marks leave a gap or overlap at {a.hi!r} / {b.lo!r}")
        return cls(tuple(ordered), tuple(m.lo for m in ordered[1:] if m.lo is not None))

    def high_for(self, key: Key) -> str:
        """The high watermark of the chunk that holds ``key``."""
        return self.marks[bisect.bisect_right(self._los, key)].high

    @property
    def highs(self) -> list[str]:
        return [m.high for m in self.marks]


@dataclass(frozen=True)
class ShardHandoff:
    """One shard's hand-off state."""

    shard: str
    run_id: str
    tables: tuple[str, ...]
    phase: str = HELD
    rejoin_at: str | None = None  # catchup: the stream position before the rewind
    marks: Mapping[str, TableMarks] = field(default_factory=dict)  # catchup: per held table

    def emit(self, table: str, key: Key | None, position: str) -> bool:
        """Emit the change of ``table`` for ``key`` whose transaction ends at ``position``?"""
        if table not in self.tables:
            # Other tables: already emitted up to rejoin_at before the rewind.
            return self.phase != CATCHUP or self.rejoin_at is None or not covers(self.rejoin_at, position)
        if self.phase in (HELD, JOINED):
            return True
        # Changes up to rejoin_at were emitted live (``held`` emits everything); a change after it
        # was not, even when a chunk read already holds it: the worker may lag behind the backfill
        # (rejoin_at before a chunk's high watermark), and suppressing such a change would lose it
        # (a delete leaves no snapshot row). Emitting it after the row is harmless: every later
        # change of the key follows it in order.
        if self.rejoin_at is not None and not covers(self.rejoin_at, position):
            return True
        tm = self.marks.get(table)
        if tm is None or key is None:
            return False  # cannot place it: the chunk read holds it (conservative for keyless rows)
        return not covers(tm.high_for(key), position)

    def emit_change(self, table: str, before: Key | None, after: Key | None, position: str) -> tuple[bool, bool]:
        """For a row change: (emit the part for the old key, emit the part for the new key).

        A primary-key change is a delete of the old key and a create of the new one (as the
        encoder writes it); each half is judged by its own key's chunk.
        """
        return (
            before is not None and self.emit(table, before, position),
            after is not None and self.emit(table, after, position),
        )

    def catchup_start(self) -> str | None:
        """Where the rewound stream starts: the smallest chunk high watermark of the held tables."""
        highs = [h for tm in self.marks.values() for h in tm.highs]
        return smallest(highs)

    def finished(self, position: str) -> bool:
        """True once the stream passed every chunk high watermark and ``rejoin_at``."""
        if self.phase != CATCHUP:
            return self.phase == JOINED
        highs = [h for tm in self.marks.values() for h in tm.highs]
        if self.rejoin_at is not None:
            highs.append(self.rejoin_at)
        return all(covers(position, h) for h in highs)

    def to_catchup(self, marks: Mapping[str, TableMarks], rejoin_at: str | None) -> ShardHandoff:
        return ShardHandoff(self.shard, self.run_id, self.tables, CATCHUP, rejoin_at, dict(marks))

    # --- offset value ------------------------------------------------------------------------

    def to_offset_field(self) -> dict[str, Any]:
        """What the worker stores next to the shard's gtid (marks are reloaded from the progress
        topic, which holds them durably; the offset only says which run and phase)."""
        out: dict[str, Any] = {"run": self.run_id, "tables": list(self.tables), "phase": self.phase}
        if self.rejoin_at is not None:
            out["rejoin_at"] = self.rejoin_at
        return out

    @classmethod
    def from_offset_field(cls, shard: str, d: Mapping[str, Any], marks: Mapping[str, TableMarks] | None = None) -> ShardHandoff:
        return cls(shard, d["run"], tuple(d["tables"]), d.get("phase", HELD), d.get("rejoin_at"), dict(marks or {}))


def smallest(positions: Sequence[str]) -> str | None:
    """A position covered by every other one (GTID sets of one shard grow monotonically)."""
    best: str | None = None
    for p in positions:
        if best is None or covers(best, p):
            best = p
    return best


def marks_from_run(watermarks: Iterable[tuple[Key | None, Key | None, str]]) -> TableMarks:
    """``RunState.watermarks(shard, table)`` -> ``TableMarks``."""
    return TableMarks.of(ChunkMark(lo, hi, high) for lo, hi, high in watermarks)
