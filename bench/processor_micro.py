"""The streaming stage alone: CPU per row of ``StreamProcessor`` (scan/parse + encode + records),
with no gRPC and no Kafka (a sink that only counts), on the benchmark's 10-column rows.

    .venv/bin/python bench/processor_micro.py --per-txn 20 --rows 20000 --repeat 5 [--ordered] [--parsed]
    .venv/bin/python bench/processor_micro.py --sinks counting,native,confluent   # + a real broker

``--parsed`` feeds upb-parsed responses (the path without the native scanner; the parse is timed,
as gRPC's deserializer runs it in the worker process) instead of raw bytes;
prints the best of ``--repeat`` runs (process CPU per row), the figure least disturbed by a shared
machine. ``--sinks`` also runs the stage on the worker's real sinks against a local broker (6
partitions, at-least-once): ``native`` (nativesink, the C producer) and ``confluent`` (sink.KafkaSink),
timing the stage's own thread (``thread_time``: encode, produce, delivery reports, final flush) and
the process (librdkafka's threads too), runs interleaved sink by sink. ``PYTHONPATH=<other tree>/worker`` measures another source tree the same way (A/B).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from events_fixtures import field, field_event, insert

from cdcworker.events import EncoderConfig
from cdcworker.events.encoder import context_headers
from cdcworker.offsets import Vgtid
from cdcworker.offsets.vgtid import ShardGtid
from cdcworker.sink import KafkaSink
from cdcworker.streaming import Features, StreamProcessor
from cdcworker.txmeta import TransactionMonitor
from cdcworker.txmeta.monitor import TxMetaOptions
from vitessapi import binlogdata_pb2 as b
from vitessapi import vtgate_pb2

T = b.VEventType
UUID = "0b7e9d2a-1111-2222-3333-444455556666"
FIELDS = [
    field("id", "INT64", "bigint", flags=3), field("a", "INT32", "int"), field("b", "UINT32", "int unsigned"),
    field("c", "VARCHAR", "varchar(64)"), field("d", "VARCHAR", "varchar(255)"),
    field("e", "DECIMAL", "decimal(10,2)", decimals=2), field("f", "FLOAT64", "double"),
    field("g", "DATETIME", "datetime(3)", decimals=3), field("h", "INT64", "bigint"), field("i", "INT8", "tinyint"),
]


class CountingSink(KafkaSink):
    def __init__(self) -> None:  # no producer
        self.records_sent = 0

    def send(self, topic: str, key: Any, value: Any, headers: Any) -> None:
        self.records_sent += 1

    def send_to_partition(self, *args: Any) -> None:
        self.records_sent += 1

    def commit_point(self, position: Any) -> None:
        pass


def values(i: int) -> list[bytes]:
    return [str(i).encode(), str(i % 1000).encode(), str(i * 7).encode(), f"name-{i}".encode(),
            f"a somewhat longer description of row {i}".encode(), f"{i % 10000}.25".encode(), repr(i / 3).encode(),
            b"2024-05-06 07:08:09.123", str(i * 1000003).encode(), str(i % 100).encode()]


def responses(rows: int, per_txn: int) -> list[bytes]:
    out = [vtgate_pb2.VStreamResponse(events=[
        b.VEvent(type=T.FIELD, field_event=field_event("bench.bench", FIELDS, "bench", s), shard=s) for s in ("-80", "80-")])]
    seq = {"-80": 1, "80-": 1}
    for n, i in enumerate(range(0, rows, per_txn)):
        s = "-80" if n % 2 == 0 else "80-"
        seq[s] += 1
        vgtid = b.VGtid(shard_gtids=[b.ShardGtid(keyspace="bench", shard=x, gtid=f"MySQL56/{UUID}:1-{q}") for x, q in seq.items()])
        out.append(vtgate_pb2.VStreamResponse(events=[
            b.VEvent(type=T.BEGIN, timestamp=1_700_000_000, shard=s),
            b.VEvent(type=T.ROW, shard=s, row_event=b.RowEvent(
                table_name="bench.bench", keyspace="bench", shard=s,
                row_changes=[insert(*values(j)) for j in range(i, i + per_txn)])),
            b.VEvent(type=T.VGTID, shard=s, vgtid=vgtid),
            b.VEvent(type=T.COMMIT, timestamp=1_700_000_000, shard=s),
        ]))
    return [r.SerializeToString() for r in out]


def make_sink(kind: str, bootstrap: str) -> Any:
    from cdcworker.events import producer_partitioner_config
    from cdcworker.nativesink import NativeKafkaSink

    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "batch.size": 1_000_000, "batch.num.messages": 10_000, "compression.type": "lz4",
            "queue.buffering.max.messages": 100_000, "queue.buffering.max.kbytes": 65536,
            **producer_partitioner_config()}
    return {"native": NativeKafkaSink, "confluent": KafkaSink}[kind](conf)


def run_sink(data: list[bytes], rows: int, kind: str, bootstrap: str, topic_prefix: str,
             ordered: bool = False) -> tuple[float, float]:
    """(thread CPU, process CPU) per row of the stage on a real sink, final flush included."""
    start = Vgtid((ShardGtid("bench", "-80", f"MySQL56/{UUID}:1-1"), ShardGtid("bench", "80-", f"MySQL56/{UUID}:1-1")))
    headers = tuple(context_headers(topic_prefix, "0", run_id="00000000-0000-7000-8000-000000000000"))
    sink = make_sink(kind, bootstrap)
    features = Features()
    if ordered:
        features.txmeta = TransactionMonitor(TxMetaOptions(topic=f"{topic_prefix}.transaction", ordered=True), None, start)
    proc = StreamProcessor(EncoderConfig(topic_prefix, headers=headers), sink, start, features=features)
    t0, p0 = time.thread_time(), time.process_time()
    for d in data:
        proc.process(d)
    sink.flush(60)
    t1, p1 = time.thread_time(), time.process_time()
    assert sink.records_sent == rows + (rows // 10 if ordered else 0) and sink.durable_position() is proc.position, \
        "not every record acknowledged"
    sink.close()
    return (t1 - t0) / rows * 1e6, (p1 - p0) / rows * 1e6


# streaming.py's FILTER_PROPS on this keyspace: an include list, one column left out, one truncated, one masked.
FILTER_PROPS = {
    "table.include.list": r"bench\.bench", "column.exclude.list": r"bench\.bench\.h",
    "column.truncate.to.16.chars": r"bench\.bench\.d", "column.mask.with.8.chars": r"bench\.bench\.c",
}


def filter_policy() -> Any:
    from cdcworker.config import load_config
    from cdcworker.filters import FilterPolicy

    cfg = load_config([], env={}, overrides={
        "name": "m", "topic.prefix": "p", "database.hostname": "h", "vitess.keyspace": "bench", **FILTER_PROPS})
    return FilterPolicy.from_config(cfg.filters, cfg.behaviour)


def run_once(data: list[bytes], rows: int, ordered: bool, parsed: bool, filters: bool = False) -> float:
    start = Vgtid((ShardGtid("bench", "-80", f"MySQL56/{UUID}:1-1"), ShardGtid("bench", "80-", f"MySQL56/{UUID}:1-1")))
    features = Features()
    encoder = EncoderConfig("p", headers=tuple(context_headers("p", "0", run_id="00000000-0000-7000-8000-000000000000")))
    if filters:
        features.policy = policy = filter_policy()
        encoder = dataclasses.replace(encoder, policy=policy)
    if ordered:
        features.txmeta = TransactionMonitor(TxMetaOptions(topic="p.transaction", ordered=True), None, start)
    proc = StreamProcessor(encoder, CountingSink(), start, features=features)
    parse = vtgate_pb2.VStreamResponse.FromString
    t0 = time.process_time()
    if parsed:  # upb's parse counts: gRPC's deserializer runs it in the worker process too
        for d in data:
            proc.process(parse(d))
    else:
        for d in data:
            proc.process(d)
    return (time.process_time() - t0) / rows * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--per-txn", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ordered", action="store_true", help="ordered transaction metadata on")
    p.add_argument("--filters", action="store_true", help="the column and table filters of FILTER_PROPS on")
    p.add_argument("--parsed", action="store_true", help="upb-parsed responses instead of raw bytes")
    p.add_argument("--sinks", default="", help="counting,native,confluent: real sinks against a local broker")
    args = p.parse_args()
    data = responses(args.rows, args.per_txn)
    if args.sinks:
        from localkafka import KafkaBroker, create_topics

        kinds = args.sinks.split(",")
        broker = KafkaBroker()
        broker.start()
        try:
            res: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            for run in range(args.repeat):
                for kind in kinds:
                    if kind == "counting":
                        us = run_once(data, args.rows, False, False)
                        res[kind].append((us, us))
                        continue
                    prefix = f"m{run}{kind}"
                    create_topics(broker.bootstrap, [f"{prefix}.bench.bench"], partitions=6)
                    create_topics(broker.bootstrap, [f"{prefix}.transaction"], partitions=1)
                    res[kind].append(run_sink(data, args.rows, kind, broker.bootstrap, prefix, args.ordered))
            for kind, rs in res.items():
                print(f"{kind}: stage thread {min(r[0] for r in rs):.2f} us/row (best), process {min(r[1] for r in rs):.2f}; "
                      f"runs {[(round(a, 1), round(b, 1)) for a, b in rs]}")
        finally:
            broker.close()
        return
    runs = [run_once(data, args.rows, args.ordered, args.parsed, args.filters) for _ in range(args.repeat)]
    print(f"per_txn={args.per_txn} ordered={args.ordered} filters={args.filters} input={'parsed' if args.parsed else 'raw'}: "
          f"best {min(runs):.2f} us/row of {[round(r, 2) for r in runs]}")


if __name__ == "__main__":
    main()
