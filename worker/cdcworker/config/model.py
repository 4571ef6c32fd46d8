"""The validated, typed, frozen worker configuration and its derived helpers."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cdcworker.config.errors import HIDDEN
from cdcworker.config.properties import ORDERED_TX_METADATA_FACTORY, TABLE_TOPIC_NAMING_STRATEGY
from cdcworker.offsets.keys import task_key_name

Patterns = tuple[re.Pattern[str], ...]


class Secret:
    """A string that prints as ``[hidden]``; call :meth:`reveal` where the real value is needed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SnapshotMode(enum.StrEnum):
    """``snapshot.mode`` (the values the catalogue allows; the operator's ``spec.snapshot.mode``)."""

    INITIAL = "initial"  # copy, then stream
    NEVER = "never"  # stream only
    INITIAL_ONLY = "initial_only"  # copy, store the position, stop before streaming

    @property
    def copies(self) -> bool:
        """The mode copies the tables before (or instead of) streaming."""
        return self is not SnapshotMode.NEVER


@dataclass(frozen=True, slots=True)
class TlsConfig:
    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Where and how to stream: VTGate, keyspace, shards, start position, VStream flags."""

    hostname: str
    port: int
    user: str | None
    password: Secret | None
    keyspace: str
    shards: tuple[str, ...] | None  # vitess.shard; None = every shard
    vgtid: str  # vitess.vgtid as configured ("current", "" or VGTID JSON)
    tablet_type: str  # MASTER, PRIMARY, REPLICA or RDONLY (MASTER and PRIMARY are one proto value)
    stop_on_reshard: bool
    stream_keyspace_heartbeats: bool
    exclude_keyspace_from_table_name: bool
    exclude_empty_shards: bool
    keepalive_interval_ms: int | None  # None: disabled (Debezium's Long.MAX_VALUE)
    grpc_headers: tuple[tuple[str, str], ...]
    max_inbound_message_size: int
    load_balancing_policy: str
    shard_epoch_map: Mapping[str, int]
    inherit_epoch: bool
    connector_generation: int
    tls: TlsConfig
    snapshot_mode: SnapshotMode
    snapshot_include_collection_list: Patterns
    heartbeat_interval_ms: int

    @property
    def address(self) -> str:
        return f"{self.hostname}:{self.port}"

    @property
    def start_gtid(self) -> str:
        """The configured start when no offset exists: '' (copy) for initial snapshots, as Debezium's getVgtid."""
        if self.snapshot_mode.copies:
            return ""
        return self.vgtid

    @property
    def heartbeat_interval_seconds(self) -> int:
        """VStream's ``heartbeat_interval`` is whole seconds; under 1000 ms turns VTGate heartbeats off."""
        return self.heartbeat_interval_ms // 1000


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """The task this worker is, as the operator passes it (Debezium's vitess.task.key / shards / total)."""

    per_task: bool  # vitess.offset.storage.per.task
    task_id: int
    task_count: int
    tasks_max: int
    generation: int
    prev_task_count: int
    shards: tuple[str, ...] | None  # None: vitess.shard, or every shard of the keyspace
    # The generations before this one, newest first from the previous: (generation, task count).
    # Empty: not given (Debezium's rule, the previous generation must be complete).
    history: tuple[tuple[int, int], ...] = ()
    # The operator saw this task store positions (shardcdc.task.offsets.expected): finding none of
    # its offsets at a start means they were lost, not that it never ran (cdcworker.offsets.lost).
    offsets_expected: bool = False

    @property
    def task_key(self) -> str | None:
        """``task<i>_<n>_<gen>`` in per-task mode, else None (offsets use the plain server partition)."""
        if not self.per_task:
            return None
        return task_key_name(self.task_id, self.task_count, self.generation)

    def properties(self) -> dict[str, str]:
        """The worker properties that carry this identity, in write order: what the operator writes
        for each task (Debezium's names, then shardcdc's), which ``load_config`` reads back into an
        equal ``TaskIdentity``. One contract between operator and worker."""
        props = {
            "tasks.max": str(self.tasks_max),
            "vitess.offset.storage.per.task": "true" if self.per_task else "false",
            "vitess.offset.storage.task.key.gen": str(self.generation),
            "vitess.prev.num.tasks": str(self.prev_task_count),
            "shardcdc.task.id": str(self.task_id),
            "shardcdc.task.count": str(self.task_count),
            "shardcdc.task.generation": str(self.generation),
            "shardcdc.task.prev.count": str(self.prev_task_count),
        }
        if self.shards is not None:
            props["shardcdc.task.shards"] = ",".join(self.shards)
        if self.history:
            # Lets a task resume shards whose previous-generation task never stored an offset.
            props["shardcdc.task.history"] = ",".join(f"{gen}:{count}" for gen, count in self.history)
        return props

    @property
    def context_task_id(self) -> str:
        """The ``__debezium.context.taskId`` header: the task key, or "0"."""
        return self.task_key or "0"

    def previous_task_keys(self) -> tuple[str, ...]:
        """Keys of the previous generation, every one required for a migration (none before generation 1)."""
        if not self.per_task or self.generation < 1 or self.prev_task_count < 1:
            return ()
        return tuple(task_key_name(i, self.prev_task_count, self.generation - 1) for i in range(self.prev_task_count))


