"""One worker task: resolve the start position, stream, produce, and store offsets.

This is the edge where I/O happens (gRPC, Kafka, signals); decisions live in the pure modules it
calls (``offsets.migration`` for where to start, ``source.retry`` for what to retry,
``streaming`` for events → records).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig, TopicNaming, TypeOptions, producer_partitioner_config
from cdcworker.events.encoder import context_headers, new_run_id
from cdcworker.features import build_features, tx_block_schema
from cdcworker.filters import AnonymisedColumns, EventConversionError
from cdcworker.idleprobe import AckCheckpoints, IdleProbe
from cdcworker.kafkaerrors import KafkaSettingError
from cdcworker.nativesink import sink_classes
from cdcworker.offsets import OffsetPartition, Vgtid
from cdcworker.offsets.keys import offset_record_key
from cdcworker.offsets.lost import check_not_lost, lost_reason
from cdcworker.offsets.migration import StoredOffsetError, resolve_task_start
from cdcworker.offsets.store import KafkaAccessError, OffsetStore, OffsetStoreError
from cdcworker.offsets.value import offset_value_at
from cdcworker.signals.runtime import TaskExtras
from cdcworker.sink import KafkaSink, SinkError, TransactionalSink
from cdcworker.source.channel import ChannelSettings, TlsSettings, open_channel
from cdcworker.source.reader import END as _END
from cdcworker.source.reader import IDLE as _IDLE
from cdcworker.source.reader import ResponseReader as _ResponseReader
from cdcworker.source.retry import Backoff, classify
from cdcworker.source.shards import serving_shards
from cdcworker.streaming import ProtocolError, ReassignmentNeeded, StreamProcessor, raw_responses
from cdcworker.topiccreator import topic_creator
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskResult:
    exit_code: int
    reason: str
    position: Vgtid | None
    done: bool = False  # the task's work is finished (snapshot.mode=initial_only): nothing to restart



# uvstreamer.init's refusal of a copy (gtid "") whose filter matches no table.
NOTHING_TO_COPY = "stream needs a position or a table to copy"


def _without_empty_copies(position: Vgtid) -> Vgtid:
    """``position`` with every shard whose copy has not begun (gtid "", no table lastpk) at "current"."""
    return Vgtid(tuple(dataclasses.replace(sg, gtid="current") if sg.gtid == "" and not sg.table_p_ks else sg
                       for sg in position))


def channel_settings(config: WorkerConfig) -> ChannelSettings:
    src = config.source
    tls = None
    if src.tls.enabled:
        from pathlib import Path

        tls = TlsSettings(
            ca_file=Path(src.tls.ca_file) if src.tls.ca_file else None,
            cert_file=Path(src.tls.cert_file) if src.tls.cert_file else None,
            key_file=Path(src.tls.key_file) if src.tls.key_file else None,
            server_name=src.tls.server_name,
        )
    return ChannelSettings(
        target=src.address,
        tls=tls,
        user=src.user,
        password=src.password.reveal() if src.password else None,
        headers=src.grpc_headers,
        max_inbound_message_size=src.max_inbound_message_size,
        keepalive_ms=src.keepalive_interval_ms or 0,
    )


def encoder_config(config: WorkerConfig, run_id: str | None = None) -> EncoderConfig:
    b = config.behaviour
    naming = TopicNaming.from_strategy(
        config.topic_prefix,
        config.topics.naming_strategy,
        config.topics.delimiter,
        config.topics.data_change_prefix if config.topics.table_naming else None,
    )
    headers: tuple[tuple[str, bytes], ...] = ()
    if b.extended_headers_enabled:
        headers = tuple(context_headers(config.topic_prefix, config.task.context_task_id, run_id=run_id or new_run_id()))
    return EncoderConfig(
        logical_name=config.topic_prefix,
        naming=naming,
        types=TypeOptions(
            decimal_handling_mode=b.decimal_handling_mode,
            time_precision_mode=b.time_precision_mode,
            bigint_unsigned_handling_mode=b.bigint_unsigned_handling_mode,
            binary_handling_mode=b.binary_handling_mode,
            include_unknown_datatypes=b.include_unknown_datatypes,
        ),
        key_schemas_enable=config.converters.key_schemas_enable,
        value_schemas_enable=config.converters.value_schemas_enable,
        tombstones_on_delete=b.tombstones_on_delete,
        replace_null_with_default=config.converters.value_replace_null_with_default,
        headers=headers,
        tx_block_schema=tx_block_schema(config),
    )


def producer_config(config: WorkerConfig) -> dict[str, Any]:
    """librdkafka settings: idempotent, ordered, partitioned like the Java client, bounded memory."""
    conf: dict[str, Any] = {
        "enable.idempotence": True,
        "acks": "all",
        # Throughput without hurting latency: 5 ms of linger, large batches, and lz4. Debezium's
        # values repeat their schema in every record, so lz4 shrinks a batch ~10x for little CPU,
        # spent on librdkafka's own thread (no GIL): the broker then writes, copies and checksums a
        # tenth of the bytes and acks sooner (BENCHMARKS.md, fifth measurement).
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": max(config.behaviour.max_queue_size * 4, 10_000),
        # librdkafka's buffer is the worker's largest memory user (its copies of the records, on
        # the producing thread's heap). 16 MiB holds ~150 ms of records at 100,000 rows/s, enough
        # to keep 1 MB batches flowing, and keeps the peak RSS near 120-130 MB while a 1,000,000-row
        # transaction streams (64 MiB: 175-230 MB, no faster; BENCHMARKS.md, "Worker latency and memory").
        "queue.buffering.max.kbytes": 16384,
        **producer_partitioner_config(),
    }
    conf.update(config.kafka.client_config("producer"))
    return conf


def discover_shards(channel: grpc.Channel, config: WorkerConfig, metadata: tuple[tuple[str, str], ...]) -> list[str]:
    """Serving shards of the keyspace via ``SHOW VITESS_SHARDS`` (as Debezium's VitessMetadata)."""
    return serving_shards(channel, config.source.keyspace, metadata)


def _on_heartbeat(metrics: Any, probe: IdleProbe | None, ev: Any) -> None:
    metrics.on_heartbeat(ev.timestamp)
    if probe is not None:
        probe.request()


class WorkerTask:
    """Runs one task until stopped, failed, or a reshard needs a new assignment."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._stop = threading.Event()
        self._checkpoints = AckCheckpoints()  # low watermark notes across the task's streams
        self._stop_reason = ""
        self._call: Any = None
        self.processor: StreamProcessor | None = None
        self.sink: KafkaSink | None = None
        self._last_written: Any = None
        self._inherited: dict[str, Any] = {}  # TaskStart.inherited: shard -> offset value of another key
        self._offset_writes: _OffsetWrites | None = None  # queued periodic offset writes
        self._restored: Any = None  # the task's own stored OffsetValue, if any
        self.metrics: Any = None
        self.run_id = new_run_id()
        self._rules: tuple[tuple[str, str], ...] = (("/.*", ""),)  # VStream filter rules (filters.vstream_rules)
        self.handoff: Any = None  # backfill.taskhandoff.TaskHandoff: shards held back / catching up for a backfill
        self._last_extra: tuple[tuple[str, Any], ...] = ()
        self._probe_client: Any = None  # idleprobe's VTGate client, opened on the first probe
        self.idle_probe: IdleProbe | None = None
        self._decorate: Any = None  # Features.decorate: offset fields stored with every position
        self.extras: Any = None  # signals.runtime.TaskExtras: filters, failure mode, signals, snapshots  # __debezium.context.runId: one per task run, kept across reconnects

    # --- control ----------------------------------------------------------------------------

    def stop(self, reason: str = "stop requested") -> None:
        self._stop_reason = reason
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        sink = self.sink
        if sink is not None:
            sink.interrupt()  # a send waiting for room in a full queue (a broker away) gives up
        extras = self.extras
        if extras is not None:
            extras.interrupt()  # and so does a signal write (relay, backfill forwarder)

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

    def _offset_value(self, position: Vgtid) -> Any:
        """``offset_value_at`` plus the backfill hand-off state while there is one (docs/backfill.md)."""
        extra = self.handoff.offset_extra() if self.handoff is not None else ()
        value = offset_value_at(position)
        return value.with_fields(extra) if extra else value

    def _write_offset(self, store: OffsetStore, position: Vgtid, wait: bool = True, timeout: float | None = None) -> None:
        """Store ``position`` (already durable in Kafka). ``wait=False``: the periodic flush queues
        the record and goes on streaming (``_OffsetWrites``); every other write waits for the ack
        (at most ``timeout`` seconds when given, else the store's timeout)."""
        if isinstance(self.sink, TransactionalSink):
            return  # offsets are committed inside the Kafka transactions
        writes = self._offset_writes
        if writes is None or writes.store is not store:
            writes = self._offset_writes = _OffsetWrites(store)
        extra = self.handoff.offset_extra() if self.handoff is not None else ()
        if position is None or (
            # Equal VGTIDs may still differ in offset fields (an ad-hoc snapshot's progress).
            position == self._last_written and offset_value_at(position) == offset_value_at(self._last_written)
            and extra == self._last_extra
        ):
            if wait:
                writes.drain(timeout)  # a stop: the last queued write has landed before the task ends
            else:
                writes.check()
            return
        if wait:
            writes.drain(timeout)  # an older queued write must not land after this one
            store.write(self.config.name, self._partition(), self._offset_value(position), timeout)
        elif not writes.queue(self.config.name, self._partition(), self._offset_value(position)):
            return  # not queued (a full local queue): a later flush or the stop writes it
        self._last_written = position
        self._last_extra = extra

    def _rewind(self, sink: KafkaSink, processor: Any) -> Any:
        """``sink.rewind``; an aborted Kafka transaction also undid ad-hoc snapshot records and the
        signal positions sealed with them, so snapshots and signal channels start over from the
        committed offset's state, as the live stream does."""
        aborts = sink.aborts
        position = sink.rewind(processor.position)
        if sink.aborts != aborts:
            if self.extras is not None:
                self.extras.on_abort(sink.durable)
            if self.metrics is not None:
                # The commit times read so far lie past where the stream resumes (low watermark).
                self._checkpoints.rewound({sm.name: sm.transactions for sm in self.metrics.shards})
        return position

    def _resolve_start(self, store: OffsetStore, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> Vgtid:
        cfg = self.config
        shards = list(cfg.task.shards or cfg.source.shards or discover_shards(channel, cfg, metadata))
        t = cfg.task
        start = resolve_task_start(
            store.lookup(cfg.name),
            server=cfg.topic_prefix,
            keyspace=cfg.source.keyspace,
            shards=shards,
            task_id=t.task_id if t.per_task else None,
            num_tasks=t.task_count,
            gen=t.generation,
            prev_num_tasks=t.prev_count,
            vgtid_setting=cfg.source.start_gtid,
            chain=t.history or None,  # unset: Debezium's rule
        )
        # Positions the operator saw stored are gone: stop rather than start over (issue 28, case 7).
        check_not_lost(start.sources, expected=t.offsets_expected, connector_name=cfg.name,
                       key=offset_record_key(cfg.name, self._partition()).decode(), topic=cfg.kafka.offsets_topic)
        log.info("starting from %s (%s)", start.vgtid.to_json(), start.sources)
        self._restored = start.stored  # transaction metadata resumes from the task's own offset
        self._inherited = start.inherited
        return start.vgtid

    # --- backfill hand-off (docs/backfill.md, "Wiring into the worker") -------------------------

    def _start_handoff(self, position: Vgtid) -> Vgtid:
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

        cfg = self.config
        feed = ProgressFeed(cfg.kafka.client_config("consumer"), progress_topic_of(cfg.topic_prefix), cfg.source.keyspace)
        stored = self._restored.fields if self._restored is not None else inherited_states(self._inherited)
        self.handoff = TaskHandoff(feed, stored, scan=finals_scanner(cfg))
        initial = cfg.properties.get(INITIAL_RUN_PROPERTY) or None
        fresh = initial is not None and all(sg.gtid == "current" for sg in position)
        if fresh:
            position = self._current_positions(position)  # a hold begins at a real position
        return self.handoff.start(position, initial_run=initial, fresh=fresh)

    def _idle_probe(self, metrics: Any, sink: KafkaSink) -> IdleProbe:
        """The low watermark's proof for idle shards, reading each shard's PRIMARY position."""
        from cdcworker.backfill.vtgate import VTGateClient

        cfg = self.config
        client = self._probe_client = VTGateClient(channel_settings(cfg), cfg.source.keyspace, "PRIMARY")
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

    def _current_positions(self, position: Vgtid) -> Vgtid:
        """``position`` with every shard's ``current`` replaced by the shard's position now."""
        from cdcworker.backfill.vtgate import VTGateClient
        from cdcworker.offsets import ShardGtid

        cfg = self.config
        client = VTGateClient(channel_settings(cfg), cfg.source.keyspace, cfg.source.tablet_type)
        try:
            return Vgtid(tuple(ShardGtid(sg.keyspace, sg.shard, client.current_position(sg.shard), sg.table_p_ks)
                               for sg in position))
        finally:
            client.close()

    def _store_handoff(self, store: OffsetStore, position: Vgtid) -> None:
        """Store ``position`` with the hand-off states now (they must be durable before a ``held``
        marker says so), then announce new holds. Exactly-once: an offset record alone in a Kafka
        transaction (the states would otherwise wait for the next transaction's commit)."""
        if self.metrics is not None:
            # Their low watermark waits for the catch-up; its cap goes into the stored states.
            caps = self.metrics.set_held({s: h.watermark_cap for s, h in self.handoff.states.items()})
            self.handoff.keep_watermark_caps(caps)
        if self._decorate is not None:
            position = self._decorate(position)  # the durable position carries the state it stores
        sink = self.sink
        if sink is not None and not isinstance(sink, TransactionalSink):
            sink._durable = position  # a rewound shard is durable only up to its catch-up start
        self._store_position(store, position)
        self.handoff.fault_point()
        self.handoff.announce()

    def _store_position(self, store: OffsetStore, position: Vgtid) -> None:
        """Store ``position`` under the task's key now and wait for it. Exactly-once: an offset
        record alone in a Kafka transaction (offsets otherwise only travel with records)."""
        if self._decorate is not None:
            position = self._decorate(position)  # ad-hoc snapshots and signal positions go along
        sink = self.sink
        if isinstance(sink, TransactionalSink):
            sink.commit_point(dataclasses.replace(position))  # a new object: commit() skips the durable one
            sink.commit()
        else:
            self._write_offset(store, position)

    def _handing_off(self) -> bool:
        return self.handoff is not None and self.handoff.active

    def _processor_class(self) -> type[StreamProcessor]:
        if not self._handing_off():
            return StreamProcessor
        from cdcworker.backfill.catchup import HandoffProcessor

        return HandoffProcessor

    def _handoff_kwargs(self) -> dict[str, Any]:
        return {"handoffs": self.handoff.states} if self._handing_off() else {}

    def _make_sink(self, store: OffsetStore, start: Vgtid) -> KafkaSink:
        cfg = self.config
        conf = producer_config(cfg)
        alo, eos = sink_classes()  # the native producer when built (nativesink)
        if not cfg.kafka.transactional:
            sink = alo(conf)
        else:
            conf["transactional.id"] = cfg.kafka.transactional_id
            partition = self._partition()

            def write(producer: Any, position: Vgtid) -> None:
                store.produce(producer, cfg.name, partition, self._offset_value(position))

            sink = eos(
                conf,
                write,
                # A Kafka transaction costs a few ms to commit: batch several poll batches.
                max_batch_records=max(cfg.behaviour.max_batch_size, 1) * 4,
                max_batch_seconds=max(cfg.behaviour.poll_interval_ms, 1) / 1000.0,
            )
        sink.topics = topic_creator(cfg.kafka)
        sink._durable = start  # nothing new is durable until the first commit point
        self._last_written = start
        return sink

    # --- streaming --------------------------------------------------------------------------

    def _request(self, position: Vgtid, journal_stops: bool) -> vtgate_pb2.VStreamRequest:
        cfg = self.config
        flags = vtgate_pb2.VStreamFlags(
            heartbeat_interval=cfg.source.heartbeat_interval_seconds,
            stop_on_reshard=cfg.source.stop_on_reshard,
            stream_keyspace_heartbeats=cfg.source.stream_keyspace_heartbeats,
            include_reshard_journal_events=journal_stops,
            exclude_keyspace_from_table_name=cfg.source.exclude_keyspace_from_table_name,
        )
        tablet_type = cfg.source.tablet_type.upper()
        return vtgate_pb2.VStreamRequest(
            tablet_type="PRIMARY" if tablet_type == "MASTER" else tablet_type,
            vgtid=position.to_proto(),
            filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=m, filter=f) for m, f in self._rules]),
            flags=flags,
        )

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
                _write_termination_message({"error": result.reason})  # the operator's Failed message
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
        except (KafkaSettingError, StoredOffsetError) as exc:
            # Refused credentials or TLS, a topic Kafka will not create with the configured
            # replication factor, an unreadable stored offset: something to fix, not a bug; no
            # traceback, and the reason goes where the operator reads it (the pod's termination
            # message, then the status).
            metrics.set_state("failed", str(exc))
            _write_termination_message({"error": str(exc), **lost_reason(exc)})
            return TaskResult(exitcodes.FAILED, str(exc), None)
        except Exception as exc:
            metrics.set_state("failed", str(exc))
            raise
        finally:
            if server is not None:
                server.stop()
        return result

    def _run(self, metrics: Any) -> TaskResult:
        cfg = self.config
        settings = channel_settings(cfg)
        metadata = settings.call_metadata()
        channel = open_channel(settings)
        store = OffsetStore(
            cfg.kafka.client_config("producer"),
            cfg.kafka.offsets_topic,
            partitions=cfg.kafka.offsets_partitions,
            replication_factor=cfg.kafka.offsets_replication_factor,
        )
        refused = False  # the cluster refused the login or certificate mid-stream (KafkaAccessError)
        try:
            store.ensure_topic()
            store.load()
            position = self._resolve_start(store, channel, metadata)
            position = self._start_handoff(position)
            for sg in position:
                metrics.shard(sg.shard, sg.keyspace)
            self.sink = sink = self._make_sink(store, position)
            stored_start = self._restored is None and not any(sg.gtid == "current" for sg in position)
            if self._handing_off():
                self._store_handoff(store, position)  # states start() created are stored before any hold is announced
            elif cfg.task.per_task and self._restored is None and not any(sg.gtid == "current" for sg in position):
                # No offset under this task's key yet (a new generation, or the first start): store
                # where it starts now. The next generation needs every key of this one, and a task
                # whose shards stay idle would otherwise never write its own (Debezium's "No offset
                # found" after two scale changes of a quiet keyspace). "current" is stored once the
                # stream names the position (VTGate sends it at once).
                self._last_written = None
                self._store_position(store, position)
            metrics.set_position_sources(
                read=lambda: self.processor.position if self.processor else position,
                durable=lambda: sink.durable,
            )
            metrics.set_state("snapshotting" if position.copying else "streaming")
            backoff = Backoff(
                initial_ms=max(50, min(cfg.behaviour.retriable_restart_wait_ms, 1000)),
                max_ms=cfg.behaviour.retry_backoff_max_ms,
                max_retries=cfg.behaviour.errors_max_retries,
            )
            # Per-task mode: a journal may name shards another task holds; stop at it instead of
            # letting VTGate fail the stream (Debezium's endless retry loop). A single task stops
            # too: VTGate could follow the journal for it, but the operator plans the shards of
            # every generation and would wait for a journal that is never reported.
            journal_stops = cfg.task.per_task
            stub = vtgateservice_pb2_grpc.VitessStub(channel)
            # The task's own stream: responses as bytes when the native scanner + encoder are on
            # (rows go to the encoder without a Python object per event); else parsed by upb.
            vstream = (
                channel.unary_stream(
                    "/vtgateservice.Vitess/VStream",
                    request_serializer=vtgate_pb2.VStreamRequest.SerializeToString,
                    response_deserializer=None,
                )
                if raw_responses()
                else stub.VStream
            )
            flush_every = cfg.kafka.offset_flush_interval_ms / 1000.0
            checkpoints = self._checkpoints  # the low watermark of shards that are never all durable at a flush
            next_flush = time.monotonic() + flush_every
            result: TaskResult | None = None
            # snapshot.mode=initial_only: copy, store the position, stop before streaming any change.
            copy_only = cfg.source.snapshot_mode == "initial_only"
            if copy_only and not position.copying:
                result = TaskResult(exitcodes.OK, _SNAPSHOT_DONE + " earlier (stored offset)", position, done=True)
            encoder = encoder_config(cfg, self.run_id)
            # Transaction metadata, heartbeats, schema changes: built once, kept across reconnects.
            features = build_features(
                cfg, position, self._restored.fields if self._restored else None, metrics.low_watermark
            )
            self.extras = extras = TaskExtras.build(
                cfg,
                encoder,
                lambda req: stub.VStream(req, metadata=metadata),
                lambda: [sg.shard for sg in (self.processor.position if self.processor else position)],
                metrics,
            )
            encoder = extras.encoder
            extras.install(features)
            # Interrupted ad-hoc snapshots and the signal channel's position, from the task's own
            # offset or (a new generation) from those its shards come from.
            extras.restore(self._restored.fields if self._restored else None,
                           {s: v.fields for s, v in self._inherited.items()})
            self._decorate = features.decorate
            if self._decorate is not None and sink.durable is not None:
                # What was restored is durable already: an abort before the first commit goes back
                # to it, not to a position without it (TaskExtras.on_abort).
                sink._durable = self._decorate(sink.durable)
            if self._decorate is not None and stored_start and (cfg.task.per_task or self._handing_off()):
                # A new task key stored its start before the state it takes over was known: store
                # it again with that state, or a restart before the next offset flush loses it.
                self._last_written = None
                self._store_position(store, position)
            sink.on_error = extras.failures.on_delivery_error  # records the broker refuses as too large
            self._rules = extras.rules()
            # VTGate heartbeats come only while the stream is idle: each asks for proof that the
            # idle shards are caught up, which moves their low watermark (idleprobe).
            probe = self.idle_probe = self._idle_probe(metrics, sink) if cfg.source.heartbeat_interval_seconds > 0 else None
            while result is None and not self._stop.is_set():
                processor = self.processor = self._processor_class()(
                    encoder,
                    sink,
                    position,
                    **self._handoff_kwargs(),
                    lookahead_rows=cfg.behaviour.max_queue_size if not self._handing_off() else 1 << 30,
                    max_queue_bytes=cfg.behaviour.max_queue_size_in_bytes if not self._handing_off() else 0,
                    journal_stops=journal_stops,
                    metrics=metrics,
                    on_heartbeat=functools.partial(_on_heartbeat, metrics, probe),
                    features=features,
                )
                try:
                    # Parsed responses while handing off: the hand-off processor reads FIELD events.
                    stream_fn = stub.VStream if self._handing_off() else vstream
                    self._call = call = stream_fn(self._request(position, journal_stops), metadata=metadata)
                    responses = _ResponseReader(call, max_bytes=cfg.behaviour.max_queue_size_in_bytes)
                    self._call = responses  # cancels the call and wakes its reader
                    while True:
                        # A timed wait, so offsets are flushed (and EOS batches committed) while idle;
                        # short while an exactly-once commit point waits for the stream to pause.
                        wait = 0.005 if extras.busy or sink.commit_pending else min(flush_every, 0.2)
                        item = responses.next(timeout=wait)
                        metrics.beat()
                        extras.poll(processor)
                        if item is _IDLE:
                            if self._stop.is_set():
                                # stop() cancelled the call, but its reader thread can miss that and
                                # wait in gRPC for ever (seen once in a full-suite run: every thread's
                                # stack showed it). Leave the stream as the CANCELLED error would.
                                raise _StreamEnded()
                            sink.on_idle()
                            if features.heartbeats is not None:
                                processor.tick()  # idle: heartbeats still go out
                        elif item is _END:
                            if not self._stop.is_set():
                                raise _StreamEnded()
                            break
                        elif isinstance(item, BaseException):
                            raise item
                        else:
                            if not metrics.connected:
                                metrics.set_connected(True)
                            processor.process(item)
                            if processor.stats.transactions:
                                backoff.reset()
                            if copy_only and not processor.position.copying:
                                responses.cancel()  # every shard's copy ended at this commit point
                                result = TaskResult(exitcodes.OK, _SNAPSHOT_DONE, processor.position, done=True)
                                break
                            if metrics.state != "streaming" and not processor.position.copying:
                                # Copy finished or reconnected: the operator's Ready waits for this.
                                metrics.set_state("streaming")
                        if time.monotonic() >= next_flush:
                            durable = sink.durable_position()
                            metrics.records_sent, metrics.records_acked = sink.records_sent, sink.records_sent - sink.pending
                            self._write_offset(store, durable, wait=False)
                            if durable is processor.position and processor.stats.last_commit_ts:
                                for sm in metrics.shards:
                                    if sm.last_commit_ts is not None and checkpoints.current(sm.name, sm.transactions):
                                        sm.on_ack(sm.last_commit_ts)
                            else:  # under load: commits noted at an earlier flush and durable now
                                acked = checkpoints.flush(processor.position, durable, {
                                    sm.name: (sm.last_commit_ts, sm.transactions) for sm in metrics.shards})
                                for shard, ts in acked.items():
                                    metrics.durable_through(shard, ts)
                            metrics.on_offsets_flushed()
                            if probe is not None:
                                probe.request()  # a quiet shard beside busy ones (rate-limited)
                            if self.handoff is not None and self.handoff.pending(durable):
                                raise _HandoffChange()
                            next_flush = time.monotonic() + flush_every
                except _HandoffChange:
                    # Everything streamed so far goes to Kafka, then the states move on and the stream
                    # restarts (rewound for a catch-up) with the offset carrying position and state.
                    processor.abandon_transaction()
                    position = self._rewind(sink, processor)
                    sink.flush(cfg.behaviour.shutdown_grace_ms / 1000.0)
                    position, _ = self.handoff.advance(position)
                    self._store_handoff(store, position)
                    if self._call is not None:
                        self._call.cancel()
                except ReassignmentNeeded as exc:
                    sink.flush()
                    # The journal's target positions are what the next generation starts from:
                    # stored before exiting, in exactly-once mode too (no records carry them), with
                    # the ad-hoc snapshot and signal state (_store_position decorates them).
                    self._store_position(store, exc.vgtid)
                    _report_journal(metrics, exc)
                    result = TaskResult(exitcodes.REASSIGNMENT_NEEDED, str(exc), exc.vgtid)
                except InterruptedError:
                    if not self._stop.is_set():
                        raise
                    # Stopped while Kafka's queue was full: what is in flight is flushed below
                    # within the shutdown grace; the stored offset stays at the durable position
                    # (the flush never commits part of a Vitess transaction).
                    processor.abandon_transaction()
                    break
                except (grpc.RpcError, _StreamEnded, AnonymisedColumns) as exc:
                    metrics.set_connected(False)
                    processor.abandon_transaction()
                    position = self._rewind(sink, processor)
                    if self._stop.is_set():
                        break
                    if isinstance(exc, grpc.RpcError) and NOTHING_TO_COPY in (exc.details() or ""):
                        fresh = _without_empty_copies(position)
                        if fresh != position:
                            # The filter matches no table yet: an empty snapshot, so stream on from
                            # the shards' current positions (tables created later are picked up).
                            # VTGate would refuse the same request again and again (as Debezium's
                            # connector then retries forever).
                            log.info("no table matches the filter, nothing to snapshot: streaming from the current "
                                     "positions of %s", ", ".join(sg.shard for sg in position if sg not in fresh))
                            position = fresh
                            if copy_only:
                                result = TaskResult(exitcodes.OK, _SNAPSHOT_DONE, position, done=True)
                            continue
                    # Every stream that broke under us, retriable or not (shardcdc_stream_errors_total).
                    code = exc.code().name if isinstance(exc, grpc.RpcError) else "EOF"
                    metrics.on_error(code)
                    if isinstance(exc, grpc.RpcError):
                        verdict = classify(exc)
                        if not verdict.retriable:
                            result = TaskResult(exitcodes.FAILED, verdict.reason, position)
                            break
                        reason = verdict.reason
                    else:
                        reason = str(exc) if isinstance(exc, AnonymisedColumns) else "VTGate ended the stream"
                    if backoff.exhausted():
                        limit = f"errors.max.retries={cfg.behaviour.errors_max_retries}"
                        result = TaskResult(exitcodes.FAILED, f"giving up after {backoff.attempts} retries ({limit}): {reason}", position)
                        break
                    metrics.on_reconnect(code)
                    metrics.set_state("reconnecting", reason)
                    delay = backoff.next_delay()
                    log.warning("VStream interrupted (%s); reconnecting from %s in %.2fs", reason, position.to_json(), delay)
                    self._stop.wait(delay)
                except (ProtocolError, SinkError, EventConversionError) as exc:
                    result = TaskResult(exitcodes.FAILED, str(exc), processor.position)
                    refused = isinstance(exc, KafkaAccessError)
                finally:
                    self._call = None
            # Stop, flush, store the durable position (never past what Kafka holds).
            grace_end = time.monotonic() + cfg.behaviour.shutdown_grace_ms / 1000.0
            try:
                # Refused access: nothing more reaches Kafka (the flush would wait out the grace).
                durable = sink.durable if refused else sink.flush(cfg.behaviour.shutdown_grace_ms / 1000.0)
            except SinkError as exc:  # refused records: nothing from them on is durable
                durable = sink.durable
                if result is None or result.exit_code == exitcodes.OK:
                    # Also after a finished snapshot (initial_only): its last records are not all
                    # in Kafka, so it is not done; a restart resumes it from the durable position.
                    result = TaskResult(exitcodes.FAILED, str(exc), durable)
            if refused:
                # The offsets topic refuses this login or certificate too: the stored offset stays
                # the last one written (never past what Kafka holds), and the next start, with the
                # settings fixed, sends the records after it again.
                log.error("%s; the stored offset stays where it was last written", result.reason if result else "")
            elif result is None or result.exit_code != exitcodes.REASSIGNMENT_NEEDED:
                try:
                    # A stop has the shutdown grace in all (Kubernetes kills the pod after it).
                    self._write_offset(store, durable, timeout=max(0.5, grace_end - time.monotonic())
                                       if self._stop.is_set() else None)
                except OffsetStoreError as exc:
                    if not self._stop.is_set():
                        raise
                    # Kafka is away: the stored offset stays older than what Kafka holds, so the
                    # next start sends some records again and loses none.
                    if result is None or result.exit_code == exitcodes.OK:
                        result = TaskResult(exitcodes.FAILED, f"stopped without storing the offset ({exc}); the next "
                                            "start resumes from the last stored offset and sends the "
                                            "records after it again", durable)
            if result is None:
                result = TaskResult(exitcodes.OK, self._stop_reason or "stopped", durable)
            states = {exitcodes.OK: "stopped", exitcodes.REASSIGNMENT_NEEDED: "reassignment_needed"}
            metrics.set_state(states.get(result.exit_code, "failed"), result.reason)
            return result
        finally:
            if self.idle_probe is not None:
                self.idle_probe.close()
            if self._probe_client is not None:
                self._probe_client.close()
            if self.extras is not None:
                self.extras.close()
            if self.handoff is not None:
                self.handoff.close()
            # A stop already waited for its offset write (within the grace): nothing left to wait for;
            # a refused login (also one met while rewinding or handing off) cannot deliver it.
            refused = refused or isinstance(sys.exc_info()[1], KafkaAccessError)
            store.close(1.0 if self._stop.is_set() or refused else None)
            channel.close()


