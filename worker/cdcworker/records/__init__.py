"""Records that are not row changes: heartbeats and schema changes."""

from cdcworker.records.heartbeat import HEARTBEAT_PARTITION, HeartbeatEmitter, heartbeat_record
from cdcworker.records.schema_change import (
    SCHEMA_CHANGE_PARTITION,
    SchemaChangeEmitter,
    ddl_operation_and_table,
    schema_change_record,
)

__all__ = [
    "HEARTBEAT_PARTITION",
    "SCHEMA_CHANGE_PARTITION",
    "HeartbeatEmitter",
    "SchemaChangeEmitter",
    "ddl_operation_and_table",
    "heartbeat_record",
    "schema_change_record",
]