@dataclass(frozen=True, slots=True)
class TopicCreationGroup:
    """A Kafka Connect topic creation group (``TopicCreationGroup``): which topics it takes, and how
    they are created. Patterns match the whole topic name, case-sensitively, as Java's ``matches``."""

    name: str
    include: re.Pattern[str] | None  # None: no include regex, so the group takes no topic
    exclude: re.Pattern[str] | None
    partitions: int  # -1: the broker's num.partitions
    replication_factor: int  # -1: the broker's default.replication.factor
    configs: Mapping[str, str]  # topic-level configs (cleanup.policy, ...)

    def matches(self, topic: str) -> bool:
        return (
            self.include is not None
            and self.include.fullmatch(topic) is not None
            and (self.exclude is None or self.exclude.fullmatch(topic) is None)
        )


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """Kafka clients, offsets topic and delivery guarantee."""

    bootstrap_servers: tuple[str, ...]
    offsets_topic: str
    offsets_partitions: int
    offsets_replication_factor: int
    offset_flush_interval_ms: int
    offset_flush_timeout_ms: int
    exactly_once_support: str
    exactly_once_source_support: str
    transactional: bool  # derived: one Kafka transaction per batch
    transactional_id: str | None
    topic_creation_enable: bool  # topic.creation.enable as set
    # The groups a missing topic is created by: topic.creation.groups in order, then "default" (which
    # takes every topic). Empty when topics are left to the broker: creation disabled, or (as in Kafka
    # Connect) no topic.creation.* setting given.
    topic_creation: tuple[TopicCreationGroup, ...] = field(repr=False)
    # Java client property names, prefixes stripped; `common` (security.protocol, sasl.*, ssl.*) applies to all.
    common: Mapping[str, str] = field(repr=False)
    producer: Mapping[str, str] = field(repr=False)
    consumer: Mapping[str, str] = field(repr=False)
    admin: Mapping[str, str] = field(repr=False)

    def client_config(self, kind: str, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """librdkafka settings for one client ("producer", "consumer" or "admin"): bootstrap + common +
        its overrides (+ ``overrides``, e.g. ``signal.consumer.*``), Java names translated."""
        from cdcworker.config.kafkaclient import librdkafka_settings

        specific: Mapping[str, str] = getattr(self, kind)
        conf = {"bootstrap.servers": ",".join(self.bootstrap_servers), **self.common, **specific, **(overrides or {})}
        if "max.request.size" in conf:
            # The Java producer's record limit is librdkafka's message.max.bytes.
            conf["message.max.bytes"] = conf.pop("max.request.size")
        return librdkafka_settings(conf)


@dataclass(frozen=True, slots=True)
class ConverterConfig:
    key_schemas_enable: bool
    value_schemas_enable: bool
    key_decimal_format: str
    value_decimal_format: str
    key_replace_null_with_default: bool
    value_replace_null_with_default: bool


@dataclass(frozen=True, slots=True)
class TopicConfig:
    naming_strategy: str
    delimiter: str
    cache_size: int
    transaction_topic: str
    heartbeat_topic: str
    schema_change_topic: str
    data_change_prefix: (
        str  # topic.prefix, or override.data.change.topic.prefix with TableTopicNamingStrategy
    )

    @property
    def table_naming(self) -> bool:
        return self.naming_strategy == TABLE_TOPIC_NAMING_STRATEGY


@dataclass(frozen=True, slots=True)
class FilterConfig:
    """Regexes are anchored (use ``fullmatch``) and case-insensitive, as Debezium's filters."""

    table_include: Patterns
    table_exclude: Patterns
    column_include: Patterns
    column_exclude: Patterns
    column_truncate: tuple[tuple[int, Patterns], ...]  # (length, columns), from column.truncate.to.N.chars
    column_mask: tuple[tuple[int, Patterns], ...]  # (length, columns), from column.mask.with.N.chars
    message_key_columns: tuple[tuple[re.Pattern[str], Patterns], ...]  # (table, key columns)
    column_propagate_source_type: Patterns
    datatype_propagate_source_type: Patterns
    skipped_operations: frozenset[str]  # subset of {"c", "u", "d", "t"}


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    provide_metadata: bool
    factory: str

    @property
    def ordered(self) -> bool:
        return self.factory == ORDERED_TX_METADATA_FACTORY


@dataclass(frozen=True, slots=True)
class Transform:
    alias: str
    type: str
    params: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class TransformConfig:
    """The three size-reducing SMTs, as flags the pipeline applies natively."""

    chain: tuple[Transform, ...]
    filter_transaction_topic_records: bool
    remove_fields: tuple[str, ...]  # dotted paths, e.g. "transaction.id"
    use_local_vgtid: bool


@dataclass(frozen=True, slots=True)
class SignalConfig:
    data_collection: str | None
    channels: tuple[str, ...]
    kafka_topic: str
    kafka_group_id: str
    consumer: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True, slots=True)
