"""Worker metrics: scrape ``/metrics`` while a loop-shaped driver feeds VStream responses."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from observability_fixtures import T0, FakeClock, Samples, parse, running, scrape, value
from prometheus_client import REGISTRY

from cdcworker.idleprobe import CLOCK_MARGIN_S
from cdcworker.observability import LATENCY_BUCKETS, LatencyHistogram, ShardMetrics, TaskMetrics
from vitessapi import binlogdata_pb2, query_pb2

_T = binlogdata_pb2.VEventType
CONNECTOR, TASK = "inventory", "task1_3_2"
BASE = {"connector": CONNECTOR, "task": TASK}
SHARDS = ("-40", "40-80", "80-")
UUID = "0b7e9d2a-1111-2222-3333-444455556666"


# --- a loop-shaped driver ----------------------------------------------------------------------


def txn_response(shard: str, rows: int, commit_ts: int) -> Any:
    """One VStream response holding one transaction of ``rows`` inserts on ``shard``."""
    from vitessapi import vtgate_pb2

    changes = [binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1], values=b"1")) for _ in range(rows)]
    events = [
        binlogdata_pb2.VEvent(type=_T.BEGIN, keyspace="ks", shard=shard, timestamp=commit_ts),
        binlogdata_pb2.VEvent(
            type=_T.ROW,
            keyspace="ks",
            shard=shard,
            row_event=binlogdata_pb2.RowEvent(
                table_name="ks.t", keyspace="ks", shard=shard, row_changes=changes
            ),
        ),
        binlogdata_pb2.VEvent(type=_T.VGTID, keyspace="ks", shard=shard),
        binlogdata_pb2.VEvent(type=_T.COMMIT, keyspace="ks", shard=shard, timestamp=commit_ts),
    ]
    return vtgate_pb2.VStreamResponse(events=events)


def heartbeat_response(ts: int) -> Any:
    from vitessapi import vtgate_pb2

    return vtgate_pb2.VStreamResponse(events=[binlogdata_pb2.VEvent(type=_T.HEARTBEAT, timestamp=ts)])


class Loop:
    """Calls the metrics API the way the streaming loop is meant to: per response and per commit."""

    def __init__(self, tm: TaskMetrics, clock: FakeClock) -> None:
        self.tm = tm
        self.clock = clock
        self.bound: dict[str, ShardMetrics] = {s: tm.shard(s, "ks") for s in SHARDS}  # bound once
        self.unacked: list[tuple[ShardMetrics, int, int]] = []

    def feed(self, response: Any) -> None:
        tm, now = self.tm, self.clock()
        rows = txn_rows = 0
        for ev in response.events:
            if ev.type == _T.ROW:
                n = len(ev.row_event.row_changes)
                rows += n
                txn_rows += n
            elif ev.type == _T.COMMIT:
                sm = self.bound[ev.shard]
                sm.on_commit(ev.timestamp, now, now, txn_rows)
                tm.on_sent(txn_rows)
                self.unacked.append((sm, ev.timestamp, txn_rows))
                txn_rows = 0
            elif ev.type == _T.HEARTBEAT:
                tm.on_heartbeat(ev.timestamp, now)
        tm.on_response(len(response.events), rows, now=now)
        tm.on_ops(creates=rows)

    def probe(self, lagging: tuple[str, ...] = ()) -> list[str]:
        """An ``IdleProbe`` round: every shard's primary is at ``G:1-9``; the durable position has
        that for every shard of the task except ``lagging`` ones (and only when nothing is unacknowledged)."""
        from cdcworker.idleprobe import IdleProbe
        from cdcworker.offsets import ShardGtid, Vgtid

        head, behind = "MySQL56/" + UUID + ":1-9", "MySQL56/" + UUID + ":1-8"
        names = [sm.name for sm in self.tm.shards]
        durable = Vgtid(tuple(ShardGtid("ks", s, behind if s in lagging or self.unacked else head) for s in names))
        return IdleProbe(lambda shards: dict.fromkeys(shards, head), lambda: durable, self.tm.mark_idle,
                         self.clock).probe()

    def kafka_acks(self) -> None:
        for sm, commit_ts, n in self.unacked:
            sm.on_ack(commit_ts, self.clock())
            self.tm.on_acked(n)
        self.unacked.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tm(clock: FakeClock) -> TaskMetrics:
    return TaskMetrics(CONNECTOR, TASK, tags=[("database", "salesdb"), ("table", "inventory")], clock=clock)


@pytest.fixture
def url(tm: TaskMetrics) -> Iterator[str]:
    with running(tm) as u:
        yield u


def shardcdc(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith("shardcdc_")}


# --- tests -------------------------------------------------------------------------------------


def test_counts_follow_the_workload(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    loop = Loop(tm, clock)
    expected_rows = 0
    expected_txns = dict.fromkeys(SHARDS, 0)
    for batch in range(3):
        for i in range(20):
            shard = SHARDS[i % 3]
            rows = i % 5 + 1
            clock.advance(0.1)
            loop.feed(txn_response(shard, rows, int(clock()) - 2))
            expected_rows += rows
            expected_txns[shard] += 1
        s = scrape(url)
        assert value(s, "shardcdc_total_number_of_events_seen", **BASE) == expected_rows
        assert value(s, "shardcdc_total_number_of_create_events_seen", **BASE) == expected_rows
        assert value(s, "shardcdc_vstream_events_total", **BASE) == 4 * 20 * (batch + 1)
        assert value(s, "shardcdc_vstream_responses_total", **BASE) == 20 * (batch + 1)
        assert value(s, "shardcdc_records_sent_total", **BASE) == expected_rows
        for shard in SHARDS:
            assert (
                value(s, "shardcdc_number_of_committed_transactions", shard=shard, **BASE)
                == expected_txns[shard]
            )
        assert value(s, "shardcdc_commit_to_read_seconds_count", **BASE) == 20 * (batch + 1)
        assert value(s, "shardcdc_commit_to_emit_seconds_count", **BASE) == 20 * (batch + 1)
        # Acks lag the sends until Kafka answers.
        assert value(s, "shardcdc_records_acked_total", **BASE) == expected_rows - sum(
            n for *_, n in loop.unacked
        )
        loop.kafka_acks()
        s = scrape(url)
        assert value(s, "shardcdc_records_acked_total", **BASE) == expected_rows
        assert value(s, "shardcdc_commit_to_ack_seconds_count", **BASE) == 20 * (batch + 1)


def test_every_series_carries_connector_task_and_custom_tags(
    tm: TaskMetrics, clock: FakeClock, url: str
) -> None:
    loop = Loop(tm, clock)
    loop.feed(txn_response("-40", 2, int(T0)))
    tm.on_reconnect(grpc.StatusCode.UNAVAILABLE)
    tm.set_low_watermark(T0)
    tm.on_offsets_flushed()
    samples = shardcdc(scrape(url))
    assert len(samples) > 60
    tag_labels = {("connector", CONNECTOR), ("task", TASK), ("database", "salesdb"), ("table", "inventory")}
    shard_level = {
        "shardcdc_milliseconds_behind_source",
        "shardcdc_number_of_committed_transactions",
        "shardcdc_shard_low_watermark_seconds",
    }
    for (name, labels), _ in samples.items():
        assert tag_labels <= labels, name
        extra = {k for k, _ in labels} - {k for k, _ in tag_labels}
        if name in shard_level:
            assert extra == {"shard"}, name
        elif name.endswith("_bucket"):
            assert extra == {"le"}, name
        elif name.startswith(("shardcdc_reconnects", "shardcdc_stream_errors")):
            assert extra == {"code"}, name
        elif name == "shardcdc_state":
            assert extra == {"state"}, name
        else:
            assert extra == set(), name
    names = {n for n, _ in samples}
    debezium = {
        "shardcdc_milliseconds_since_last_event",
        "shardcdc_total_number_of_events_seen",
        "shardcdc_total_number_of_create_events_seen",
        "shardcdc_total_number_of_update_events_seen",
        "shardcdc_total_number_of_delete_events_seen",
        "shardcdc_number_of_events_filtered",
        "shardcdc_number_of_erroneous_events",
        "shardcdc_queue_total_capacity",
        "shardcdc_queue_remaining_capacity",
        "shardcdc_connected",
        "shardcdc_milliseconds_behind_source",
        "shardcdc_number_of_committed_transactions",
        "shardcdc_max_queue_size_in_bytes",
        "shardcdc_current_queue_size_in_bytes",
    }
    ours = {
        "shardcdc_low_watermark_seconds",
        "shardcdc_low_watermark_lag_seconds",
        "shardcdc_commit_to_read_seconds_bucket",
        "shardcdc_commit_to_emit_seconds_sum",
        "shardcdc_commit_to_ack_seconds_count",
        "shardcdc_reconnects_total",
        "shardcdc_records_sent_total",
        "shardcdc_records_acked_total",
        "shardcdc_offsets_flushed_total",
        "shardcdc_generation",
        "shardcdc_state",
    }
    assert debezium | ours <= names, sorted((debezium | ours) - names)


def test_lag_falls_to_zero_when_idle(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    loop = Loop(tm, clock)
    clock.t = T0 + 5  # the worker reads transactions committed five seconds ago
    for shard in SHARDS:
        loop.feed(txn_response(shard, 3, int(T0)))
    s = scrape(url)
    for shard in SHARDS:
        assert value(s, "shardcdc_milliseconds_behind_source", shard=shard, **BASE) == 5000.0
    assert value(s, "shardcdc_milliseconds_since_last_event", **BASE) == 0.0
    assert value(s, "shardcdc_low_watermark_seconds", **BASE) is None  # nothing acknowledged yet

    loop.kafka_acks()
    s = scrape(url)
    assert value(s, "shardcdc_low_watermark_seconds", **BASE) == T0
    assert value(s, "shardcdc_low_watermark_lag_seconds", **BASE) == 5.0

    # Idle without heartbeats: time since the last event grows, lag metrics keep their last value.
    clock.advance(3)
    s = scrape(url)
    assert value(s, "shardcdc_milliseconds_since_last_event", **BASE) == 3000.0
    assert value(s, "shardcdc_low_watermark_lag_seconds", **BASE) == 8.0

    # A VTGate heartbeat while idle: lag ~0, but on its own it proves no shard caught up.
    clock.advance(1)
    loop.feed(heartbeat_response(int(clock())))
    s = scrape(url)
    for shard in SHARDS:
        assert value(s, "shardcdc_milliseconds_behind_source", shard=shard, **BASE) == 0.0
    assert value(s, "shardcdc_low_watermark_seconds", **BASE) == T0
    # The probe it triggers: every durable position holds its primary's set → watermark = the
    # probe's whole second less the clock margin (commit timestamps are whole source seconds).
    assert loop.probe() == list(SHARDS)
    s = scrape(url)
    for shard in SHARDS:
        assert value(s, "shardcdc_shard_low_watermark_seconds", shard=shard, **BASE) == T0 + 9 - CLOCK_MARGIN_S
    assert value(s, "shardcdc_milliseconds_since_last_event", **BASE) == 0.0
    assert value(s, "shardcdc_low_watermark_seconds", **BASE) == T0 + 9 - CLOCK_MARGIN_S
    assert value(s, "shardcdc_low_watermark_lag_seconds", **BASE) == CLOCK_MARGIN_S


def test_unacked_records_hold_the_low_watermark_back(tm: TaskMetrics, clock: FakeClock) -> None:
    loop = Loop(tm, clock)
    clock.t = T0 + 1
    loop.feed(txn_response("-40", 1, int(T0)))
    loop.kafka_acks()
    loop.feed(txn_response("40-80", 1, int(T0)))
    loop.feed(txn_response("80-", 1, int(T0)))
    loop.kafka_acks()
    assert tm.low_watermark() == T0
    clock.t = T0 + 20
    loop.feed(txn_response("80-", 1, int(T0) + 19))  # in flight
    loop.feed(heartbeat_response(int(T0) + 20))
    assert loop.probe() == []  # not durable: a record is unacknowledged
    assert tm.low_watermark() == T0
    loop.kafka_acks()
    assert [s.watermark for s in tm.shards] == [T0, T0, T0 + 19]
    assert tm.low_watermark() == T0  # -40 and 40-80 are idle but not proven durable yet
    # A throttled (or lagging) shard looks idle to VTGate too: its changes are not read, and
    # only the shards whose durable position holds their primary's move.
    clock.t = T0 + 21
    assert loop.probe(lagging=("40-80",)) == ["-40", "80-"]
    assert [s.watermark for s in tm.shards] == [T0 + 20, T0, T0 + 20]  # T0 + 21 less the margin
    assert tm.low_watermark() == T0
    assert loop.probe() == list(SHARDS)
    assert tm.low_watermark() == T0 + 20
    # A shard bound later (a reshard) has no watermark yet: the published one does not go back.
    fresh = tm.shard("80-c0", "ks")
    assert tm.low_watermark() == T0 + 20
    fresh.on_ack(T0 + 25, T0 + 26)
    assert tm.low_watermark() == T0 + 20
    tm.drop_shard("80-")
    clock.t = T0 + 28
    loop.probe()
    assert tm.low_watermark() == T0 + 27
    tm.set_low_watermark(T0 + 30)  # the loop may compute it itself
    assert tm.low_watermark() == T0 + 30
    tm.set_low_watermark(None)
    assert tm.low_watermark() == T0 + 27


def test_a_backfill_hold_keeps_the_shards_watermark_until_it_is_released(tm: TaskMetrics, clock: FakeClock) -> None:
    """A held table's changes reach Kafka only in the catch-up: the shard's other commits must not
    move its watermark past the hold's start."""
    loop = Loop(tm, clock)
    clock.t = T0 + 1
    for shard in SHARDS:
        loop.feed(txn_response(shard, 1, int(T0)))
    loop.kafka_acks()
    assert tm.low_watermark() == T0
    tm.set_held(["40-80"])
    clock.t = T0 + 10
    for shard in SHARDS:
        loop.feed(txn_response(shard, 1, int(T0) + 9))
    loop.kafka_acks()
    assert loop.probe() == list(SHARDS)
    assert [s.watermark for s in tm.shards] == [T0 + 9, T0, T0 + 9]  # acked commits at T0 + 9
    assert tm.low_watermark() == T0
    tm.set_held([])  # caught up and rejoined
    assert tm.low_watermark() == T0 + 9
    fresh = tm.shard("c0-", "ks")  # held before it has any watermark: unknown until released
    tm.set_held(["c0-"])
    fresh.on_ack(T0 + 12)
    assert fresh.watermark is None and tm.low_watermark() == T0 + 9


