"""The native producer (``nativesink``, ``_native/kafkaprod.c``) against confluent-kafka's path.

The same VStream responses go through ``StreamProcessor`` once with ``NativeKafkaSink`` and once
with ``sink.KafkaSink`` into one topic on a real broker: the two halves of every partition must be
the same records (key, value, headers) in the same order, and both sinks must report every record
acknowledged at the stream's last commit point. The transactions mix what the C loop sends itself
(inserts, same-key updates) with what it hands back to the Python path (deletes with their
tombstones, primary-key changes) inside one ROW event, so the hand-over keeps the order; with
transaction metadata (plain, ordered, ordered without ``transaction.id``) the C loop writes the
``transaction`` blocks and their counters. A tiny librdkafka queue makes the C loop wait for room
(its back-pressure path) without losing a record.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from events_fixtures import delete, field, field_event, insert, update

import cdcworker.streaming as streaming
from cdcworker.events import EncoderConfig, producer_partitioner_config
from cdcworker.events.encoder import context_headers
from cdcworker.nativesink import NativeKafkaSink, NativeTransactionalSink, native_sinks
from cdcworker.offsets import Vgtid
from cdcworker.offsets.vgtid import ShardGtid
from cdcworker.sink import KafkaSink, SinkError, TransactionalSink
from cdcworker.txmeta import TransactionMonitor
from cdcworker.txmeta.monitor import TxMetaOptions
from localkafka import ConsumedRecord, KafkaBroker, await_markers, consume_all, create_topics
from vitessapi import binlogdata_pb2 as b
from vitessapi import vtgate_pb2

T = b.VEventType
UUID = "6a7e9d2a-1111-2222-3333-444455556666"
FIELDS = [field("id", "INT64", "bigint", flags=3), field("name", "VARCHAR", "varchar(64)"),
          field("qty", "INT32", "int")]
SHARDS = ("-80", "80-")


def row(i: int, name: str = "", qty: int = 1) -> tuple[bytes, bytes, bytes]:
    return str(i).encode(), (name or f"item-{i}").encode(), str(qty).encode()


def responses(name: Callable[[int], str] | None = None, ts: int = 1_700_000_000) -> list[bytes]:
    """FIELD per shard, then transactions alternating over the shards, each one ROW event.
    ``name``: row i's name (default item-i); ``ts``: the commit time (s) of every transaction."""
    seq = dict.fromkeys(SHARDS, 1)

    def named(i: int, qty: int = 1) -> tuple[bytes, bytes, bytes]:
        return row(i, name(i) if name else "", qty)

    out = [vtgate_pb2.VStreamResponse(events=[
        b.VEvent(type=T.FIELD, field_event=field_event("shop.items", FIELDS, "shop", s), shard=s) for s in SHARDS])]

    def txn(shard: str, changes: list[Any]) -> None:
        seq[shard] += 1
        vgtid = b.VGtid(shard_gtids=[b.ShardGtid(keyspace="shop", shard=s, gtid=f"MySQL56/{UUID}:1-{n}")
                                     for s, n in seq.items()])
        out.append(vtgate_pb2.VStreamResponse(events=[
            b.VEvent(type=T.BEGIN, timestamp=ts, shard=shard),
            b.VEvent(type=T.ROW, shard=shard, row_event=b.RowEvent(table_name="shop.items", keyspace="shop",
                                                                   shard=shard, row_changes=changes)),
            b.VEvent(type=T.VGTID, shard=shard, vgtid=vgtid),
            b.VEvent(type=T.COMMIT, timestamp=ts, shard=shard),
        ]))

    for n in range(40):
        base = n * 100
        shard = SHARDS[n % 2]
        if n % 4 == 3:  # the C loop stops at each delete / key change and resumes after it
            txn(shard, [insert(*named(base + 1)), update(named(base + 1), named(base + 1, qty=2)),
                        delete(*named(base - 99)), insert(*named(base + 2)),
                        update(named(base - 98), named(base + 98)), insert(*named(base + 3))])
        else:
            txn(shard, [insert(*named(base + i)) for i in range(1, 31)])
    return [r.SerializeToString() for r in out]


SINKS: dict[str, tuple[type[KafkaSink], dict[str, Any]]] = {
    "native": (NativeKafkaSink, {}),
    "confluent": (KafkaSink, {}),
    "native-small-queue": (NativeKafkaSink, {"queue.buffering.max.messages": 7}),
}