class BehaviourConfig:
    """Event conversion, queueing, retries, failure handling, metrics and shutdown."""

    decimal_handling_mode: str
    time_precision_mode: str
    bigint_unsigned_handling_mode: str
    binary_handling_mode: str
    include_unknown_datatypes: bool
    override_datetime_to_nullable: bool
    schema_name_adjustment_mode: str
    field_name_adjustment_mode: str
    tombstones_on_delete: bool
    include_schema_changes: bool
    extended_headers_enabled: bool
    failure_handling_mode: str  # fail, warn or skip ("ignore" is read as skip, as Debezium does)
    max_queue_size: int
    max_queue_size_in_bytes: int
    max_batch_size: int
    poll_interval_ms: int
    errors_max_retries: int
    retriable_restart_wait_ms: int
    retry_backoff_max_ms: int
    heartbeat_interval_ms: int
    heartbeat_low_watermark: bool
    custom_metric_tags: tuple[tuple[str, str], ...]
    metrics_port: int
    shutdown_grace_ms: int
    metrics_address: str = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything one worker process needs, validated. ``repr`` never shows a secret."""

    name: str
    topic_prefix: str
    source: SourceConfig
    task: TaskIdentity
    kafka: KafkaConfig
    converters: ConverterConfig
    topics: TopicConfig
    filters: FilterConfig
    transactions: TransactionConfig
    transforms: TransformConfig
    signals: SignalConfig
    behaviour: BehaviourConfig
    # Every catalogue property's typed value (defaults included) and the raw explicit settings.
    properties: Mapping[str, object] = field(repr=False)
    raw: Mapping[str, str] = field(repr=False)
    secret_keys: frozenset[str] = field(repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def task_key(self) -> str | None:
        return self.task.task_key

    @property
    def offset_partition(self) -> dict[str, str]:
        """Kafka Connect source partition: ``{"server": prefix}`` plus ``"task_key"`` in per-task mode."""
        partition = {"server": self.topic_prefix}
        if self.task.task_key is not None:
            partition["task_key"] = self.task.task_key
        return partition

    def redacted(self) -> dict[str, str]:
        """The explicit settings, sorted, with every secret shown as ``[hidden]``; safe to log."""
        return {k: (HIDDEN if k in self.secret_keys else v) for k, v in sorted(self.raw.items())}

    def __repr__(self) -> str:
        return f"WorkerConfig({self.redacted()!r})"

    __str__ = __repr__
