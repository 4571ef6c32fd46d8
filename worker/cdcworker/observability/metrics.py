"""Per-task metrics: Debezium's streaming metrics, commit-latency histograms and the low watermark.

The streaming loop updates plain attributes of two small objects, :class:`TaskMetrics` (one per
worker) and :class:`ShardMetrics` (one per shard, created once and cached); a custom Prometheus
collector turns them into samples only when ``/metrics`` is scraped. So the hot path is a few
integer additions: no label lookups, no locks, no metric-object calls. The loop is the only
writer; the HTTP thread only reads (single attribute reads are atomic under the GIL, and every
derived value such as "milliseconds since last event" is computed at scrape time).

Names are Debezium's streaming attributes snake-cased with a ``shardcdc_`` prefix
(``MilliSecondsBehindSource`` → ``shardcdc_milliseconds_behind_source``) and, like the JMX
exporter shows them, they are gauges. Metrics of our own follow Prometheus conventions
(base units, ``_total`` counters). Every series carries ``connector`` and ``task`` labels plus
the ``custom.metric.tags``; per-shard series add ``shard``.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from cdcworker.jsontypes import JsonObject

__all__ = [
    "LATENCY_BUCKETS",
    "RESERVED_LABELS",
    "STATES",
    "LatencyHistogram",
    "PositionEntry",
    "ShardMetrics",
    "StageMetrics",
    "TaskMetrics",
    "grpc_code_name",
]

Clock = Callable[[], float]

# The task's lifecycle as the operator sees it (``/status`` and ``shardcdc_state``).
STATES = ("starting", "snapshotting", "streaming", "reconnecting", "reassignment_needed", "failed", "stopped",
          "completed")
_READY_STATES = frozenset(("snapshotting", "streaming"))
_DONE_STATES = frozenset(("completed",))  # the work is finished: ready without a VTGate connection

# Labels the worker sets itself; a custom.metric.tags key may not reuse them.
RESERVED_LABELS = frozenset(("connector", "task", "shard", "code", "state", "le", "quantile"))

# Seconds. VStream commit timestamps have one-second resolution, so sub-second buckets only
# separate "same second" from the rest; the tail reaches the ten-minute VTGate idle timeout.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class PositionEntry(Protocol):
    """What ``/status`` needs of one shard of a position (``offsets.ShardGtid`` fits)."""

    @property
    def keyspace(self) -> str: ...
    @property
    def shard(self) -> str: ...
    @property
    def gtid(self) -> str: ...


PositionSource = Callable[[], "Iterable[PositionEntry] | None"]


class ErroneousCounter(Protocol):
    """Where failure handling counts the events it skipped (``TaskMetrics.on_erroneous``): the
    filters and snapshot code see only this, so they run (and are tested) without a task's metrics."""

    def on_erroneous(self, n: int = 1) -> None: ...


class SignalMetrics(ErroneousCounter, Protocol):
    """What a task's signal and snapshot extras report (``signals.runtime.TaskExtras``)."""

    def on_signal_refused(self, message: str) -> None: ...


class StreamMetrics(ErroneousCounter, Protocol):
    """What a ``streaming.StreamProcessor`` reports per response and commit (``TaskMetrics`` is the
    implementation); the processor is handed this narrow seam, not the task's whole metrics."""

    queue_remaining: int
    queue_bytes: int
    records_sent: int
    awaiting_journal: JsonObject | None  # a reshard journal some held source shards delivered

    def queue(self, capacity: int, remaining: int, size_bytes: int = 0, max_bytes: int = 0) -> None: ...

    def on_response(self, events: int, rows: int = 0, filtered: int = 0, now: float | None = None) -> None: ...

    def on_commit(self, shard: str, commit_ts_s: float, read_ts: float | None = None,
                  emit_ts: float | None = None, records: int = 0) -> None: ...