def producer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "compression.type": "lz4", **producer_partitioner_config(), **extra}


TXMETA: dict[str, TxMetaOptions | None] = {
    "no-txmeta": None,
    "plain": TxMetaOptions("p.transaction"),
    "ordered": TxMetaOptions("p.transaction", ordered=True),
    "ordered-no-id": TxMetaOptions("p.transaction", ordered=True, remove_fields=frozenset({"transaction.id"})),
}


def run_stream(sink: KafkaSink, data: list[bytes], prefix: str, txmeta: str = "no-txmeta", **encoder: Any) -> Vgtid:
    start = Vgtid(tuple(ShardGtid("shop", s, f"MySQL56/{UUID}:1-1") for s in SHARDS))
    headers = tuple(context_headers(prefix, "0", run_id="00000000-0000-7000-8000-000000000000"))
    opts = TXMETA[txmeta]
    features = streaming.Features(txmeta=TransactionMonitor(opts, None, start) if opts is not None else None)
    proc = streaming.StreamProcessor(EncoderConfig(prefix, headers=headers, **encoder), sink, start, features=features)
    for d in data:
        proc.process(d)
    sink.flush(60)
    assert sink.durable_position() is proc.position, "the last commit point is not durable"
    assert sink.pending == 0
    sink.close()
    return proc.position


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Envelope ts_ms from one fixed processing time, so two runs write the same bytes."""
    monkeypatch.setattr(streaming, "time", SimpleNamespace(time_ns=lambda: 1_750_000_000_123_456_789,
                                                           time=lambda: 1_750_000_000.0, monotonic=time.monotonic))


@pytest.fixture(scope="module")
def data() -> list[bytes]:
    return responses()


def halves(records: list[ConsumedRecord]) -> Iterator[tuple[list[Any], list[Any]]]:
    by_partition: dict[int, list[Any]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append((r.key, r.value, r.headers))
    for recs in by_partition.values():
        assert len(recs) % 2 == 0
        yield recs[: len(recs) // 2], recs[len(recs) // 2 :]


def test_native_sink_is_in_use_here() -> None:
    assert native_sinks(), "the native producer must be built here (make native)"


@pytest.mark.parametrize(("other", "txmeta"), [
    ("confluent", "no-txmeta"), ("native-small-queue", "no-txmeta"),
    ("confluent", "plain"), ("confluent", "ordered"), ("confluent", "ordered-no-id"),
])
def test_native_and_confluent_sinks_write_the_same_records(
    kafka_broker: KafkaBroker, data: list[bytes], fixed_clock: None, other: str, txmeta: str
) -> None:
    prefix = f"ns{time.time_ns() % 10**9}"
    topic = f"{prefix}.shop.items"
    create_topics(kafka_broker.bootstrap, [topic], partitions=6)
    ends = []
    python_sends = 0

    def counting(send: Any) -> Any:
        def counted(*args: Any) -> None:
            nonlocal python_sends
            python_sends += 1
            send(*args)

        return counted

    for kind in ("native", other):
        cls, extra = SINKS[kind]
        sink = cls(producer_conf(kafka_broker.bootstrap, **extra))
        if kind == "native":
            sink.send = counting(sink.send)  # type: ignore[method-assign]
        ends.append(run_stream(sink, data, prefix, txmeta))
    assert ends[0] == ends[1]
    # The C loop sent every insert and same-key update; only deletes (+ tombstones) and the key
    # changes (delete + tombstone + create) took the Python path: 5 records in 10 transactions;
    # and BEGIN/END, 2 per transaction, with transaction metadata (to their own topic).
    assert python_sends == 10 * 5 + (0 if txmeta == "no-txmeta" else 40 * 2)
    records = consume_all(kafka_broker.bootstrap, topic)
    if txmeta != "no-txmeta":
        blocks = [json.loads(r.value)["payload"]["transaction"] for r in records if r.value]
        assert all(b is not None and b["total_order"] >= 1 for b in blocks)
        assert ("id" in blocks[0]) == (txmeta != "ordered-no-id")
        assert ("transaction_rank" in blocks[0]) == txmeta.startswith("ordered")
    # 30 rows x 30 transactions, 10 transactions of 5 records + delete, tombstone, and a key change
    # as delete + tombstone + create: 900 + 10 x 9 per run.
    assert len(records) == 2 * (30 * 30 + 10 * 9)
    compared = 0
    for first, second in halves(records):
        assert first == second
        compared += len(first)
    assert compared == 30 * 30 + 10 * 9
    tombstones = [r for r in records if r.value is None]
    assert len(tombstones) == 2 * 10 * 2


@pytest.mark.parametrize(("ts", "encoder"), [
    (0, {"value_schemas_enable": False, "replace_null_with_default": False}),
    (-5, {}),
    (10**10, {}),  # ts_ns past 64 bits: the C loop hands the rows to the Python path
], ids=["no-schema-null-snapshot", "negative-time", "past-64-bits"])
def test_tails_written_in_c_are_the_python_paths_bytes(
    kafka_broker: KafkaBroker, fixed_clock: None, ts: int, encoder: dict[str, Any]
) -> None:
    """Without transaction metadata the C loop writes the envelope tails itself (source block
    from its parts, commit times, op, batch time: ``Producer.send_rows_src``): the same records as
    the Python path's tails at the ends of what they hold."""
    data = responses(ts=ts)
    prefix = f"nt{time.time_ns() % 10**9}"
    topic = f"{prefix}.shop.items"
    create_topics(kafka_broker.bootstrap, [topic], partitions=6)
    for kind in ("native", "confluent"):
        cls, extra = SINKS[kind]
        run_stream(cls(producer_conf(kafka_broker.bootstrap, **extra)), data, prefix, **encoder)
    records = consume_all(kafka_broker.bootstrap, topic)
    assert len(records) == 2 * (30 * 30 + 10 * 9)
    source = json.loads(records[0].value or b"")
    source = source.get("payload", source)["source"]
    assert (source["ts_ms"], source["ts_ns"], source["snapshot"]) == (
        ts * 1000, ts * 1_000_000_000, None if encoder.get("replace_null_with_default") is False else "false")
    for first, second in halves(records):
        assert first == second


