"""Debezium signals: read from the signal table in the change stream or from a Kafka topic.

Both channels produce ``Signal(id, type, data)`` and hand it to one ``SignalDispatcher``, which
runs on the task's processing thread and calls the ``SnapshotEngine``:

- ``execute-snapshot`` — ``data``: ``{"data-collections": ["ks.t", ...], "type": "incremental"|"blocking",
  "additional-conditions": [{"data-collection": "ks.t", "filter": "<where>"}]}`` (Debezium 2.x) or
  ``"additional-condition": "<where>"`` (older, for every collection);
- ``stop-snapshot`` — ``data``: ``{"data-collections": [...]}`` (all when absent);
- ``log`` — ``data``: ``{"message": "..."}``, written to the log.

Source channel (``signal.data.collection``): an INSERT into the table (columns ``id``, ``type``,
``data``) is acted on once its transaction commits, as Debezium does; other operations are
ignored. Kafka channel (``signal.enabled.channels`` contains ``kafka``): records on
``signal.kafka.topic`` whose key is ``topic.prefix`` and whose value is ``{"type", "data"}``.

Where the Kafka channels resume is part of the task's offset (``SIGNAL_OFFSETS_KEY``: per topic
and partition, the next record to read), sealed into the same commit point as what the signals
started, so a signal is replayed after a crash exactly when its effect was not durable. Debezium
commits the channel's consumer group on its own schedule instead: a crash loses a signal read
before it, and a task key of a new generation (a new group) reads the topic from the start again.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from cdcworker import kafkaclients
from cdcworker.events import EncoderConfig, TablePlan
from cdcworker.jsontypes import JsonMapping
from cdcworker.signals import document
from cdcworker.signals.document import SignalError, parse_data, parse_record
from cdcworker.snapshot import SnapshotEngine, SnapshotRequest
from cdcworker.textcut import quote

if TYPE_CHECKING:
    from cdcworker.offsets import Vgtid
    from cdcworker.signals.forward import SignalRelay

log = logging.getLogger(__name__)

EXECUTE_SNAPSHOT = "execute-snapshot"
STOP_SNAPSHOT = "stop-snapshot"
LOG = "log"


@dataclass(frozen=True, slots=True)
class Signal:
    id: str
    type: str
    data: JsonMapping
    channel: str = "source"
    position: tuple[str, int, int] | None = None  # Kafka channel: (topic, partition, offset) of its record


def signal_from_row(row: JsonMapping) -> Signal:
    """A signal-table row (``id``, ``type``, ``data``) as a Signal; ``SignalError`` when its data is
    not a JSON object."""
    return Signal(str(row.get("id") or ""), str(row.get("type") or ""), parse_data(row.get("data")), "source")


def signal_from_kafka(key: bytes | None, value: bytes | None, prefix: str, offset: int,
                      partition: int = 0, topic: str = "", skip_origin: str | None = None) -> Signal | None:
    """A Kafka signal record, or None when it is addressed to another connector (key != prefix)
    or was relayed by this task itself (``origin`` = ``skip_origin``); ``SignalError`` when its
    value is not a signal document."""
    if key is None or key.decode(errors="replace") != prefix or not value:
        return None
    body = parse_record(value)
    if skip_origin is not None and body.get("origin") == skip_origin:
        return None
    sid = str(body.get("id") or f"kafka-{offset}")
    return Signal(sid, str(body.get("type") or ""), parse_data(body.get("data")), "kafka", (topic, partition, offset))


def relay_value(signal: Signal, origin: str) -> bytes:
    """A signal-table signal as a record of the relay topic (``signal_from_kafka`` reads it)."""
    body = {"id": signal.id, "type": signal.type, "data": dict(signal.data), "origin": origin}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


SIGNAL_OFFSETS_KEY = "shardcdc_signal_offsets"


ChannelOffsets = Mapping[tuple[str, int], int]  # (topic, partition) -> next offset to read


def signal_offsets_field(offsets: ChannelOffsets) -> tuple[tuple[str, str], ...]:
    """The offset field for the Kafka channels' read positions (``{topic: {partition: next}}``)."""
    if not offsets:
        return ()
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, p), o in sorted(offsets.items()):
        by_topic.setdefault(topic, {})[str(p)] = o
    return ((SIGNAL_OFFSETS_KEY, json.dumps(by_topic, separators=(",", ":"))),)


