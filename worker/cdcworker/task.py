"""One worker task: a short router over the stages in ``cdcworker.stages``.

connect -> resume -> hand off -> stream (reconnecting as ``stages.outcomes`` says) -> stop. This
is the edge where I/O happens (gRPC, Kafka, signals); decisions live in the pure modules the
stages call (``offsets.migration`` for where to start, ``source.retry`` for what to retry,
``streaming`` for events -> records).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.events.encoder import new_run_id
from cdcworker.idleprobe import AckCheckpoints, IdleProbe
from cdcworker.kafkaerrors import KafkaAccessError
from cdcworker.offsets import OffsetPartition, OffsetValue, Vgtid
from cdcworker.offsets.lost import lost_reason
from cdcworker.offsets.writes import OffsetExtra, TaskOffsets
from cdcworker.signals.runtime import Extras
from cdcworker.sink import KafkaSink
from cdcworker.stages import connect, handoff, resume, stop, stream
from cdcworker.stages.outcomes import SETUP_FAILURES, Outcome, TaskResult, outcome_of
from cdcworker.stages.stop import write_termination_message
from cdcworker.streaming import StreamProcessor

if TYPE_CHECKING:
    from cdcworker.backfill.taskhandoff import Handoff
    from cdcworker.backfill.vtgate import VTGateClient
    from cdcworker.observability import StageMetrics

__all__ = ["Cancellable", "TaskResult", "WorkerTask"]

log = logging.getLogger(__name__)

# What the stream loop does after each outcome (stages.outcomes); False: leave the loop.
Handler = Callable[["WorkerTask", connect.Connection, stream.Session, StreamProcessor, BaseException], bool]
HANDLERS: dict[Outcome, Handler] = {
    Outcome.HANDOFF: handoff.advance,
    Outcome.REASSIGN: stop.reassign,
    Outcome.STOP: stream.interrupted,
    Outcome.RECONNECT: stream.reconnect,
    Outcome.FAIL: stream.fail,
}


class Cancellable(Protocol):
    """What ``WorkerTask.stop`` cancels: the VStream gRPC call, then the ``ResponseReader`` over it
    (the call's ``cancel()`` returns a bool, the reader's None: neither is used)."""

    def cancel(self) -> object: ...


class WorkerTask:
    """Runs one task until stopped, failed, or a reshard needs a new assignment."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._stop = threading.Event()
        self._stop_reason = ""
        self._call: Cancellable | None = None  # the VStream call, then its ResponseReader: what stop() cancels
        self.checkpoints = AckCheckpoints()  # low watermark notes across the task's streams
        self.processor: StreamProcessor | None = None
        self.sink: KafkaSink | None = None
        self.offsets = TaskOffsets(config.name, self._partition(), self._offset_extra)
        self.inherited: dict[str, OffsetValue] = {}  # TaskStart.inherited: shard -> offset value of another key
        self.restored: OffsetValue | None = None  # the task's own stored OffsetValue, if any
        self.metrics: StageMetrics | None = None
        self.run_id = new_run_id()  # __debezium.context.runId: one per task run, kept across reconnects
        self.rules: tuple[tuple[str, str], ...] = (("/.*", ""),)  # VStream filter rules (filters.vstream_rules)
        self.handoff: Handoff | None = None  # shards held back / catching up for a backfill
        self.probe_client: VTGateClient | None = None  # idleprobe's VTGate client, opened on the first probe
        self.idle_probe: IdleProbe | None = None
        self.decorate: Callable[[Vgtid], Vgtid] | None = None  # Features.decorate: offset fields stored with every position
        self.extras: Extras | None = None  # filters, failure mode, signals, snapshots

    # --- control ----------------------------------------------------------------------------

    def stop(self, reason: str = "stop requested") -> None:
        self._stop_reason = reason
        self._stop.set()
        self.cancel_call()
        sink = self.sink
        if sink is not None:
            sink.interrupt()  # a send waiting for room in a full queue (a broker away) gives up
        extras = self.extras
        if extras is not None:
            extras.interrupt()  # and so does a signal write (relay, backfill forwarder)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` or until stopped (a reconnect's backoff)."""
        self._stop.wait(seconds)

    def set_call(self, call: Cancellable) -> None:
        self._call = call

    def cancel_call(self) -> None:
        call = self._call
        if call is not None:
            call.cancel()

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            self.stop(f"received {signal.Signals(signum).name}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    # --- offsets ----------------------------------------------------------------------------

    def _partition(self) -> OffsetPartition:
        t = self.config.task
        if t.task_key is None:
            return OffsetPartition(self.config.topic_prefix)
        return OffsetPartition.for_task(self.config.topic_prefix, t.task_id, t.task_count, t.generation)

    def _offset_extra(self) -> OffsetExtra:
        return self.handoff.offset_extra() if self.handoff is not None else ()

    # --- the stages ---------------------------------------------------------------------------

    def run(self) -> TaskResult:
        from cdcworker.observability import TaskMetrics, serve

        cfg = self.config
        self.metrics = metrics = TaskMetrics(
            cfg.name, cfg.task.context_task_id, tags=cfg.behaviour.custom_metric_tags, generation=max(cfg.task.generation, 0)
        )
        server = serve(metrics, cfg.behaviour.metrics_port, cfg.behaviour.metrics_address)
        try:
            result = self._run(metrics)
            if result.exit_code == exitcodes.FAILED:
                write_termination_message({"error": result.reason})  # the operator's Failed message
            supervised = os.environ.get(exitcodes.SUPERVISED_ENV) == "1" and not self._stop.is_set()
            if supervised and result.done:
                metrics.set_state("completed", result.reason)
                log.info("%s; waiting to be stopped (supervised: an exit would be restarted)", result.reason)
                self._stop.wait()
            elif supervised and result.exit_code == exitcodes.REASSIGNMENT_NEEDED:
                # Restarted, the worker would resume from its offset (the journal's target shards)
                # and stream them beside the next generation, and the journal would leave its
                # status document: it waits, reporting the journal, until the operator stops it.
                log.info("%s; waiting to be stopped with the journal reported", result.reason)
                self._stop.wait()
        except SETUP_FAILURES as exc:
            # Refused credentials or TLS, a topic Kafka will not create with the configured
            # replication factor, an unreadable stored offset: something to fix, not a bug; no
            # traceback, and the reason goes where the operator reads it (the pod's termination
            # message, then the status).
            metrics.set_state("failed", str(exc))
            write_termination_message({"error": str(exc), **lost_reason(exc)})
            return TaskResult(exitcodes.FAILED, str(exc), None)
        except Exception as exc:
            metrics.set_state("failed", str(exc))
            raise
        finally:
            if server is not None:
                server.stop()
        return result

    def _run(self, metrics: StageMetrics) -> TaskResult:
        conn = connect.connect(self.config)
        refused = False
        try:
            try:
                session = self._start(conn, metrics)
            except InterruptedError:
                if not self._stop.is_set():
                    raise
                return TaskResult(exitcodes.OK, f"{self._stop_reason} while starting: nothing streamed", None)
            while session.result is None and not self._stop.is_set():
                processor = stream.new_processor(self, session)
                try:
                    stream.stream_once(self, conn, session, processor)
                except Exception as exc:
                    outcome = outcome_of(exc)
                    if outcome is None:
                        raise
                    if not HANDLERS[outcome](self, conn, session, processor, exc):
                        break
                finally:
                    self._call = None
            refused = session.refused
            return stop.finish(self, conn, session)
        finally:
            # A refused login (also one met while rewinding or handing off) cannot deliver the offset.
            stop.close(self, conn, refused or isinstance(sys.exc_info()[1], KafkaAccessError))

    def _start(self, conn: connect.Connection, metrics: StageMetrics) -> stream.Session:
        """Connect, resume, hand off: the position the first stream starts from, stored where needed."""
        conn.store.ensure_topic()
        conn.store.load()
        position = resume.resolve_start(self, conn)
        position = handoff.start_handoff(self, position)
        for sg in position:
            metrics.shard(sg.shard, sg.keyspace)
        self.sink = sink = connect.make_sink(self.config, conn.store, self.offsets, position, self._stop.is_set)
        stored_start = resume.is_stored_start(self, position)
        if handoff.handing_off(self):
            handoff.store_handoff(self, conn.store, position)  # states start() created are stored before any hold is announced
        elif self.config.task.per_task and stored_start:
            resume.store_new_key(self, conn, position)
        metrics.set_position_sources(
            read=lambda: self.processor.position if self.processor else position,
            durable=lambda: sink.durable,
        )
        metrics.set_state("snapshotting" if position.copying else "streaming")
        return stream.prepare(self, conn, position, stored_start)
