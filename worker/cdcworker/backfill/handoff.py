"""Hand-off between a backfill and the live stream: which change events the worker emits (pure).

Phases, per shard (the state lives in the worker's offset value, see ``to_offset_field``):

``held``
    The backfill runs. The backfilled ("held") tables' change events are not emitted; the other
    tables keep flowing. ``holds[t]`` is the position from which table ``t`` is held: every change
    of ``t`` up to it was emitted live (and is in Kafka before the worker announces the hold, so
    before any chunk of the shard is read: ``HoldStarted`` in ``taskhandoff``).
``catchup``
    Every chunk of the shard is done. The stream is rewound to the smallest chunk high watermark
    or hold position (every change not emitted live is replayed). A held table's change for key K
    at position p is emitted when p is after H(K), the high watermark of K's own chunk (the chunk
    read holds everything up to it). At or before H(K) it is emitted only if it is K's *final*
    change: the last change of K in ``(holds[t], H(K)]`` when that change is a delete (K is absent
    at H(K): no snapshot row, but the topic may hold an older record of K that must be deleted), or
    any last change for a table held *late* (chunks were already done when the hold began, so the
    worker may have emitted live records after their snapshot rows; re-stating the state at H(K)
    puts the right record last). The finals come from a first pass over the window
    (``FinalChanges``, driven by ``catchup.scan_finals``). Other tables: changes up to ``rejoin_at``
    (where the stream was before the rewind) were emitted and are not emitted again.
``joined``
    Once the stream passed every chunk high watermark and ``rejoin_at`` the rule emits everything:
    the state can be dropped.

Per key the topic then holds: the live changes up to the hold, the snapshot row (state at H(K)) or,
if K is absent at H(K), its final delete, then every change after H(K), in order. The rule is a
pure function of (state, table, key, position) and the finals are a pure function of the binlog
window, so a crash in any phase resumes correctly from the stored offset and state.

Three refinements (docs/backfill.md, "The protocol"):

* *abandoned runs*: a cancelled or failed attempt releases the hold through the same catch-up,
  with the chunks it did not finish marked at the hold position (``marks_for``): their keys get
  every change after the hold; chunks done in earlier epochs of the run count as not done;
* *conditional runs* (``additional-condition``): a key whose state at H(K) is outside the
  condition got no snapshot row; the first pass finds the ones that changed during the hold
  (``WindowScan.uncovered``) and the catch-up emits every change of theirs after the hold;
* *hold everything* (``hold_all_from``): a new connector whose initial snapshot is a backfill
  holds every table from its first position, before the run's plan names the tables.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from cdcworker.backfill.chunking import bounds_from_points
from cdcworker.backfill.gtid import covers
from cdcworker.backfill.progress import RunState
from cdcworker.backfill.spec import Key
from cdcworker.jsontypes import JsonMapping, JsonObject

HELD, CATCHUP, JOINED = "held", "catchup", "joined"
OFFSET_FIELD = "shardcdc_backfill"


class Verdict(enum.IntEnum):
    """What the catch-up does with one change of one key."""

    SKIP = 0  # held, or at/before the key's high watermark and not its final change
    EMIT = 1  # after the key's high watermark (or not a held table)
    FINAL = 2  # the key's final change: emit the last change of the key in its transaction only


@dataclass(frozen=True)
class ChunkMark:
    """A chunk's key range, its high watermark and its low one (where its window began). A chunk
    the run did not finish (an abandoned attempt) is marked at the hold: no snapshot row covers it."""

    lo: Key | None
    hi: Key | None
    high: str
    low: str = ""


@dataclass(frozen=True)
class TableMarks:
    """The chunk marks of one table on one shard; the chunks partition the key space."""

    marks: tuple[ChunkMark, ...]
    _los: tuple[Key, ...] = field(default=(), repr=False, compare=False)
    condition: str | None = None  # the run's additional-condition for the table (None: every row)

    @classmethod
    def of(cls, marks: Iterable[ChunkMark], condition: str | None = None) -> TableMarks:
        ordered = sorted(marks, key=lambda m: (m.lo is not None, m.lo or ()))
        if not ordered or ordered[0].lo is not None or ordered[-1].hi is not None:
            raise ValueError("chunk marks must cover the key space (first lo and last hi unbounded)")
        for a, b in itertools.pairwise(ordered):
            if a.hi != b.lo:
                raise ValueError(f"chunk marks leave a gap or overlap at {a.hi!r} / {b.lo!r}")
        return cls(tuple(ordered), tuple(m.lo for m in ordered[1:] if m.lo is not None), condition)

    def mark_for(self, key: Key) -> ChunkMark:
        """The mark of the chunk that holds ``key``."""
        return self.marks[bisect.bisect_right(self._los, key)]

    def high_for(self, key: Key) -> str:
        """The high watermark of the chunk that holds ``key``."""
        return self.mark_for(key).high

    @property
    def highs(self) -> list[str]:
        return [m.high for m in self.marks]


Finals = Mapping[str, Mapping[Key, str]]  # table -> key -> position of the key's final change
Uncovered = Mapping[str, AbstractSet[Key]]  # table -> keys no snapshot row covers (conditional runs)


@dataclass(frozen=True)
class WindowScan:
    """What the catch-up's first pass found in the binlog window (see ``FinalChanges``)."""

    finals: Finals
    uncovered: Uncovered = field(default_factory=dict)


