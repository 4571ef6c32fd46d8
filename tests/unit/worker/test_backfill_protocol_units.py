"""The hand-off protocol's pure parts: epochs and abandon markers in the progress topic, a released
hold's catch-up marks, a hold of every table (initial snapshot by backfill), condition-aware
catch-up scans."""

from __future__ import annotations

from typing import Any

from cdcworker.backfill.handoff import (
    CATCHUP,
    HELD,
    ChunkMark,
    FinalChanges,
    ShardHandoff,
    TableMarks,
    Verdict,
    WindowScan,
    marks_for,
)
from cdcworker.backfill.progress import (
    AttemptRecord,
    ChunkDone,
    HandoffDone,
    HoldStarted,
    PlanRecord,
    RunAbandoned,
    RunState,
    parse_handoff,
    parse_hold,
    parse_record,
)
from cdcworker.backfill.spec import Chunk
from cdcworker.backfill.taskhandoff import TaskHandoff
from cdcworker.offsets import Vgtid

U = "MySQL56/6a00c132-972b-564a-9ad8-0d01b1878746"
KS = "ks"


def pos(n: int) -> str:
    return f"{U}:1-{n}"


def plan(run: str = "r1", shard: str = "-80", table: str = "t", condition: str | None = None) -> PlanRecord:
    return PlanRecord(run, KS, shard, table, ("id",), 2, 20, "even", ((10,),), condition)


def done(index: int, low: int, high: int, epoch: int = 0, run: str = "r1", shard: str = "-80") -> ChunkDone:
    lo, hi = ((None, (10,)), ((10,), None))[index]
    return ChunkDone(Chunk(run, KS, shard, "t", index, ("id",), lo, hi), 5, pos(low), pos(high), 0, 0, epoch)


def test_markers_round_trip_and_fold_into_epochs() -> None:
    for rec in (AttemptRecord("r1", KS, 2), RunAbandoned("r1", KS, 1, "lane failed", "job"),
                RunAbandoned("r1", KS, None, "cancelled", "operator"), done(1, 3, 4, epoch=2)):
        assert parse_record(rec.value()) == rec
    assert RunAbandoned("r1", KS, 1).key() != RunAbandoned("r1", KS, None).key()  # compaction keeps both
    hold = HoldStarted("r1", KS, "-80", ("t",), {"t": pos(3)}, 1)
    assert parse_hold(hold.value()) == hold
    hand = HandoffDone("r1", KS, "-80", pos(9), 1)
    assert parse_handoff(hand.value()) == hand and hand.key() != HandoffDone("r1", KS, "-80", pos(9), 0).key()
    state = RunState("r1")
    state.apply(plan())
    assert (state.epoch, state.next_epoch(), state.is_abandoned(0)) == (0, 0, False)
    state.apply(RunAbandoned("r1", KS, 0, "x", "job"))
    assert state.is_abandoned(0) and state.next_epoch() == 1  # the next attempt opens epoch 1
    state.apply(AttemptRecord("r1", KS, 1))
    assert (state.epoch, state.is_abandoned(1), state.next_epoch()) == (1, False, 1)  # a crashed attempt: same epoch
    state.apply(RunAbandoned("r1", KS, None, "cancelled", "operator"))
    assert state.is_abandoned(1) and state.is_abandoned(7) and state.cancelled is not None


def test_released_hold_marks_unfinished_chunks_at_the_hold() -> None:
    state = RunState("r1")
    state.apply(plan())
    state.apply(done(0, 3, 5))  # done in this epoch: its snapshot rows are at H = 5
    tm = marks_for(state, "-80", "t", 0, pos(2))
    assert [(m.lo, m.hi, m.high, m.low) for m in tm.marks] == [(None, (10,), pos(5), pos(3)), ((10,), None, pos(2), "")]
    h = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)}).to_catchup({"t": tm}, rejoin_at=pos(9)).with_finals({})
    assert h.catchup_start() == pos(2)
    assert h.decide("t", (3,), pos(4)) == Verdict.SKIP and h.decide("t", (3,), pos(6)) == Verdict.EMIT
    # The chunk the attempt never finished: every change after the hold, none before.
    assert h.decide("t", (11,), pos(3)) == Verdict.EMIT and h.decide("t", (11,), pos(2)) == Verdict.SKIP
    # A chunk done in an earlier epoch is marked at the hold of this one.
    assert marks_for(state, "-80", "t", 1, pos(7)).high_for((3,)) == pos(7)


