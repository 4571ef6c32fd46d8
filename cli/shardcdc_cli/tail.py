"""``shardcdc tail TOPIC``: decode and pretty-print the change events of a topic.

Reads every partition (from the end, or ``--from-beginning``), decodes Debezium JSON events (with or
without the ``schema``/``payload`` envelope) and prints one line per event: partition/offset, the
operation, the source position (shard, transaction), the key and the changed columns. ``--json``
prints each event's payload instead. Stops after ``--max-messages`` or ``--idle-timeout`` seconds
without a record; otherwise follows until interrupted.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import orjson
from rich.console import Console
from rich.text import Text

from cdcworker import kafkaclients
from cdcworker.jsontypes import JsonMapping, JsonValue
from shardcdc_cli.target import TargetError, _client_settings

__all__ = ["format_event", "register"]

OPS = {"c": ("create", "green"), "u": ("update", "yellow"), "d": ("delete", "red"), "r": ("read", "cyan"),
       "t": ("truncate", "magenta")}


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("topic", help="a change-event topic (<prefix>.<keyspace>.<table>), or any topic")
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--command-config", help="properties file of Kafka client settings (security, SASL, TLS)")
    parser.add_argument("-X", dest="client_properties", action="append", default=[], metavar="KEY=VALUE",
                        help="one Kafka client setting (repeatable)")
    parser.add_argument("--from-beginning", action="store_true", help="start at the first record")
    parser.add_argument("--max-messages", type=int, default=0, help="stop after this many records")
    parser.add_argument("--idle-timeout", type=float, default=0.0,
                        help="stop after this many seconds without a record (default: follow)")
    parser.add_argument("--json", action="store_true", help="print each event's payload as JSON")
    return run


def _payload(data: bytes | None) -> JsonValue:
    if data is None:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        return doc["payload"]
    return doc


def _changes(before: JsonMapping | None, after: JsonMapping | None) -> str:
    if before and after:
        changed = [f"{k}: {before.get(k)!r} -> {v!r}" for k, v in after.items() if before.get(k) != v]
        return "; ".join(changed) or "(no column changed)"
    row = after or before or {}
    return ", ".join(f"{k}={v!r}" for k, v in row.items())


def format_event(partition: int, offset: int, key: bytes | None, value: bytes | None) -> Text:
    """One printable line for a record (a change event, a tombstone, or anything else)."""
    where = Text(f"{partition}:{offset} ", style="dim")
    k = _payload(key)
    key_text = orjson.dumps(k).decode() if isinstance(k, dict | list) else str(k)
    if value is None:
        return where + Text("tombstone", style="bold") + Text(f" key={key_text}")
    p = _payload(value)
    if not isinstance(p, dict) or "op" not in p:
        return where + Text(f"key={key_text} value={p if isinstance(p, str) else orjson.dumps(p).decode()}")
    word, style = OPS.get(str(p.get("op")), (str(p.get("op")), "bold"))
    src = p.get("source") or {}
    txn = p.get("transaction") or {}
    pos = f"{src.get('keyspace', '')}/{src.get('shard', '')}"
    if txn.get("id"):
        pos += f" txn {txn['id']}"
    line = where + Text(f"{word:<8}", style=f"bold {style}") + Text(f" {src.get('table', '')} ", style="bold")
    line += Text(f"[{pos}] key={key_text} ", style="dim")
    line += Text(_changes(p.get("before"), p.get("after")))
    return line


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    from cdcworker.topicread import TopicReader, TopicReadError

    out = console or Console()
    err = Console(stderr=True)
    try:
        settings = _client_settings(argparse.Namespace(command_config=args.command_config,
                                                       client_properties=args.client_properties))
    except (TargetError, OSError) as exc:
        err.print(f"shardcdc tail: {exc}", markup=False)
        return 1
    consumer = kafkaclients.consumer({"bootstrap.servers": args.bootstrap_servers, **settings,
                         "group.id": f"shardcdc-tail-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"}, "tail consumer")
    try:
        # All topics, not the one: a metadata request naming a topic may auto-create it.
        meta = consumer.list_topics(timeout=10).topics.get(args.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            err.print(f"shardcdc tail: topic {args.topic!r} not found"
                      + (f": {meta.error}" if meta is not None and meta.error else ""), markup=False)
            return 1
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        reader = TopicReader(consumer, args.topic)
        reader.assign(meta.partitions, start)
        seen = 0
        last = time.monotonic()
        while True:
            try:
                msgs = reader.fetch(0.2, max_records=500)
            except TopicReadError as exc:
                err.print(f"shardcdc tail: {exc.error}", markup=False)
                return 1
            for msg in msgs:
                part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                if args.json:
                    out.print_json(data={"partition": part, "offset": offset,
                                         "key": _payload(msg.key()), "value": _payload(msg.value())})
                else:
                    out.print(format_event(part, offset, msg.key(), msg.value()), soft_wrap=True)
                seen += 1
                if args.max_messages and seen >= args.max_messages:
                    return 0
            if msgs:
                last = time.monotonic()
            elif args.idle_timeout and time.monotonic() - last > args.idle_timeout:
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        consumer.close()