@dataclass(frozen=True)
class ShardHandoff:
    """One shard's hand-off state."""

    shard: str
    run_id: str
    tables: tuple[str, ...]
    phase: str = HELD
    rejoin_at: str | None = None  # catchup: the stream position before the rewind
    marks: Mapping[str, TableMarks] = field(default_factory=dict)  # catchup: per held table
    holds: Mapping[str, str] = field(default_factory=dict)  # table -> position the hold began at
    late: tuple[str, ...] = ()  # tables whose hold began after some of their chunks were done
    epoch: int = 0  # the run's attempt generation this hold belongs to (progress.AttemptRecord)
    hold_all_from: str | None = None  # every table is held from here (an initial snapshot's backfill)
    # catchup: each key's final change and the keys no snapshot row covers (None: not scanned yet).
    # Derived from the binlog window, so they are neither stored nor compared: a restart scans again.
    finals: Finals | None = field(default=None, compare=False)
    uncovered: Uncovered = field(default_factory=dict, compare=False)
    # The shard's low watermark when the hold began (source time, s): it stays there until the
    # catch-up is over. Stored so a restarted worker publishes it instead of "unknown"; not part
    # of the state's identity (set once the hold is announced to the metrics).
    watermark_cap: float | None = field(default=None, compare=False)

    def held(self, table: str) -> bool:
        return table in self.tables or self.hold_all_from is not None

    def hold_of(self, table: str) -> str | None:
        """Where the hold of ``table`` began (every change of it up to there was emitted live)."""
        return self.holds.get(table, self.hold_all_from)

    def decide(self, table: str, key: Key | None, position: str) -> Verdict:
        """The verdict on the change of ``table`` for ``key`` whose transaction ends at ``position``."""
        if not self.held(table):
            # Other tables flow; in the catch-up they were already emitted up to rejoin_at.
            if self.phase == CATCHUP and self.rejoin_at is not None and covers(self.rejoin_at, position):
                return Verdict.SKIP
            return Verdict.EMIT
        if self.phase == JOINED:
            return Verdict.EMIT
        if self.phase == HELD:
            return Verdict.SKIP
        tm = self.marks.get(table)
        if tm is None:
            if table in self.tables:
                return Verdict.SKIP  # no chunk marks: cannot place it (the catch-up loads them first)
            # Held by hold_all_from but not in the run (no plan names it): nothing covers it.
            hold = self.hold_of(table)
            return Verdict.EMIT if hold is not None and not covers(hold, position) else Verdict.SKIP
        if key is None:  # keyless rows cannot be placed in a chunk: emit them after every chunk
            return Verdict.EMIT if not any(covers(h, position) for h in tm.highs) else Verdict.SKIP
        if not covers(tm.high_for(key), position):
            return Verdict.EMIT
        hold = self.hold_of(table)
        if key in self.uncovered.get(table, ()) and hold is not None and not covers(hold, position):
            return Verdict.EMIT  # outside the run's condition at H(K): no snapshot row, every change counts
        finals = (self.finals or {}).get(table)
        return Verdict.FINAL if finals is not None and finals.get(key) == position else Verdict.SKIP

    def emit(self, table: str, key: Key | None, position: str) -> bool:
        return self.decide(table, key, position) != Verdict.SKIP

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
        """Where the rewound stream starts: the smallest chunk high watermark or hold position
        (a change after it was either held or may have to follow a snapshot row)."""
        holds = [*self.holds.values(), *([self.hold_all_from] if self.hold_all_from is not None else [])]
        return smallest([h for tm in self.marks.values() for h in tm.highs] + holds)

    def scan_window(self) -> tuple[str, list[str]] | None:
        """(start, high watermarks) of the window the finals come from: from the smallest hold to
        every chunk high watermark; None when no final change is possible (no hold, or every
        chunk's high watermark is at or before its table's hold)."""
        start = smallest(list(self.holds.values()))
        if start is None:
            return None
        highs = [h for t, tm in self.marks.items() for h in tm.highs
                 if t in self.holds and not covers(self.holds[t], h)]
        return (start, highs) if highs else None

    def finished(self, position: str) -> bool:
        """True once the stream passed every chunk high watermark and ``rejoin_at``."""
        if self.phase != CATCHUP:
            return self.phase == JOINED
        highs = [h for tm in self.marks.values() for h in tm.highs]
        if self.rejoin_at is not None:
            highs.append(self.rejoin_at)
        return all(covers(position, h) for h in highs)

    def to_catchup(self, marks: Mapping[str, TableMarks], rejoin_at: str | None) -> ShardHandoff:
        return replace(self, phase=CATCHUP, rejoin_at=rejoin_at, marks=dict(marks), finals=None, uncovered={})

    def with_finals(self, finals: Finals, uncovered: Uncovered | None = None) -> ShardHandoff:
        return replace(self, finals=finals, uncovered=dict(uncovered or {}))

    def with_scan(self, scan: WindowScan) -> ShardHandoff:
        return self.with_finals(scan.finals, scan.uncovered)

    @property
    def conditions(self) -> dict[str, str]:
        """table -> the run's additional-condition, for the held tables that have one."""
        return {t: tm.condition for t, tm in self.marks.items() if tm.condition}

    # --- offset value ------------------------------------------------------------------------

    def to_offset_field(self) -> JsonObject:
        """What the worker stores next to the shard's gtid (marks are reloaded from the progress
        topic, which holds them durably, and finals are scanned again)."""
        out: JsonObject = {"run": self.run_id, "tables": list(self.tables), "phase": self.phase}
        if self.holds:
            out["hold_from"] = dict(sorted(self.holds.items()))
        if self.late:
            out["late"] = list(self.late)
        if self.rejoin_at is not None:
            out["rejoin_at"] = self.rejoin_at
        if self.epoch:
            out["epoch"] = self.epoch
        if self.hold_all_from is not None:
            out["hold_all_from"] = self.hold_all_from
        if self.watermark_cap is not None:
            out["watermark_cap"] = round(self.watermark_cap, 3)
        return out

    @classmethod
    def from_offset_field(cls, shard: str, d: JsonMapping, marks: Mapping[str, TableMarks] | None = None) -> ShardHandoff:
        return cls(shard, d["run"], tuple(d["tables"]), d.get("phase", HELD), d.get("rejoin_at"), dict(marks or {}),
                   dict(d.get("hold_from") or {}), tuple(d.get("late") or ()), int(d.get("epoch") or 0),
                   d.get("hold_all_from"), watermark_cap=d.get("watermark_cap"))


