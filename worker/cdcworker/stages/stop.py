"""Stop: flush, store the durable position (never past what Kafka holds), report, close."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING

from cdcworker import exitcodes
from cdcworker.jsontypes import JsonMapping
from cdcworker.offsets import Vgtid
from cdcworker.offsets.store import OffsetStoreError
from cdcworker.sink import SinkError
from cdcworker.stages.commit import store_position
from cdcworker.stages.outcomes import TaskResult
from cdcworker.streaming import ReassignmentNeeded, StreamProcessor

if TYPE_CHECKING:
    from cdcworker.observability import StageMetrics
    from cdcworker.stages.connect import Connection
    from cdcworker.stages.stream import Session
    from cdcworker.task import WorkerTask

log = logging.getLogger(__name__)

STATES = {exitcodes.OK: "stopped", exitcodes.REASSIGNMENT_NEEDED: "reassignment_needed"}


def reassign(task: WorkerTask, conn: Connection, session: Session, _processor: StreamProcessor,
             exc: BaseException) -> bool:
    """A reshard journal: its target positions are what the next generation starts from, stored
    before exiting, in exactly-once mode too (no records carry them), with the ad-hoc snapshot and
    signal state (``store_position`` decorates them)."""
    assert isinstance(exc, ReassignmentNeeded) and task.sink is not None and task.metrics is not None
    task.sink.flush()
    store_position(task, conn.store, exc.vgtid)
    report_journal(task.metrics, exc)
    session.result = TaskResult(exitcodes.REASSIGNMENT_NEEDED, str(exc), exc.vgtid)
    return True


def finish(task: WorkerTask, conn: Connection, session: Session) -> TaskResult:
    """Flush what is in flight within the shutdown grace and store the durable position."""
    sink, metrics, result = task.sink, task.metrics, session.result
    assert sink is not None and metrics is not None
    grace = task.config.behaviour.shutdown_grace_ms / 1000.0
    grace_end = time.monotonic() + grace
    durable: Vgtid | None
    try:
        # Refused access: nothing more reaches Kafka (the flush would wait out the grace).
        durable = sink.durable if session.refused else sink.flush(grace)
    except SinkError as exc:  # refused records: nothing from them on is durable
        durable = sink.durable
        if result is None or result.exit_code == exitcodes.OK:
            # Also after a finished snapshot (initial_only): its last records are not all in
            # Kafka, so it is not done; a restart resumes it from the durable position.
            result = TaskResult(exitcodes.FAILED, str(exc), durable)
    if session.refused:
        # The offsets topic refuses this login or certificate too: the stored offset stays the
        # last one written (never past what Kafka holds), and the next start, with the settings
        # fixed, sends the records after it again.
        log.error("%s; the stored offset stays where it was last written", result.reason if result else "")
    elif result is None or result.exit_code != exitcodes.REASSIGNMENT_NEEDED:
        result = _store_final(task, conn, durable, result, grace_end)
    if result is None:
        result = TaskResult(exitcodes.OK, task.stop_reason or "stopped", durable)
    metrics.set_state(STATES.get(result.exit_code, "failed"), result.reason)
    return result


def _store_final(task: WorkerTask, conn: Connection, durable: Vgtid | None, result: TaskResult | None,
                 grace_end: float) -> TaskResult | None:
    try:
        # A stop has the shutdown grace in all (Kubernetes kills the pod after it).
        task.offsets.write(conn.store, durable, timeout=max(0.5, grace_end - time.monotonic())
                           if task.stopping else None)
    except OffsetStoreError as exc:
        if not task.stopping:
            raise
        # Kafka is away: the stored offset stays older than what Kafka holds, so the next start
        # sends some records again and loses none.
        if result is None or result.exit_code == exitcodes.OK:
            return TaskResult(exitcodes.FAILED, f"stopped without storing the offset ({exc}); the next start "
                              "resumes from the last stored offset and sends the records after it again", durable)
    return result


def close(task: WorkerTask, conn: Connection, refused: bool) -> None:
    """Close what the task opened. A stop already waited for its offset write (within the grace):
    nothing left to wait for; a refused login cannot deliver it."""
    for part in (task.idle_probe, task.probe_client, task.extras, task.handoff):
        if part is not None:
            part.close()
    conn.close(1.0 if task.stopping or refused else None)


def report_journal(metrics: StageMetrics, exc: ReassignmentNeeded) -> None:
    """Tell the operator where the reshard leads: in /status and in the pod's termination message."""
    journal = {
        "participants": sorted(p.shard for p in exc.journal.participants),
        "positions": [{"shard": g.shard, "gtid": g.gtid} for g in exc.journal.shard_gtids],
    }
    metrics.journal = journal
    metrics.awaiting_journal = None
    write_termination_message({"journal": journal})


def write_termination_message(doc: JsonMapping) -> None:  # Any: a JSON document
    """The pod's termination message (``terminationMessagePath``), read by the operator."""
    path = os.environ.get("SHARDCDC_TERMINATION_LOG", "/dev/termination-log")
    try:
        with open(path, "w") as fh:
            json.dump(doc, fh)
    except OSError:
        log.debug("no termination log at %s", path)