def test_a_restarted_worker_publishes_the_stored_cap_of_a_hold(clock: FakeClock) -> None:
    """The cap is stored with the hold (ShardHandoff.watermark_cap): a worker restarted mid-backfill
    knows no watermark yet, and publishes the stored one rather than "unknown" until the catch-up."""
    before = TaskMetrics("conn", "0", clock=clock)
    sm = before.shard("-80", "ks")
    sm.on_ack(T0)
    assert before.set_held(["-80"]) == {"-80": T0}  # what the task stores with the hold
    sm.on_ack(T0 + 5)
    assert sm.watermark == T0

    after = TaskMetrics("conn", "0", clock=clock)  # the restarted process
    sm = after.shard("-80", "ks")
    assert after.set_held({"-80": T0}) == {"-80": T0}
    assert sm.watermark == T0 and after.low_watermark() == T0
    sm.on_ack(T0 + 7)  # live commits of the shard's other tables do not move it
    assert sm.watermark == T0
    assert after.set_held({}) == {}  # rejoined
    assert sm.watermark == T0 + 7


def test_latency_histograms_have_exact_buckets(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    sm = tm.shard("-80")
    for lag in (0.0, 0.3, 2.0, 7.0, 700.0, -1.5):  # -1.5: source clock ahead of ours → 0
        sm.on_commit(T0, T0 + lag, T0 + lag + 0.02)
    s = scrape(url)
    cumulative = {
        0.005: 2, 0.01: 2, 0.025: 2, 0.05: 2, 0.1: 2, 0.25: 2, 0.5: 3, 1.0: 3, 2.0: 4, 5.0: 4,
        10.0: 5, 30.0: 5, 60.0: 5, 120.0: 5, 300.0: 5, 600.0: 5,
    }  # fmt: skip
    assert list(cumulative) == list(LATENCY_BUCKETS)
    for bound, n in cumulative.items():
        le = str(bound)
        assert value(s, "shardcdc_commit_to_read_seconds_bucket", le=le, **BASE) == n, le
    assert value(s, "shardcdc_commit_to_read_seconds_bucket", le="+Inf", **BASE) == 6
    assert value(s, "shardcdc_commit_to_read_seconds_count", **BASE) == 6
    assert value(s, "shardcdc_commit_to_read_seconds_sum", **BASE) == pytest.approx(709.3)
    # 0.02 and the clamped -1.48; the others are later
    assert value(s, "shardcdc_commit_to_emit_seconds_bucket", le="0.025", **BASE) == 2
    assert value(s, "shardcdc_commit_to_ack_seconds_count", **BASE) == 0


def test_histogram_quantiles_interpolate_like_promql() -> None:
    h = LatencyHistogram((0.25, 0.5, 1.0))
    assert h.quantile(0.5) is None
    for _ in range(10):
        h.observe(0.3)
    assert h.quantile(0.5) == pytest.approx(0.375)  # 0.25 + 0.25 * 5/10
    h.observe(5.0)
    assert h.quantile(0.99) == 1.0  # in +Inf: the last finite bound
    assert h.count == 11
    assert h.buckets() == [("0.25", 0.0), ("0.5", 10.0), ("1.0", 10.0), ("+Inf", 11.0)]
    with pytest.raises(ValueError):
        LatencyHistogram((1.0, 0.5))


def test_reconnects_and_errors_by_grpc_code(tm: TaskMetrics, url: str) -> None:
    tm.on_error(grpc.StatusCode.UNAVAILABLE)
    tm.on_reconnect(grpc.StatusCode.UNAVAILABLE)
    tm.on_error("unavailable")
    tm.on_reconnect("UNAVAILABLE")
    tm.on_error(grpc.StatusCode.PERMISSION_DENIED)
    tm.on_error(None)
    s = scrape(url)
    assert value(s, "shardcdc_reconnects_total", code="UNAVAILABLE", **BASE) == 2
    assert value(s, "shardcdc_stream_errors_total", code="UNAVAILABLE", **BASE) == 2
    assert value(s, "shardcdc_stream_errors_total", code="PERMISSION_DENIED", **BASE) == 1
    assert value(s, "shardcdc_stream_errors_total", code="UNKNOWN", **BASE) == 1
    assert value(s, "shardcdc_reconnects_total", code="PERMISSION_DENIED", **BASE) is None


def test_state_generation_queue_and_connection_gauges(tm: TaskMetrics, url: str) -> None:
    s = scrape(url)
    assert value(s, "shardcdc_state", state="starting", **BASE) == 1
    assert value(s, "shardcdc_connected", **BASE) == 0
    tm.set_state("streaming")
    tm.set_connected(True)
    tm.set_generation(4)
    tm.queue(capacity=20240, remaining=20000, size_bytes=4096, max_bytes=1 << 20)
    tm.on_erroneous(2)
    tm.on_response(1, 0, filtered=3)
    s = scrape(url)
    states = {dict(ls)["state"]: v for (n, ls), v in s.items() if n == "shardcdc_state"}
    assert states == {
        "starting": 0, "snapshotting": 0, "streaming": 1, "reconnecting": 0,
        "reassignment_needed": 0, "failed": 0, "stopped": 0, "completed": 0,
    }  # fmt: skip
    assert value(s, "shardcdc_connected", **BASE) == 1
    assert value(s, "shardcdc_ready", **BASE) == 1
    assert value(s, "shardcdc_generation", **BASE) == 4
    assert value(s, "shardcdc_queue_total_capacity", **BASE) == 20240
    assert value(s, "shardcdc_queue_remaining_capacity", **BASE) == 20000
    assert value(s, "shardcdc_current_queue_size_in_bytes", **BASE) == 4096
    assert value(s, "shardcdc_max_queue_size_in_bytes", **BASE) == 1 << 20
    assert value(s, "shardcdc_number_of_erroneous_events", **BASE) == 2
    assert value(s, "shardcdc_number_of_events_filtered", **BASE) == 3
    with pytest.raises(ValueError, match="unknown task state"):
        tm.set_state("running")


def test_hot_path_binds_children_once(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    sm = tm.shard("-80", "ks")
    assert tm.shard("-80") is sm
    assert sm.labels == (CONNECTOR, TASK, "salesdb", "inventory", "-80")  # label values bound up front
    assert not hasattr(sm, "__dict__")  # slots: attribute writes, no per-instance dict

    class NoLookups(dict[str, ShardMetrics]):
        def __getitem__(self, key: str) -> ShardMetrics:
            raise AssertionError("hot path looked a shard up")

        def get(self, key: str, default: object = None) -> Any:
            raise AssertionError("hot path looked a shard up")

    tm._shards = NoLookups(tm._shards)
    before = sys.getallocatedblocks()
    for i in range(20_000):
        tm.on_response(4, 3, 0, now=T0 + i)
        sm.on_commit(T0, T0 + 0.5, T0 + 0.6, 3)
        sm.on_ack(T0, T0 + 0.7)
        tm.on_sent(3)
        tm.on_acked(3)
    assert sys.getallocatedblocks() - before < 200  # nothing accumulates per call
    s = scrape(url)  # the scrape thread does not need the dict either
    assert value(s, "shardcdc_number_of_committed_transactions", shard="-80", **BASE) == 20_000
    assert value(s, "shardcdc_total_number_of_events_seen", **BASE) == 60_000


def test_drop_shard_removes_its_series(tm: TaskMetrics, url: str) -> None:
    tm.shard("-80").on_commit(T0, T0)
    tm.shard("80-").on_commit(T0, T0)
    tm.drop_shard("-80")
    s = scrape(url)
    assert value(s, "shardcdc_number_of_committed_transactions", shard="-80", **BASE) is None
    assert value(s, "shardcdc_number_of_committed_transactions", shard="80-", **BASE) == 1
    assert [x.name for x in tm.shards] == ["80-"]


def test_each_worker_has_its_own_registry(clock: FakeClock) -> None:
    a = TaskMetrics("a", "0", clock=clock)
    b = TaskMetrics("b", "0", clock=clock)
    a.on_response(1, 5)
    b.on_response(1, 7)
    from prometheus_client.exposition import generate_latest

    sa, sb = parse(generate_latest(a.registry).decode()), parse(generate_latest(b.registry).decode())
    assert value(sa, "shardcdc_total_number_of_events_seen") == 5
    assert value(sb, "shardcdc_total_number_of_events_seen") == 7
    assert value(sa, "shardcdc_total_number_of_events_seen", connector="b") is None
    global_names = {m.name for m in REGISTRY.collect()}
    assert not any(n.startswith("shardcdc_") for n in global_names)
    assert any(n.startswith("process_") for n, _ in sa)  # process metrics ride along per registry


@pytest.mark.parametrize("tag", ["shard", "connector", "le", "code"])
def test_reserved_tag_names_are_rejected(tag: str) -> None:
    with pytest.raises(ValueError, match="reserved label"):
        TaskMetrics("c", "0", tags=[(tag, "x")])


def test_duplicate_tag_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="twice"):
        TaskMetrics("c", "0", tags=[("env", "a"), ("env", "b")])


def test_the_idle_probe_marks_the_whole_second_before_it_less_the_clock_margin() -> None:
    """Commit timestamps are whole seconds of the source's clock: a change committed right after a
    probe at 100.4 has timestamp 100 (or 99 on a primary whose clock is a little behind), so the
    proof may only say "everything before 99 is in Kafka"."""
    from cdcworker.idleprobe import IdleProbe
    from cdcworker.offsets import ShardGtid, Vgtid

    head, behind = f"MySQL56/{UUID}:1-9", f"MySQL56/{UUID}:1-8"
    durable = Vgtid((ShardGtid("ks", "-80", head), ShardGtid("ks", "80-", behind)))
    marks: list[tuple[str, float]] = []
    probe = IdleProbe(lambda shards: dict.fromkeys(shards, head), lambda: durable,
                      lambda s, t: marks.append((s, t)), clock=lambda: 100.4)
    assert probe.probe() == ["-80"] and marks == [("-80", 100.0 - CLOCK_MARGIN_S)]
    # A shard whose position could not be read (left out) proves nothing.
    marks.clear()
    probe = IdleProbe(lambda shards: {"80-": head}, lambda: durable, lambda s, t: marks.append((s, t)),
                      clock=lambda: 100.4)
    assert probe.probe() == [] and marks == []


def test_under_sustained_load_the_watermark_follows_the_durable_position() -> None:
    """A stream that is never wholly durable at a flush: each flush notes where each shard was read
    and that commit's time; a later flush whose durable position contains it moves the shard's
    watermark there (about one flush interval behind, rather than never)."""
    from cdcworker.idleprobe import AckCheckpoints
    from cdcworker.offsets import Vgtid

    uuid = "0b7e9d2a-1111-2222-3333-444455556666"

    def at(a: int, b: int) -> Vgtid:
        return Vgtid.of("ks", {"-80": f"MySQL56/{uuid}:1-{a}", "80-": f"MySQL56/{uuid}:1-{b}"})

    cp = AckCheckpoints()
    assert cp.flush(at(10, 20), at(8, 19), {"-80": (T0 + 1, 1), "80-": (T0 + 2, 1)}) == {}  # noted: -80@10, 80-@20
    # Next flush: -80 durable through 10, 80- still at 19; the read went on meanwhile.
    assert cp.flush(at(30, 40), at(12, 19), {"-80": (T0 + 5, 2), "80-": (T0 + 6, 2)}) == {"-80": T0 + 1}
    # -80 noted again at 30; 80- keeps waiting for 20 (its first note), which is durable now.
    assert cp.flush(at(50, 60), at(30, 25), {"-80": (T0 + 9, 3), "80-": (T0 + 9, 3)}) == {"-80": T0 + 5, "80-": T0 + 2}
    # A shard without a commit read yet is not noted.
    fresh = AckCheckpoints()
    assert fresh.flush(at(1, 1), None, {"-80": (None, 0)}) == {} and fresh.flush(at(2, 2), at(2, 2), {}) == {}


def test_after_an_aborted_kafka_transaction_old_commit_times_are_not_taken() -> None:
    """Exactly-once: a reconnect aborts the open Kafka transaction and the stream resumes before
    commits it had read. Their times must not become the watermark when the resume point is durable."""
    from cdcworker.idleprobe import AckCheckpoints
    from cdcworker.offsets import Vgtid

    uuid = "0b7e9d2a-1111-2222-3333-444455556666"

    def at(a: int) -> Vgtid:
        return Vgtid.of("ks", {"-80": f"MySQL56/{uuid}:1-{a}"})

    cp = AckCheckpoints()
    assert cp.flush(at(10), at(5), {"-80": (T0 + 9, 7)}) == {}  # noted: read through 10 at T0 + 9
    cp.rewound({"-80": 7})  # aborted: the stream resumes at 5, the last commit read is still T0 + 9
    assert cp.flush(at(5), at(5), {"-80": (T0 + 9, 7)}) == {}  # the note is gone, the time not taken
    assert not cp.current("-80", 7)  # nor by the all-durable fast path
    assert cp.flush(at(10), at(5), {"-80": (T0 + 9, 7)}) == {}
    assert cp.flush(at(6), at(5), {"-80": (T0 + 3, 8)}) == {}  # a transaction read since: noted again
    assert cp.current("-80", 8)
    assert cp.flush(at(8), at(6), {"-80": (T0 + 4, 9)}) == {"-80": T0 + 3}


def test_a_late_durable_commit_moves_the_watermark_but_not_the_ack_latency(tm: TaskMetrics) -> None:
    sm = tm.shard("-80")
    sm.durable_through(T0)
    sm.durable_through(T0 - 5)  # older: no step back
    assert sm.watermark == T0 and tm.low_watermark() == T0
    assert tm.commit_to_ack.count == 0  # learnt a flush late: no observation of that delay
    sm.on_ack(T0 + 1, ack_ts=T0 + 1.25)
    assert sm.watermark == T0 + 1 and tm.commit_to_ack.count == 1