class FinalChanges:
    """First pass of the catch-up: each held key's final change in ``(holds[t], H(K)]``.

    Fed every change of the held tables in commit order (``change``), from the smallest hold to the
    largest high watermark. A key is kept while its last change in its window is a delete (or, for
    a late table, any change); a later insert or update of the key inside its window drops it. The
    memory is one entry per key deleted in its window and not re-created (per key touched in the
    window for late tables): bounded by the keys the window's transactions touched, never by the
    table size.

    Tables with an additional condition also need to know which keys present at H(K) got no
    snapshot row: the chunk read covers keys inside the condition, plus every key its window
    ``(L, H]`` changed (the merge keeps those whatever the condition). So per key touched in its
    window it keeps the last change (position, present after it); ``in_condition`` is fed the same
    window through a VStream filtered by the condition (a change shows its after image there only
    if that image matches), and ``scan()`` combines both.
    """

    def __init__(self, h: ShardHandoff) -> None:
        self.h = h
        self.finals: dict[str, dict[Key, str]] = {t: {} for t in h.tables}
        self.conditional = set(h.conditions)
        self.last: dict[str, dict[Key, tuple[str, bool]]] = {t: {} for t in self.conditional}
        self.matching: dict[str, set[Key]] = {t: set() for t in self.conditional}

    def _in_window(self, table: str, key: Key, position: str) -> bool:
        hold = self.h.holds.get(table)
        tm = self.h.marks.get(table)
        return (hold is not None and tm is not None and not covers(hold, position)
                and covers(tm.high_for(key), position))

    def change(self, table: str, before: Key | None, after: Key | None, position: str) -> None:
        finals = self.finals.get(table)
        if finals is None:
            return
        last = self.last.get(table)
        if before is not None and before != after and self._in_window(table, before, position):
            finals[before] = position  # a delete (or the delete half of a primary-key change)
            if last is not None:
                last[before] = (position, False)
        if after is not None and self._in_window(table, after, position):
            if table in self.h.late:
                finals[after] = position
            else:
                finals.pop(after, None)  # present at its high watermark: the snapshot row has it
            if last is not None:
                last[after] = (position, True)

    def in_condition(self, table: str, before: Key | None, after: Key | None, position: str) -> None:
        """A change as the condition-filtered stream shows it: each image only if it matches."""
        keys = self.matching.get(table)
        if keys is None:
            return
        if before is not None and self._in_window(table, before, position):
            keys.discard(before)  # left the condition (or was deleted) here, unless the after says otherwise
        if after is not None and self._in_window(table, after, position):
            keys.add(after)

    def forget_condition(self) -> None:
        """The condition could not be evaluated: no key counts as inside it."""
        for keys in self.matching.values():
            keys.clear()

    def scan(self) -> WindowScan:
        uncovered: dict[str, frozenset[Key]] = {}
        for table, last in self.last.items():
            tm = self.h.marks[table]
            # Present at H(K), last changed at or before the chunk's low watermark (so not in its
            # window) and outside the condition there: the chunk read did not return it.
            uncovered[table] = frozenset(k for k, (pos, present) in last.items()
                                         if present and covers(tm.mark_for(k).low or pos, pos)
                                         and k not in self.matching[table])
        return WindowScan(self.finals, uncovered)


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


def marks_for(run: RunState, shard: str, table: str, epoch: int, hold: str) -> TableMarks:
    """The catch-up marks of a held table: every chunk of the plan, at its high watermark when it
    was done in this hold's ``epoch``, else at ``hold`` (an abandoned attempt's unfinished chunks, or
    chunks done in an earlier epoch, whose hand-off is over: every change after the hold counts)."""
    plan = run.plans[(shard, table)]
    marks = []
    for index, (lo, hi) in enumerate(bounds_from_points(plan.points)):
        done = run.done.get((shard, table, index))
        if done is not None and done.epoch == epoch:
            marks.append(ChunkMark(lo, hi, done.high, done.low))
        else:
            marks.append(ChunkMark(lo, hi, hold))
    return TableMarks.of(marks, plan.condition)
