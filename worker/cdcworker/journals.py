"""A reshard journal followed shard by shard, for a task holding several of its source shards.

VTGate sends each source shard's journal as that shard's stream reaches it (with
``include_reshard_journal_events``), then, when the stream does not hold every participant, ends
the VStream with "not all journaling participants are in the stream" (vstream_manager's
getJournalEvent). A task holding several source shards of one reshard must therefore read each
of them up to its own journal before the journal's target positions replace them: stopping at the
first journal would skip a lagging sibling's last changes before the cut-over (the next generation
starts at the targets, after them).

``JournalProgress`` is that bookkeeping, kept across the task's reconnects; pure, no I/O:

- a shard that delivered the journal is *done*: its position before the journal is pinned into
  every commit point (offsets never pass its journal, so a restart reads the journal again and
  skips nothing), and it is left out of the next VStream request (never streamed past it);
- the journal is complete when every participant the task holds is done: the task then stores
  the targets' positions and exits for reassignment, as a task holding one source shard does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from cdcworker.jsontypes import JsonObject
from cdcworker.offsets import ShardGtid, Vgtid
from vitessapi import binlogdata_pb2

ShardKey = tuple[str, str]  # (keyspace, shard)


def participants(journal: binlogdata_pb2.Journal) -> frozenset[ShardKey]:
    return frozenset((p.keyspace, p.shard) for p in journal.participants)


def held_participants(journal: binlogdata_pb2.Journal, position: Vgtid) -> frozenset[ShardKey]:
    """The journal's source shards this task streams (``position``: every shard of the task)."""
    return participants(journal) & {(sg.keyspace, sg.shard) for sg in position}


def reassigned(position: Vgtid, journal: binlogdata_pb2.Journal) -> Vgtid:
    """Where the next generation starts: the task's other shards as they are, the journal's
    source shards replaced by its target shards at the journal's positions."""
    gone = participants(journal)
    kept = tuple(sg for sg in position if (sg.keyspace, sg.shard) not in gone)
    return Vgtid(kept).update(ShardGtid(g.keyspace, g.shard, g.gtid) for g in journal.shard_gtids)


class JournalMismatch(ValueError):
    """A second reshard's journal arrived while the task still waits for the first one's."""


class JournalProgress:
    """Which held source shards of one reshard journal have delivered it (see the module doc)."""

    def __init__(self) -> None:
        self.journal: binlogdata_pb2.Journal | None = None
        self.held: frozenset[ShardKey] = frozenset()
        self.done: dict[ShardKey, ShardGtid] = {}  # shard -> its position before the journal
        # Each shard's place in the task's VGTID when the journal first arrived: a done shard
        # VTGate no longer reports is pinned back there, not at the end, so the stored offset
        # keeps one shard order through the reshard.
        self._rank: dict[ShardKey, int] = {}
        self._done_at_error = 0  # len(done) at VTGate's last "not all journaling participants"
        self._blind_errors = 0  # such errors in a row with no shard delivering the journal between

    @property
    def pending(self) -> list[ShardKey]:
        """Held participants still streaming towards the journal, sorted."""
        return sorted(self.held - self.done.keys())

    def report(self) -> JsonObject:
        """What ``/status`` shows while the task waits for its other source shards' journals."""
        assert self.journal is not None
        return {"id": str(self.journal.id), "done": [s for _, s in sorted(self.done)],
                "pending": [s for _, s in self.pending]}

    def reached(self, journal: binlogdata_pb2.Journal, shard: ShardKey, position: Vgtid) -> bool:
        """``shard`` delivered ``journal`` with the task at ``position`` (its last commit point:
        ``shard``'s entry there is its position before the journal). True when every held
        participant has now delivered it."""
        if self.journal is not None and self.journal.id != journal.id:
            raise JournalMismatch(
                f"reshard journal {journal.id} arrived while shards {names(self.pending)} were still "
                f"streaming towards journal {self.journal.id}"
            )
        held = self.held if self.journal is not None else held_participants(journal, position)
        before = position.get(shard[1], shard[0])
        if shard not in held or before is None:
            # Ignored, the stream would go on past the cut-over (VTGate follows a journal itself
            # when the request holds every participant): refused instead.
            raise JournalMismatch(
                f"reshard journal {journal.id} delivered by {names([shard])}, which is not one of its source "
                f"shards that this task streams ({names(sorted(held)) or 'none'})"
            )
        if self.journal is None:
            self.journal, self.held = journal, held
            self._rank = {(sg.keyspace, sg.shard): i for i, sg in enumerate(position)}
        self.done.setdefault(shard, before)
        return not self.pending

    def participants_error(self) -> bool:
        """VTGate ended the stream with "not all journaling participants are in the stream": True
        when a reconnect can help. It can when a shard delivered the journal since the last such
        error (that shard is left out now), or once without one (the error may have overtaken its
        journal event). Two in a row with no journal delivered between would reconnect forever:
        the task fails instead, with the reassignment message."""
        progressed = len(self.done) != self._done_at_error
        self._done_at_error = len(self.done)
        self._blind_errors = 0 if progressed else self._blind_errors + 1
        return self._blind_errors <= 1

    def pin(self, position: Vgtid) -> Vgtid:
        """``position`` with every done shard at its position before the journal (a commit point
        keeps its other fields): VTGate's VGTID omits a shard left out of the request, or moves it
        past the journal."""
        if not self.done:
            return position
        pinned = Vgtid(position.shard_gtids).update(self.done.values()).shard_gtids
        rank, last = self._rank, len(self._rank)
        ordered = tuple(sorted(pinned, key=lambda sg: rank.get((sg.keyspace, sg.shard), last)))
        return dataclasses.replace(position, shard_gtids=ordered)

    def streamed(self, position: Vgtid) -> Vgtid:
        """The VStream request's position: the done shards left out, so none is read past its
        journal and VTGate's "not all journaling participants" error is not met again for them."""
        if not self.done:
            return position
        return Vgtid(tuple(sg for sg in position if (sg.keyspace, sg.shard) not in self.done))

    def rewound(self, position: Vgtid) -> list[ShardKey]:
        """A reconnect resumes from ``position`` (an aborted Kafka transaction may have taken it
        back before a shard's journal): a done shard whose pinned position is not the one there
        is streamed again, up to its journal again. Returns the shards undone."""
        undone = [key for key, sg in self.done.items() if position.get(key[1], key[0]) != sg]
        for key in undone:
            del self.done[key]
        return sorted(undone)


def names(shards: Iterable[ShardKey]) -> str:
    """``ks/shard, ...`` for logs and messages."""
    return ", ".join(f"{ks}/{shard}" for ks, shard in shards)