def stored_signal_offsets(fields: JsonMapping | None) -> dict[tuple[str, int], int] | None:
    """The Kafka channels' read positions in a stored offset value (None: none recorded)."""
    raw = fields.get(SIGNAL_OFFSETS_KEY) if fields else None
    if not isinstance(raw, str):
        return None
    try:
        return {(str(t), int(p)): int(o) for t, parts in json.loads(raw).items() for p, o in parts.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("the stored signal channel position cannot be read (%s); the channel resumes from its "
                    "consumer group", exc)
        return None


def inherited_signal_offsets(values: Sequence[JsonMapping]) -> dict[tuple[str, int], int] | None:
    """Where a task of a new generation resumes the channel: per partition, the lowest position
    of the tasks its shards come from, so no signal that one of them had not acted on durably is
    lost (one that another had acted on may run again for that one's shards: at least once). A
    partition one of them never read starts from the group's position (none: the earliest)."""
    stored = [stored_signal_offsets(v) for v in values]
    if not stored or any(s is None for s in stored):
        return None
    known = [s for s in stored if s is not None]
    common = set(known[0]).intersection(*known[1:])
    return {p: min(s[p] for s in known) for p in common} or None


def snapshot_request(signal: Signal) -> SnapshotRequest:
    """The request of an ``execute-snapshot`` signal (``SignalError`` when its data is misshapen)."""
    return document.snapshot_request(signal.id, signal.data)


@dataclass(frozen=True, slots=True)
class _Rewound:
    topic: str


def _topic_of(item: Signal | tuple[str, int, int]) -> str | None:
    """The Kafka topic an inbox item was read from (None: a source-channel signal)."""
    if isinstance(item, Signal):
        return item.position[0] if item.position else None
    return item[0]


class SignalDispatcher:
    """Acts on signals, in arrival order, on the task's processing thread."""

    def __init__(self, engine: SnapshotEngine | None, on_refused: Callable[[str], None] | None = None) -> None:
        self.engine = engine
        self._on_refused = on_refused  # TaskMetrics.on_signal_refused: /status and the metric
        self.handled: list[Signal] = []  # for status and tests
        # Signals, and Kafka read positions (topic, partition, next offset) to record once what
        # came before them has been acted on.
        self._inbox: queue.SimpleQueue[Signal | tuple[str, int, int] | _Rewound] = queue.SimpleQueue()
        self._discarding: set[str] = set()  # topics whose channel has not yet sought back (rewind)
        # The Kafka channels' positions as of the signals acted on (processing thread only).
        self.channel_offsets: dict[tuple[str, int], int] = {}
        self._field: tuple[tuple[str, str], ...] = ()  # signal_offsets_field(channel_offsets), cached
        # Something was acted on or read since the task last sealed a commit point for it.
        self.changed = False

    @property
    def forwards(self) -> bool:
        """The engine hands signals to the operator (``forward.BackfillSignalForwarder``)."""
        return hasattr(self.engine, "forward")

    def submit(self, signal: Signal) -> None:
        """Thread-safe: queue a signal (the Kafka channel's thread uses this). A forwarding engine
        is thread-safe and acts at once, so the channel commits its offset only after the signal
        is durably handed over."""
        if self.forwards:
            self.dispatch(signal)
            if signal.position is not None:
                topic, partition, offset = signal.position
                self.passed(topic, partition, offset + 1)
            return
        self._inbox.put(signal)

    def passed(self, topic: str, partition: int, next_offset: int) -> None:
        """Thread-safe: a Kafka channel has read up to ``next_offset`` (records before it were
        submitted or were not for this task)."""
        self._inbox.put((topic, partition, next_offset))

    def poll(self) -> None:
        """Act on queued signals (cheap when none)."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Rewound):
                self._discarding.discard(item.topic)
                continue
            if self._discarding and _topic_of(item) in self._discarding:
                continue  # read before its channel sought back: it comes again
            self.changed = True
            if isinstance(item, Signal):
                self.dispatch(item)
                if item.position is None:
                    continue
                topic, partition, offset = item.position
                item = (topic, partition, offset + 1)
            key = (item[0], item[1])
            if item[2] > self.channel_offsets.get(key, -1):  # positions only move forward
                self.channel_offsets[key] = item[2]
                self._field = signal_offsets_field(self.channel_offsets)

    def rewind(self, offsets: ChannelOffsets, topics: Sequence[str] = ()) -> None:
        """Back to ``offsets`` (an aborted Kafka transaction took what came after): queued signals
        and positions are dropped, and so is what ``topics``' channels queue until they report
        having sought back (``rewound``); they read it all again (processing thread)."""
        while True:
            try:
                self._inbox.get_nowait()
            except queue.Empty:
                break
        self._discarding = set(topics)
        self.channel_offsets = dict(offsets)
        self._field = signal_offsets_field(self.channel_offsets)

    def rewound(self, topic: str) -> None:
        """Thread-safe: ``topic``'s channel has sought back; what it queues from now on counts."""
        self._inbox.put(_Rewound(topic))

    def restore_offsets(self, offsets: ChannelOffsets) -> None:
        """Positions stored in (or inherited into) the task's offset (processing thread)."""
        self.channel_offsets.update(offsets)
        self._field = signal_offsets_field(self.channel_offsets)

    def offsets_field(self) -> tuple[tuple[str, str], ...]:
        """The offset field for the channels' positions now (cached: built once per change)."""
        return self._field

    def dispatch(self, signal: Signal) -> None:
        log.info("signal %s (%s) from the %s channel: %s", signal.id, signal.type, signal.channel,
                 quote(dict(signal.data), 2000))
        try:
            self._act(signal)
        except SignalError as exc:
            self.refused(f"signal {signal.id} ({signal.type}) from the {signal.channel} channel refused: {exc}")
            return
        except (ValueError, TypeError, KeyError) as exc:  # the engine's refusal (e.g. no such table)
            log.warning("signal %s (%s) ignored: %s", signal.id, signal.type, exc)
            return
        self.handled.append(signal)

    def refused(self, message: str) -> None:
        """A signal refused for its shape (any thread): one log line, counted for /status."""
        log.warning("%s; the task goes on, later signals are acted on", message)
        if self._on_refused is not None:
            self._on_refused(message)

    def _act(self, signal: Signal) -> None:
        """Do what the signal asks; its document is read by ``signals.document`` first."""
        if signal.type == EXECUTE_SNAPSHOT:
            request = snapshot_request(signal)
            if self.engine is None:
                raise ValueError("no snapshot engine is configured")
            if self.forwards:
                cast(Any, self.engine).forward(signal.id, signal.type, request, (), signal.channel)
            else:
                self.engine.start(request)
        elif signal.type == STOP_SNAPSHOT:
            names = document.stop_collections(signal.data)
            if self.engine is not None and self.forwards:
                cast(Any, self.engine).forward(signal.id, signal.type, None, names, signal.channel)
            elif self.engine is not None:
                self.engine.cancel(None, names)
        elif signal.type == LOG:
            log.info("signal %s: %s", signal.id, document.log_message(signal.data))
        else:
            raise ValueError(f"type {quote(signal.type)} is not supported (execute-snapshot, stop-snapshot, log)")


class SignalTap:
    """Reads the signal table out of the change stream: INSERTs, acted on at their COMMIT."""

    def __init__(self, data_collection: str, encoder: EncoderConfig, dispatcher: SignalDispatcher,
                 relay: SignalRelay | None = None) -> None:
        keyspace, _, table = data_collection.partition(".")
        # Multi-task: the row reaches only the task streaming its shard; the relay
        # (forward.SignalRelay) hands it to the others before the commit point is sealed.
        self._relay = relay
        # VTGate names tables "ks.t", or "t" with exclude_keyspace_from_table_name.
        self.tables = frozenset({f"{keyspace}.{table}", table})
        self._encoder = EncoderConfig(encoder.logical_name, encoder.naming, encoder.types)
        self._dispatcher = dispatcher
        self._plans: dict[tuple[str, str], TablePlan] = {}
        self._pending: list[tuple[TablePlan, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)

    def field(self, key: tuple[str, str], fe: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        try:
            self._plans[key] = TablePlan.compile(fe, self._encoder)
        except ValueError as exc:
            self._plans.pop(key, None)
            log.warning("signal table FIELD event cannot be planned (%s); its rows are ignored", exc)

    def row(self, key: tuple[str, str], re: Any) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        plan = self._plans.get(key)
        if plan is None:
            return
        for rc in re.row_changes:
            if rc.HasField("after") and not rc.HasField("before"):
                self._pending.append((plan, rc))

    def commit(self, vgtid_json: str = "", vgtid: Any = None, shard: str = "", before: Any = None) -> None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """The transaction of the pending rows committed at ``vgtid`` on ``shard`` (the stream's
        previous VGTID was ``before``): act on them, unless they are the signal table's initial
        copy (old signals, read by a copy batch)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if vgtid is not None and self._lastpk(vgtid, shard) not in (None, self._lastpk(before, shard)):
            return
        for plan, rc in pending:
            try:
                signal = signal_from_row(plan.decode(rc.after))
            except ValueError as exc:
                self._dispatcher.refused(f"signal row at {vgtid_json} refused: {exc}")
                continue
            self._dispatcher.dispatch(signal)
            if self._relay is not None:
                self._relay.publish(signal)

    def _lastpk(self, vgtid: Vgtid, shard: str) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """The signal table's copy progress on ``shard`` in ``vgtid`` (None: not copying it).

        A copy batch of the signal table moves it; a new row (also a catch-up row during the copy
        phase, and the first transaction after a resume) leaves it where it was. Debezium acts only
        on streamed inserts: rows already in the table when a snapshot copies it are history."""
        sg = next((g for g in vgtid or () if g.shard == shard), None)
        return next((t for t in (sg.table_p_ks if sg is not None else ()) if t.table_name in self.tables), None)

    def rollback(self) -> None:
        self._pending.clear()


class KafkaSignalChannel:
    """Consumes ``signal.kafka.topic`` on its own thread and submits signals to the dispatcher.

    Each task reads every signal and acts on it for its own shards. It starts where its offset
    says (``start(offsets)``, the dispatcher's ``channel_offsets`` as stored); a partition without
    one starts from the task's consumer group (an offset committed by an earlier shardcdc, which
    committed there) or, with none, from the earliest record, as Debezium's channel does. It
    never commits the group itself: the offset is the record of what was acted on.
    """

    def __init__(
        self,
        client_config: Mapping[str, str],
        topic: str,
        group_id: str,
        prefix: str,
        dispatcher: SignalDispatcher,
        skip_origin: str | None = None,
    ) -> None:
        conf = {
            **client_config,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        self._consumer = kafkaclients.consumer(conf, "signal consumer")
        self.topic = topic
        self._prefix = prefix
        self._dispatcher = dispatcher
        self._stop = threading.Event()
        self._offsets: dict[int, int] = {}
        self._skip_origin = skip_origin  # the relay topic: records this task relayed itself
        self._start_offsets: dict[int, int] = {}
        self._rewind_to: dict[int, int] | None = None  # set by rewind(), applied by the channel thread
        self._rewind_lock = threading.Lock()
        self.received = 0
        self._thread = threading.Thread(target=self._run, name="signal-kafka", daemon=True)

    def start(self, offsets: ChannelOffsets | None = None) -> KafkaSignalChannel:
        self._offsets = {p: o for (t, p), o in (offsets or {}).items() if t == self.topic}
        self._start_offsets = dict(self._offsets)
        self._consumer.subscribe([self.topic], on_assign=self._on_assign)
        self._thread.start()
        return self

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:  # Any: confluent-kafka's Consumer and TopicPartitions as its on_assign callback passes them
        for tp in partitions:
            if tp.partition in self._offsets:
                tp.offset = self._offsets[tp.partition]
        consumer.assign(partitions)

    def rewind(self, offsets: Mapping[int, int]) -> None:
        """Read again from ``offsets`` (partition -> next offset; a partition without one from
        where the channel started). Thread-safe: the channel's thread seeks."""
        with self._rewind_lock:
            self._rewind_to = dict(offsets)

    def _seek_back(self, offsets: Mapping[int, int]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self._offsets = {**self._start_offsets, **offsets}  # also what a later assignment starts from
        for tp in self._consumer.assignment():
            target = offsets.get(tp.partition, self._start_offsets.get(tp.partition, OFFSET_BEGINNING))
            self._consumer.seek(TopicPartition(self.topic, tp.partition, target))
            self._offsets[tp.partition] = target

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._rewind_lock:
                rewind, self._rewind_to = self._rewind_to, None
            if rewind is not None:
                try:
                    self._seek_back(rewind)
                except Exception as exc:  # tried again on the next turn
                    log.warning("signal channel %s: rewinding failed (%s); retrying", self.topic, exc)
                    with self._rewind_lock:
                        if self._rewind_to is None:
                            self._rewind_to = rewind
                    self._stop.wait(0.5)
                    continue
                self._dispatcher.rewound(self.topic)
            try:
                msg = self._consumer.poll(0.2)
            except RuntimeError:
                return  # closed
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.fatal():
                    log.error("signal channel: %s", err)
                    return
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            self._offsets[partition] = offset + 1  # a re-assignment resumes here, not at the start
            try:
                signal = signal_from_kafka(msg.key(), msg.value(), self._prefix, offset, partition, self.topic,
                                           self._skip_origin)
            except SignalError as exc:
                self._dispatcher.refused(f"signal record at {self.topic}/{partition}/{offset} refused: {exc}")
                signal = None
            if signal is None:
                self._dispatcher.passed(self.topic, partition, offset + 1)
                continue
            try:
                self._dispatcher.submit(signal)
            except Exception as exc:  # e.g. the progress topic cannot be written: retry the record
                log.error("signal %s not handed over (%s); retrying", signal.id, exc)
                from confluent_kafka import TopicPartition

                self._consumer.seek(TopicPartition(self.topic, partition, offset))
                self._offsets[partition] = offset
                self._stop.wait(5.0)
                continue
            self.received += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._consumer.close()


__all__ = [
    "EXECUTE_SNAPSHOT",
    "LOG",
    "SIGNAL_OFFSETS_KEY",
    "STOP_SNAPSHOT",
    "KafkaSignalChannel",
    "Signal",
    "SignalDispatcher",
    "SignalError",
    "SignalTap",
    "inherited_signal_offsets",
    "relay_value",
    "signal_from_kafka",
    "signal_from_row",
    "signal_offsets_field",
    "snapshot_request",
    "stored_signal_offsets",
]
