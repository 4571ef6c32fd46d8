"""``shardcdc verify``: does a change-event topic, materialised, equal the source table now?

Reads the table through VTGate (``Execute``: ``SELECT * FROM <table>`` in the keyspace, the same
gRPC API the connector uses, so it works against real Vitess and the test server alike), reads the
topic from the beginning to its end (``read_committed``), applies the events in order per key
(:mod:`shardcdc_cli.materialise`) and compares row by row. Run it once the workload has stopped and the
connector has caught up (``--wait`` retries until equal or the deadline). Exit codes: 0 equal,
1 different (a summary is printed), 2 the source or Kafka cannot be read.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console

from cdcworker import kafkaclients
from shardcdc_cli.materialise import compare, materialise

__all__ = ["read_table", "read_topic", "register"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--vtgate", required=True, help="VTGate gRPC address host:port")
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--key", default="id", help="primary key column (default id)")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", action="append",
                        help="change-event topic (default <prefix>.<keyspace>.<table>); repeat it for a table "
                             "whose rows are in several topics")
    parser.add_argument("--prefix", help="topic prefix, for the default topic name")
    parser.add_argument("--per-shard", action="store_true",
                        help="topic.naming.strategy=DefaultTopicNamingStrategy: read <prefix>.<shard>.<table> "
                             "of every serving shard of the keyspace")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="retry for this many seconds until the topic equals the table")
    return run


@dataclass(frozen=True, slots=True)
class _Record:
    key: bytes | None
    value: bytes | None


def read_table(vtgate: str, keyspace: str, table: str, timeout: float = 60.0) -> list[dict[str, bytes | None]]:
    """Every row of the table as MySQL text values, through VTGate ``Execute``."""
    import grpc

    from vitessapi import query_pb2, vtgate_pb2, vtgateservice_pb2_grpc

    with grpc.insecure_channel(vtgate) as channel:
        stub = vtgateservice_pb2_grpc.VitessStub(channel)
        resp = stub.Execute(vtgate_pb2.ExecuteRequest(
            query=query_pb2.BoundQuery(sql=f"SELECT * FROM {table}"),
            session=vtgate_pb2.Session(target_string=keyspace, autocommit=True)), timeout=timeout)
    if resp.error.code:
        raise RuntimeError(f"SELECT * FROM {keyspace}.{table}: {resp.error.message}")
    names = [f.name for f in resp.result.fields]
    rows: list[dict[str, bytes | None]] = []
    for row in resp.result.rows:
        values: list[bytes | None] = []
        pos = 0
        for length in row.lengths:
            if length < 0:
                values.append(None)
            else:
                values.append(row.values[pos:pos + length])
                pos += length
        rows.append(dict(zip(names, values, strict=True)))
    return rows


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[_Record]:
    """Every committed record from the beginning to the current end, partition by partition."""
    from cdcworker.topicread import TopicEndTimeout, TopicReader, TopicReadError

    consumer = kafkaclients.consumer({"bootstrap.servers": bootstrap, "group.id": f"shardcdc-verify-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"}, "verify consumer")
    out: list[_Record] = []
    try:
        meta = consumer.list_topics(timeout=timeout).topics.get(topic)
        if meta is None:
            raise RuntimeError(f"topic {topic!r} not found")
        reader = TopicReader(consumer, topic)
        for p in sorted(meta.partitions):  # partition by partition: each in its own order
            reader.assign([p])
            try:
                out.extend(_Record(msg.key(), msg.value()) for msg in reader.read_to_end(timeout))
            except TopicEndTimeout:
                raise RuntimeError(f"reading {topic}[{p}] did not reach its end within {timeout}s") from None
            except TopicReadError as exc:
                raise RuntimeError(str(exc)) from None
    finally:
        consumer.close()
    return out


def _default_topics(args: argparse.Namespace) -> list[str]:
    if not args.per_shard:
        return [f"{args.prefix}.{args.keyspace}.{args.table}"]
    import grpc

    from cdcworker.events.topics import TopicNaming, TopicStrategy
    from cdcworker.source.shards import serving_shards

    with grpc.insecure_channel(args.vtgate) as channel:
        shards = serving_shards(channel, args.keyspace)
    naming = TopicNaming(args.prefix, strategy=TopicStrategy.DEFAULT)
    return sorted(naming.data_topics(args.keyspace, args.table, shards))


def run(args: argparse.Namespace, console: Console | None = None) -> int:

    out = console or Console()
    if not args.topic and not args.prefix:
        out.print("shardcdc verify: give --topic or --prefix")
        return 2
    try:
        topics = args.topic or _default_topics(args)
    except Exception as exc:  # grpc errors while listing the shards
        out.print(f"shardcdc verify: {exc}", markup=False)
        return 2
    topic = ", ".join(topics)
    deadline = time.monotonic() + args.wait
    while True:
        try:
            truth = read_table(args.vtgate, args.keyspace, args.table)
            # A key lives on one shard, so on one topic: concatenating the topics keeps each key's order.
            records = [r for t in topics for r in read_topic(args.bootstrap_servers, t)]
        except Exception as exc:  # grpc and Kafka errors: say which side failed
            out.print(f"shardcdc verify: {exc}", markup=False)
            return 2
        state = materialise(records)
        diff = compare(state, truth, args.key)
        if diff.empty:
            out.print(f"[green]equal[/]: {topic} ({len(records)} records, {state.duplicates} duplicates) "
                      f"materialises to the {len(truth)} rows of {args.keyspace}.{args.table}", soft_wrap=True)
            return 0
        if time.monotonic() >= deadline:
            out.print(f"[red]different[/]: {topic} vs {args.keyspace}.{args.table}:")
            out.print(diff.summary(), markup=False, highlight=False, soft_wrap=True)
            return 1
        time.sleep(1.0)  # the connector is catching up: poll again until the deadline
