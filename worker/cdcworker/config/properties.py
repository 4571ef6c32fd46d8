"""The catalogue of every configuration property the worker accepts.

Names, types and defaults follow the Debezium Vitess connector (its ``VitessConnectorConfig`` plus the
common Debezium and Kafka Connect settings it inherits), so a Debezium connector configuration can be
handed to shardcdc unchanged. Properties that shardcdc adds live under the ``shardcdc.`` namespace so they
can never collide with a future Debezium name.

The operator reuses this table for its CRD: ``operator_owned`` marks what the operator sets per task and a
user must not set in the CRD's free-form connector config.

Where Debezium's documentation and its code disagree, the code's runtime default wins, because that is what
a user switching from Debezium actually ran with (``max.queue.size``: the docs table says 20240, the code
``CommonConnectorConfig.DEFAULT_MAX_QUEUE_SIZE`` is 8192).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Java's Long.MAX_VALUE: Debezium's "disabled" default for `vitess.keepalive.interval.ms`.
LONG_MAX = 9_223_372_036_854_775_807
INT_MAX = 2_147_483_647

DEFAULT_TX_METADATA_FACTORY = "io.debezium.pipeline.txmetadata.DefaultTransactionMetadataFactory"
ORDERED_TX_METADATA_FACTORY = (
    "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory"
)
SCHEMA_TOPIC_NAMING_STRATEGY = "io.debezium.schema.SchemaTopicNamingStrategy"
DEFAULT_TOPIC_NAMING_STRATEGY = "io.debezium.schema.DefaultTopicNamingStrategy"
TABLE_TOPIC_NAMING_STRATEGY = "io.debezium.connector.vitess.TableTopicNamingStrategy"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
VITESS_CONNECTOR_CLASS = "io.debezium.connector.vitess.VitessConnector"

# The three single message transforms of the "efficient transaction metadata" section (issue 5).
SMT_FILTER_TRANSACTION_TOPIC_RECORDS = "io.debezium.connector.vitess.transforms.FilterTransactionTopicRecords"
SMT_REMOVE_FIELD = "io.debezium.connector.vitess.transforms.RemoveField"
SMT_USE_LOCAL_VGTID = "io.debezium.connector.vitess.transforms.UseLocalVgtid"
SUPPORTED_TRANSFORMS = (SMT_FILTER_TRANSACTION_TOPIC_RECORDS, SMT_REMOVE_FIELD, SMT_USE_LOCAL_VGTID)


class PropType(enum.Enum):
    """How a raw string value is parsed."""

    STRING = "string"
    INT = "int"  # Java int range
    LONG = "long"  # Java long range
    BOOLEAN = "bool"
    LIST = "list"  # comma-separated strings, blanks dropped
    ENUM = "enum"  # one of `allowed`, matched case-insensitively, stored as the canonical spelling
    REGEX_LIST = "regex-list"  # comma-separated regular expressions, each must compile
    PASSWORD = "password"  # a string that is never logged


@dataclass(frozen=True, slots=True)
class Property:
    """One configuration property: its name, how to parse it and what it defaults to."""

    name: str
    type: PropType
    default: object = None  # parsed form; None means "unset"
    description: str = ""
    allowed: tuple[str, ...] = ()  # ENUM only: canonical spellings
    operator_owned: bool = False
    required: bool = False
    minimum: int | None = None  # INT/LONG only
    maximum: int | None = None
    group: str = "connector"
    deprecated: str = ""  # non-empty: what to use instead

    @property
    def secret(self) -> bool:
        return self.type is PropType.PASSWORD


@dataclass(frozen=True, slots=True)
class PatternProperty:
    """A family of properties whose name carries a parameter, e.g. ``column.truncate.to.20.chars``."""

    pattern: re.Pattern[str]
    example: str
    type: PropType
    description: str
    group: str = "filters"


@dataclass(frozen=True, slots=True)
class PrefixFamily:
    """Properties passed through to a client under a prefix (``producer.*``), or handled as a group."""

    prefix: str
    description: str
    group: str
    # Keys in the family whose values are always secret, matched on the part after the prefix.
    secret_suffixes: tuple[str, ...] = ()


def _p(name: str, type_: PropType, default: object = None, description: str = "", **kw: object) -> Property:
    return Property(name, type_, default, description, **kw)  # type: ignore[arg-type]


S, I, L, B, LST, E, RX, PW = (  # noqa: E741 - one-letter names keep the table readable
    PropType.STRING,
    PropType.INT,
    PropType.LONG,
    PropType.BOOLEAN,
    PropType.LIST,
    PropType.ENUM,
    PropType.REGEX_LIST,
    PropType.PASSWORD,
)

_PROPERTIES: tuple[Property, ...] = (
    # --- identity -------------------------------------------------------------------------------------------
    _p(
        "name",
        S,
        None,
        "Unique connector name; first element of every offsets-topic key.",
        required=True,
        operator_owned=True,
        group="identity",
    ),
    _p(
        "topic.prefix",
        S,
        None,
        "Namespace of every topic the connector writes; letters, digits, '-', '.', '_'.",
        required=True,
        operator_owned=True,
        group="identity",
    ),
    _p(
        "connector.class",
        S,
        VITESS_CONNECTOR_CLASS,
        "Accepted for Debezium compatibility; must name the Vitess connector.",
        group="identity",
    ),
    _p(
        "tasks.max",
        I,
        1,
        "Maximum number of tasks; above 1 requires vitess.offset.storage.per.task.",
        minimum=1,
        operator_owned=True,
        group="identity",
    ),
    # --- VTGate connection ----------------------------------------------------------------------------------
    _p(
        "database.hostname",
        S,
        None,
        "Hostname or IP of the VTGate gRPC server.",
        required=True,
        group="vitess",
    ),
    _p(
        "database.port", I, 15991, "Port of the VTGate gRPC server.", minimum=1, maximum=65535, group="vitess"
    ),
    _p(
        "database.user",
        S,
        None,
        "VTGate user for static gRPC credentials; unset means unauthenticated.",
        operator_owned=True,
        group="vitess",
    ),
    _p(
        "database.password",
        PW,
        None,
        "VTGate password for static gRPC credentials.",
        operator_owned=True,
        group="vitess",
    ),
    _p("vitess.keyspace", S, None, "Keyspace to stream.", required=True, group="vitess"),
    _p(
        "vitess.shard",
        LST,
        None,
        "Comma-separated shards to stream; unset streams every shard.",
        group="vitess",
    ),
    _p(
        "vitess.vgtid",
        S,
        "current",
        "Start position: 'current', '' (copy first) or a VGTID JSON covering vitess.shard.",
        group="vitess",
    ),
    _p(
        "vitess.gtid",
        S,
        "current",
        "Deprecated alias of vitess.vgtid: validated, never read.",
        group="vitess",
        deprecated="vitess.vgtid",
    ),
    _p(
        "vitess.tablet.type",
        E,
        "MASTER",
        "Tablet type to stream from (MASTER and PRIMARY are the same type).",
        allowed=("MASTER", "PRIMARY", "REPLICA", "RDONLY"),
        group="vitess",
    ),
    _p("vitess.stop_on_reshard", B, False, "VStream flag stop_on_reshard.", group="vitess"),
    _p(
        "vitess.stream.keyspace.heartbeats",
        B,
        False,
        "Stream the _vt.heartbeat table rows as data events.",
        group="vitess",
    ),
    _p(
        "vitess.exclude.keyspace.from.table.name",
        B,
        False,
        "VStream flag exclude_keyspace_from_table_name (saves VTGate a copy per ROW event).",
        group="vitess",
    ),
    _p(
        "vitess.exclude.empty.shards",
        B,
        False,
        "Leave shards without tablets out of the shard list.",
        group="vitess",
    ),
    _p(
        "vitess.keepalive.interval.ms",
        L,
        LONG_MAX,
        "gRPC keepalive ping interval; Long.MAX_VALUE disables it.",
        minimum=1,
        group="vitess",
    ),
    _p(
        "vitess.grpc.headers",
        S,
        None,
        "gRPC headers sent with VStream: key1:value1,key2:value2.",
        group="vitess",
    ),
    _p(
        "vitess.grpc.max_inbound_message_size",
        I,
        4_194_304,
        "Largest gRPC message accepted, in bytes.",
        minimum=1,
        group="vitess",
    ),
    _p(
        "vitess.grpc.default.load.balancing.policy",
        E,
        "pick_first",
        "gRPC load balancing policy.",
        allowed=("pick_first", "round_robin"),
        group="vitess",
    ),
    _p("vitess.shard.epoch.map", S, "", 'Initial epochs per shard as JSON, e.g. {"-80":1}.', group="vitess"),
    _p(
        "vitess.inherit.epoch",
        B,
        False,
        "New shards inherit the highest overlapping parent epoch + 1.",
        group="vitess",
    ),
    _p(
        "vitess.connector.generation",
        L,
        0,
        "Ordering generation; a change increments every epoch.",
        minimum=0,
        group="vitess",
    ),
    # gRPC TLS: Debezium's channel is plaintext only, so these are shardcdc's own.
    _p("shardcdc.vitess.tls.enabled", B, False, "Use TLS for the VTGate gRPC channel.", group="vitess"),
    _p(
        "shardcdc.vitess.tls.ca.file",
        S,
        None,
        "PEM file of CA certificates to verify VTGate; unset uses the system roots.",
        group="vitess",
    ),
    _p("shardcdc.vitess.tls.cert.file", S, None, "PEM client certificate for mutual TLS.", group="vitess"),
    _p("shardcdc.vitess.tls.key.file", S, None, "PEM private key of the client certificate.", group="vitess"),
    _p(
        "shardcdc.vitess.tls.server.name",
        S,
        None,
        "Override the TLS server name (SNI and verification).",
        group="vitess",
    ),
    # --- offsets per task (Debezium's names) ----------------------------------------------------------------
    _p(
        "vitess.offset.storage.per.task",
        B,
        False,
        "Store offsets per task under task<i>_<n>_<gen> keys.",
        operator_owned=True,
        group="offsets",
    ),
    _p(
        "vitess.offset.storage.task.key.gen",
        I,
        -1,
        "Task-parallelism generation of the offset keys.",
        operator_owned=True,
        group="offsets",
    ),
    _p(
        "vitess.prev.num.tasks",
        I,
        -1,
        "Number of tasks of the previous generation.",
        operator_owned=True,
        group="offsets",
    ),
    # --- shardcdc task identity (set by the operator) ---------------------------------------------------------
    _p(
        "shardcdc.task.id",
        I,
        0,
        "This worker's task index, 0-based.",
        minimum=0,
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.count",
        I,
        1,
        "Number of tasks actually running (Debezium's vitess.total.tasks).",
        minimum=1,
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.generation",
        I,
        None,
        "Generation of the task keys; defaults to vitess.offset.storage.task.key.gen.",
        minimum=-1,
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.prev.count",
        I,
        None,
        "Task count of the previous generation; defaults to vitess.prev.num.tasks.",
        minimum=-1,
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.history",
        LST,
        (),
        "The generations before this one, newest first from the previous one, as <generation>:<tasks> "
        "(the operator's record). With it a previous-generation task that never stored an offset does "
        "not stop the migration: its shards resume from the newest generation that holds them.",
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.offsets.expected",
        B,
        False,
        "The operator saw this task store positions: a start that finds none of its offsets stops "
        "(OffsetsLost) instead of starting over as snapshot.mode says. Set through the environment from "
        "the connector's <name>-positions ConfigMap, so it changes without restarting the task.",
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.task.shards",
        LST,
        None,
        "Shards this task streams; unset means vitess.shard (or all shards).",
        operator_owned=True,
        group="task",
    ),
    _p(
        "shardcdc.metrics.port",
        I,
        8080,
        "Port of the metrics, health and status HTTP endpoint; 0 disables it.",
        minimum=0,
        maximum=65535,
        group="task",
    ),
    _p(
        "shardcdc.metrics.address",
        S,
        "0.0.0.0",
        "Address the metrics, health and status endpoint listens on: 0.0.0.0 (every interface) or one "
        "address, e.g. ${env:POD_IP} (the operator gives workers POD_IP) so it is not on loopback.",
        group="task",
    ),
    _p(
        "shardcdc.shutdown.grace.ms",
        L,
        30_000,
        "On SIGTERM: time allowed to flush and commit offsets.",
        minimum=0,
        group="task",
    ),
    # --- snapshot -------------------------------------------------------------------------------------------------
    _p(
        "snapshot.mode",
        E,
        "initial",
        "initial: copy then stream; never: stream only; initial_only: copy, store the position and exit 0 "
        "before streaming (a restart after a complete copy exits at once; an interrupted copy resumes). "
        "Under the operator the finished worker reports state completed (Ready: SnapshotCompleted) and waits "
        "to be stopped, since its Deployment would restart an exit.",
        allowed=("initial", "never", "initial_only"),
        group="snapshot",
    ),
    _p(
        "snapshot.include.collection.list",
        RX,
        None,
        "Tables (keyspace.table regexes) the initial copy includes.",
        group="snapshot",
    ),
    _p(
        "shardcdc.backfill.initial.run",
        S,
        None,
        "Run id of the backfill that makes this connector's initial snapshot (set by the operator for "
        "snapshot.mode=initial with a backfill engine): a first start holds every table back from the shards' "
        "current positions until that run's catch-up, so no live change precedes the snapshot.",
        group="snapshot",
    ),
    # --- value conversion -----------------------------------------------------------------------------------------
    _p(
        "decimal.handling.mode",
        E,
        "precise",
        "DECIMAL as precise (Connect Decimal), double or string.",
        allowed=("precise", "double", "string"),
        group="types",
    ),
    _p(
        "time.precision.mode",
        E,
        "adaptive_time_microseconds",
        "Temporal representation.",
        allowed=("adaptive_time_microseconds", "connect", "isostring"),
        group="types",
    ),
    _p(
        "bigint.unsigned.handling.mode",
        E,
        "string",
        "BIGINT UNSIGNED as string, long or precise.",
        allowed=("string", "long", "precise"),
        group="types",
    ),
    _p(
        "binary.handling.mode",
        E,
        "bytes",
        "Binary columns as bytes, base64, base64-url-safe or hex.",
        allowed=("bytes", "base64", "base64-url-safe", "hex"),
        group="types",
    ),
    _p(
        "include.unknown.datatypes",
        B,
        False,
        "Emit columns of unsupported types as bytes instead of dropping them.",
        group="types",
    ),
    _p(
        "override.datetime.to.nullable",
        B,
        False,
        "Make DATE and DATETIME optional so zero dates become null.",
        group="types",
    ),
    _p(
        "schema.name.adjustment.mode",
        E,
        "none",
        "Adjust schema names for the converter: none, avro, avro_unicode.",
        allowed=("none", "avro", "avro_unicode"),
        group="types",
    ),
    _p(
        "field.name.adjustment.mode",
        E,
        "none",
        "Adjust field names for the converter: none, avro, avro_unicode.",
        allowed=("none", "avro", "avro_unicode"),
        group="types",
    ),
    # --- events -------------------------------------------------------------------------------------------------
    _p("tombstones.on.delete", B, True, "Follow each delete with a tombstone.", group="events"),
    _p("skipped.operations", LST, ("t",), "Operations not emitted: c, u, d, t, or none.", group="events"),
    _p(
        "message.key.columns",
        S,
        None,
        "Key columns per table: ks.table:regex,regex;ks.table2:regex.",
        group="events",
    ),
    _p(
        "column.propagate.source.type",
        RX,
        None,
        "Columns (ks.table.column regexes) whose schema carries the source type.",
        group="events",
    ),
    _p(
        "datatype.propagate.source.type",
        RX,
        None,
        "Source type names whose columns' schemas carry the source type.",
        group="events",
    ),
    _p(
        "include.schema.changes",
        B,
        False,
        "Write DDL schema-change records to the <topic.prefix> topic.",
        group="events",
    ),
    _p("extended.headers.enabled", B, True, "Add the __debezium.context.* headers.", group="events"),
    _p(
        "event.processing.failure.handling.mode",
        E,
        "fail",
        "Events that cannot be converted: fail, warn or skip.",
        allowed=("fail", "warn", "skip", "ignore"),
        group="events",
    ),
    _p(
        "provide.transaction.metadata",
        B,
        False,
        "Write BEGIN/END records and the transaction block.",
        group="transactions",
    ),
    _p(
        "transaction.metadata.factory",
        E,
        DEFAULT_TX_METADATA_FACTORY,
        "Transaction metadata flavour.",
        allowed=(DEFAULT_TX_METADATA_FACTORY, ORDERED_TX_METADATA_FACTORY),
        group="transactions",
    ),
    # --- filters ---------------------------------------------------------------------------------------------------
    _p(
        "table.include.list",
        RX,
        None,
        "Tables to capture, anchored regexes on keyspace.table.",
        group="filters",
    ),
    _p(
        "table.exclude.list",
        RX,
        None,
        "Tables not to capture, anchored regexes on keyspace.table.",
        group="filters",
    ),
    _p(
        "column.include.list",
        RX,
        None,
        "Columns to keep, anchored regexes on keyspace.table.column.",
        group="filters",
    ),
    _p(
        "column.exclude.list",
        RX,
        None,
        "Columns to drop, anchored regexes on keyspace.table.column.",
        group="filters",
    ),
    # --- topics ----------------------------------------------------------------------------------------------------
    _p(
        "topic.naming.strategy",
        E,
        SCHEMA_TOPIC_NAMING_STRATEGY,
        "Topic naming: <prefix>.<ks>.<table>, <prefix>.<shard>.<table> (Default: a topic per shard) or <prefix>.<table>.",
        allowed=(SCHEMA_TOPIC_NAMING_STRATEGY, DEFAULT_TOPIC_NAMING_STRATEGY, TABLE_TOPIC_NAMING_STRATEGY),
        group="topics",
    ),
    _p("topic.delimiter", S, ".", "Delimiter between topic name parts.", group="topics"),
    _p("topic.cache.size", I, 10_000, "Size of the table-to-topic name cache.", minimum=1, group="topics"),
    _p(
        "topic.transaction",
        S,
        "transaction",
        "Suffix of the transaction topic: <prefix>.<topic.transaction>.",
        group="topics",
    ),
    _p(
        "topic.heartbeat.prefix",
        S,
        "__debezium-heartbeat",
        "Heartbeat topic: <prefix-of-this>.<topic.prefix>.",
        group="topics",
    ),
    _p(
        "heartbeat.topics.prefix",
        S,
        "__debezium-heartbeat",
        "Deprecated alias of topic.heartbeat.prefix.",
        group="topics",
        deprecated="topic.heartbeat.prefix",
    ),
    _p(
        "override.data.change.topic.prefix",
        S,
        None,
        "TableTopicNamingStrategy: prefix replacing topic.prefix.",
        group="topics",
    ),
    _p(
        "override.schema.change.topic",
        S,
        None,
        "TableTopicNamingStrategy: schema-change topic name.",
        group="topics",
    ),
    _p(
        "topic.creation.enable",
        B,
        True,
        "Create a missing topic when the task first writes to it, as Kafka Connect does when any other "
        "topic.creation.* setting is given (without one, topics are left to the broker's auto-creation).",
        group="topics",
    ),
    _p(
        "topic.creation.default.partitions",
        I,
        1,
        "Partitions of topics created by the default group; -1 uses the broker's num.partitions. "
        "Kafka Connect requires it (no default) once topic creation is configured.",
        minimum=-1,
        group="topics",
    ),
    _p(
        "topic.creation.default.replication.factor",
        I,
        -1,
        "Replication factor of topics created by the default group; -1 uses the broker default. "
        "Kafka Connect requires it (no default) once topic creation is configured.",
        minimum=-1,
        group="topics",
    ),
    _p(
        "topic.creation.groups",
        LST,
        (),
        "Topic creation groups besides default, in matching order: a new topic takes the settings of the "
        "first group whose topic.creation.<group>.include regexes match it and .exclude ones do not, else "
        "the default group's.",
        group="topics",
    ),
    # --- heartbeats ------------------------------------------------------------------------------------------------
    _p(
        "heartbeat.interval.ms",
        I,
        0,
        "Heartbeat interval; 0 disables heartbeat records and VTGate heartbeats.",
        minimum=0,
        group="heartbeats",
    ),
    _p(
        "shardcdc.heartbeat.low.watermark",
        B,
        False,
        "Add the low watermark to heartbeat records.",
        group="heartbeats",
    ),
    # --- signals ---------------------------------------------------------------------------------------------------
    _p("signal.data.collection", S, None, "Signal table as keyspace.table.", group="signals"),
    _p("signal.enabled.channels", LST, ("source",), "Signal channels: source, kafka.", group="signals"),
    _p(
        "signal.kafka.topic",
        S,
        None,
        "Kafka signal topic; defaults to <topic.prefix>-signal.",
        group="signals",
    ),
    _p(
        "signal.kafka.groupId",
        S,
        "kafka-signal",
        "Consumer group of the Kafka signal channel (per task: <groupId>-<task key>). Where the channel resumes is "
        "stored in the task's offset (shardcdc_signal_offsets), not committed to the group, so a signal is acted on "
        "again only if its effect was not durable; the group's offset is read only when the offset has none.",
        group="signals",
    ),
    _p(
        "shardcdc.signal.snapshot.engine",
        E,
        "vstream",
        "execute-snapshot runs a VStream copy in the task (vstream) or is handed to the operator's backfill engine "
        "via the progress topic (backfill; set by the operator when spec.snapshot.backfill is configured).",
        allowed=("vstream", "backfill"),
        group="signals",
    ),
    # --- queue, batching, retries -----------------------------------------------------------------------------------
    _p(
        "max.queue.size",
        I,
        8192,
        "Events buffered between VStream and Kafka; must exceed max.batch.size.",
        minimum=1,
        group="queue",
    ),
    _p(
        "max.queue.size.in.bytes",
        L,
        0,
        "Bytes buffered between VStream and Kafka; 0 means unbounded by bytes. Bounds the serialized row "
        "changes a transaction holds until its COMMIT (beyond it the transaction is streamed, as beyond "
        "max.queue.size rows) and the responses read ahead of processing (the reader then stops pulling, "
        "and gRPC flow control holds VTGate).",
        minimum=0,
        group="queue",
    ),
    _p("max.batch.size", I, 2048, "Events per batch handed to the producer.", minimum=1, group="queue"),
    _p(
        "poll.interval.ms",
        L,
        500,
        "Wait for new events before a batch is processed.",
        minimum=1,
        group="queue",
    ),
    _p(
        "errors.max.retries",
        I,
        -1,
        "Retriable-error restarts: -1 unlimited, 0 none, N at most N.",
        minimum=-1,
        group="queue",
    ),
    _p(
        "retriable.restart.connector.wait.ms",
        L,
        10_000,
        "First wait before reconnecting after a retriable error.",
        minimum=1,
        group="queue",
    ),
    _p(
        "shardcdc.retry.backoff.max.ms",
        L,
        60_000,
        "Cap of the exponential reconnect backoff.",
        minimum=1,
        group="queue",
    ),
    # --- metrics ---------------------------------------------------------------------------------------------------
    _p("custom.metric.tags", S, None, "Extra metric labels: k1=v1,k2=v2.", group="metrics"),
    # --- transforms --------------------------------------------------------------------------------------------------
    _p(
        "transforms",
        LST,
        None,
        "Aliases of the single message transforms, each with transforms.<alias>.type.",
        group="transforms",
    ),
    # --- Kafka (Connect worker settings) --------------------------------------------------------------------------
    _p("bootstrap.servers", LST, ("localhost:9092",), "Kafka bootstrap servers.", group="kafka"),
    _p(
        "security.protocol",
        E,
        "PLAINTEXT",
        "Kafka client security protocol.",
        allowed=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        group="kafka",
    ),
    _p(
        "offset.storage.topic",
        S,
        "connect-offsets",
        "Compacted topic holding the offsets (Kafka Connect format).",
        group="kafka",
    ),
    _p(
        "offset.storage.partitions",
        I,
        25,
        "Partitions of the offsets topic when created.",
        minimum=1,
        group="kafka",
    ),
    _p(
        "offset.storage.replication.factor",
        I,
        3,
        "Replication of the offsets topic when created; -1 broker default.",
        minimum=-1,
        group="kafka",
    ),
    _p(
        "offset.flush.interval.ms",
        L,
        60_000,
        "At-least-once: how often offsets are committed.",
        minimum=1,
        group="kafka",
    ),
    _p(
        "offset.flush.timeout.ms",
        L,
        5_000,
        "Time allowed for outstanding records to be acknowledged at a flush.",
        minimum=1,
        group="kafka",
    ),
    _p(
        "exactly.once.support",
        E,
        "requested",
        "requested: transactions if exactly.once.source.support=enabled; required: always; disabled: never.",
        allowed=("requested", "required", "disabled"),
        group="kafka",
    ),
    _p(
        "exactly.once.source.support",
        E,
        "disabled",
        "Worker switch of Kafka Connect: disabled, preparing, enabled.",
        allowed=("disabled", "preparing", "enabled"),
        group="kafka",
    ),
    _p(
        "transaction.boundary",
        E,
        "poll",
        "Exactly-once: one Kafka transaction per batch (poll).",
        allowed=("poll",),
        group="kafka",
    ),
    _p(
        "key.converter",
        E,
        JSON_CONVERTER,
        "Only Kafka Connect's JsonConverter is supported.",
        allowed=(JSON_CONVERTER,),
        group="converters",
    ),
    _p(
        "value.converter",
        E,
        JSON_CONVERTER,
        "Only Kafka Connect's JsonConverter is supported.",
        allowed=(JSON_CONVERTER,),
        group="converters",
    ),
    _p(
        "key.converter.schemas.enable",
        B,
        True,
        "Keys carry their schema (JsonConverter envelope).",
        group="converters",
    ),
    _p(
        "value.converter.schemas.enable",
        B,
        True,
        "Values carry their schema (JsonConverter envelope).",
        group="converters",
    ),
    _p(
        "key.converter.decimal.format",
        E,
        "BASE64",
        "JsonConverter decimal format for keys: BASE64 or NUMERIC.",
        allowed=("BASE64", "NUMERIC"),
        group="converters",
    ),
    _p(
        "value.converter.decimal.format",
        E,
        "BASE64",
        "JsonConverter decimal format for values: BASE64 or NUMERIC.",
        allowed=("BASE64", "NUMERIC"),
        group="converters",
    ),
    _p(
        "value.converter.replace.null.with.default",
        B,
        True,
        "JsonConverter: null fields take their schema default.",
        group="converters",
    ),
    _p(
        "key.converter.replace.null.with.default",
        B,
        True,
        "JsonConverter: null fields take their schema default.",
        group="converters",
    ),
    # Kafka Connect's config-provider declarations; file, directory and env are built in.
    _p(
        "config.providers",
        LST,
        None,
        "Declared config providers (file, directory, env are built in).",
        group="providers",
    ),
)

PROPERTIES: Mapping[str, Property] = {p.name: p for p in _PROPERTIES}

PATTERN_PROPERTIES: tuple[PatternProperty, ...] = (
    PatternProperty(
        re.compile(r"column\.truncate\.to\.(\d+)\.chars"),
        "column.truncate.to.20.chars",
        RX,
        "Truncate matching character columns to N characters.",
    ),
    PatternProperty(
        re.compile(r"column\.mask\.with\.(\d+)\.chars"),
        "column.mask.with.10.chars",
        RX,
        "Replace matching character columns with N asterisks.",
    ),
)

# Prefix families. Java client names are kept as given; the Kafka client layer maps them.
PREFIX_FAMILIES: tuple[PrefixFamily, ...] = (
    PrefixFamily(
        "producer.",
        "Passed to the Kafka producer, over shardcdc's defaults: enable.idempotence=true, acks=all, "
        "linger.ms=5, batch.size=1000000, compression.type=lz4, queue.buffering.max.kbytes=16384 (librdkafka's "
        "record buffer, the worker's largest memory user) and queue.buffering.max.messages=4 x max.queue.size (at least 10,000).",
        "kafka",
        (
            "password",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.truststore.password",
            "ssl.keystore.key",
            "sasl.oauthbearer.client.secret",
        ),
    ),
    PrefixFamily(
        "consumer.",
        "Passed to the Kafka consumer that reads offsets and signals.",
        "kafka",
        (
            "password",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.truststore.password",
            "ssl.keystore.key",
        ),
    ),
    PrefixFamily(
        "admin.",
        "Passed to the Kafka admin client that creates topics.",
        "kafka",
        (
            "password",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.truststore.password",
            "ssl.keystore.key",
        ),
    ),
    PrefixFamily(
        "sasl.",
        "Kafka client SASL settings, shared by every client, with Kafka Connect's names: sasl.mechanism, and "
        "sasl.jaas.config with the PLAIN or SCRAM login module (username, password), OAUTHBEARER with client "
        "credentials (clientId, clientSecret, scope), translated for librdkafka (no Kerberos: librdkafka here has no GSSAPI). "
        "librdkafka's own names (sasl.username ...) are taken as well.",
        "kafka",
        ("jaas.config", "password", "client.secret"),
    ),
    PrefixFamily(
        "ssl.",
        "Kafka client TLS settings, shared by every client, with Kafka Connect's names: a PEM or PKCS12 trust "
        "store (ssl.truststore.location/.type/.password, or ssl.truststore.certificates), a PKCS12 or PEM key "
        "store (ssl.keystore.*, ssl.key.password); JKS stores must be converted (keytool -importkeystore "
        "-deststoretype PKCS12). An empty ssl.endpoint.identification.algorithm turns hostname checks off, "
        "as in Java. librdkafka's own names (ssl.ca.location ...) are taken as well.",
        "kafka",
        ("key.password", "keystore.password", "truststore.password", "keystore.key"),
    ),
    PrefixFamily(
        "topic.creation.",
        "Topic creation groups (Kafka Connect): topic.creation.<group>.include / .exclude (regex lists), "
        ".partitions and .replication.factor (default: the default group's), and topic-level configs of "
        "the topics a group creates (e.g. topic.creation.default.cleanup.policy).",
        "topics",
    ),
    PrefixFamily("transforms.", "Single message transform settings.", "transforms"),
    PrefixFamily("config.providers.", "Config provider classes and parameters.", "providers"),
    PrefixFamily(
        "signal.consumer.",
        "Passed to the consumer of the Kafka signal channel.",
        "signals",
        ("password", "sasl.jaas.config"),
    ),
)


def family_of(key: str) -> PrefixFamily | None:
    """The prefix family a key belongs to, if it is not itself a catalogue property."""
    for family in PREFIX_FAMILIES:
        if key.startswith(family.prefix) and len(key) > len(family.prefix):
            return family
    return None


def pattern_of(key: str) -> tuple[PatternProperty, re.Match[str]] | None:
    for pattern in PATTERN_PROPERTIES:
        match = pattern.pattern.fullmatch(key)
        if match:
            return pattern, match
    return None


def is_secret_key(key: str) -> bool:
    """Whether a key's value is a secret by its name alone (provider-resolved values are secret too)."""
    prop = PROPERTIES.get(key)
    if prop is not None:
        return prop.secret
    family = family_of(key)
    if family is None:
        return False
    rest = key[len(family.prefix) :]
    return "password" in rest or "secret" in rest or any(rest.endswith(s) for s in family.secret_suffixes)


def operator_owned() -> tuple[str, ...]:
    """Names the operator sets for each task; the CRD rejects them in user-supplied config."""
    return tuple(p.name for p in _PROPERTIES if p.operator_owned)


def known_names() -> Iterable[str]:
    """Every exact name plus one example per pattern, for "did you mean" suggestions."""
    yield from PROPERTIES
    for pattern in PATTERN_PROPERTIES:
        yield pattern.example
