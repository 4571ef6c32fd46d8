"""Backfill planning, reconciliation, progress and hand-off rules (pure, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from cdcworker.backfill import chunking
from cdcworker.backfill.gtid import GtidError, covers, is_position, parse
from cdcworker.backfill.handoff import (
    CATCHUP,
    HELD,
    JOINED,
    ChunkMark,
    FinalChanges,
    ShardHandoff,
    TableMarks,
    Verdict,
    marks_for,
    smallest,
)
from cdcworker.backfill.lanes import make_lanes
from cdcworker.backfill.progress import (
    ChunkDone,
    PlanRecord,
    ProgressTracker,
    load_run,
    parse_record,
)
from cdcworker.backfill.reconcile import KeyReader, reconcile
from cdcworker.backfill.spec import BackfillSpec, Chunk
from cdcworker.backfill.throttle import RowThrottle

U1 = "MySQL56/6a00c132-972b-564a-9ad8-0d01b1878746"
U2 = "0b5ad1a0-0000-4000-8000-000000000002"


def pos(n: int) -> str:
    return f"{U1}:1-{n}"


# --- gtid ----------------------------------------------------------------------------------------


def test_covers_compares_executed_sets_including_reparents() -> None:
    assert covers(pos(5), pos(5)) and covers(pos(5), pos(3))
    assert not covers(pos(3), pos(4))
    after_reparent = f"{pos(7)},{U2}:1-2"
    assert covers(after_reparent, pos(7)) and not covers(pos(7), after_reparent)
    assert covers(f"{U1}:1-3:5-9", f"{U1}:6-8") and not covers(f"{U1}:1-3:5-9", f"{U1}:3-5")
    assert parse(f"{U1}:1-3:4-6") == parse(f"{U1}:1-6")  # adjacent intervals merge
    with pytest.raises(GtidError, match="unsupported GTID flavor 'FilePos'"):
        parse("FilePos/mysql-bin.000001:4")


def test_covers_compares_mariadb_positions_per_domain() -> None:
    """Vitess's MariaDB flavor (``MariaDB/<domain>-<server>-<seq>``, as real Vitess v24 on MariaDB
    10.11 reports): per domain the sequence decides, the server id does not (gtid_strict_mode, as
    ``MariadbGTIDSet.Contains``); a domain the watermark lacks is not covered."""
    assert covers("MariaDB/0-1135409253-41", "MariaDB/0-1135409253-41")
    assert covers("MariaDB/0-1135409253-41", "MariaDB/0-1135409253-40")
    assert not covers("MariaDB/0-1135409253-40", "MariaDB/0-1135409253-41")
    assert covers("MariaDB/0-7-50", "MariaDB/0-1135409253-41")  # a new primary continues the domain
    assert covers("MariaDB/0-1-9,1-2-3", "MariaDB/1-2-3") and not covers("MariaDB/0-1-9", "MariaDB/0-1-9,1-2-1")
    assert covers("MariaDB/0-1-9", "MariaDB/")  # a shard that has executed nothing
    assert not covers("MariaDB/0-1-9", f"{U1}:1-3") and not covers(pos(9), "MariaDB/0-1-1")
    for bad, why in (("MariaDB/0-1", "not <domain>-<server>-<sequence>"), ("MariaDB/0-1-x", "bad GTID number"),
                     ("MariaDB/0-1-2,0-3-4", "names domain 0 twice")):
        with pytest.raises(GtidError, match=why):
            parse(bad)


def test_is_position_knows_both_flavors_and_no_markers() -> None:
    assert is_position(pos(3)) and is_position("MariaDB/0-1-41") and is_position("MySQL56/")
    assert not any(is_position(g) for g in ("", "current", "FilePos/x:4", "0-1-41"))


# --- chunking ------------------------------------------------------------------------------------


def test_even_split_for_dense_integer_keys_covers_the_key_space() -> None:
    stats = chunking.TableStats(rows=1000, min_value=1, max_value=1000)
    assert chunking.is_dense(stats, True)
    points = chunking.even_points(stats, chunk_size=300, max_chunks=100)
    assert points == [(301,), (601,), (901,)]
    assert chunking.bounds_from_points(points) == [(None, (301,)), ((301,), (601,)), ((601,), (901,)), ((901,), None)]


def test_sparse_or_composite_keys_use_split_points_and_chunk_count_is_bounded() -> None:
    sparse = chunking.TableStats(rows=10, min_value=1, max_value=10**9)
    assert not chunking.is_dense(sparse, True)
    assert not chunking.is_dense(chunking.TableStats(10, 1, 10), False)
    keys = [(i, j) for i in range(10) for j in range(3)]  # 30 composite keys

    def next_point(start: tuple | None) -> tuple | None:  # type: ignore[type-arg]
        i = 0 if start is None else keys.index(start)
        j = i + 7
        return keys[j] if j < len(keys) else None

    assert chunking.query_points(next_point, max_chunks=100) == [keys[7], keys[14], keys[21], keys[28]]
    assert len(chunking.query_points(next_point, max_chunks=3)) == 2  # 3 chunks at most
    assert chunking.effective_chunk_size(1_000_000, 8096, 10) == 100_000
    dense = chunking.TableStats(rows=1_000_000, min_value=1, max_value=1_000_000)
    assert len(chunking.bounds_from_points(chunking.even_points(dense, 10, 50))) <= 50


def test_chunk_sql_uses_row_constructors_and_binds() -> None:
    c = Chunk("r1", "ks", "-80", "lines", 2, ("order_id", "line"), (5, 1), (9, 0), "qty > 3")
    sql, binds = chunking.chunk_select(c)
    assert sql.endswith(
        "SELECT * FROM `lines` WHERE (`order_id`, `line`) >= (:lo0, :lo1) AND (`order_id`, `line`) < (:hi0, :hi1)"
        " AND (qty > 3)"
    )
    assert binds == {"lo0": 5, "lo1": 1, "hi0": 9, "hi1": 0}
    sql, binds = chunking.split_select("t", ("id",), (10,), 100, None)
    assert sql.endswith("SELECT `id` FROM `t` WHERE `id` >= :lo0 ORDER BY `id` LIMIT 1 OFFSET 100")
    first = Chunk("r1", "ks", "-80", "t", 0, ("id",), None, (10,))
    assert chunking.chunk_select(first)[0].endswith("SELECT * FROM `t` WHERE `id` < :hi0")
    assert first.contains((9,)) and not first.contains((10,))


# --- reconcile -----------------------------------------------------------------------------------


class Row:
    def __init__(self, *vals: str | None) -> None:
        self.lengths = [-1 if v is None else len(v) for v in vals]
        self.values = b"".join(v.encode() for v in vals if v is not None)

    def __repr__(self) -> str:
        return f"Row({self.values!r})"


KEY = KeyReader([0], [True])


def test_key_reader_handles_nulls_before_the_key_and_composite_keys() -> None:
    assert KeyReader([1, 2], [True, False])(Row(None, "17", "ab")) == (17, "ab")


def test_reconcile_applies_window_changes_so_the_chunk_is_the_state_at_the_high_watermark() -> None:
    read = [Row("1", "a"), Row("2", "b"), Row("3", "c"), Row("4", "d")]
    in_range = Chunk("r", "ks", "-", "t", 0, ("id",), (1,), (10,)).contains
    window = [
        (Row("2", "b"), Row("2", "b2")),  # update
        (Row("3", "c"), None),  # delete
        (None, Row("5", "e")),  # insert in range
        (None, Row("50", "x")),  # insert out of range: another chunk's
        (Row("4", "d"), Row("40", "d")),  # PK change moving the row out of the range
        (None, Row("6", "f")),
        (Row("6", "f"), None),  # inserted and deleted within the window
        (Row("2", "b2"), Row("2", "b3")),  # last change wins
    ]
    merged = reconcile(read, window, KEY, in_range)
    assert [r.values for r in merged.kept] == [b"1a"]
    assert sorted(r.values for r in merged.changed) == [b"2b3", b"5e"]
    assert merged.removed == 2  # 3 deleted, 4 moved away
    no_window = reconcile(read, [], KEY, in_range)
    assert no_window.kept == read and no_window.changed == []


# --- lanes, throttle, progress ------------------------------------------------------------------


def _chunks(shard: str, n: int, table: str = "t") -> list[Chunk]:
    return [Chunk("r", "ks", shard, table, i, ("id",), None, None) for i in range(n)]


def test_lanes_bound_concurrency_per_shard_and_spread_over_shards() -> None:
    lanes = make_lanes(_chunks("-80", 5) + _chunks("80-", 1), per_shard=2)
    assert [[c.shard for c in lane] for lane in lanes] == [["-80"] * 3, ["80-"], ["-80"] * 2]
    assert sorted(c.index for lane in lanes for c in lane if c.shard == "-80") == [0, 1, 2, 3, 4]


def test_throttle_paces_rows_per_second() -> None:
    now = [0.0]
    t = RowThrottle(100.0, burst_seconds=1.0, clock=lambda: now[0])
    assert t.acquire(100) == 0.0
    assert t.acquire(50) == pytest.approx(0.5)
    now[0] = 1.5
    assert t.acquire(100) == 0.0  # 1.5 s refilled 150 tokens after a 50 debt
    assert RowThrottle(0).acquire(10**9) == 0.0


def test_progress_records_round_trip_and_fold_into_run_state() -> None:
    plan = PlanRecord("r1", "ks", "-80", "t", ("id",), 2, 20, "even", ((11,),), None)
    c0 = Chunk("r1", "ks", "-80", "t", 0, ("id",), None, (11,), None, 10)
    c1 = Chunk("r1", "ks", "-80", "t", 1, ("id",), (11,), None, None, 10)
    d0 = ChunkDone(c0, 10, pos(3), pos(4), 1, 123)
    assert parse_record(plan.value()) == plan and parse_record(d0.value()) == d0
    other_run = ChunkDone(Chunk("r0", "ks", "-80", "t", 1, ("id",), (11,), None), 1, pos(1), pos(1))
    state = load_run([(plan.key(), plan.value()), (d0.key(), d0.value()), (b"x", None),
                      (other_run.key(), other_run.value())], "r1")
    assert state.is_done(c0) and not state.is_done(c1)
    assert not state.table_complete("-80", "t") and not state.complete
    state.apply(ChunkDone(c1, 12, pos(4), pos(6)))
    assert state.complete and state.shard_complete("-80")
    assert state.watermarks("-80", "t") == [(None, (11,), pos(4)), ((11,), None, pos(6))]
    assert c0.progress_key() == b'["r1","ks","-80","t",0]'


def test_tracker_reports_rate_and_eta() -> None:
    now = [0.0]
    tr = ProgressTracker(window_seconds=10, clock=lambda: now[0])
    tr.plan([PlanRecord("r", "ks", "-80", "t", ("id",), 4, 400, "even")])
    c = _chunks("-80", 4)
    now[0] = 2.0
    tr.done(ChunkDone(c[0], 100, pos(1), pos(1)))
    tr.done(ChunkDone(c[0], 100, pos(1), pos(1)))  # a duplicate record counts once
    now[0] = 4.0
    tr.done(ChunkDone(c[1], 100, pos(1), pos(1)))
    assert (tr.chunks_done, tr.chunks_total, tr.rows_done, tr.rows_total) == (2, 4, 200, 400)
    assert tr.rate() == pytest.approx(50.0)
    assert tr.eta_seconds() == pytest.approx(4.0)


def test_spec_round_trips_and_matches_tables() -> None:
    spec = BackfillSpec("run-1", ("items", r"ks\.ord.*"), {"topic.prefix": "p"}, conditions={"items": "qty > 1"},
                        shards=("-80",), chunk_size=10)
    assert BackfillSpec.from_json(spec.to_json()) == spec
    assert spec.matches("ks", "items") and spec.matches("ks", "orders") and not spec.matches("ks", "lines")
    assert spec.condition_for("ks", "items") == "qty > 1" and spec.condition_for("ks", "orders") is None
    with pytest.raises(ValueError):
        BackfillSpec("bad run", ("t",))
    c = Chunk("r", "ks", "-80", "t", 3, ("a", "b"), (1, "x"), None, "a > 0", 5)
    assert Chunk.from_json(c.to_json()) == c


# --- hand-off ------------------------------------------------------------------------------------


def _marks() -> TableMarks:
    return TableMarks.of([ChunkMark((10,), None, pos(8)), ChunkMark(None, (10,), pos(5))])


def test_held_tables_are_held_back_and_the_catchup_emits_after_each_keys_chunk() -> None:
    held = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)})
    assert not held.emit("t", (1,), pos(100))  # held back
    assert held.emit("other", None, pos(100))  # other tables flow
    h = held.to_catchup({"t": _marks()}, rejoin_at=pos(12)).with_finals({"t": {}})
    assert h.catchup_start() == pos(2)  # the hold began before every chunk: replay from it
    assert not h.emit("t", (3,), pos(5)) and h.emit("t", (3,), pos(6))  # chunk 0: high 5
    assert not h.emit("t", (10,), pos(8)) and h.emit("t", (10,), pos(9))  # chunk 1: high 8
    assert not h.emit("other", None, pos(12)) and h.emit("other", None, pos(13))  # emitted up to rejoin_at
    # A PK change from chunk 0 into chunk 1 at position 7: the delete is new, the create is in the read.
    assert h.emit_change("t", (3,), (11,), pos(7)) == (True, False)
    assert h.emit_change("t", None, (4,), pos(6)) == (False, True)
    assert not h.finished(pos(11)) and h.finished(pos(12))
    assert ShardHandoff("-80", "r1", ("t",), JOINED).emit("t", (1,), pos(1))
    # A worker behind the backfill (rejoin_at before chunk 1's high watermark 8): changes after
    # rejoin_at were never emitted, but the chunk read holds them: the same rule applies.
    lagging = held.to_catchup({"t": _marks()}, rejoin_at=pos(6)).with_finals({"t": {}})
    assert not lagging.emit("t", (10,), pos(7)) and lagging.emit("t", (10,), pos(9))
    assert lagging.emit("other", None, pos(7)) and not lagging.emit("other", None, pos(6))
    assert lagging.finished(pos(8)) and not lagging.finished(pos(7))


def test_final_changes_emit_deletes_before_the_high_watermark_once() -> None:
    h = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)}).to_catchup({"t": _marks()}, rejoin_at=pos(12))
    acc = FinalChanges(h)
    acc.change("t", None, (1,), pos(1))  # before the hold: emitted live
    acc.change("t", (1,), None, pos(2))  # at the hold: emitted live
    acc.change("t", None, (3,), pos(3))  # inserted and deleted during the run, before its chunk's high (5)
    acc.change("t", (3,), None, pos(4))
    acc.change("t", (4,), None, pos(3))  # existed before the run, deleted before its chunk: the topic holds it
    acc.change("t", (6,), None, pos(3))  # deleted, then re-inserted before high: the snapshot row has it
    acc.change("t", None, (6,), pos(4))
    acc.change("t", (7,), None, pos(6))  # deleted after its chunk's high watermark: emitted anyway
    acc.change("t", (2,), (12,), pos(4))  # a PK change from chunk 0 (high 5) into chunk 1 (high 8)
    acc.change("t", (12,), None, pos(8))  # ...and the new key deleted at chunk 1's high
    acc.change("t", (11,), (11,), pos(8))  # an update of a key: not a delete
    acc.change("other", (5,), None, pos(3))  # not held
    assert acc.finals == {"t": {(3,): pos(4), (4,): pos(3), (2,): pos(4), (12,): pos(8)}}
    h = h.with_finals(acc.finals)
    assert h.decide("t", (3,), pos(4)) == Verdict.FINAL and h.decide("t", (3,), pos(3)) == Verdict.SKIP
    assert h.decide("t", (6,), pos(3)) == Verdict.SKIP and h.decide("t", (6,), pos(6)) == Verdict.EMIT
    assert h.emit_change("t", (2,), (12,), pos(4)) == (True, False)
    # A late table (chunks were done before its hold): any last change before the high is re-stated.
    late = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(6)}, late=("t",)).to_catchup({"t": _marks()}, pos(12))
    acc = FinalChanges(late)
    acc.change("t", None, (3,), pos(4))  # before the hold
    acc.change("t", None, (11,), pos(7))
    acc.change("t", (11,), (11,), pos(8))
    acc.change("t", (12,), None, pos(7))
    acc.change("t", None, (12,), pos(7))
    assert acc.finals == {"t": {(11,): pos(8), (12,): pos(7)}}
    assert late.catchup_start() == pos(5) and late.scan_window() == (pos(6), [pos(8)])


def test_a_chunk_retried_after_a_partial_emission_ends_with_the_keys_state_at_the_retrys_high() -> None:
    """A task killed mid-chunk emitted snapshot rows at H1 (pos 4) and no done record; the retry read
    the chunk at H2 (pos 7) and its done record carries H2. Keys deleted in (H1, H2] are in no row
    of the retry: their delete is the key's final change in (hold, H2], so the catch-up emits it
    after the stale row. That needs the hold to begin before the killed attempt's read."""
    plan = PlanRecord("r1", "ks", "-80", "t", ("id",), 2, 6, "even", ((10,),))
    chunk0, chunk1 = (Chunk("r1", "ks", "-80", "t", i, ("id",), lo, hi) for i, (lo, hi)
                      in enumerate(chunking.bounds_from_points(plan.points)))
    run = load_run([(None, r.value()) for r in (plan, ChunkDone(chunk1, 2, pos(3), pos(5)),
                                                ChunkDone(chunk0, 2, pos(6), pos(7)))], "r1")
    # Source: keys 1, 2, 3 at H1 (emitted by the killed attempt); 1 deleted at 5; 3 deleted at 5 and
    # re-inserted at 6; 2 updated at 6 (both in the retry's read); 2 updated again at 8.
    changes = [((1,), None, pos(5)), ((3,), None, pos(5)), ((2,), (2,), pos(6)), (None, (3,), pos(6)),
               ((2,), (2,), pos(8))]
    held = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)})
    h = held.to_catchup({"t": marks_for(run, "-80", "t", 0, pos(2))}, rejoin_at=pos(8))
    assert h.marks["t"].high_for((1,)) == pos(7)  # the retry's high watermark, not the hold
    acc = FinalChanges(h)
    for bk, ak, at in changes:
        acc.change("t", bk, ak, at)
    h = h.with_finals(acc.finals)
    topic: dict[tuple[int, ...], str | None] = {(1,): "H1", (2,): "H1", (3,): "H1"}  # the killed attempt
    topic.update({(2,): "H2", (3,): "H2"})  # the retry: the range at H2
    for bk, ak, at in changes:
        old, new = h.emit_change("t", bk, ak, at)
        if old and bk != ak:
            topic[bk] = None
        if new:
            topic[ak] = at
    assert topic == {(1,): None, (2,): pos(8), (3,): "H2"}
    assert h.decide("t", (1,), pos(5)) == Verdict.FINAL and h.decide("t", (2,), pos(6)) == Verdict.SKIP
    # Without a hold there is no window for final changes: the stale row of key 1 would stay.
    bare = ShardHandoff("-80", "r1", ("t",)).to_catchup({"t": marks_for(run, "-80", "t", 0, "")}, pos(8))
    assert bare.scan_window() is None and bare.decide("t", (1,), pos(5)) == Verdict.SKIP