def test_values_over_many_buffer_blocks_are_the_same_records(kafka_broker: KafkaBroker, fixed_clock: None) -> None:
    """The C loop cuts record values from 1 MiB blocks that the delivery reports give back: ~8 KB
    values fill a block every ~120 records, so these ~1,000 fill, retire, reuse and free blocks;
    every 25th value (100 KB) is too large for a block and is allocated on its own, as before."""
    data = responses(lambda i: ("x" * 100_000 if i % 25 == 0 else "y" * 8_000) + str(i))
    prefix = f"nb{time.time_ns() % 10**9}"
    topic = f"{prefix}.shop.items"
    create_topics(kafka_broker.bootstrap, [topic], partitions=6)
    for kind in ("native", "confluent"):
        cls, extra = SINKS[kind]
        run_stream(cls(producer_conf(kafka_broker.bootstrap, **extra)), data, prefix)
    records = consume_all(kafka_broker.bootstrap, topic)
    assert len(records) == 2 * (30 * 30 + 10 * 9)
    assert sum(len(r.value or b"") > 100_000 for r in records) == 2 * 30  # the 25th row of each 30-row transaction
    for first, second in halves(records):
        assert first == second


def test_records_keep_their_headers_when_the_headers_change_between_calls(
    kafka_broker: KafkaBroker, data: list[bytes]
) -> None:
    """send_rows gives each record a header list kept from a delivered record with the same
    headers; other headers replace that pool while records holding lists of the old one are still
    in flight. Two processors with different context headers share one producer, response by
    response, so the headers change at every call: each record must carry its own."""
    prefixes = [f"nr{time.time_ns() % 10**9}{c}" for c in "ab"]
    create_topics(kafka_broker.bootstrap, [f"{p}.shop.items" for p in prefixes], partitions=6)
    start = Vgtid(tuple(ShardGtid("shop", s, f"MySQL56/{UUID}:1-1") for s in SHARDS))
    headers = {p: tuple(context_headers(p, "0")) for p in prefixes}
    sink = NativeKafkaSink(producer_conf(kafka_broker.bootstrap))
    procs = [streaming.StreamProcessor(EncoderConfig(p, headers=headers[p]), sink, start) for p in prefixes]
    for d in data * 3:
        for proc in procs:
            proc.process(d)
    sink.flush(60)
    assert sink.pending == 0
    sink.close()
    for p in prefixes:
        records = consume_all(kafka_broker.bootstrap, f"{p}.shop.items")
        assert len(records) == 3 * (30 * 30 + 10 * 9)
        own = headers[p]
        assert {r.headers[len(r.headers) - len(own):] for r in records} == {own}
        # a key change's delete and create also name the other key (Python path), first
        assert {tuple(n for n, _ in r.headers[: len(r.headers) - len(own)]) for r in records} == {
            (), ("__debezium.newkey",), ("__debezium.oldkey",)}


