"""Commit: store the durable position (each offset flush, a hand-off, a stop) and move the watermark."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from cdcworker.offsets import Vgtid
from cdcworker.offsets.store import OffsetStore
from cdcworker.offsets.watermark import note_durable
from cdcworker.sink import KafkaSink, TransactionalSink
from cdcworker.stages.outcomes import HandoffChange
from cdcworker.streaming import StreamProcessor

if TYPE_CHECKING:
    from cdcworker.idleprobe import IdleProbe
    from cdcworker.task import WorkerTask


def store_position(task: WorkerTask, store: OffsetStore, position: Vgtid) -> None:
    """Store ``position`` under the task's key now and wait for it. Exactly-once: an offset
    record alone in a Kafka transaction (offsets otherwise only travel with records)."""
    if task.decorate is not None:
        position = task.decorate(position)  # ad-hoc snapshots and signal positions go along
    sink = task.sink
    if isinstance(sink, TransactionalSink):
        sink.commit_point(dataclasses.replace(position))  # a new object: commit() skips the durable one
        sink.commit()
    else:
        task.offsets.write(store, position)


def rewind(task: WorkerTask, sink: KafkaSink, processor: StreamProcessor) -> Vgtid:
    """``sink.rewind``; an aborted Kafka transaction also undid ad-hoc snapshot records and the
    signal positions sealed with them, so snapshots and signal channels start over from the
    committed offset's state, as the live stream does."""
    aborts = sink.aborts
    position: Vgtid = sink.rewind(processor.position)
    if sink.aborts != aborts:
        if task.extras is not None:
            task.extras.on_abort(sink.durable)
        if task.metrics is not None:
            # The commit times read so far lie past where the stream resumes (low watermark).
            task.checkpoints.rewound({sm.name: sm.transactions for sm in task.metrics.shards})
    return position


def flush_offsets(task: WorkerTask, store: OffsetStore, processor: StreamProcessor, probe: IdleProbe | None) -> None:
    """The periodic offset flush: queue the durable position's write, move the low watermark,
    and restart the stream when a backfill hand-off state moves on (``HandoffChange``)."""
    sink, metrics = task.sink, task.metrics
    assert sink is not None and metrics is not None
    durable = sink.durable_position()
    metrics.records_sent, metrics.records_acked = sink.records_sent, sink.records_sent - sink.pending
    task.offsets.write(store, durable, wait=False)
    note_durable(metrics, task.checkpoints, processor.position, durable, bool(processor.stats.last_commit_ts))
    metrics.on_offsets_flushed()
    if probe is not None:
        probe.request()  # a quiet shard beside busy ones (rate-limited)
    if task.handoff is not None and task.handoff.pending(durable):
        raise HandoffChange()


def next_flush_at(task: WorkerTask) -> float:
    return time.monotonic() + task.config.kafka.offset_flush_interval_ms / 1000.0