def test_a_retried_conditional_chunks_key_that_left_the_condition_before_the_retry_is_uncovered() -> None:
    """Key 4 was inside the condition at H1 (pos 4: the killed attempt emitted it) and left it at
    pos 5, before the retry's low watermark (pos 6): the retry has no row for it. It is uncovered, so
    every change of it after the hold is emitted (older ones too), and its last record is right."""
    plan = PlanRecord("r1", "ks", "-80", "t", ("id",), 1, 6, "even", (), "qty < 5")
    chunk0 = Chunk("r1", "ks", "-80", "t", 0, ("id",), None, None, "qty < 5")
    run = load_run([(None, r.value()) for r in (plan, ChunkDone(chunk0, 2, pos(6), pos(7)))], "r1")
    h = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)}).to_catchup(
        {"t": marks_for(run, "-80", "t", 0, pos(2))}, rejoin_at=pos(8))
    acc = FinalChanges(h)
    acc.change("t", (4,), (4,), pos(3))
    acc.in_condition("t", (4,), (4,), pos(3))  # inside the condition before and after
    acc.change("t", (4,), (4,), pos(5))
    acc.in_condition("t", (4,), None, pos(5))  # the filtered stream shows only the matching before image
    h = h.with_scan(acc.scan())
    assert h.uncovered == {"t": frozenset({(4,)})}
    assert h.decide("t", (4,), pos(3)) == Verdict.EMIT and h.decide("t", (4,), pos(5)) == Verdict.EMIT