def test_native_transactional_sink_commits_the_same_records(
    kafka_broker: KafkaBroker, data: list[bytes], fixed_clock: None
) -> None:
    prefix = f"nt{time.time_ns() % 10**9}"
    topic = f"{prefix}.shop.items"
    offsets = f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic], partitions=6)
    create_topics(kafka_broker.bootstrap, [offsets], partitions=1)
    written: list[Vgtid] = []

    def write(producer: Any, position: Vgtid) -> None:
        producer.produce(offsets, key=b"k", value=position.to_json().encode(), partition=0)
        written.append(position)

    sinks = []
    for cls in (NativeTransactionalSink, TransactionalSink):
        conf = producer_conf(kafka_broker.bootstrap, **{"transactional.id": f"{prefix}-{cls.__name__}"})
        sinks.append(cls(conf, write, max_batch_records=64))
        run_stream(sinks[-1], data, prefix)
    # One offset record per Kafka commit, and the time the stage waited in the commits is counted.
    assert sum(s.commits for s in sinks) == len(written) and all(s.commits > 1 for s in sinks)
    assert all(s.commit_seconds > 0 for s in sinks)
    records = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert len(records) == 2 * (30 * 30 + 10 * 9)
    for first, second in halves(records):
        assert first == second
    stored = [r.value for r in consume_all(kafka_broker.bootstrap, offsets, read_committed=True)]
    assert stored == [p.to_json().encode() for p in written]
    assert stored[-1] == written[-1].to_json().encode()


def test_live_keys_are_remembered_while_a_snapshot_runs(kafka_broker: KafkaBroker, data: list[bytes]) -> None:
    """An ad-hoc snapshot wraps the live sink to remember the keys the live stream emits (a read of
    such a key is dropped: the live record is newer). The native C loop must not bypass it."""
    from cdcworker.snapshot.vstream_copy import _WatchingSink

    prefix = f"nw{time.time_ns() % 10**9}"
    topic = f"{prefix}.shop.items"
    create_topics(kafka_broker.bootstrap, [topic], partitions=2)
    seen: set[tuple[str, bytes]] = set()
    inner = NativeKafkaSink(producer_conf(kafka_broker.bootstrap))
    watching = _WatchingSink(inner, {topic}, seen)
    run_stream(watching, data, prefix)  # type: ignore[arg-type]
    keys = {r.key for r in consume_all(kafka_broker.bootstrap, topic)}
    assert len(keys) > 900
    assert seen == {(topic, k) for k in keys}


def offsets_sink(cls: type[TransactionalSink], broker: KafkaBroker, txn_id: str, offsets: str) -> tuple[Any, list[Vgtid]]:
    """An exactly-once sink whose offset writer puts each position (JSON) on ``offsets`` and lists it."""
    written: list[Vgtid] = []

    def write(producer: Any, position: Vgtid) -> None:
        producer.produce(offsets, key=b"k", value=position.to_json().encode(), partition=0)
        written.append(position)

    return cls(producer_conf(broker.bootstrap, **{"transactional.id": txn_id}), write), written


def commit_one(sink: TransactionalSink, topic: str, gtid: str = "MySQL56/u:1-2") -> Vgtid:
    """Send one record to ``topic`` and commit it at a commit point; the committed position."""
    point = Vgtid((ShardGtid("ks", "0", gtid),))
    sink.send_to_partition(topic, 0, b"k", b"v", None)
    sink.commit_point(point)
    sink.commit()
    return point


