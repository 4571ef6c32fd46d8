"""Build the stream's optional outputs from the configuration (pure: no I/O).

The streaming loop (``streaming.Features``) receives ready objects: the transaction monitor
restored from the task's stored offset, the heartbeat emitter, the schema-change emitter and the
size-reducing SMT flags. The task builds them once per run, so their state (open transaction,
epochs, heartbeat timer) survives reconnects.
"""

from __future__ import annotations

from collections.abc import Callable

from cdcworker.config import WorkerConfig
from cdcworker.events.encoder import DEBEZIUM_VERSION
from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets import Vgtid
from cdcworker.offsets.vgtid import CURRENT_GTID
from cdcworker.records import HeartbeatEmitter, SchemaChangeEmitter
from cdcworker.streaming import Features
from cdcworker.txmeta import TransactionMonitor, TxMetaOptions, transaction_block_schema
from cdcworker.txmeta.transforms import block_exclusions

__all__ = ["build_features", "epoch_start", "tx_block_schema"]


def tx_block_schema(cfg: WorkerConfig) -> JsonObject | None:
    """The envelope's ``transaction`` schema when it differs from Debezium's default block.

    The ordered factory adds ``transaction_epoch`` / ``transaction_rank``; ``RemoveField`` on
    ``transaction.<field>`` removes fields (the schema changes even while the block is null).
    """
    exclude = block_exclusions(cfg.transforms.remove_fields)
    ordered = cfg.transactions.ordered
    if not ordered and not exclude:
        return None
    return transaction_block_schema(ordered, exclude)


def epoch_start(cfg: WorkerConfig, start: Vgtid, restored: JsonMapping | None) -> Vgtid:
    """The "previous VGTID" the first epoch is computed against, as Debezium's task sets it.

    Without stored offsets, per-task mode off and no ``vitess.shard`` list, Debezium starts from
    ``[{keyspace, shard:"", gtid:"current"}]`` (VTGate expands it): every real shard of the first
    transaction is then new to the epoch map and gets epoch 0 (not 1, as a start from listed
    shards gives). Anything else starts from the resolved VGTID.
    """
    src = cfg.source
    if restored is None and not cfg.task.per_task and not src.shards and src.start_gtid == CURRENT_GTID:
        return Vgtid.of(src.keyspace, [("", CURRENT_GTID)])
    return start


def build_features(
    cfg: WorkerConfig,
    start: Vgtid,
    restored: JsonMapping | None,
    low_watermark: Callable[[], float | None] | None = None,
) -> Features:
    """``restored``: the task's own stored offset fields (None on a first start or a migration)."""
    txmeta = None
    if cfg.transactions.provide_metadata:
        # Debezium adds the __debezium.context.* headers to data change and schema-change records
        # only: BEGIN/END and heartbeat records carry none.
        txmeta = TransactionMonitor(TxMetaOptions.from_config(cfg), restored, epoch_start(cfg, start, restored))
    b = cfg.behaviour
    heartbeats = None
    if b.heartbeat_interval_ms > 0:
        heartbeats = HeartbeatEmitter(
            cfg.topics.heartbeat_topic,
            cfg.topic_prefix,
            b.heartbeat_interval_ms,
            key_schemas_enable=cfg.converters.key_schemas_enable,
            value_schemas_enable=cfg.converters.value_schemas_enable,
            low_watermark=b.heartbeat_low_watermark,
        )
    schema_changes = None
    if b.include_schema_changes:
        schema_changes = SchemaChangeEmitter(
            cfg.topics.schema_change_topic,
            cfg.topic_prefix,
            cfg.source.keyspace,
            key_schemas_enable=cfg.converters.key_schemas_enable,
            value_schemas_enable=cfg.converters.value_schemas_enable,
            version=DEBEZIUM_VERSION,
        )
    return Features(
        txmeta=txmeta,
        heartbeats=heartbeats,
        schema_changes=schema_changes,
        local_vgtid=cfg.transforms.use_local_vgtid,
        internal_tables=cfg.source.stream_keyspace_heartbeats,
        low_watermark=low_watermark,
    )