def test_handoff_state_round_trips_through_the_offset_field() -> None:
    h = ShardHandoff("-80", "r1", ("t",), CATCHUP, pos(12), {"t": _marks()}, {"t": pos(2)}, ("t",))
    d = h.to_offset_field()
    assert d == {"run": "r1", "tables": ["t"], "phase": "catchup", "rejoin_at": pos(12), "hold_from": {"t": pos(2)},
                 "late": ["t"]}
    assert ShardHandoff.from_offset_field("-80", d, {"t": _marks()}) == h
    assert ShardHandoff.from_offset_field("-80", {"run": "r", "tables": ["t"]}).phase == HELD


def test_marks_must_partition_the_key_space() -> None:
    with pytest.raises(ValueError):
        TableMarks.of([ChunkMark(None, (10,), pos(1))])
    with pytest.raises(ValueError):
        TableMarks.of([ChunkMark(None, (10,), pos(1)), ChunkMark((11,), None, pos(1))])
    assert smallest([pos(7), pos(3), pos(9)]) == pos(3)


def test_partial_row_changes_serialize_like_protobuf() -> None:
    from cdcworker.backfill.rowchange import PartialChange, read
    from vitessapi import binlogdata_pb2, query_pb2

    for n in (1, 127, 128, 20_000):
        row = query_pb2.Row(lengths=[n, -1], values=b"x" * n)
        other = query_pb2.Row(lengths=[2], values=b"42")
        assert read(row).SerializeToString() == binlogdata_pb2.RowChange(after=row).SerializeToString()
        both = PartialChange(before=other, after=row)
        assert both.SerializeToString() == binlogdata_pb2.RowChange(before=other, after=row).SerializeToString()
        assert both.HasField("before") and not read(row).HasField("before") and read(row).after is row


