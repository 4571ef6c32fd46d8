"""Wiring of filters, failure handling, signals and ad-hoc snapshots into one task run.

``TaskExtras.build`` reads the configuration once; the task then calls ``restore(...)`` with its
stored (or inherited) offset, ``rules()`` for each VStream request, ``poll(processor)`` on every
loop turn and ``close()`` at the end. Nothing here runs when none of these features is configured
(``poll`` is a no-op, and no commit point is decorated).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cdcworker.backfill.taskhandoff import progress_topic_of
from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig
from cdcworker.filters import FailureHandler, FilterPolicy, vstream_rules
from cdcworker.filters.failure import FailureMode, topic_limits
from cdcworker.jsontypes import JsonMapping
from cdcworker.offsets.value import Checkpoint, with_offset_fields
from cdcworker.signals import (
    SIGNAL_OFFSETS_KEY,
    KafkaSignalChannel,
    SignalDispatcher,
    SignalTap,
    inherited_signal_offsets,
    stored_signal_offsets,
)
from cdcworker.signals.forward import (
    BACKFILL,
    ENGINE_PROPERTY,
    BackfillSignalForwarder,
    SignalRelay,
    TopicWriter,
)
from cdcworker.snapshot.vstream_copy import STATE_KEYS, VStreamCopyEngine

if TYPE_CHECKING:
    from cdcworker.observability.metrics import ErroneousCounter, SignalMetrics
    from cdcworker.offsets import Vgtid
    from cdcworker.streaming import Features, StreamProcessor

log = logging.getLogger(__name__)

_OWNED_KEYS = STATE_KEYS | {SIGNAL_OFFSETS_KEY}  # the offset fields decorate() writes


class Extras(Protocol):
    """What a running task uses of its extras once they are set up (``TaskExtras`` is the
    implementation): poll them between responses, undo what an aborted Kafka transaction took
    with it, interrupt a signal write on stop, close. ``WorkerTask.extras`` is typed with this so
    the task loop depends on these five members, not on how signals and snapshots are built."""

    @property
    def busy(self) -> bool: ...

    def poll(self, processor: StreamProcessor) -> None: ...

    def on_abort(self, durable: Vgtid | None) -> None: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass
class TaskExtras:
    encoder: EncoderConfig
    policy: FilterPolicy
    failures: FailureHandler
    keyspace: str
    signal_tables: tuple[str, ...] = ()
    dispatcher: SignalDispatcher | None = None
    tap: SignalTap | None = None
    engine: VStreamCopyEngine | BackfillSignalForwarder | None = None
    channels: list[KafkaSignalChannel] = dataclasses.field(default_factory=list)
    relay: SignalRelay | None = None

    @classmethod
    def build(
        cls,
        cfg: WorkerConfig,
        encoder: EncoderConfig,
        open_stream: Callable[[Any], Any],  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        shards: Callable[[], Sequence[str]],
        metrics: SignalMetrics | None = None,
    ) -> TaskExtras:
        policy = FilterPolicy.from_config(cfg.filters, cfg.behaviour)
        if policy.touches_columns:
            encoder = dataclasses.replace(encoder, policy=policy)
        failures = FailureHandler(cfg.behaviour.failure_handling_mode, metrics)
        failures.topic_limit = topic_limits(cfg.kafka.client_config("admin"))
        extras = cls(encoder, policy, failures, cfg.source.keyspace)
        sig = cfg.signals
        source = bool(sig.data_collection) and "source" in sig.channels
        kafka = "kafka" in sig.channels
        if (source or kafka) and cfg.properties.get(ENGINE_PROPERTY) == BACKFILL:
            # Backfills run on the connector's engine: hand snapshot signals to the operator.
            extras.engine = BackfillSignalForwarder(
                cfg.kafka.client_config("producer"),
                progress_topic_of(cfg.topic_prefix),
                cfg.source.keyspace,
                replication_factor=cfg.kafka.offsets_replication_factor,
            )
            extras.dispatcher = SignalDispatcher(extras.engine, _refusals(metrics))
        elif source or kafka:
            extras.engine = VStreamCopyEngine(
                open_stream,
                cfg.source.keyspace,
                shards,
                encoder,
                # The copy reads the primary, which is never behind the live stream's tablet: a
                # lagging replica could copy a row the live stream has already deleted (a read
                # after the delete brings it back).
                tablet_type="PRIMARY",
                exclude_keyspace_from_table_name=cfg.source.exclude_keyspace_from_table_name,
                failures=_copy_failures(failures, metrics),
            )
            extras.dispatcher = SignalDispatcher(extras.engine, _refusals(metrics))
        task_key = cfg.task.task_key
        client = cfg.kafka.client_config("consumer", sig.consumer)
        if source and sig.data_collection and extras.dispatcher is not None:
            if isinstance(extras.engine, VStreamCopyEngine) and task_key is not None and cfg.task.task_count > 1:
                # The signal row reaches one task; the others learn of it through the relay.
                extras.relay = SignalRelay(cfg.kafka.client_config("producer"), cfg.topic_prefix, task_key,
                                           replication_factor=cfg.kafka.offsets_replication_factor)
                try:
                    extras.relay.ensure_topic()  # before the channels subscribe: they see it at once
                except Exception as exc:  # the first relay write creates it (and retries)
                    log.warning("the signal relay topic %s could not be created yet: %s", extras.relay.store.topic, exc)
                extras.channels.append(KafkaSignalChannel(client, extras.relay.store.topic,
                                                          f"{sig.kafka_group_id}-relay-{task_key}", cfg.topic_prefix,
                                                          extras.dispatcher, skip_origin=task_key))
            extras.tap = SignalTap(sig.data_collection, encoder, extras.dispatcher, extras.relay)
            extras.signal_tables = (sig.data_collection.partition(".")[2],)
        if kafka and extras.dispatcher is not None:
            group = sig.kafka_group_id if task_key is None else f"{sig.kafka_group_id}-{task_key}"
            extras.channels.append(KafkaSignalChannel(client, sig.kafka_topic, group, cfg.topic_prefix, extras.dispatcher))
        return extras

    def install(self, features: Features) -> None:
        """Hand the stream processor what it needs (``streaming.Features``)."""
        features.policy = self.policy
        features.failures = self.failures
        features.signals = self.tap
        if self.dispatcher is not None:
            features.decorate = self.decorate

    def decorate(self, position: Any) -> Any:  # Any: the commit point the stream sealed (commit_point), handed back as given
        """``position`` with the state to resume from in its offset fields: the ad-hoc snapshots
        (``VStreamCopyEngine.state_fields``) and where the Kafka signal channels have read to
        (also channels this task does not read, e.g. the relay in a one-task generation: carried
        on, so the next multi-task generation does not read from the start). One Checkpoint per
        commit point at most: both states are cached per change."""
        engine = self.engine.state_fields() if isinstance(self.engine, VStreamCopyEngine) else ()
        channels = self.dispatcher.offsets_field() if self.dispatcher is not None else ()
        return with_offset_fields(position, engine + channels, _OWNED_KEYS)

    def restore(self, own: JsonMapping | None, inherited: Mapping[str, JsonMapping] | None = None) -> None:
        """Resume from the task's stored offset fields (``own``), or, for a task key without one
        (a new generation), from the offset fields its shards come from (``inherited``, shard ->
        fields): the ad-hoc snapshots that were queued or running, and the Kafka signal channel's
        position."""
        inherited = inherited or {}
        if self.engine is not None:
            if own is not None:
                self.engine.restore(own)
            elif inherited and isinstance(self.engine, VStreamCopyEngine):
                self.engine.restore_inherited(inherited)
        if self.dispatcher is not None:
            offsets = (stored_signal_offsets(own) if own is not None
                       else inherited_signal_offsets(list({id(v): v for v in inherited.values()}.values())))
            if offsets:
                self.dispatcher.restore_offsets(offsets)  # kept in the offset until they move
                self.dispatcher.changed = own is None  # a new task key stores them at once
            for channel in self.channels:
                mine = {k: o for k, o in (offsets or {}).items() if k[0] == channel.topic}
                log.info("signal channel %s starts from %s", channel.topic,
                         mine or "its consumer group's position (earliest without one)")
                channel.start(mine)

    def rules(self) -> tuple[tuple[str, str], ...]:
        tf = self.policy.tables
        return vstream_rules(self.keyspace, tf.include, tf.exclude, self.signal_tables)

    @property
    def busy(self) -> bool:
        """A snapshot is running: the task polls more often."""
        return self.engine is not None and self.engine.active

    def poll(self, processor: StreamProcessor) -> None:
        d = self.dispatcher
        if d is not None:
            d.poll()
            if d.changed and processor is not None and processor.features.decorate is not None \
                    and processor.between_transactions and not any(sg.gtid == "current" for sg in processor.position):
                # A commit point of its own, so what the signals changed is stored while the
                # source is idle too (a stop or a rescale then starts from it).
                d.changed = False
                processor.seal(dataclasses.replace(processor.position))
        if self.engine is not None and self.engine.active:
            self.engine.pump(processor)

    def on_abort(self, durable: object) -> None:
        """The exactly-once sink aborted its open Kafka transaction: what the signals since
        ``durable`` started is gone with it, so the snapshots start over from ``durable``'s state
        and the Kafka channels read again from its positions (signals acted on since are replayed)."""
        if self.engine is not None and hasattr(self.engine, "on_abort"):
            self.engine.on_abort(durable)
        if self.dispatcher is None:
            return
        stored = stored_signal_offsets(dict(durable.extra) if isinstance(durable, Checkpoint) else {}) or {}
        self.dispatcher.rewind(stored, [c.topic for c in self.channels])
        for channel in self.channels:
            channel.rewind({p: o for (t, p), o in stored.items() if t == channel.topic})

    def interrupt(self) -> None:
        """The task is stopping: a signal write waiting on Kafka gives up (thread-safe)."""
        for writer in (self.relay, self.engine):
            if isinstance(writer, TopicWriter):
                writer.interrupt()

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        if self.relay is not None:
            self.relay.close()
        if self.engine is not None:
            self.engine.close()


def _refusals(metrics: SignalMetrics | None) -> Callable[[str], None] | None:
    """Where the dispatcher counts refused signals (the task's metrics and /status)."""
    return getattr(metrics, "on_signal_refused", None)


def _copy_failures(stream: FailureHandler, metrics: ErroneousCounter | None) -> FailureHandler:
    """An ad-hoc snapshot never fails the task: its bad events are skipped (or warned about), and
    oversized records are judged against the same topic limits as the stream's."""
    copy = FailureHandler(FailureMode.SKIP if stream.mode is FailureMode.SKIP else FailureMode.WARN, metrics)
    copy.topic_limit = stream.topic_limit
    return copy
