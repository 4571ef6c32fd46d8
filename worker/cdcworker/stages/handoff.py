"""Hand off: follow the backfills of the progress topic (docs/backfill.md, "Wiring into the worker")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcworker.config import WorkerConfig
from cdcworker.config.clients import channel_settings
from cdcworker.jsontypes import JsonObject
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.store import OffsetStore
from cdcworker.sink import TransactionalSink
from cdcworker.stages.commit import rewind, store_position
from cdcworker.streaming import StreamProcessor

if TYPE_CHECKING:
    from cdcworker.stages.connect import Connection
    from cdcworker.stages.stream import Session
    from cdcworker.task import WorkerTask


def start_handoff(task: WorkerTask, position: Vgtid) -> Vgtid:
    """Follow the backfills of the progress topic: restore the state stored with the offset. A
    connector whose initial snapshot is a backfill (``shardcdc.backfill.initial.run``) starts,
    the first time, at the shards' current positions with every table held for that run."""
    from cdcworker.backfill.catchup import finals_scanner
    from cdcworker.backfill.taskhandoff import (
        INITIAL_RUN_PROPERTY,
        ProgressFeed,
        TaskHandoff,
        inherited_states,
        progress_topic_of,
    )

    cfg = task.config
    feed = ProgressFeed(cfg.kafka.client_config("consumer"), progress_topic_of(cfg.topic_prefix), cfg.source.keyspace)
    stored = task.restored.fields if task.restored is not None else inherited_states(task.inherited)
    task.handoff = handoff = TaskHandoff(feed, stored, scan=finals_scanner(cfg))
    raw = cfg.properties.get(INITIAL_RUN_PROPERTY)
    initial = str(raw) if raw else None
    fresh = initial is not None and all(sg.gtid == "current" for sg in position)
    if fresh:
        position = current_positions(cfg, position)  # a hold begins at a real position
    return handoff.start(position, initial_run=initial, fresh=fresh)


def current_positions(cfg: WorkerConfig, position: Vgtid) -> Vgtid:
    """``position`` with every shard's ``current`` replaced by the shard's position now."""
    from cdcworker.backfill.vtgate import VTGateClient

    client = VTGateClient(channel_settings(cfg), cfg.source.keyspace, cfg.source.tablet_type)
    try:
        return Vgtid(tuple(ShardGtid(sg.keyspace, sg.shard, client.current_position(sg.shard), sg.table_p_ks)
                           for sg in position))
    finally:
        client.close()


def store_handoff(task: WorkerTask, store: OffsetStore, position: Vgtid) -> None:
    """Store ``position`` with the hand-off states now (they must be durable before a ``held``
    marker says so), then announce new holds. Exactly-once: an offset record alone in a Kafka
    transaction (the states would otherwise wait for the next transaction's commit)."""
    handoff = task.handoff
    assert handoff is not None
    if task.metrics is not None:
        # Their low watermark waits for the catch-up; its cap goes into the stored states.
        caps = task.metrics.set_held({s: h.watermark_cap for s, h in handoff.states.items()})
        handoff.keep_watermark_caps(caps)
    if task.decorate is not None:
        position = task.decorate(position)  # the durable position carries the state it stores
    sink = task.sink
    if sink is not None and not isinstance(sink, TransactionalSink):
        sink.set_durable(position)  # a rewound shard is durable only up to its catch-up start
    store_position(task, store, position)
    handoff.fault_point()
    handoff.announce()


def handing_off(task: WorkerTask) -> bool:
    return task.handoff is not None and task.handoff.active


def processor_class(task: WorkerTask) -> type[StreamProcessor]:
    if not handing_off(task):
        return StreamProcessor
    from cdcworker.backfill.catchup import HandoffProcessor

    return HandoffProcessor


def processor_kwargs(task: WorkerTask) -> JsonObject:  # Any: StreamProcessor's keyword arguments
    return {"handoffs": task.handoff.states} if task.handoff is not None and handing_off(task) else {}


def advance(task: WorkerTask, conn: Connection, session: Session, processor: StreamProcessor,
            _exc: BaseException) -> bool:
    """A hand-off state moves on: everything streamed so far goes to Kafka, then the states move
    on and the stream restarts (rewound for a catch-up) with the offset carrying position and state."""
    sink, handoff = task.sink, task.handoff
    assert sink is not None and handoff is not None
    processor.abandon_transaction()
    position = rewind(task, sink, processor)
    sink.flush(task.config.behaviour.shutdown_grace_ms / 1000.0)
    session.position, _ = handoff.advance(position)
    store_handoff(task, conn.store, session.position)
    task.cancel_call()
    return True