def test_the_job_refuses_speculative_attempts() -> None:
    """spark.speculation would run a second attempt of a lane beside a live first one; nothing fences it."""
    from cdcworker.backfill.job import UnsafeSparkConf, check_spark_conf

    for value in (None, "false", "FALSE "):
        check_spark_conf({"spark.speculation": value}.get)  # Spark's default, or off: runs
    for value in ("true", " True"):
        with pytest.raises(UnsafeSparkConf, match=r"spark\.speculation=true is not supported"):
            check_spark_conf({"spark.speculation": value}.get)


def test_a_hold_keeps_its_watermark_cap_in_the_offset() -> None:
    """The low watermark cap travels with the hold's state (to_offset_field) and keeps the first
    value it was given; it is not part of the state's identity."""
    from cdcworker.backfill.taskhandoff import OFFSET_FIELD, ProgressFeed, TaskHandoff

    held = ShardHandoff("-80", "r1", ("t",), holds={"t": pos(2)})
    stored = {OFFSET_FIELD: {"-80": held.to_offset_field()}}
    handoff = TaskHandoff(ProgressFeed({}, "p.backfill-progress", "ks"), stored)
    handoff.keep_watermark_caps({"-80": 1_700_000_000.5, "80-": 1.0})  # 80- holds nothing
    handoff.keep_watermark_caps({"-80": 1_700_000_009.0})  # a later call keeps the first cap
    field = handoff.offset_extra()[0][1]["-80"]
    assert field["watermark_cap"] == 1_700_000_000.5 and set(handoff.states) == {"-80"}
    restored = ShardHandoff.from_offset_field("-80", field)
    assert restored.watermark_cap == 1_700_000_000.5 and restored == held


