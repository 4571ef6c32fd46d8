"""Resume: where the task starts (its stored offset, the generation before, or the configured start)."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from cdcworker.offsets import Vgtid
from cdcworker.offsets.keys import offset_record_key
from cdcworker.offsets.lost import check_not_lost
from cdcworker.offsets.migration import resolve_task_start
from cdcworker.stages.commit import store_position
from cdcworker.stages.connect import Connection, discover_shards

if TYPE_CHECKING:
    from cdcworker.task import WorkerTask

log = logging.getLogger(__name__)

# uvstreamer.init's refusal of a copy (gtid "") whose filter matches no table.
NOTHING_TO_COPY = "stream needs a position or a table to copy"


def resolve_start(task: WorkerTask, conn: Connection) -> Vgtid:
    """The start position; remembers the task's own stored offset and what it inherits."""
    cfg = task.config
    t = cfg.task
    shards = list(t.shards or cfg.source.shards or discover_shards(conn.channel, cfg, conn.metadata))
    start = resolve_task_start(
        conn.store.lookup(cfg.name),
        server=cfg.topic_prefix,
        keyspace=cfg.source.keyspace,
        shards=shards,
        task_id=t.task_id if t.per_task else None,
        task_count=t.task_count,
        gen=t.generation,
        prev_task_count=t.prev_task_count,
        vgtid_setting=cfg.source.start_gtid,
        chain=t.history or None,  # unset: Debezium's rule
    )
    # Positions the operator saw stored are gone: stop rather than start over (issue 28, case 7).
    check_not_lost(start.sources, expected=t.offsets_expected, connector_name=cfg.name,
                   key=offset_record_key(cfg.name, task.offsets.partition).decode(), topic=cfg.kafka.offsets_topic)
    log.info("starting from %s (%s)", start.vgtid.to_json(), start.sources)
    task.restored = start.stored  # transaction metadata resumes from the task's own offset
    task.inherited = start.inherited
    return start.vgtid


def is_stored_start(task: WorkerTask, position: Vgtid) -> bool:
    """A start the task has no offset of its own for, at named positions (none "current")."""
    return task.restored is None and not any(sg.gtid == "current" for sg in position)


def store_new_key(task: WorkerTask, conn: Connection, position: Vgtid) -> None:
    """No offset under this task's key yet (a new generation, or the first start): store where it
    starts now. The next generation needs every key of this one, and a task whose shards stay idle
    would otherwise never write its own (Debezium's "No offset found" after two scale changes of a
    quiet keyspace). "current" is stored once the stream names the position (VTGate sends it at once)."""
    task.offsets.forget()
    store_position(task, conn.store, position)


def without_empty_copies(position: Vgtid) -> Vgtid:
    """``position`` with every shard whose copy has not begun (gtid "", no table lastpk) at "current"."""
    return Vgtid(tuple(dataclasses.replace(sg, gtid="current") if sg.gtid == "" and not sg.table_p_ks else sg
                       for sg in position))
