"""max.queue.size.in.bytes: a bound on buffered row bytes, with back-pressure, fed to the queue metrics.

Two places hold VStream data before it becomes records: the reader's queue of responses (it stops
pulling from gRPC when the byte budget is used, so flow control holds VTGate) and the rows of the
open transaction (beyond the budget the transaction is streamed before its COMMIT, as beyond
max.queue.size rows). Sizes are the serialized RowChanges of each ROW event, summed per event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from events_fixtures import field, field_event, insert
from worker_fixtures import RecordingSink, running_task, wait_for, wait_positioned, worker_config

from cdcworker import exitcodes
from cdcworker.events import EncoderConfig
from cdcworker.observability import TaskMetrics
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.source.channel import ChannelSettings, open_channel
from cdcworker.source.reader import END, ResponseReader
from cdcworker.streaming import StreamProcessor
from localkafka import KafkaBroker, consume_all
from vitessapi import binlogdata_pb2, vtgate_pb2
from vtgatesim import VTGateSim

_T = binlogdata_pb2.VEventType


# --- the reader stops pulling from gRPC at the byte budget ---------------------------------------


class FakeCall:
    """A VStream call: iterates responses, counts pulls, ends with CANCELLED once cancelled.

    Like gRPC's single-threaded unary-stream call (the worker's channel option), a cancel runs no
    callback: only the thread iterating the call would see it.
    """

    def __init__(self, responses: list[bytes]) -> None:
        self.responses = responses
        self.pulled = 0
        self.cancelled = False

    def __iter__(self) -> Iterator[bytes]:
        for r in self.responses:
            if self.cancelled:
                raise RuntimeError("CANCELLED")
            self.pulled += 1
            yield r

    def cancel(self) -> None:
        self.cancelled = True


def test_reader_holds_at_most_the_budget_plus_one_response() -> None:
    call = FakeCall([bytes([i]) * 1000 for i in range(6)])
    reader = ResponseReader(call, depth=16, max_bytes=2500)
    wait_for(reader.waiting.is_set, what="the reader to wait for room")
    # 3 responses queued (3000 bytes: each was admitted below 2500), the 4th pulled and held.
    assert (call.pulled, reader.queued_bytes) == (4, 3000)
    assert reader.next(5) == bytes([0]) * 1000
    wait_for(lambda: call.pulled == 5 and reader.waiting.is_set(), what="one more pulled, then a wait")
    assert (reader.queued_bytes, reader.peak_bytes) == (3000, 3000)
    got = [reader.next(5) for _ in range(5)]
    assert got == [bytes([i]) * 1000 for i in range(1, 6)]
    assert reader.next(5) is END
    assert (call.pulled, reader.queued_bytes, reader.peak_bytes) == (6, 0, 3000)


@pytest.mark.parametrize("depth", [1, 2, 5, 16])
def test_reader_stays_within_its_depth_and_never_stalls(depth: int) -> None:
    """Room goes back to the reader half the depth at a time: it never runs more than ``depth``
    responses (plus the one it holds) ahead of what ``next`` returned, and a reader waiting for
    room always gets it before the queue runs dry (a stall would end in IDLE here)."""
    call = FakeCall([i.to_bytes(2, "big") for i in range(60)])
    reader = ResponseReader(call, depth=depth)
    wait_for(lambda: call.pulled == depth + 1, what="the reader to fill the queue and hold one more")
    got = []
    for k in range(1, 61):
        item = reader.next(5)
        assert type(item) is bytes, f"response {k}: {item!r}"
        got.append(int.from_bytes(item, "big"))
        assert call.pulled <= depth + k + 1
    assert got == list(range(60))
    assert reader.next(5) is END


def test_a_cancel_wakes_a_waiting_reader() -> None:
    call = FakeCall([bytes(1000)] * 6)
    reader = ResponseReader(call, depth=16, max_bytes=1500)
    wait_for(reader.waiting.is_set, what="the reader to wait for room")
    assert (call.pulled, reader.queued_bytes) == (3, 2000)
    reader.cancel()
    assert call.cancelled
    items = [reader.next(5) for _ in range(4)]
    assert items[:3] == [bytes(1000)] * 3  # the queued ones and the one it held
    assert isinstance(items[3], RuntimeError) and str(items[3]) == "CANCELLED"  # for the task to handle


def test_a_cancel_wakes_a_reader_waiting_for_room_on_a_real_channel(sim: VTGateSim) -> None:
    """The worker's channel reads a stream on its consuming thread: the reader's cancel must wake it."""
    for i in range(20):
        sim.execute(f"INSERT INTO t (id, name) VALUES ({i}, '{'x' * 60}')", "commerce")
    with open_channel(ChannelSettings(sim.address)) as channel:
        vstream = channel.unary_stream("/vtgateservice.Vitess/VStream",
                                       request_serializer=vtgate_pb2.VStreamRequest.SerializeToString)
        start = binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="commerce", shard="0", gtid="")])
        call = vstream(vtgate_pb2.VStreamRequest(tablet_type=1, vgtid=start))
        reader = ResponseReader(call, depth=64, max_bytes=1)
        wait_for(reader.waiting.is_set, what="the reader to wait for room")
        reader.cancel()
        wait_for(lambda: not reader.waiting.is_set(), what="the cancel to wake the reader")
        items = [reader.next(5) for _ in range(3)]
    assert all(type(i) is bytes for i in items[:2])  # the queued response and the one it held
    assert isinstance(items[2], grpc.RpcError) and items[2].code() == grpc.StatusCode.CANCELLED


# --- the processor streams a transaction out at the budget; the metrics follow ---------------------

GTID = "MySQL56/0b7e9d2a-1111-2222-3333-444455556666"


def _responses(raw: bool) -> list[Any]:
    fe = field_event("t", [field("id", "INT64", "bigint", flags=1 | 2), field("name", "VARCHAR", "varchar(64)")], "ks", "0")
    fe.table_name = "ks.t"

    def row_event(*ids: int) -> binlogdata_pb2.VEvent:
        rcs = [insert(str(i).encode(), f"name-{i}".encode()) for i in ids]
        re_ = binlogdata_pb2.RowEvent(table_name="ks.t", row_changes=rcs, keyspace="ks", shard="0")
        return binlogdata_pb2.VEvent(type=_T.ROW, row_event=re_, keyspace="ks", shard="0")

    vgtid = binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="ks", shard="0", gtid=f"{GTID}:1-8")])
    groups = [
        [binlogdata_pb2.VEvent(type=_T.BEGIN, timestamp=1_700_000_000, shard="0"),
         binlogdata_pb2.VEvent(type=_T.FIELD, field_event=fe, shard="0"), row_event(1, 2)],
        [row_event(3, 4)],
        [row_event(5), binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=vgtid, shard="0"),
         binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=1_700_000_009, shard="0")],
    ]  # fmt: skip
    responses = [vtgate_pb2.VStreamResponse(events=g) for g in groups]
    return [r.SerializeToString() for r in responses] if raw else responses


def _bytes(*ids: int) -> int:
    return sum(insert(str(i).encode(), f"name-{i}".encode()).ByteSize() for i in ids)


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "parsed"])
def test_a_transaction_is_streamed_at_the_byte_budget_and_the_metrics_follow(raw: bool) -> None:
    budget = _bytes(1, 2) + 1  # rows 1-2 fit, rows 3-4 cross it
    sink = RecordingSink()
    metrics = TaskMetrics("c", "0")
    start = Vgtid((ShardGtid("ks", "0", f"{GTID}:1-7"),))
    proc = StreamProcessor(EncoderConfig("p"), sink, start, lookahead_rows=1000, metrics=metrics, max_queue_bytes=budget)
    assert (metrics.queue_max_bytes, metrics.queue_bytes) == (budget, 0)
    first, second, third = _responses(raw)
    proc.process(first)
    assert (metrics.queue_bytes, len(sink.records)) == (_bytes(1, 2), 0)  # held until COMMIT
    proc.process(second)
    assert (metrics.queue_bytes, len(sink.records)) == (0, 4)  # over the budget: streamed out
    proc.process(third)
    assert (metrics.queue_bytes, len(sink.records)) == (0, 5)
    assert proc.stats.peak_queue_bytes == _bytes(1, 2, 3, 4)
    sources = [json.loads(r[3])["payload"]["source"] for r in sink.records]
    # Streamed rows carry the position and time known before the COMMIT (a documented difference).
    before = f'[{{"keyspace":"ks","shard":"0","gtid":"{GTID}:1-7","table_p_ks":[]}}]'
    after = f'[{{"keyspace":"ks","shard":"0","gtid":"{GTID}:1-8","table_p_ks":[]}}]'
    assert [(s["vgtid"], s["ts_ms"]) for s in sources] == [(before, 1_700_000_000_000)] * 4 + [(after, 1_700_000_009_000)]
    assert [json.loads(r[3])["payload"]["after"]["id"] for r in sink.records] == [1, 2, 3, 4, 5]


def test_without_a_byte_budget_nothing_is_counted() -> None:
    sink = RecordingSink()
    metrics = TaskMetrics("c", "0")
    proc = StreamProcessor(EncoderConfig("p"), sink, Vgtid((ShardGtid("ks", "0", f"{GTID}:1-7"),)), metrics=metrics)
    first, _, _ = _responses(raw=False)
    proc.process(first)
    # As Debezium's ChangeEventQueue: sizes are tracked only when max.queue.size.in.bytes is set.
    assert (metrics.queue_max_bytes, metrics.queue_bytes, metrics.queue_remaining) == (0, 0, 8190)


# --- a large transaction through the worker ---------------------------------------------------------

BUDGET = 16384


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim(packet_size=4096) as s:
        s.create_keyspace("commerce", ddl=["CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR(64), PRIMARY KEY (id))"])
        yield s


def test_a_large_transaction_streams_with_bounded_buffered_bytes(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    extra = {"max.queue.size": "100000", "max.queue.size.in.bytes": str(BUDGET)}
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra=extra)
    rows = 3000
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        before = sim.positions("commerce")["0"]
        values = ", ".join(f"({i}, 'row-{i:05d}-{'x' * 40}')" for i in range(1, rows + 1))
        sim.execute(f"INSERT INTO t (id, name) VALUES {values}", "commerce")
        after = sim.positions("commerce")["0"]
        wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= rows
                 and run.task.sink.durable_position() is not None
                 and {sg.shard: sg.gtid for sg in run.task.sink.durable_position()} == {"0": after},
                 what="the transaction durable")
        proc, metrics = run.task.processor, run.task.metrics
        assert proc is not None and metrics is not None
        peak = proc.stats.peak_queue_bytes
        queue_bytes, queue_max = metrics.queue_bytes, metrics.queue_max_bytes
        result = run.stop()
    assert result.exit_code == exitcodes.OK
    records = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.t")
    payloads = [json.loads(r.value)["payload"] for r in records]
    assert [p["after"]["id"] for p in payloads] == list(range(1, rows + 1))  # each once, in order
    gtids = [json.loads(p["source"]["vgtid"])[0]["gtid"] for p in payloads]
    held = gtids.count(after)
    # Streamed out in pieces of at most the budget; only the rows after the last piece waited for COMMIT.
    assert gtids == [before] * (rows - held) + [after] * held
    row_bytes = _row_bytes(payloads[-1]["after"]["id"])
    assert 0 < held * row_bytes < BUDGET
    assert BUDGET <= peak < BUDGET + 4096 + row_bytes  # one ROW event (a packet) beyond the budget
    assert (queue_max, queue_bytes) == (BUDGET, 0)  # nothing held once the transaction committed


def _row_bytes(i: int) -> int:
    return insert(str(i).encode(), f"row-{i:05d}-{'x' * 40}".encode()).ByteSize()