class FakeFeed:
    """``ProgressFeed`` without Kafka: what was read, and what was written."""

    topic = "p"
    keyspace = KS

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self.handed_off: set[tuple[str, int, str]] = set()
        self.written: list[Any] = []

    def add(self, *records: Any) -> None:
        for rec in records:
            run_id = rec.chunk.run_id if isinstance(rec, ChunkDone) else rec.run_id
            self.runs.setdefault(run_id, RunState(run_id)).apply(rec)

    def poll(self, to_end: bool = False, timeout: float = 30.0) -> None:
        pass

    def mark_handed_off(self, h: ShardHandoff, position: str) -> None:
        self.written.append(HandoffDone(h.run_id, KS, h.shard, position, h.epoch))
        self.handed_off.add((h.run_id, h.epoch, h.shard))

    def mark_held(self, h: ShardHandoff) -> None:
        self.written.append(HoldStarted(h.run_id, KS, h.shard, h.tables, h.holds, h.epoch))

    def close(self) -> None:
        pass


def at(n: int, shard: str = "-80") -> Vgtid:
    return Vgtid.of(KS, {shard: pos(n)})


def test_an_abandoned_epoch_is_caught_up_and_the_next_attempt_held_again() -> None:
    feed = FakeFeed()
    th = TaskHandoff(feed, scan=lambda h: WindowScan({}))  # type: ignore[arg-type]
    feed.add(plan())
    th.start(at(4))
    h = th.states["-80"]
    assert (h.phase, h.holds, h.epoch) == (HELD, {"t": pos(4)}, 0)
    feed.add(done(0, 5, 6), RunAbandoned("r1", KS, 0, "lane failed", "job"))
    position, changed = th.advance(at(9))
    h = th.states["-80"]
    assert changed and h.phase == CATCHUP and h.rejoin_at == pos(9) and position == at(4)  # rewound to the hold
    assert h.marks["t"].high_for((3,)) == pos(6) and h.marks["t"].high_for((12,)) == pos(4)
    th.advance(at(9))
    assert th.states == {} and feed.written[-1] == HandoffDone("r1", KS, "-80", pos(9), 0)
    # The next attempt (epoch 1) is held afresh; chunk 0, done in epoch 0, is not late for it.
    feed.add(AttemptRecord("r1", KS, 1))
    th.advance(at(10))
    h = th.states["-80"]
    assert (h.phase, h.epoch, h.holds, h.late) == (HELD, 1, {"t": pos(10)}, ())
    th.announce()
    assert feed.written[-1] == HoldStarted("r1", KS, "-80", ("t",), {"t": pos(10)}, 1)
    feed.add(done(1, 11, 12, epoch=1))
    position, _ = th.advance(at(13))
    h = th.states["-80"]
    assert h.phase == CATCHUP and position == at(10)
    assert h.marks["t"].high_for((3,)) == pos(10) and h.marks["t"].high_for((12,)) == pos(12)
    th.advance(at(13))
    # Cancelled for good: never held again, whatever attempts follow.
    feed.add(RunAbandoned("r1", KS, None, "cancelled", "operator"), AttemptRecord("r1", KS, 2))
    th.advance(at(14))
    assert th.states == {}


