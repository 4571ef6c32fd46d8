"""Stream: one VStream connection at a time, records to Kafka, offsets flushed on the way."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from cdcworker import exitcodes
from cdcworker.config.clients import channel_settings, encoder_config
from cdcworker.config.model import SnapshotMode
from cdcworker.events import EncoderConfig
from cdcworker.features import build_features
from cdcworker.filters import AnonymisedColumns
from cdcworker.idleprobe import IdleProbe
from cdcworker.journals import JournalProgress, names
from cdcworker.kafkaerrors import KafkaAccessError
from cdcworker.offsets import Vgtid
from cdcworker.signals.runtime import TaskExtras
from cdcworker.sink import KafkaSink
from cdcworker.source.reader import END, IDLE, ResponseReader
from cdcworker.source.retry import JOURNAL_PARTICIPANTS_MESSAGE, Backoff, classify
from cdcworker.stages import handoff
from cdcworker.stages.commit import flush_offsets, next_flush_at, rewind, store_position
from cdcworker.stages.connect import Connection, vstream_request
from cdcworker.stages.outcomes import StreamEnded, TaskResult
from cdcworker.stages.resume import NOTHING_TO_COPY, without_empty_copies
from cdcworker.streaming import Features, StreamProcessor

if TYPE_CHECKING:
    from cdcworker.observability import StageMetrics
    from cdcworker.task import WorkerTask

log = logging.getLogger(__name__)

SNAPSHOT_DONE = "snapshot.mode=initial_only: the initial snapshot completed"


@dataclass
class Session:
    """What the streaming loop keeps across reconnects."""

    position: Vgtid
    features: Features
    encoder: EncoderConfig
    backoff: Backoff
    probe: IdleProbe | None
    copy_only: bool  # snapshot.mode=initial_only: copy, store the position, stop before any change
    # Per-task mode: a journal may name shards another task holds; stop at it instead of letting
    # VTGate fail the stream (Debezium's endless retry loop). A single task stops too: VTGate could
    # follow the journal for it, but the operator plans the shards of every generation and would
    # wait for a journal that is never reported.
    journal_stops: bool
    # Per-task mode: the source shards of a reshard that delivered its journal while the task's
    # other source shards of it stream on (cdcworker.journals).
    journals: JournalProgress = field(default_factory=JournalProgress)
    result: TaskResult | None = None
    refused: bool = False  # the cluster refused the login or certificate mid-stream (KafkaAccessError)
    next_flush: float = 0.0


def prepare(task: WorkerTask, conn: Connection, position: Vgtid, stored_start: bool) -> Session:
    """Transaction metadata, heartbeats, schema changes, signals and filters: built once, kept across reconnects."""
    cfg, metrics, sink = task.config, task.metrics, task.sink
    assert metrics is not None and sink is not None
    restored = task.restored.fields if task.restored else None
    features = build_features(cfg, position, restored, metrics.low_watermark)
    task.extras = extras = TaskExtras.build(
        cfg,
        encoder_config(cfg, task.run_id),
        lambda req: conn.stub.VStream(req, metadata=conn.metadata),
        lambda: [sg.shard for sg in (task.processor.position if task.processor else position)],
        metrics,
    )
    extras.install(features)
    # Interrupted ad-hoc snapshots and the signal channel's position, from the task's own offset
    # or (a new generation) from those its shards come from.
    extras.restore(restored, {s: v.fields for s, v in task.inherited.items()})
    task.decorate = features.decorate
    if task.decorate is not None and sink.durable is not None:
        # What was restored is durable already: an abort before the first commit goes back to it,
        # not to a position without it (TaskExtras.on_abort).
        sink.set_durable(task.decorate(sink.durable))
    if task.decorate is not None and stored_start and (cfg.task.per_task or handoff.handing_off(task)):
        # A new task key stored its start before the state it takes over was known: store it
        # again with that state, or a restart before the next offset flush loses it.
        task.offsets.forget()
        store_position(task, conn.store, position)
    sink.on_error = extras.failures.on_delivery_error  # records the broker refuses as too large
    task.rules = extras.rules()
    # VTGate heartbeats come only while the stream is idle: each asks for proof that the idle
    # shards are caught up, which moves their low watermark (idleprobe).
    probe = task.idle_probe = idle_probe(task, metrics, sink) if cfg.source.heartbeat_interval_seconds > 0 else None
    b = cfg.behaviour
    session = Session(
        position, features, extras.encoder,
        Backoff(initial_ms=max(50, min(b.retriable_restart_wait_ms, 1000)), max_ms=b.retry_backoff_max_ms,
                max_retries=b.errors_max_retries),
        probe, cfg.source.snapshot_mode is SnapshotMode.INITIAL_ONLY, cfg.task.per_task, next_flush=next_flush_at(task))
    if session.copy_only and not position.copying:
        session.result = TaskResult(exitcodes.OK, SNAPSHOT_DONE + " earlier (stored offset)", position, done=True)
    return session


def idle_probe(task: WorkerTask, metrics: StageMetrics, sink: KafkaSink) -> IdleProbe:
    """The low watermark's proof for idle shards, reading each shard's PRIMARY position."""
    from cdcworker.backfill.vtgate import VTGateClient

    cfg = task.config
    client = task.probe_client = VTGateClient(channel_settings(cfg), cfg.source.keyspace, "PRIMARY")
    interval = max(1.0, cfg.source.heartbeat_interval_seconds)

    def positions(shards: Sequence[str]) -> dict[str, str]:
        out = {}
        for s in shards:
            try:
                out[s] = client.current_position(s, timeout=max(2.0, interval))
            except Exception as exc:  # this shard is not proven; the others may be
                log.debug("idle probe: %s: %s", s, exc)
        return out

    return IdleProbe(positions, lambda: sink.durable, metrics.mark_idle, interval=interval)


def _on_heartbeat(metrics: StageMetrics, probe: IdleProbe | None, ev: Any) -> None:  # Any: a VEvent (upb or raw)
    metrics.on_heartbeat(ev.timestamp)
    if probe is not None:
        probe.request()


def new_processor(task: WorkerTask, session: Session) -> StreamProcessor:
    cfg, handing, metrics = task.config, handoff.handing_off(task), task.metrics
    assert task.sink is not None and metrics is not None
    task.processor = handoff.processor_class(task)(
        session.encoder,
        task.sink,
        session.position,
        **handoff.processor_kwargs(task),
        lookahead_rows=cfg.behaviour.max_queue_size if not handing else 1 << 30,
        max_queue_bytes=cfg.behaviour.max_queue_size_in_bytes if not handing else 0,
        journal_stops=session.journal_stops,
        journals=session.journals if session.journal_stops else None,
        metrics=metrics,
        on_heartbeat=functools.partial(_on_heartbeat, metrics, session.probe),
        features=session.features,
    )
    return task.processor


def stream_once(task: WorkerTask, conn: Connection, session: Session, processor: StreamProcessor) -> None:
    """One VStream connection until it ends: returns on a stop or a finished copy (initial_only),
    raises what ended it otherwise (``outcomes``)."""
    cfg, sink, metrics, extras = task.config, task.sink, task.metrics, task.extras
    assert sink is not None and metrics is not None and extras is not None
    # Parsed responses while handing off: the hand-off processor reads FIELD events.
    stream_fn = conn.stub.VStream if handoff.handing_off(task) else conn.vstream
    # Source shards that delivered a reshard journal stay out: they are never read past it.
    request = vstream_request(cfg, session.journals.streamed(session.position), session.journal_stops, task.rules)
    call = stream_fn(request, metadata=conn.metadata)
    task.set_call(call)
    responses = ResponseReader(call, max_bytes=cfg.behaviour.max_queue_size_in_bytes)
    task.set_call(responses)  # cancels the call and wakes its reader
    flush_every = min(cfg.kafka.offset_flush_interval_ms / 1000.0, 0.2)
    while True:
        # A timed wait, so offsets are flushed (and EOS batches committed) while idle; short
        # while an exactly-once commit point waits for the stream to pause.
        item = responses.next(timeout=0.005 if extras.busy or sink.commit_pending else flush_every)
        metrics.beat()
        extras.poll(processor)
        if item is IDLE:
            if task.stopping:
                # stop() cancelled the call, but its reader thread can miss that and wait in gRPC
                # for ever (seen once in a full-suite run: every thread's stack showed it). Leave
                # the stream as the CANCELLED error would.
                raise StreamEnded()
            sink.on_idle()
            if session.features.heartbeats is not None:
                processor.tick()  # idle: heartbeats still go out
        elif item is END:
            if not task.stopping:
                raise StreamEnded()
            return
        elif isinstance(item, BaseException):
            raise item
        elif _process(task, session, processor, item):
            responses.cancel()  # every shard's copy ended at this commit point
            return
        if time.monotonic() >= session.next_flush:
            flush_offsets(task, conn.store, processor, session.probe)
            session.next_flush = next_flush_at(task)


def _process(task: WorkerTask, session: Session, processor: StreamProcessor, item: object) -> bool:  # a response (bytes or upb), handed to the processor
    """One response; True when an initial_only copy finished at it."""
    metrics = task.metrics
    assert metrics is not None
    if not metrics.connected:
        metrics.set_connected(True)
    processor.process(item)
    if processor.stats.transactions:
        session.backoff.reset()
    if session.copy_only and not processor.position.copying:
        session.result = TaskResult(exitcodes.OK, SNAPSHOT_DONE, processor.position, done=True)
        return True
    if metrics.state != "streaming" and not processor.position.copying:
        # Copy finished or reconnected: the operator's Ready waits for this.
        metrics.set_state("streaming")
    return False


def reconnect(task: WorkerTask, _conn: Connection, session: Session, processor: StreamProcessor,
              exc: BaseException) -> bool:
    """The stream broke: rewind to what the producer holds and reconnect after a backoff, or fail
    (not retriable, or out of retries). False: leave the loop."""
    metrics, sink = task.metrics, task.sink
    assert metrics is not None and sink is not None
    metrics.set_connected(False)
    processor.abandon_transaction()
    session.position = position = rewind(task, sink, processor)
    undone = session.journals.rewound(position)
    if undone:  # /status shows what is still done
        metrics.awaiting_journal = session.journals.report() if session.journals.done else None
        log.info("reshard journal: %s resume before the journal again (the Kafka transaction was aborted); "
                 "streaming them up to it again", names(undone))
    if task.stopping:
        return False
    if isinstance(exc, grpc.RpcError) and NOTHING_TO_COPY in (exc.details() or ""):
        fresh = without_empty_copies(position)
        if fresh != position:
            # The filter matches no table yet: an empty snapshot, so stream on from the shards'
            # current positions (tables created later are picked up). VTGate would refuse the same
            # request again and again (as Debezium's connector then retries forever).
            log.info("no table matches the filter, nothing to snapshot: streaming from the current "
                     "positions of %s", ", ".join(sg.shard for sg in position if sg not in fresh))
            session.position = fresh
            if session.copy_only:
                session.result = TaskResult(exitcodes.OK, SNAPSHOT_DONE, fresh, done=True)
            return True
    # Every stream that broke under us, retriable or not (shardcdc_stream_errors_total).
    code = exc.code().name if isinstance(exc, grpc.RpcError) else "EOF"
    metrics.on_error(code)
    if isinstance(exc, grpc.RpcError):
        details = (exc.details() if hasattr(exc, "details") else str(exc)) or ""
        follows = session.journal_stops and (
            JOURNAL_PARTICIPANTS_MESSAGE not in details or session.journals.participants_error())
        verdict = classify(exc, follows_journals=follows)
        if not verdict.retriable:
            session.result = TaskResult(exitcodes.FAILED, verdict.reason, position)
            return False
        reason = verdict.reason
    else:
        reason = str(exc) if isinstance(exc, AnonymisedColumns) else "VTGate ended the stream"
    backoff = session.backoff
    if backoff.exhausted():
        limit = f"errors.max.retries={task.config.behaviour.errors_max_retries}"
        session.result = TaskResult(exitcodes.FAILED, f"giving up after {backoff.attempts} retries ({limit}): {reason}", position)
        return False
    metrics.on_reconnect(code)
    metrics.set_state("reconnecting", reason)
    delay = backoff.next_delay()
    log.warning("VStream interrupted (%s); reconnecting from %s in %.2fs", reason, position.to_json(), delay)
    task.wait(delay)
    return True


def fail(_task: WorkerTask, _conn: Connection, session: Session, processor: StreamProcessor, exc: BaseException) -> bool:
    """Broken input, a refused record, an event that cannot be converted: the task fails."""
    session.result = TaskResult(exitcodes.FAILED, str(exc), processor.position)
    session.refused = isinstance(exc, KafkaAccessError)
    return True  # the loop ends on the result


def interrupted(task: WorkerTask, _conn: Connection, _session: Session, processor: StreamProcessor,
                exc: BaseException) -> bool:
    """Stopped while Kafka's queue was full: what is in flight is flushed within the shutdown
    grace; the stored offset stays at the durable position (the flush never commits part of a
    Vitess transaction). Not stopping: a bug, re-raised."""
    if not task.stopping:
        raise exc
    processor.abandon_transaction()
    return False