def test_exactly_once_flush_stores_a_commit_point_without_records(kafka_broker: KafkaBroker) -> None:
    """A stop right after commit points that carried no records (COPY_COMPLETED after the last
    batch was committed, OTHER, empty transactions) still stores the last of them."""
    prefix = f"nf{time.time_ns() % 10**9}"
    topic, offsets = f"{prefix}.t", f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic, offsets], partitions=1)
    for cls in (NativeTransactionalSink, TransactionalSink):
        sink, written = offsets_sink(cls, kafka_broker, f"{prefix}-{cls.__name__}", offsets)
        with_record = commit_one(sink, topic)
        assert sink.durable is with_record
        without = Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-3"),))
        sink.commit_point(without)  # nothing produced since the commit
        assert sink.flush(10) is without and written[-1] is without
        sink.close()
    stored = [r.value for r in consume_all(kafka_broker.bootstrap, offsets, read_committed=True)]
    assert stored[-1] == Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-3"),)).to_json().encode()


def test_exactly_once_abort_keeps_no_copies_of_the_purged_records(kafka_broker: KafkaBroker) -> None:
    """Records still queued when a Kafka transaction is aborted (a reconnect mid-transaction) fail
    with a purge report; the native producer copies each failed record for the failure hook, and
    the exactly-once sink must let those copies go rather than hold them for the life of the task."""
    prefix = f"na{time.time_ns() % 10**9}"
    topic = f"{prefix}.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    conf = producer_conf(kafka_broker.bootstrap, **{"transactional.id": f"{prefix}-x", "linger.ms": 60_000,
                                                           "message.timeout.ms": 120_000, "transaction.timeout.ms": 120_000})
    sink = NativeTransactionalSink(conf, lambda producer, position: None)
    for i in range(200):  # held by the minute-long linger: still queued at the abort
        sink.send_to_partition(topic, 0, b"k%d" % i, b"v" * 1000, None)
    sink.flush(10)  # no commit point: the open transaction holds a partial one and is aborted
    assert sink.producer.take_errors() == ()
    sink.close()


def test_exactly_once_abort_gives_header_lists_back_and_later_records_keep_their_headers(
    kafka_broker: KafkaBroker, data: list[bytes]
) -> None:
    """send_rows' records purged by an abort come back as failed delivery reports with their
    header lists, which go back to the pool: the records sent after the abort reuse them and must
    carry exactly the headers they were given (the aborted ones are never read)."""
    prefix = f"nq{time.time_ns() % 10**9}"
    topic, offsets = f"{prefix}.shop.items", f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic], partitions=6)
    create_topics(kafka_broker.bootstrap, [offsets], partitions=1)
    conf = producer_conf(kafka_broker.bootstrap, **{"transactional.id": f"{prefix}-q", "linger.ms": 60_000,
                                                   "message.timeout.ms": 120_000, "transaction.timeout.ms": 120_000})
    sink = NativeTransactionalSink(conf, lambda producer, position: producer.produce(offsets, value=b"o", partition=0))
    start = Vgtid(tuple(ShardGtid("shop", s, f"MySQL56/{UUID}:1-1") for s in SHARDS))
    headers = tuple(context_headers(prefix, "0"))
    # A transaction larger than the lookahead is streamed before its COMMIT: its rows leave
    # through send_rows and, with the COMMIT cut off, wait in the open Kafka transaction (linger).
    partial = vtgate_pb2.VStreamResponse.FromString(data[1])
    del partial.events[2:]  # BEGIN and the 30-row ROW event; no VGTID, no COMMIT
    cut = streaming.StreamProcessor(EncoderConfig(prefix, headers=headers), sink, start, lookahead_rows=5)
    for d in (data[0], partial.SerializeToString()):
        cut.process(d)
    assert sink.records_sent == 30
    sink.flush(10)  # no commit point after them: aborted, their 30 reports purged
    assert sink.producer.take_errors() == ()
    proc = streaming.StreamProcessor(EncoderConfig(prefix, headers=headers), sink, start)
    for d in data:
        proc.process(d)
    sink.flush(60)
    sink.close()
    await_markers(kafka_broker.bootstrap, topic)
    records = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    assert len(records) == 30 * 30 + 10 * 9
    assert {r.headers[len(r.headers) - len(headers):] for r in records} == {headers}


