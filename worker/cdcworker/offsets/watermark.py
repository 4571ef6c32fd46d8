"""The low watermark's step at each offset flush: which shards' commits are now durable.

The periodic flush stores the durable position (``offsets.writes``); this tells the metrics how
far each shard's commits are durable, so ``shardcdc_low_watermark`` moves (docs/observability.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcworker.offsets.vgtid import Vgtid

if TYPE_CHECKING:
    from cdcworker.idleprobe import AckCheckpoints
    from cdcworker.observability import StageMetrics


def note_durable(metrics: StageMetrics, checkpoints: AckCheckpoints, read: Vgtid, durable: Vgtid | None,
                 committed: bool) -> None:
    """``read``: the stream's position; ``durable``: what Kafka holds; ``committed``: the stream
    has seen a commit. All read is durable: every shard's last commit is acknowledged; else (under
    load) the commits noted at an earlier flush that are durable now."""
    if durable is read and committed:
        for sm in metrics.shards:
            if sm.last_commit_ts is not None and checkpoints.current(sm.name, sm.transactions):
                sm.on_ack(sm.last_commit_ts)
        return
    acked = checkpoints.flush(read, durable, {sm.name: (sm.last_commit_ts, sm.transactions) for sm in metrics.shards})
    for shard, ts in acked.items():
        metrics.durable_through(shard, ts)
