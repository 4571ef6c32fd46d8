"""The operator's view of a connector's backfill progress topic (``<topic.prefix>.backfill-progress``).

What the topic says (:class:`FeedState`, a pure fold of its records in order):

* per run: chunks planned and done, rows emitted, and the job's own ``run`` record (started,
  finished, error), so ``status.backfills[]`` shows progress whatever the engine;
* the snapshot signals workers handed over (``signal`` records), which ones a later
  ``stop-snapshot`` cancelled, and which the operator already closed (``signal-closed``);
* which runs are over for good (``abandon`` records without an epoch: the operator's own, see
  ``backfillrelease``).

I/O (:class:`ProgressFeeds`): one tail per connector that needs it, on its own thread, so a
reconcile never waits for Kafka: it takes the latest :class:`FeedView` (``ready`` once the tail
reached the topic's end after it started). The tail keeps one consumer open and reads only new
records (a compacted, one-partition topic: cheap), and stops by itself when no reconcile asked
for it for ``idle_seconds`` (a connector whose backfills are over). It also writes the
operator's records (``signal-closed``, ``abandon``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Producer

from cdcoperator.kafkaaccess import KafkaAccess, plain_access
from cdcoperator.model import ConnectorResource
from cdcworker import kafkaclients
from cdcworker.backfill.progress import (
    RUN,
    SIGNAL,
    SIGNAL_CLOSED,
    ChunkDone,
    PlanRecord,
    RunAbandoned,
    RunStatus,
    SignalClosed,
    SignalRecord,
    parse_control,
    parse_record,
)
from cdcworker.jsontypes import JsonMapping, JsonObject

log = logging.getLogger(__name__)

EXECUTE, STOP = "execute-snapshot", "stop-snapshot"
LOOKUP_INTERVAL = 2.0
DEFAULT_IDLE_SECONDS = 300.0
REQUEUE_SECONDS = 60.0  # an operator record not read back after this is written again


def progress_topic(cr: ConnectorResource) -> str:
    return f"{cr.spec.kafka.topic_prefix}.backfill-progress"


def rfc3339(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the fold (pure) --------------------------------------------------------------------------------


@dataclass
class RunProgress:
    plans: dict[tuple[str, str], int] = field(default_factory=dict)  # (shard, table) -> chunks
    done: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)  # -> (rows, finished_ms)
    status: RunStatus | None = None
    abandoned: str | None = None  # the run is over for good: the reason

    def summary(self) -> JsonObject:
        """``chunksDone/chunksTotal/rows``, ``state`` (running, succeeded, failed, complete), times, error,
        ``abandoned`` (the reason, once the run is over for good)."""
        total = sum(self.plans.values())
        done = [v for (s, t, i), v in self.done.items() if i < self.plans.get((s, t), 0)]
        out: JsonObject = {"chunksTotal": total, "chunksDone": len(done), "rows": sum(r for r, _ in done)}
        if self.abandoned is not None:
            out["abandoned"] = self.abandoned
        st = self.status
        if st is not None:
            out["state"] = st.state
            if st.started_ms:
                out["started_ms"] = st.started_ms
            if st.state in ("succeeded", "failed") and st.finished_ms:
                out["finished_ms"] = st.finished_ms
            if st.error:
                out["error"] = st.error
        elif self.plans:
            out["state"] = "complete" if len(done) == total else "running"
        if "started_ms" not in out and done:
            out["started_ms"] = min(ms for _, ms in done if ms) if any(ms for _, ms in done) else 0
            if not out["started_ms"]:
                del out["started_ms"]
        return out


@dataclass
class FeedState:
    keyspace: str
    runs: dict[str, RunProgress] = field(default_factory=dict)
    signals: dict[str, SignalRecord] = field(default_factory=dict)  # execute requests, first appearance order
    stopped: dict[str, str] = field(default_factory=dict)  # request id -> the stop signal's id
    stops_seen: set[str] = field(default_factory=set)
    closed: dict[str, SignalClosed] = field(default_factory=dict)

    def apply(self, value: bytes) -> None:
        rec = parse_record(value)
        if isinstance(rec, PlanRecord):
            if rec.keyspace == self.keyspace:
                self.runs.setdefault(rec.run_id, RunProgress()).plans[(rec.shard, rec.table)] = rec.chunks
            return
        if isinstance(rec, ChunkDone):
            c = rec.chunk
            if c.keyspace == self.keyspace:
                self.runs.setdefault(c.run_id, RunProgress()).done[(c.shard, c.table, c.index)] = (
                    rec.rows, rec.finished_ms)
            return
        if isinstance(rec, RunAbandoned):
            if rec.keyspace == self.keyspace and rec.epoch is None:
                self.runs.setdefault(rec.run_id, RunProgress()).abandoned = rec.reason or "abandoned"
            return
        if rec is not None:
            return  # attempt records: the workers' business
        control = parse_control(value)
        if isinstance(control, RunStatus):
            self.runs.setdefault(control.run_id, RunProgress()).status = control
        elif isinstance(control, SignalClosed):
            if control.keyspace == self.keyspace:
                self.closed[control.signal_id] = control
        elif isinstance(control, SignalRecord) and control.keyspace == self.keyspace:
            if control.signal == EXECUTE:
                # The first appearance decides the order; a replay of the same signal changes nothing.
                self.signals.setdefault(control.signal_id, control)
            elif control.signal == STOP and control.signal_id not in self.stops_seen:
                self.stops_seen.add(control.signal_id)
                # A stop cancels the requests before it (topic order) that touch its tables (all when
                # it names none). A request seen after its stop is not cancelled by it.
                for sid, req in self.signals.items():
                    if sid in self.stopped or sid in self.closed:
                        continue
                    if not control.tables or set(control.tables) & set(req.tables):
                        self.stopped[sid] = control.signal_id


@dataclass(frozen=True)
class FeedView:
    """A reconcile's snapshot of the fold. ``ready``: the tail has read the topic to its end."""

    ready: bool = False
    error: str = ""
    runs: Mapping[str, JsonMapping] = field(default_factory=dict)  # run id -> RunProgress.summary()
    signals: tuple[SignalRecord, ...] = ()
    stopped: Mapping[str, str] = field(default_factory=dict)
    closed: Mapping[str, SignalClosed] = field(default_factory=dict)

    @classmethod
    def of(cls, state: FeedState, ready: bool = True, error: str = "") -> FeedView:
        return cls(ready, error, {r: p.summary() for r, p in state.runs.items()}, tuple(state.signals.values()),
                   dict(state.stopped), dict(state.closed))