class StageMetrics(StreamMetrics, SignalMetrics, Protocol):
    """What ``WorkerTask`` and its stages (``cdcworker.stages``, ``offsets.watermark``) report and
    read: the task's state, connection, heartbeats, hand-off caps and durable commit times.
    ``TaskMetrics`` is the implementation; ``/status``, the probes and the Prometheus collector read
    the concrete class (they render its whole snapshot), the task loop sees only this seam."""

    connected: bool
    state: str
    records_acked: int
    journal: JsonObject | None

    @property
    def shards(self) -> tuple[ShardMetrics, ...]: ...

    def shard(self, name: str, keyspace: str = "") -> ShardMetrics: ...

    def set_position_sources(self, read: PositionSource | None, durable: PositionSource | None = None) -> None: ...

    def durable_through(self, shard: str, commit_ts_s: float) -> None: ...

    def beat(self, now: float | None = None) -> None: ...

    def on_heartbeat(self, source_ts_s: float, read_ts: float | None = None) -> None: ...

    def mark_idle(self, shard: str, ts_s: float) -> None: ...

    def set_held(self, shards: Iterable[str] | Mapping[str, float | None]) -> dict[str, float | None]: ...

    def on_offsets_flushed(self, now: float | None = None) -> None: ...

    def set_connected(self, connected: bool) -> None: ...

    def on_reconnect(self, code: object) -> None: ...

    def on_error(self, code: object) -> None: ...

    def set_state(self, state: str, reason: str = "") -> None: ...

    def low_watermark(self) -> float | None: ...


def grpc_code_name(code: object) -> str:
    """``grpc.StatusCode.UNAVAILABLE`` / ``"unavailable"`` / None → ``"UNAVAILABLE"`` (a bounded label)."""
    if code is None:
        return "UNKNOWN"
    name = getattr(code, "name", None)
    return str(name if isinstance(name, str) else code).upper()


class LatencyHistogram:
    """A cumulative histogram cheap enough to observe per transaction (a bisect and two adds)."""

    __slots__ = ("_bounds", "_counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("histogram bounds must be strictly increasing")
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)  # last slot: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        if seconds < 0.0:
            seconds = 0.0  # clock skew between the database and this pod; never a negative latency
        # bisect_left: the first bound >= value, which is Prometheus' "le" semantics.
        self._counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self._counts)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf``, from one consistent snapshot."""
        counts = list(self._counts)  # one C-level copy: the loop cannot interleave
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self._bounds, float("inf")), counts, strict=True):
            running += n
            out.append((floatToGoString(bound), float(running)))
        return out

    def quantile(self, q: float) -> float | None:
        """Estimate like PromQL's ``histogram_quantile`` (linear inside the bucket); None if empty."""
        counts = list(self._counts)
        total = sum(counts)
        if total == 0:
            return None
        rank = q * total
        running = 0
        lower = 0.0
        for i, n in enumerate(counts):
            upper = self._bounds[i] if i < len(self._bounds) else None
            if running + n >= rank and n > 0:
                if upper is None:
                    return lower  # beyond the last bound: the best known lower limit
                return lower + (upper - lower) * ((rank - running) / n)
            running += n
            if upper is not None:
                lower = upper
        return lower


