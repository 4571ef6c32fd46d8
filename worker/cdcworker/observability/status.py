"""The ``/status`` document: what the operator reads to report a task's progress and health.

Shape (every key always present; times are unix milliseconds, durations milliseconds)::

    {"connector": str, "task": str, "generation": int, "tags": {str: str},
     "state": one of STATES, "reason": str | None, "state_since_ms": int,
     "live": bool, "ready": bool, "connected": bool, "time_ms": int,
     "events_seen": int, "transactions": int, "records_sent": int, "records_acked": int,
     "last_event_ms": int | None, "milliseconds_since_last_event": int | None,
     "low_watermark_ms": int | None, "low_watermark_lag_ms": int | None,
     "latency_ms": {"commit_to_read" | "commit_to_emit" | "commit_to_ack":
                    {"count": int, "p50": float | None, "p95": float | None, "p99": float | None}},
     "shards": [{"keyspace": str, "shard": str, "gtid": str | None, "durable_gtid": str | None,
                 "lag_ms": int | None, "last_event_ms": int | None, "last_commit_ms": int | None,
                 "transactions": int, "records_sent": int, "low_watermark_ms": int | None}, ...]}

Shards are sorted by name; a shard appears if the loop bound metrics for it or a position
source names it. Pure: built from a TaskMetrics snapshot and the position callables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcworker.jsontypes import JsonObject

if TYPE_CHECKING:
    from cdcworker.observability.metrics import LatencyHistogram, PositionSource, TaskMetrics

__all__ = ["build_status"]


def _ms(ts: float | None) -> int | None:
    return None if ts is None else round(ts * 1000)


def _quantiles(h: LatencyHistogram) -> JsonObject:
    def q(x: float) -> float | None:
        v = h.quantile(x)
        return None if v is None else round(v * 1000.0, 3)

    return {"count": h.count, "p50": q(0.5), "p95": q(0.95), "p99": q(0.99)}


def _positions(source: PositionSource | None) -> dict[str, tuple[str, str]]:
    """shard → (keyspace, gtid) from a position callable; a failing source reads as unknown."""
    if source is None:
        return {}
    try:
        entries = source()
    except Exception:  # status must never take the endpoint down
        return {}
    if entries is None:
        return {}
    return {e.shard: (e.keyspace, e.gtid) for e in entries}


def build_status(tm: TaskMetrics) -> JsonObject:
    now = tm.clock()
    read = _positions(tm.read_position)
    durable = _positions(tm.durable_position)
    by_name = {sm.name: sm for sm in tm.shards}
    shards: list[JsonObject] = []
    for name in sorted(set(by_name) | set(read) | set(durable)):
        sm = by_name.get(name)
        keyspace = (sm.keyspace if sm is not None else "") or read.get(name, durable.get(name, ("", "")))[0]
        shards.append(
            {
                "keyspace": keyspace,
                "shard": name,
                "gtid": read[name][1] if name in read else None,
                "durable_gtid": durable[name][1] if name in durable else None,
                "lag_ms": None if sm is None or sm.behind_source_ms is None else round(sm.behind_source_ms),
                "last_event_ms": None if sm is None else _ms(sm.last_read_ts),
                "last_commit_ms": None if sm is None else _ms(sm.last_commit_ts),
                "transactions": 0 if sm is None else sm.transactions,
                "records_sent": 0 if sm is None else sm.records,
                "low_watermark_ms": None if sm is None else _ms(sm.watermark),
            }
        )
    lw = tm.low_watermark()
    last = tm.last_event_ts
    doc: JsonObject = {
        "connector": tm.connector,
        "task": tm.task,
        "generation": tm.generation,
        "tags": dict(tm.tags),
        "state": tm.state,
        "reason": tm.reason or None,
        "state_since_ms": _ms(tm.state_since),
        "live": tm.live(now),
        "ready": tm.ready(),
        "connected": tm.connected,
        "time_ms": _ms(now),
        "events_seen": tm.events_seen,
        "transactions": sum(sm.transactions for sm in by_name.values()),
        "records_sent": tm.records_sent,
        "records_acked": tm.records_acked,
        "last_event_ms": _ms(last),
        "milliseconds_since_last_event": None if last is None else max(0, round((now - last) * 1000)),
        "low_watermark_ms": _ms(lw),
        "low_watermark_lag_ms": None if lw is None else max(0, round((now - lw) * 1000)),
        "latency_ms": {
            "commit_to_read": _quantiles(tm.commit_to_read),
            "commit_to_emit": _quantiles(tm.commit_to_emit),
            "commit_to_ack": _quantiles(tm.commit_to_ack),
        },
        "shards": shards,
        "signals": {"refused": tm.signals_refused, "last_refused": tm.last_signal_refusal},
    }
    if getattr(tm, "journal", None) is not None:
        doc["journal"] = tm.journal
    if getattr(tm, "awaiting_journal", None) is not None:
        doc["awaitingJournal"] = tm.awaiting_journal
    return doc