def fold(values: list[bytes], keyspace: str) -> FeedView:
    """The view of a list of record values (tests, tools)."""
    state = FeedState(keyspace)
    for v in values:
        state.apply(v)
    return FeedView.of(state)


# --- the tail (I/O) -------------------------------------------------------------------------------


class _Tail:
    def __init__(self, config: Mapping[str, object], topic: str, keyspace: str, idle_seconds: float) -> None:
        self.config = dict(config)
        self.topic = topic
        self.state = FeedState(keyspace)
        self.idle = idle_seconds
        self.lock = threading.Lock()
        self.ready = False
        self.error = ""
        self.used = time.monotonic()
        self.outbox: queue.SimpleQueue[SignalClosed | RunAbandoned] = queue.SimpleQueue()
        self.queued: dict[bytes, float] = {}  # abandon record key -> when it was last queued
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"backfill-feed-{topic}", daemon=True)

    def view(self) -> FeedView:
        self.used = time.monotonic()
        with self.lock:
            return FeedView.of(self.state, self.ready, self.error)

    def _run(self) -> None:
        from cdcworker.topicread import TopicReader, TopicReadError

        consumer = kafkaclients.consumer({**self.config, "group.id": f"shardcdc-operator-{uuid.uuid4()}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "auto.offset.reset": "earliest"}, "operator's backfill feed consumer")
        reader = TopicReader(consumer, self.topic)
        producer: Producer | None = None
        assigned = False
        try:
            while not self.stop.is_set() and time.monotonic() - self.used < self.idle:
                if not assigned:
                    try:
                        # All topics' metadata: naming the topic would auto-create it on some brokers.
                        meta = consumer.list_topics(timeout=10).topics.get(self.topic)
                    except Exception as exc:  # unreachable cluster: say so, look again later
                        self.error = f"cannot read {self.topic}: {exc}"
                        self.stop.wait(LOOKUP_INTERVAL)
                        continue
                    if meta is None or meta.error is not None or not meta.partitions:
                        with self.lock:  # no topic yet: no run and no signal so far
                            self.ready, self.error = True, ""
                        self.stop.wait(LOOKUP_INTERVAL)
                        continue
                    reader.assign([0])
                    assigned = True
                while not self.outbox.empty():
                    if producer is None:
                        producer = kafkaclients.producer(self.config, "operator's backfill feed producer")
                    rec = self.outbox.get()
                    producer.produce(self.topic, rec.value(), rec.key())
                if producer is not None:
                    producer.poll(0)
                try:
                    msgs = reader.fetch(0.5, max_records=100)
                except TopicReadError as exc:
                    self.error = str(exc)
                    continue
                for msg in msgs:
                    value = msg.value()
                    if value is not None:
                        with self.lock:
                            try:
                                self.state.apply(value)
                            except (ValueError, KeyError, TypeError) as exc:
                                log.warning("%s offset %d: unreadable record ignored (%s)", self.topic, msg.offset(), exc)
                if reader.reached:  # caught up: what the topic held is applied
                    with self.lock:
                        self.ready, self.error = True, ""
        except Exception:
            log.exception("backfill progress tail of %s failed", self.topic)
        finally:
            if producer is not None:
                producer.flush(10)
            consumer.close()


class ProgressFeeds:
    """One tail per connector (namespace, name, uid) and client settings, started on demand, stopped
    when idle. ``access``: the cluster's client settings (``kafkaaccess``; default: those that need
    no Secret); rotated credentials start a new tail, the old one idles out."""

    def __init__(self, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
        self.idle = idle_seconds
        self._tails: dict[tuple[str, str, str, str], _Tail] = {}
        self._lock = threading.Lock()

    def view(self, cr: ConnectorResource, access: KafkaAccess | None = None) -> FeedView:
        """The latest view (never blocks; not ready until the tail has read the topic once)."""
        access = access or plain_access(cr)
        if access.config is None:
            return FeedView(error=f"progress not read: {access.problem}")
        return self._tail(cr, access).view()

    def close_signal(self, cr: ConnectorResource, rec: SignalClosed, access: KafkaAccess | None = None) -> None:
        """Queue the operator's ``signal-closed`` record (written by the tail's thread)."""
        self._put(cr, rec, access)

    def abandon(self, cr: ConnectorResource, rec: RunAbandoned, access: KafkaAccess | None = None) -> None:
        """Queue the operator's ``abandon`` record of a run that is over (written by the tail's thread;
        the fold shows it once read back, and then nobody asks for it again)."""
        self._put(cr, rec, access)

    def _put(self, cr: ConnectorResource, rec: SignalClosed | RunAbandoned, access: KafkaAccess | None) -> None:
        access = access or plain_access(cr)
        if access.config is None:
            return
        tail = self._tail(cr, access)
        if isinstance(rec, RunAbandoned):
            # Asked for at every reconcile until the fold shows it: queue it again only if a write
            # seems lost (the tail writes without waiting for acknowledgements).
            now = time.monotonic()
            if now - tail.queued.get(rec.key(), -REQUEUE_SECONDS) < REQUEUE_SECONDS:
                return
            tail.queued[rec.key()] = now
        tail.outbox.put(rec)

    def _tail(self, cr: ConnectorResource, access: KafkaAccess) -> _Tail:
        assert access.config is not None
        key = (cr.namespace, cr.name, cr.uid, access.fingerprint)
        with self._lock:
            tail = self._tails.get(key)
            if tail is None or not tail.thread.is_alive():
                tail = _Tail(dict(access.config), progress_topic(cr), cr.spec.source.keyspace, self.idle)
                self._tails[key] = tail
                tail.thread.start()
            return tail

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            for key in [k for k in self._tails if k[:2] == (namespace, name)]:
                self._tails.pop(key).stop.set()

    def close(self) -> None:
        with self._lock:
            tails, self._tails = list(self._tails.values()), {}
        for t in tails:
            t.stop.set()
        for t in tails:
            with contextlib.suppress(RuntimeError):
                t.thread.join(15)


FEEDS = ProgressFeeds()

__all__ = ["EXECUTE", "FEEDS", "RUN", "SIGNAL", "SIGNAL_CLOSED", "STOP", "FeedState", "FeedView", "ProgressFeeds",
           "RunProgress", "fold", "progress_topic", "rfc3339"]