def _report_journal(metrics: Any, exc: ReassignmentNeeded) -> None:
    """Tell the operator where the reshard leads: in /status and in the pod's termination message."""
    journal = {
        "participants": sorted(p.shard for p in exc.journal.participants),
        "positions": [{"shard": g.shard, "gtid": g.gtid} for g in exc.journal.shard_gtids],
    }
    metrics.journal = journal
    _write_termination_message({"journal": journal})


def _write_termination_message(doc: Mapping[str, Any]) -> None:
    """The pod's termination message (``terminationMessagePath``), read by the operator."""
    import json
    import os

    path = os.environ.get("SHARDCDC_TERMINATION_LOG", "/dev/termination-log")
    try:
        with open(path, "w") as fh:
            json.dump(doc, fh)
    except OSError:
        log.debug("no termination log at %s", path)


_SNAPSHOT_DONE = "snapshot.mode=initial_only: the initial snapshot completed"

class _OffsetWrites:
    """Periodic at-least-once offset writes that do not hold up the stream while the broker acks.

    The value written is already durable (every record it covers was acknowledged), so the
    write only has to land eventually and in order: the store's producer is idempotent and the
    task's key always goes to one partition, so queued writes land in the order they were made.
    A synchronous write (stop, hand-off, reassignment) drains the queue first. A failed write
    fails the task at the next flush, as a synchronous one would have; the store's local view is
    updated once the broker acknowledged (``OffsetStore.remember``).
    """

    def __init__(self, store: OffsetStore) -> None:
        self.store = store
        self._producer: Any = None
        self._errors: list[Any] = []
        self.in_flight = 0

    def queue(self, name: str, partition: OffsetPartition, value: Any) -> bool:
        """Queue the offset record; False when the local queue had no room for it."""
        self.check()
        if self._producer is None:
            self._producer = self.store._own_producer()  # the producer of store.write: one order
        written: list[tuple[bytes, bytes | None]] = []

        def on_delivery(err: Any, _msg: object) -> None:
            self.in_flight -= 1
            if err is not None:
                self._errors.append(err)
            else:
                self.store.remember(*written[0])

        try:
            written.append(self.store.produce(self._producer, name, partition, value, on_delivery))
        except BufferError:
            return False  # not with one record per interval; the next flush writes it
        self.in_flight += 1
        return True

    def check(self) -> None:
        """Serve the acks of earlier writes; raise if one of them failed."""
        if self.in_flight:
            self._producer.poll(0)
        if self._errors:
            raise OffsetStoreError(f"offset not written: {self._errors[0]}")

    def drain(self, timeout: float | None = None) -> None:
        if self.in_flight:
            timeout = self.store._timeout if timeout is None else timeout
            if self._producer.flush(timeout):
                raise OffsetStoreError(f"offset not acknowledged within {timeout}s")
        self.check()


class _HandoffChange(Exception):
    """A backfill hand-off state moves on (held, catch-up, rejoined): restart the stream."""


class _StreamEnded(Exception):
    """VTGate completed the stream without an error (Debezium only logs this and stalls)."""