class ShardMetrics:
    """One shard's counters; get it once from :meth:`TaskMetrics.shard` and keep the reference."""

    __slots__ = (
        "_clock",
        "_h_ack",
        "_h_emit",
        "_h_read",
        "acked_commit_ts",
        "behind_source_ms",
        "held",
        "held_cap",
        "idle_ts",
        "keyspace",
        "labels",
        "last_commit_ts",
        "last_read_ts",
        "name",
        "records",
        "transactions",
    )

    def __init__(self, task: TaskMetrics, name: str, keyspace: str) -> None:
        self.name = name
        self.keyspace = keyspace
        self.labels = (*task.labels, name)
        self._clock = task.clock
        self._h_read = task.commit_to_read
        self._h_emit = task.commit_to_emit
        self._h_ack = task.commit_to_ack
        self.transactions = 0
        self.records = 0
        self.behind_source_ms: float | None = None  # unknown until a commit or heartbeat is read
        self.last_commit_ts: float | None = None  # source commit time (s) of the newest transaction read
        self.last_read_ts: float | None = None
        self.acked_commit_ts: float | None = None  # newest commit time whose records Kafka acknowledged
        self.idle_ts: float | None = None  # proven caught up, everything durable, at this time
        # While a backfill holds some of the shard's tables back (their changes reach Kafka only in
        # the catch-up), the watermark stays where it was when the hold began (None: unknown).
        self.held = False
        self.held_cap: float | None = None

    # --- hot path (per transaction) ------------------------------------------------------------

    def on_commit(
        self, commit_ts_s: float, read_ts: float | None = None, emit_ts: float | None = None, records: int = 0
    ) -> None:
        """A transaction of this shard was read at ``read_ts`` and its records produced at ``emit_ts``."""
        if read_ts is None:
            read_ts = self._clock()
        self.transactions += 1
        self.records += records
        self.last_commit_ts = commit_ts_s
        self.last_read_ts = read_ts
        lag = read_ts - commit_ts_s
        self.behind_source_ms = lag * 1000.0 if lag > 0.0 else 0.0
        self._h_read.observe(lag)
        if emit_ts is not None:
            self._h_emit.observe(emit_ts - commit_ts_s)

    def on_ack(self, commit_ts_s: float, ack_ts: float | None = None) -> None:
        """Kafka acknowledged every record of this shard up to the transaction committed at ``commit_ts_s``."""
        if ack_ts is None:
            ack_ts = self._clock()
        self.durable_through(commit_ts_s)
        self._h_ack.observe(ack_ts - commit_ts_s)

    def durable_through(self, commit_ts_s: float) -> None:
        """Like ``on_ack``, learnt later than the ack itself (``AckCheckpoints``): the watermark
        moves, the commit-to-ack histogram does not take a late observation."""
        acked = self.acked_commit_ts
        if acked is None or commit_ts_s > acked:
            self.acked_commit_ts = commit_ts_s

    def mark_idle(self, source_ts_s: float) -> None:
        """The shard is caught up to ``source_ts_s`` and Kafka holds everything read from it."""
        idle = self.idle_ts
        if idle is None or source_ts_s > idle:
            self.idle_ts = source_ts_s

    def hold(self, held: bool, restored_cap: float | None = None) -> None:
        """A backfill holds (some of) the shard's tables back, or no longer does. ``restored_cap``:
        the cap stored with the hold, for a process that does not know the watermark yet."""
        if held and not self.held:
            wm = self.watermark  # the value before the hold: still a true statement
            self.held_cap = wm if wm is not None else restored_cap
        self.held = held
        if not held:
            self.held_cap = None

    @property
    def watermark(self) -> float | None:
        """Source time T such that every change of this shard committed before T is in Kafka."""
        acked, idle = self.acked_commit_ts, self.idle_ts
        if acked is None:
            wm = idle
        elif idle is None:
            wm = acked
        else:
            wm = acked if acked > idle else idle
        if self.held:
            cap = self.held_cap
            if cap is None or wm is None:
                return cap  # a cap restored with the hold is true before this process knows more
            return wm if wm < cap else cap
        return wm