def test_initial_snapshot_holds_every_table_until_the_plan_names_them() -> None:
    feed = FakeFeed()
    th = TaskHandoff(feed)  # type: ignore[arg-type]
    start = Vgtid.of(KS, {"-80": pos(3), "80-": pos(3)})
    th.start(start, initial_run="init", fresh=True)
    for shard in ("-80", "80-"):
        h = th.states[shard]
        assert (h.tables, h.hold_all_from) == ((), pos(3))
        assert h.decide("anything", None, pos(4)) == Verdict.SKIP
    # The run plans table t on -80 only: -80 holds t from the start (not late), 80- is released.
    feed.add(plan("init", "-80"), AttemptRecord("init", KS, 0))
    both = Vgtid.of(KS, {"-80": pos(8), "80-": pos(8)})
    position, _ = th.advance(both)
    held, released = th.states["-80"], th.states["80-"]
    assert (held.phase, held.tables, held.holds, held.late) == (HELD, ("t",), {"t": pos(3)}, ())
    assert released.phase == CATCHUP and position.get("80-").gtid == pos(3)  # type: ignore[union-attr]
    assert released.decide("other", None, pos(4)) == Verdict.EMIT and released.decide("other", None, pos(3)) == Verdict.SKIP
    # A restored hold of every table for a run the configuration no longer names is released.
    stored = {"shardcdc_backfill": {"-80": ShardHandoff("-80", "old", (), hold_all_from=pos(2)).to_offset_field()}}
    again = TaskHandoff(FakeFeed(), stored)  # type: ignore[arg-type]
    position = again.start(at(5), initial_run=None)
    assert again.states["-80"].phase == CATCHUP and position == at(2)
    # Not on a restart with a stored position, nor for a run already over.
    later = TaskHandoff(FakeFeed())  # type: ignore[arg-type]
    assert later.start(at(5), initial_run="init", fresh=False) == at(5) and later.states == {}
    over = FakeFeed()
    over.add(plan("init"), RunAbandoned("init", KS, None, "cancelled", "operator"))
    gone = TaskHandoff(over)  # type: ignore[arg-type]
    gone.start(at(5), initial_run="init", fresh=True)
    assert gone.states == {}


def test_conditional_catchup_emits_every_change_of_keys_outside_the_condition() -> None:
    marks = TableMarks.of([ChunkMark(None, None, pos(10), pos(6))], "qty < 50")
    h = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)}).to_catchup({"t": marks}, rejoin_at=pos(12))
    acc = FinalChanges(h)
    # (old key, new key, position) as the unfiltered stream shows them, and as the stream filtered
    # by the condition shows them (an image only when it matches).
    changes = [
        ((1,), (1,), 3, (1,), (1,)),  # updated inside the condition before the chunk's window: snapshot row
        ((2,), (2,), 4, None, None),  # updated outside the condition: no snapshot row
        ((3,), (3,), 7, None, None),  # outside, but changed inside the window (L=6, H=10]: the merge has it
        ((4,), (4,), 3, None, (4,)),  # entered the condition ...
        ((4,), (4,), 5, (4,), None),  # ... and left it again: no snapshot row
        ((5,), None, 4, (5,), None),  # deleted: its final delete, not uncovered
    ]
    for bk, ak, p, fb, fa in changes:
        acc.change("t", bk, ak, pos(p))
        if fb is not None or fa is not None:
            acc.in_condition("t", fb, fa, pos(p))
    scan = acc.scan()
    assert scan.uncovered == {"t": frozenset({(2,), (4,)})} and scan.finals == {"t": {(5,): pos(4)}}
    h = h.with_scan(scan)
    assert [h.decide("t", (2,), pos(p)) for p in (2, 4, 11)] == [Verdict.SKIP, Verdict.EMIT, Verdict.EMIT]
    assert h.decide("t", (1,), pos(3)) == Verdict.SKIP and h.decide("t", (3,), pos(7)) == Verdict.SKIP
    assert h.decide("t", (5,), pos(4)) == Verdict.FINAL
    # A condition VStream filters cannot evaluate: every key changed before its window counts as outside.
    acc.forget_condition()
    assert acc.scan().uncovered == {"t": frozenset({(1,), (2,), (4,)})}
