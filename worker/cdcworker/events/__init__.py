"""Vitess FIELD/ROW events → Debezium change records in Kafka Connect JsonConverter bytes.

Planning (``TablePlan.compile``) happens once per FIELD event; ``TablePlan.encode_change``
is the per-row hot path.
"""

from cdcworker.events.encoder import EncoderConfig, OutRecord, TablePlan
from cdcworker.events.source import SourceContext
from cdcworker.events.topics import TopicNaming, murmur2, partition_for, producer_partitioner_config
from cdcworker.events.types import TypeOptions

__all__ = [
    "EncoderConfig",
    "OutRecord",
    "SourceContext",
    "TablePlan",
    "TopicNaming",
    "TypeOptions",
    "murmur2",
    "partition_for",
    "producer_partitioner_config",
]
