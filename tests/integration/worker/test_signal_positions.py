"""Where signals resume: a signal passes the task's offset only together with what it started.

Source channel: the commit point of the transaction that inserted a signal row is sealed after the
signal was acted on, and carries the ad-hoc snapshot it queued (before, the snapshot reached only
a later commit point: a crash in between lost the signal for good).

Kafka channel: the channel's read position is stored in the task's offset
(``shardcdc_signal_offsets``), in the same commit points as the snapshots the signals started. A
restarted task, and a task of a new generation, resume the channel there. Before, each task
committed a consumer group of its own task key as soon as a signal was queued: a crash lost the
signal, and every new generation (new task keys, new groups, ``earliest``) ran every signal in the
topic again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from events_fixtures import field, field_event, insert
from polling import wait_for
from worker_fixtures import (
    PositionSink,
    caught_up,
    commerce_sim,
    running_task,
    wait_positioned,
    worker_config,
)

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig
from cdcworker.filters import FailureHandler
from cdcworker.offsets import OffsetPartition, OffsetValue, ShardGtid, Vgtid, offset_record_key
from cdcworker.offsets.value import Checkpoint
from cdcworker.signals import (
    SIGNAL_OFFSETS_KEY,
    Signal,
    SignalDispatcher,
    SignalTap,
    inherited_signal_offsets,
    stored_signal_offsets,
)
from cdcworker.signals.runtime import TaskExtras
from cdcworker.snapshot import SnapshotRequest
from cdcworker.snapshot.vstream_copy import STATE_KEY, VStreamCopyEngine
from cdcworker.streaming import Features, StreamProcessor
from localkafka import KafkaBroker, consume_all
from vitessapi import binlogdata_pb2, vtgate_pb2
from vtgatesim import VTGateSim

_T = binlogdata_pb2.VEventType
G = "MySQL56/0b7e9d2a-1111-2222-3333-444455556666:1-"


def _ev(t: int, **kw: Any) -> binlogdata_pb2.VEvent:
    return binlogdata_pb2.VEvent(type=t, keyspace="ks", shard="0", **kw)


def _signal_txn(gtid: str, sid: bytes, data: dict[str, Any]) -> list[binlogdata_pb2.VEvent]:
    fields = [field("id", "INT64", "bigint", flags=1 | 2), field("type", "VARCHAR", "varchar(32)"),
              field("data", "TEXT", "text")]
    row = binlogdata_pb2.RowEvent(table_name="ks.dbz_signal", keyspace="ks", shard="0",
                                  row_changes=[insert(sid, b"execute-snapshot", json.dumps(data).encode())])
    vgtid = binlogdata_pb2.VGtid(shard_gtids=[ShardGtid("ks", "0", gtid).to_proto()])
    return [_ev(_T.BEGIN), _ev(_T.FIELD, field_event=field_event("ks.dbz_signal", fields, "ks", "0")),
            _ev(_T.ROW, row_event=row), _ev(_T.VGTID, vgtid=vgtid), _ev(_T.COMMIT, timestamp=1_700_000_001)]


def test_the_signal_rows_commit_point_carries_the_snapshot_it_started() -> None:
    encoder = EncoderConfig("p")
    engine = VStreamCopyEngine(lambda req: iter(()), "ks", lambda: ["0"], encoder)
    dispatcher = SignalDispatcher(engine)
    extras = TaskExtras(encoder, None, FailureHandler("fail"), "ks", dispatcher=dispatcher, engine=engine,  # type: ignore[arg-type]
                        tap=SignalTap("ks.dbz_signal", encoder, dispatcher))
    features = Features()
    extras.install(features)
    sink = PositionSink()
    proc = StreamProcessor(encoder, sink, Vgtid((ShardGtid("ks", "0", G + "4"),)), features=features)
    proc.process(vtgate_pb2.VStreamResponse(events=_signal_txn(G + "5", b"7", {"data-collections": ["ks.customer"]})))
    assert [s.id for s in dispatcher.handled] == ["7"]
    (point,) = sink.positions
    assert Vgtid(point.shard_gtids) == Vgtid((ShardGtid("ks", "0", G + "5"),))
    # The first commit point past the signal row already holds the snapshot it queued.
    assert isinstance(point, Checkpoint)
    state = json.loads(dict(point.extra)[STATE_KEY])["requests"]
    assert [(r["id"], r["data_collections"]) for r in state] == [("7", ["ks.customer"])]
    assert proc.position is point


def test_the_dispatcher_records_the_channel_position_only_once_a_signal_was_acted_on() -> None:
    started: list[str] = []

    class Engine:
        def start(self, request: SnapshotRequest) -> None:
            started.append(request.id)

        def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
            pass

    d = SignalDispatcher(Engine())  # type: ignore[arg-type]
    d.passed("sig", 0, 3)  # records 0..2 were another connector's
    d.submit(Signal("a", "execute-snapshot", {"data-collections": ["ks.t"]}, "kafka", ("sig", 0, 3)))
    d.passed("sig", 1, 8)
    assert d.channel_offsets == {} and started == []  # queued: nothing acted on yet
    d.poll()
    assert started == ["a"]
    assert d.channel_offsets == {("sig", 0): 4, ("sig", 1): 8}


def test_a_new_generation_resumes_the_channel_at_the_lowest_position_of_its_sources() -> None:
    def fields(offsets: dict[int, int] | None) -> dict[str, str]:
        return {} if offsets is None else {SIGNAL_OFFSETS_KEY: json.dumps({"sig": {str(p): o for p, o in offsets.items()}})}

    assert stored_signal_offsets(fields({0: 5, 2: 1})) == {("sig", 0): 5, ("sig", 2): 1}
    assert stored_signal_offsets({SIGNAL_OFFSETS_KEY: "not json"}) is None
    assert inherited_signal_offsets([fields({0: 9}), fields({0: 4, 1: 2})]) == {("sig", 0): 4}
    # One source task never stored a position: nothing it had not acted on may be skipped.
    assert inherited_signal_offsets([fields({0: 9}), fields(None)]) is None
    assert inherited_signal_offsets([]) is None


def test_a_snapshot_running_across_a_generation_change_resumes_per_shard() -> None:
    """Task 0 of the old generation copied ``-40`` and was half-way through ``40-80``; task 1 had
    queued the same snapshot. The new task holds all three shards: ``-40`` is done, ``40-80``
    resumes from its entry, ``80-`` (queued, never started) is copied from the start."""
    from cdcworker.offsets.vgtid import LastPK, PKField, PKRow, TableLastPK

    lastpk = TableLastPK("customer", LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((2,), b"17"),)))
    copy = Vgtid((ShardGtid("ks", "-40", G + "3"), ShardGtid("ks", "40-80", G + "8", (lastpk,))))

    def state(vgtid: str) -> dict[str, str]:
        return {STATE_KEY: json.dumps({"requests": [{"id": "s1", "data_collections": ["ks.customer"], "conditions": {},
                                                     "kind": "incremental", "stopped": [], "vgtid": vgtid}]})}

    old0, old1 = state(copy.to_json()), state("")
    engine = VStreamCopyEngine(lambda req: iter(()), "ks", lambda: ["-40", "40-80", "80-"], EncoderConfig("p"))
    engine.restore_inherited({"-40": old0, "40-80": old0, "80-": old1})
    assert [r.id for r in engine._queued] == ["s1"]
    resume = Vgtid.from_json(engine._resume["s1"])
    assert [(sg.shard, sg.gtid, sg.table_p_ks, sg.copying) for sg in resume] == [
        ("-40", G + "3", (), False),
        ("40-80", G + "8", (lastpk,), True),
        ("80-", "", (), True),
    ]


# --- the Kafka channel against the real broker ----------------------------------------------------

DDL = ["CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))"]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim(DDL, customers=4) as s:
        yield s


def _task(base: WorkerConfig, broker: KafkaBroker, sim: VTGateSim, task: int, tasks: int, gen: int,
          shards: list[str]) -> WorkerConfig:
    return worker_config(broker, sim.address, "commerce", prefix=base.topic_prefix, extra={
        "signal.enabled.channels": "kafka", "vitess.offset.storage.per.task": "true", "tasks.max": str(tasks),
        "shardcdc.task.id": str(task), "shardcdc.task.count": str(tasks), "shardcdc.task.generation": str(gen),
        "shardcdc.task.shards": ",".join(shards), "shardcdc.task.prev.count": "1",
    })


def _stored(broker: KafkaBroker, cfg: WorkerConfig) -> dict[str, Any]:
    t = cfg.task
    key = offset_record_key(cfg.name, OffsetPartition.for_task(cfg.topic_prefix, t.task_id, t.task_count, t.generation))
    values = [r.value for r in consume_all(broker.bootstrap, cfg.kafka.offsets_topic) if r.key == key and r.value]
    return OffsetValue.from_bytes(values[-1]).fields if values else {}


def _signal(producer: Producer, cfg: WorkerConfig, sid: str, kind: str, data: dict[str, Any]) -> None:
    producer.produce(cfg.signals.kafka_topic, json.dumps({"id": sid, "type": kind, "data": data}).encode(),
                     cfg.topic_prefix.encode())
    producer.flush(30)


def test_the_kafka_channel_resumes_from_the_offset_after_a_restart_and_a_rescale(
        sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    base = worker_config(kafka_broker, sim.address, "commerce")
    gen0 = _task(base, kafka_broker, sim, 0, 1, 0, ["-80", "80-"])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    topic = f"{base.topic_prefix}.commerce.customer"
    _signal(producer, gen0, "snap-1", "execute-snapshot", {"data-collections": ["commerce.customer"]})
    with running_task(gen0) as run:
        wait_positioned(sim, run)
        wait_for(lambda: run.task.extras.engine.completed == ["snap-1"], what="the snapshot")
        wait_for(lambda: SIGNAL_OFFSETS_KEY in _stored(kafka_broker, gen0), what="the channel position stored")
        assert run.stop().exit_code == exitcodes.OK
    assert json.loads(_stored(kafka_broker, gen0)[SIGNAL_OFFSETS_KEY]) == {gen0.signals.kafka_topic: {"0": 1}}
    reads = [r for r in consume_all(kafka_broker.bootstrap, topic) if r.value]
    assert len(reads) == 4

    # Restarted, and then as two tasks of a new generation: a later signal is acted on, the
    # snapshot is not run again (each run's handled list is exactly the new signal).
    _signal(producer, gen0, "log-2", "log", {"message": "after the restart"})
    with running_task(gen0) as run:
        wait_for(lambda: run.task.extras is not None and [s.id for s in run.task.extras.dispatcher.handled] == ["log-2"],
                 what="the restarted task to read the new signal")
        assert run.task.extras.engine.completed == []
        assert run.stop().exit_code == exitcodes.OK
    _signal(producer, gen0, "log-3", "log", {"message": "after the rescale"})
    for task, shards in ((0, ["-80"]), (1, ["80-"])):
        cfg = _task(base, kafka_broker, sim, task, 2, 1, shards)
        with running_task(cfg) as run:
            wait_for(lambda r=run: r.task.extras is not None  # type: ignore[misc]
                     and [s.id for s in r.task.extras.dispatcher.handled] == ["log-3"],
                     what=f"task {task} of generation 1 to read the new signal")
            assert run.stop().exit_code == exitcodes.OK
        assert json.loads(_stored(kafka_broker, cfg)[SIGNAL_OFFSETS_KEY]) == {cfg.signals.kafka_topic: {"0": 3}}
    assert len([r for r in consume_all(kafka_broker.bootstrap, topic) if r.value]) == 4  # no second snapshot


SIGNAL_DDL = [*DDL, "CREATE TABLE dbz_signal (id BIGINT NOT NULL, type VARCHAR(32), data TEXT, PRIMARY KEY (id))"]


def test_a_signal_row_reaches_every_task_of_a_multi_task_connector(kafka_broker: KafkaBroker) -> None:
    """The signal row is on one shard, so only one task reads it; before, only that task's shards
    were snapshotted. It now relays the signal, and the other task snapshots its shards too."""
    with commerce_sim(SIGNAL_DDL, customers=6) as sim:
        base = worker_config(kafka_broker, sim.address, "commerce")

        def task(i: int, shard: str) -> WorkerConfig:
            return worker_config(kafka_broker, sim.address, "commerce", prefix=base.topic_prefix, extra={
                "signal.data.collection": "commerce.dbz_signal", "vitess.offset.storage.per.task": "true",
                "tasks.max": "2", "shardcdc.task.id": str(i), "shardcdc.task.count": "2",
                "shardcdc.task.generation": "0", "shardcdc.task.shards": shard, "shardcdc.task.prev.count": "1"})

        with running_task(task(0, "-80")) as a, running_task(task(1, "80-")) as b:
            for run in (a, b):
                wait_for(lambda r=run: r.task.processor is not None and r.task.extras is not None  # type: ignore[misc]
                         and all(sg.gtid != "current" for sg in r.task.processor.position), what="positioned")
            data = json.dumps({"data-collections": ["commerce.customer"]})
            sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{data}')", "commerce")
            for run in (a, b):
                wait_for(lambda r=run: r.task.extras.engine.completed == ["1"], what="both tasks' snapshots")  # type: ignore[misc]
                wait_for(lambda r=run: r.task.sink.pending == 0, what="acknowledged")  # type: ignore[misc]
            relayed = [r.task.extras.relay.relayed for r in (a, b)]
            assert sorted(relayed) == [[], ["1"]]  # the task that read the row relayed it
            assert a.stop().exit_code == exitcodes.OK and b.stop().exit_code == exitcodes.OK
    reads = [json.loads(r.value)["payload"] for r in consume_all(kafka_broker.bootstrap, f"{base.topic_prefix}.commerce.customer")
             if r.value]
    assert sorted(p["after"]["id"] for p in reads if p["op"] == "r") == [1, 2, 3, 4, 5, 6]


def test_rows_already_in_the_signal_table_are_not_acted_on_by_the_initial_snapshot(kafka_broker: KafkaBroker) -> None:
    """The initial copy reads the signal table's old rows as inserts; acting on them re-ran every
    signal ever sent. Only rows the stream brings after the copy batch are signals (Debezium)."""
    with commerce_sim(SIGNAL_DDL, customers=3) as sim:
        old = json.dumps({"data-collections": ["commerce.customer"]})
        sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (1, 'execute-snapshot', '{old}')", "commerce")
        cfg = worker_config(kafka_broker, sim.address, "commerce", extra={
            "signal.data.collection": "commerce.dbz_signal", "snapshot.mode": "initial"})
        with running_task(cfg) as run:
            wait_for(lambda: run.task.processor is not None and not run.task.processor.position.copying
                     and caught_up(sim, run), what="the initial copy")
            new = json.dumps({"message": "after the copy"})
            sim.execute(f"INSERT INTO dbz_signal (id, type, data) VALUES (2, 'log', '{new}')", "commerce")
            wait_for(lambda: [s.id for s in run.task.extras.dispatcher.handled] == ["2"], what="only the new signal")
            assert run.task.extras.engine.completed == [] and not run.task.extras.engine.active
            assert run.stop().exit_code == exitcodes.OK
    reads = [json.loads(r.value)["payload"] for r in consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
             if r.value]
    assert sorted(p["after"]["id"] for p in reads) == [1, 2, 3]  # the initial snapshot's reads, once


def test_a_signal_row_is_a_copy_row_only_when_its_transaction_moves_the_copy_position() -> None:
    """Compared with the stream's previous VGTID (after a resume: the stored one), not with memory:
    the first transaction after a restart in the middle of the copy is a new signal when the
    signal table's lastpk is where the stored position left it."""
    from cdcworker.offsets.vgtid import LastPK, PKField, PKRow, TableLastPK

    def at(key: bytes) -> Vgtid:
        lastpk = TableLastPK("dbz_signal", LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((len(key),), key),)))
        return Vgtid((ShardGtid("ks", "0", G + "5", (lastpk,)),))

    handled: list[str] = []

    class Dispatcher:
        def dispatch(self, signal: Signal) -> None:
            handled.append(signal.id)

    fields = [field("id", "INT64", "bigint", flags=1 | 2), field("type", "VARCHAR", "varchar(32)"),
              field("data", "TEXT", "text")]

    def new_tap() -> SignalTap:
        tap = SignalTap("ks.dbz_signal", EncoderConfig("p"), Dispatcher())  # type: ignore[arg-type]
        tap.field(("ks", "dbz_signal"), field_event("ks.dbz_signal", fields, "ks", "0"))
        return tap

    def row(sid: bytes) -> None:
        tap.row(("ks", "dbz_signal"), binlogdata_pb2.RowEvent(row_changes=[insert(sid, b"log", b"{}")]))

    tap = new_tap()
    row(b"1")
    tap.commit("", at(b"3"), "0", at(b"1"))  # a copy batch: the lastpk moved from 1 to 3
    tap = new_tap()  # the task restarts from the stored position (lastpk 3)
    row(b"9")
    tap.commit("", at(b"3"), "0", at(b"3"))  # resumed at lastpk 3, the stream brings a new row
    row(b"10")
    tap.commit("", Vgtid((ShardGtid("ks", "0", G + "6"),)), "0", at(b"3"))  # after COPY_COMPLETED
    assert handled == ["9", "10"]


def test_a_rewind_drops_what_its_channel_read_before_seeking_back() -> None:
    started: list[str] = []

    class Engine:
        def start(self, request: SnapshotRequest) -> None:
            started.append(request.id)

    d = SignalDispatcher(Engine())  # type: ignore[arg-type]
    d.passed("sig", 0, 5)
    d.poll()
    d.rewind({("sig", 0): 2}, ["sig"])
    # The channel thread had read offset 6 before it sought back: dropped, not recorded.
    d.submit(Signal("late", "execute-snapshot", {"data-collections": ["ks.t"]}, "kafka", ("sig", 0, 6)))
    d.poll()
    assert started == [] and d.channel_offsets == {("sig", 0): 2}
    d.rewound("sig")
    d.submit(Signal("again", "execute-snapshot", {"data-collections": ["ks.t"]}, "kafka", ("sig", 0, 2)))
    d.poll()
    assert started == ["again"] and d.channel_offsets == {("sig", 0): 3}