def test_the_progress_feed_guesses_nothing_from_an_outage_at_start() -> None:
    """At start an unreadable cluster is an error (not "no backfill ever ran"); mid-stream the
    feed looks again later and the stream's own sink decides what the outage means."""
    from confluent_kafka import KafkaError, KafkaException

    from cdcworker.backfill.taskhandoff import ProgressFeed

    class Away:
        def list_topics(self, timeout: float) -> None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "all brokers down"))

    feed = ProgressFeed({}, "p.backfill-progress", "ks")
    feed._consumer = Away()
    with pytest.raises(KafkaException):
        feed.poll(to_end=True)
    feed._next_lookup = 0.0
    feed.poll()  # no exception: retried at the next lookup
    assert feed.runs == {}


def test_spark_session_launches_the_java_gateway_again_when_it_dies_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark forks its gateway with preexec_fn; in a threaded process that child can die before exec."""
    from pyspark.sql import SparkSession

    from cdcworker.backfill import job

    calls: list[int] = []

    def flaky(self: Any) -> str:  # the first two launches die
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.")
        return "session"

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", flaky)
    assert job.spark_session("local[1]") == "session" and len(calls) == 3 == job.GATEWAY_LAUNCHES
    calls.clear()
    monkeypatch.setattr(job, "GATEWAY_LAUNCHES", 2)
    with pytest.raises(RuntimeError, match="JAVA_GATEWAY_EXITED"):
        job.spark_session("local[1]")  # given up after the last launch

    def broken(self: Any) -> str:
        raise ValueError("another error")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", broken)
    monkeypatch.setattr(job, "GATEWAY_LAUNCHES", 3)
    with pytest.raises(ValueError, match="another error"):
        job.spark_session("local[1]")  # not retried
