"""Topic names and Kafka's Java-client default partitioning."""

from __future__ import annotations

import re
from dataclasses import dataclass

# One home for Kafka's Java partitioning: the offsets store partitions its records the same way.
from cdcworker.offsets.javacompat import java_murmur2_partition as partition_for
from cdcworker.offsets.javacompat import murmur2 as murmur2

__all__ = ["TopicNaming", "murmur2", "partition_for", "producer_partitioner_config", "sanitize_topic"]

_INVALID_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._\-]")


def sanitize_topic(name: str) -> str:
    """Replace characters Kafka rejects in topic names with ``_`` (as Debezium does)."""
    return _INVALID_TOPIC_CHARS.sub("_", name)


@dataclass(frozen=True)
class TopicNaming:
    """``topic.naming.strategy``: default (schema) ``<prefix>.<keyspace>.<table>``,
    or ``TableTopicNamingStrategy`` ``<prefix-or-override>.<table>``."""

    prefix: str
    delimiter: str = "."
    table_strategy: bool = False
    override_data_change_prefix: str | None = None

    @classmethod
    def from_strategy(
        cls,
        prefix: str,
        strategy: str = "io.debezium.schema.SchemaTopicNamingStrategy",
        delimiter: str = ".",
        override_data_change_prefix: str | None = None,
    ) -> TopicNaming:
        table = strategy.endswith("TableTopicNamingStrategy")
        return cls(prefix, delimiter, table, override_data_change_prefix if table else None)

    def data_topic(self, keyspace: str, table: str) -> str:
        d = self.delimiter
        if self.table_strategy:
            return sanitize_topic(f"{self.override_data_change_prefix or self.prefix}{d}{table}")
        return sanitize_topic(f"{self.prefix}{d}{keyspace}{d}{table}")


def producer_partitioner_config() -> dict[str, str]:
    """librdkafka setting that partitions keyed records exactly like the Java client
    (null keys go to a random partition, as the Java client's sticky partitioner may)."""
    return {"partitioner": "murmur2_random"}