def test_exactly_once_commit_waits_for_room_for_its_offset_record(kafka_broker: KafkaBroker) -> None:
    """A full local queue when the offset record is produced (confluent-kafka raises BufferError
    there under back-pressure) delays the commit; it does not crash the task."""
    prefix = f"nb{time.time_ns() % 10**9}"
    topic, offsets = f"{prefix}.t", f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic, offsets], partitions=1)
    refusals = [BufferError("Local: Queue full")]

    def write(producer: Any, position: Vgtid) -> None:
        if refusals:
            raise refusals.pop()
        producer.produce(offsets, key=b"k", value=position.to_json().encode(), partition=0)

    sink = TransactionalSink(producer_conf(kafka_broker.bootstrap, **{"transactional.id": f"{prefix}-b"}), write)
    point = Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-2"),))
    sink.send_to_partition(topic, 0, b"k", b"v", None)
    sink.commit_point(point)
    sink.commit()
    assert sink.durable is point and not refusals
    sink.close()
    assert [r.value for r in consume_all(kafka_broker.bootstrap, offsets, read_committed=True)] == [point.to_json().encode()]


def test_exactly_once_failed_commit_stores_no_offset_past_the_aborted_records(kafka_broker: KafkaBroker) -> None:
    """A record the broker refuses fails its Kafka transaction's commit, which aborts it. The stop
    that follows must not commit the aborted commit point's offset on its own (the records would
    be skipped for good); the stored position stays at the last committed transaction."""
    prefix = f"nc{time.time_ns() % 10**9}"
    topic, offsets = f"{prefix}.t", f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1, config={"max.message.bytes": "2000"})
    create_topics(kafka_broker.bootstrap, [offsets], partitions=1)
    for cls in (NativeTransactionalSink, TransactionalSink):
        sink, _ = offsets_sink(cls, kafka_broker, f"{prefix}-{cls.__name__}", offsets)
        first = commit_one(sink, topic)
        refused = Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-3"),))
        sink.send_to_partition(topic, 0, b"big", os.urandom(10_000), None)  # over max.message.bytes, compressed too
        sink.commit_point(refused)
        with pytest.raises(SinkError, match="Kafka transaction commit failed"):
            sink.commit()
        assert sink.flush(10) is first and sink.durable is first
        sink.close()
    stored = [r.value for r in consume_all(kafka_broker.bootstrap, offsets, read_committed=True)]
    assert set(stored) == {first.to_json().encode()}  # never the refused transaction's position


def test_exactly_once_reconnect_commits_a_transaction_that_ends_at_its_commit_point(kafka_broker: KafkaBroker) -> None:
    """A reconnect does not leave a complete Kafka transaction open through its waits (they could
    outlast transaction.timeout.ms, and the coordinator's abort would end the task as fenced)."""
    prefix = f"nr{time.time_ns() % 10**9}"
    topic, offsets = f"{prefix}.t", f"{prefix}.offsets"
    create_topics(kafka_broker.bootstrap, [topic, offsets], partitions=1)
    sink, written = offsets_sink(TransactionalSink, kafka_broker, f"{prefix}-r", offsets)
    point = Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-2"),))
    sink.send_to_partition(topic, 0, b"k", b"v", None)
    sink.commit_point(point)
    assert sink.rewind(point) is point
    assert sink.durable is point and written == [point] and sink.pending == 0
    sink.close()
    assert [r.value for r in consume_all(kafka_broker.bootstrap, topic, read_committed=True)] == [b"v"]


def test_a_failure_hook_that_raises_leaves_the_record_failed(kafka_broker: KafkaBroker) -> None:
    """The native sink takes the failed reports out of C before judging them: when the failure
    hook raises, the reports it did not judge must stay failures, or the next durable position
    would pass a record Kafka refused (and the stop would store it)."""
    prefix = f"nh{time.time_ns() % 10**9}"
    topic = f"{prefix}.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1, config={"max.message.bytes": "2000"})
    sink = NativeKafkaSink(producer_conf(kafka_broker.bootstrap))

    def hook(err: Any, msg: Any) -> bool:
        raise RuntimeError("failure hook broke")

    sink.on_error = hook
    point = Vgtid((ShardGtid("ks", "0", "MySQL56/u:1-2"),))
    sink.send_to_partition(topic, 0, b"big", os.urandom(10_000), None)  # refused by the broker
    sink.commit_point(point)
    deadline = time.monotonic() + 30
    with pytest.raises(RuntimeError, match="failure hook broke"):
        while time.monotonic() < deadline:
            sink.durable_position()
    with pytest.raises(SinkError, match="Kafka rejected 1 record"):
        sink.durable_position()
    assert sink.durable is None