class TaskMetrics:
    """All metrics and health state of one worker task, with its own Prometheus registry.

    Hot path: :meth:`on_response` per VStream response, ``ShardMetrics.on_commit`` per
    transaction, ``ShardMetrics.on_ack`` per acknowledged transaction, :meth:`on_sent` /
    :meth:`on_acked` per batch. Everything else is called on state changes only.
    """

    def __init__(
        self,
        connector: str,
        task: str = "0",
        *,
        tags: Iterable[tuple[str, str]] = (),
        generation: int = 0,
        clock: Clock = time.time,
        liveness_timeout_s: float = 60.0,
        buckets: Sequence[float] = LATENCY_BUCKETS,
        process_metrics: bool = True,
    ) -> None:
        tags = tuple(tags)
        names = [k for k, _ in tags]
        clash = sorted(RESERVED_LABELS.intersection(names))
        if clash:
            raise ValueError(f"custom.metric.tags may not use the reserved label name(s) {', '.join(clash)}")
        if len(set(names)) != len(names):
            raise ValueError("custom.metric.tags names a label twice")
        self.connector = connector
        self.task = task
        self.tags = tags
        self.clock = clock
        self.liveness_timeout_s = liveness_timeout_s
        self.label_names: tuple[str, ...] = ("connector", "task", *names)
        self.labels: tuple[str, ...] = (connector, task, *(v for _, v in tags))
        self.shard_label_names: tuple[str, ...] = (*self.label_names, "shard")

        self.commit_to_read = LatencyHistogram(buckets)
        self.commit_to_emit = LatencyHistogram(buckets)
        self.commit_to_ack = LatencyHistogram(buckets)

        now = clock()
        # Debezium's streaming attributes.
        self.events_seen = 0  # change events (rows): TotalNumberOfEventsSeen
        self.creates = 0
        self.updates = 0
        self.deletes = 0
        self.events_filtered = 0
        self.erroneous = 0
        self.signals_refused = 0  # signal documents of the wrong shape (signals.document)
        self.last_signal_refusal: str | None = None
        self.last_event_ts: float | None = None
        self.queue_capacity = 0
        self.queue_remaining = 0
        self.queue_bytes = 0
        self.queue_max_bytes = 0
        self.connected = False
        # Ours.
        self.responses = 0
        self.vevents = 0
        self.records_sent = 0
        self.records_acked = 0
        self.offsets_flushed = 0
        self.last_offset_flush_ts: float | None = None
        self.generation = generation
        self.reconnects: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.explicit_low_watermark: float | None = None
        self._lw_floor: float | None = None  # the highest low watermark computed so far
        self.last_beat = now
        self.started_ts = now
        self.state = "starting"
        self.reason = ""
        self.journal: JsonObject | None = None  # set when a reshard journal needs a reassignment
        # Set while some held source shards of a reshard delivered its journal and others stream on.
        self.awaiting_journal: JsonObject | None = None
        self.state_since = now
        self.read_position: PositionSource | None = None
        self.durable_position: PositionSource | None = None

        self._shards: dict[str, ShardMetrics] = {}
        self._shard_list: tuple[ShardMetrics, ...] = ()  # copy-on-write: the scrape thread iterates it

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        if process_metrics:
            from prometheus_client import ProcessCollector

            ProcessCollector(registry=self.registry)

    # --- binding ------------------------------------------------------------------------------

    def shard(self, name: str, keyspace: str = "") -> ShardMetrics:
        """The shard's metrics object, created on first use; callers keep the reference."""
        sm = self._shards.get(name)
        if sm is None:
            sm = self._shards[name] = ShardMetrics(self, name, keyspace)
            self._shard_list = (*self._shard_list, sm)
        elif keyspace and not sm.keyspace:
            sm.keyspace = keyspace
        return sm

    @property
    def shards(self) -> tuple[ShardMetrics, ...]:
        return self._shard_list

    def drop_shard(self, name: str) -> None:
        """Forget a shard this task no longer streams (after a reshard), so its series disappear."""
        if self._shards.pop(name, None) is not None:
            self._shard_list = tuple(s for s in self._shard_list if s.name != name)

    def set_position_sources(
        self, read: PositionSource | None, durable: PositionSource | None = None
    ) -> None:
        """Callables giving the read and durable positions (per-shard gtids), asked only by ``/status``."""
        self.read_position = read
        self.durable_position = durable

    # --- hot path -----------------------------------------------------------------------------

    def on_response(self, events: int, rows: int = 0, filtered: int = 0, now: float | None = None) -> None:
        """One VStream response with ``events`` VEvents carrying ``rows`` change events (``filtered`` dropped)."""
        self.responses += 1
        self.vevents += events
        self.events_seen += rows
        self.events_filtered += filtered
        self.last_event_ts = self.last_beat = self.clock() if now is None else now

    def on_ops(self, creates: int = 0, updates: int = 0, deletes: int = 0) -> None:
        """Change events by operation (Debezium's TotalNumberOf{Create,Update,Delete}EventsSeen)."""
        self.creates += creates
        self.updates += updates
        self.deletes += deletes

    def on_commit(
        self,
        shard: str,
        commit_ts_s: float,
        read_ts: float | None = None,
        emit_ts: float | None = None,
        records: int = 0,
    ) -> None:
        """Convenience for callers without a ShardMetrics reference (one dict lookup)."""
        (self._shards.get(shard) or self.shard(shard)).on_commit(commit_ts_s, read_ts, emit_ts, records)

    def on_ack(self, shard: str, commit_ts_s: float, ack_ts: float | None = None) -> None:
        (self._shards.get(shard) or self.shard(shard)).on_ack(commit_ts_s, ack_ts)

    def durable_through(self, shard: str, commit_ts_s: float) -> None:
        (self._shards.get(shard) or self.shard(shard)).durable_through(commit_ts_s)

    def on_sent(self, n: int = 1) -> None:
        self.records_sent += n

    def on_acked(self, n: int = 1) -> None:
        self.records_acked += n

    def beat(self, now: float | None = None) -> None:
        """The loop is alive (call it where the loop waits: backoff, flush, idle polls)."""
        self.last_beat = self.clock() if now is None else now

    # --- per event of note --------------------------------------------------------------------

    def on_heartbeat(self, source_ts_s: float, read_ts: float | None = None) -> None:
        """A VTGate heartbeat: VTGate sent nothing for the heartbeat interval (Debezium's lag of 0).

        It does not move the low watermark: VTGate's heartbeat says nothing per shard, and a shard
        whose tablet is throttled or lagging sends nothing either. A shard's watermark moves on
        its own acknowledged commits and on ``mark_idle`` (``idleprobe.IdleProbe``'s proof).
        """
        if read_ts is None:
            read_ts = self.clock()
        lag = read_ts - source_ts_s
        behind = lag * 1000.0 if lag > 0.0 else 0.0
        for sm in self._shard_list:
            sm.behind_source_ms = behind

    def mark_idle(self, shard: str, ts_s: float) -> None:
        """``shard`` is proven caught up at ``ts_s`` with everything read durable (``IdleProbe``)."""
        sm = self._shards.get(shard)
        if sm is not None:
            sm.mark_idle(ts_s)

    def set_held(self, shards: Iterable[str] | Mapping[str, float | None]) -> dict[str, float | None]:
        """The shards a backfill hand-off holds now (their watermark stays until released), with
        the caps stored with their holds when given; returns each held shard's cap (to store)."""
        caps: Mapping[str, float | None] = shards if isinstance(shards, Mapping) else dict.fromkeys(shards)
        for sm in self._shard_list:
            sm.hold(sm.name in caps, caps.get(sm.name))
        return {sm.name: sm.held_cap for sm in self._shard_list if sm.held}

    def on_signal_refused(self, message: str) -> None:
        """A signal was refused (wrong shape): counted, and the last reason kept for /status."""
        self.signals_refused += 1
        self.last_signal_refusal = message

    def on_erroneous(self, n: int = 1) -> None:
        """Events that could not be converted (warn/skip failure handling)."""
        self.erroneous += n

    def on_offsets_flushed(self, now: float | None = None) -> None:
        self.offsets_flushed += 1
        self.last_offset_flush_ts = self.clock() if now is None else now

    def queue(self, capacity: int, remaining: int, size_bytes: int = 0, max_bytes: int = 0) -> None:
        self.queue_capacity = capacity
        self.queue_remaining = remaining
        self.queue_bytes = size_bytes
        self.queue_max_bytes = max_bytes

    def set_connected(self, connected: bool) -> None:
        self.connected = connected

    def on_reconnect(self, code: object) -> None:
        """A reconnect attempt after the stream failed with ``code`` (a ``grpc.StatusCode`` or name)."""
        key = grpc_code_name(code)
        self.reconnects[key] = self.reconnects.get(key, 0) + 1

    def on_error(self, code: object) -> None:
        """A stream error (retriable or not) by gRPC status code."""
        key = grpc_code_name(code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def set_generation(self, generation: int) -> None:
        self.generation = generation

    def set_state(self, state: str, reason: str = "") -> None:
        if state not in STATES:
            raise ValueError(f"unknown task state {state!r}; expected one of {', '.join(STATES)}")
        if state != self.state or reason != self.reason:
            self.state_since = self.clock()
        self.state = state
        self.reason = reason

    def set_low_watermark(self, ts_s: float | None) -> None:
        """Override the computed low watermark (None returns to the per-shard computation)."""
        self.explicit_low_watermark = ts_s

    # --- derived values -----------------------------------------------------------------------

    def low_watermark(self) -> float | None:
        """Commit time T such that every change committed before T on this task's shards is in Kafka.

        The minimum of the shards' watermarks, never moving backwards: a statement about the
        past stays true, so a shard bound later (after a reshard) without a watermark of its own
        keeps the last value instead of making it unknown. None until every shard has one.
        """
        if self.explicit_low_watermark is not None:
            return self.explicit_low_watermark
        floor = self._lw_floor
        lowest: float | None = None
        for sm in self._shard_list:
            wm = sm.watermark
            if wm is None:
                return floor
            if lowest is None or wm < lowest:
                lowest = wm
        if lowest is None or (floor is not None and floor >= lowest):
            return floor
        self._lw_floor = lowest  # a racing scrape may write an older value: still a true bound
        return lowest

    def live(self, now: float | None = None) -> bool:
        """The loop refreshed its heartbeat within ``liveness_timeout_s``."""
        t = self.clock() if now is None else now
        return t - self.last_beat <= self.liveness_timeout_s

    def ready(self) -> bool:
        """Streaming (or snapshotting) and connected to VTGate."""
        return (self.connected and self.state in _READY_STATES) or self.state in _DONE_STATES

    def status(self) -> JsonObject:
        from cdcworker.observability.status import build_status

        return build_status(self)


class _Collector:
    """Reads a TaskMetrics at scrape time and yields Prometheus metric families."""

    def __init__(self, tm: TaskMetrics) -> None:
        self.tm = tm

    def collect(self) -> Iterator[Metric]:
        now = self.tm.clock()
        yield from self._streaming(now)
        yield from self._shards()
        yield from self._watermark(now)
        yield from self._latency()
        yield from self._counters(now)

    def _gauge(self, name: str, doc: str, value: float | None) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=list(self.tm.label_names))
        if value is not None:
            g.add_metric(self.tm.labels, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=list(self.tm.label_names))
        c.add_metric(self.tm.labels, value)
        return c

    def _streaming(self, now: float) -> Iterator[Metric]:
        tm = self.tm
        # Debezium streaming metrics (task level).
        since = None if tm.last_event_ts is None else max(0.0, now - tm.last_event_ts) * 1000.0
        yield self._gauge(
            "shardcdc_milliseconds_since_last_event",
            "Milliseconds since the connector read and processed the most recent event (absent before the first).",
            since,
        )
        yield self._gauge(
            "shardcdc_total_number_of_events_seen",
            "Change events seen since the worker started.",
            tm.events_seen,
        )
        yield self._gauge(
            "shardcdc_total_number_of_create_events_seen", "Create events seen since start.", tm.creates
        )
        yield self._gauge(
            "shardcdc_total_number_of_update_events_seen", "Update events seen since start.", tm.updates
        )
        yield self._gauge(
            "shardcdc_total_number_of_delete_events_seen", "Delete events seen since start.", tm.deletes
        )
        yield self._gauge(
            "shardcdc_number_of_events_filtered",
            "Events dropped by include/exclude filter rules.",
            tm.events_filtered,
        )
        yield self._gauge(
            "shardcdc_number_of_erroneous_events",
            "Events that could not be converted (warn/skip).",
            tm.erroneous,
        )
        yield self._counter(
            "shardcdc_signals_refused",
            "Signals refused because their document has the wrong shape (the log and /status say why).",
            tm.signals_refused,
        )
        yield self._gauge(
            "shardcdc_queue_total_capacity",
            "Capacity of the queue between stream and producer.",
            tm.queue_capacity,
        )
        yield self._gauge(
            "shardcdc_queue_remaining_capacity", "Remaining capacity of that queue.", tm.queue_remaining
        )
        yield self._gauge(
            "shardcdc_max_queue_size_in_bytes", "Maximum buffer of that queue in bytes.", tm.queue_max_bytes
        )
        yield self._gauge(
            "shardcdc_current_queue_size_in_bytes", "Current buffer of that queue in bytes.", tm.queue_bytes
        )
        yield self._gauge(
            "shardcdc_connected", "1 while the worker is connected to VTGate.", 1.0 if tm.connected else 0.0
        )

    def _shards(self) -> Iterator[Metric]:
        sln = list(self.tm.shard_label_names)
        # Debezium streaming metrics (shard level).
        behind = GaugeMetricFamily(
            "shardcdc_milliseconds_behind_source",
            "Milliseconds between a change's commit and the connector processing it (includes clock skew).",
            labels=sln,
        )
        txns = GaugeMetricFamily(
            "shardcdc_number_of_committed_transactions", "Committed transactions processed.", labels=sln
        )
        shard_wm = GaugeMetricFamily(
            "shardcdc_shard_low_watermark_seconds",
            "Per shard: commit time before which every change is in Kafka (unix seconds).",
            labels=sln,
        )
        for sm in self.tm.shards:
            if sm.behind_source_ms is not None:
                behind.add_metric(sm.labels, sm.behind_source_ms)
            txns.add_metric(sm.labels, sm.transactions)
            wm = sm.watermark
            if wm is not None:
                shard_wm.add_metric(sm.labels, wm)
        yield behind
        yield txns
        yield shard_wm

    def _watermark(self, now: float) -> Iterator[Metric]:
        # Low watermark (the Spanner connector's MilliSecondsLowWatermark / ...Lag, in seconds).
        lw = self.tm.low_watermark()
        yield self._gauge(
            "shardcdc_low_watermark_seconds",
            "Commit time T (unix seconds) such that every change committed before T on the task's shards is in Kafka.",
            lw,
        )
        yield self._gauge(
            "shardcdc_low_watermark_lag_seconds",
            "Seconds between now and the low watermark.",
            None if lw is None else max(0.0, now - lw),
        )

    def _latency(self) -> Iterator[Metric]:
        tm = self.tm
        ln, lv = list(tm.label_names), tm.labels
        # Latency histograms (commit → read / emit / Kafka ack).
        for name, doc, hist in (
            (
                "shardcdc_commit_to_read_seconds",
                "Source commit to the worker reading the transaction.",
                tm.commit_to_read,
            ),
            (
                "shardcdc_commit_to_emit_seconds",
                "Source commit to the worker producing its records.",
                tm.commit_to_emit,
            ),
            (
                "shardcdc_commit_to_ack_seconds",
                "Source commit to Kafka acknowledging its records.",
                tm.commit_to_ack,
            ),
        ):
            h = HistogramMetricFamily(name, doc, labels=ln)
            h.add_metric(lv, hist.buckets(), hist.sum)
            yield h

    def _counters(self, now: float) -> Iterator[Metric]:
        tm = self.tm
        ln, lv = list(tm.label_names), tm.labels
        # Our counters.
        yield self._counter("shardcdc_vstream_responses", "VStream responses received.", tm.responses)
        yield self._counter("shardcdc_vstream_events", "VEvents received (all types).", tm.vevents)
        yield self._counter("shardcdc_records_sent", "Records handed to the Kafka producer.", tm.records_sent)
        yield self._counter(
            "shardcdc_records_acked",
            "Records acknowledged by Kafka (exactly-once: in committed transactions); updated at each offset flush.",
            tm.records_acked,
        )
        yield self._counter(
            "shardcdc_offsets_flushed", "Offset records written to the offsets topic.", tm.offsets_flushed
        )
        yield self._gauge(
            "shardcdc_last_offset_flush_timestamp_seconds",
            "When offsets were last written.",
            tm.last_offset_flush_ts,
        )
        for name, doc, by_code in (
            (
                "shardcdc_reconnects",
                "Reconnects to VTGate by the gRPC code that broke the stream.",
                tm.reconnects,
            ),
            ("shardcdc_stream_errors", "Stream errors by gRPC status code.", tm.errors),
        ):
            c = CounterMetricFamily(name, doc, labels=[*ln, "code"])
            for code, n in sorted(dict(by_code).items()):
                c.add_metric([*lv, code], n)
            yield c
        yield self._gauge("shardcdc_generation", "Task generation (bumped by every reassignment).", tm.generation)
        state = GaugeMetricFamily("shardcdc_state", "1 for the task's current state.", labels=[*ln, "state"])
        current = tm.state
        for s in STATES:
            state.add_metric([*lv, s], 1.0 if s == current else 0.0)
        yield state
        yield self._gauge("shardcdc_ready", "1 while the readiness probe passes.", 1.0 if tm.ready() else 0.0)
        yield self._gauge(
            "shardcdc_loop_heartbeat_age_seconds",
            "Seconds since the streaming loop last reported itself alive.",
            max(0.0, now - tm.last_beat),
        )
