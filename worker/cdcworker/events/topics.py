"""Topic names and Kafka's Java-client default partitioning."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

# One home for Kafka's Java partitioning: the offsets store partitions its records the same way.
from cdcworker.offsets.javacompat import java_murmur2_partition as partition_for
from cdcworker.offsets.javacompat import murmur2 as murmur2

__all__ = ["TopicNaming", "TopicStrategy", "murmur2", "partition_for", "producer_partitioner_config", "sanitize_topic"]

_INVALID_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._\-]")


def sanitize_topic(name: str) -> str:
    """Replace characters Kafka rejects in topic names with ``_`` (as Debezium does)."""
    return _INVALID_TOPIC_CHARS.sub("_", name)


class TopicStrategy(enum.Enum):
    """Which parts of Debezium's Vitess ``TableId`` (catalog = shard, schema = keyspace, table)
    name a data topic, per ``topic.naming.strategy``."""

    SCHEMA = "schema"  # SchemaTopicNamingStrategy: TableId.schemaParts(), <prefix>.<keyspace>.<table>
    DEFAULT = "default"  # DefaultTopicNamingStrategy: TableId.databaseParts(), <prefix>.<shard>.<table>
    TABLE = "table"  # the Vitess TableTopicNamingStrategy: <prefix-or-override>.<table>

    @classmethod
    def of(cls, strategy: str) -> TopicStrategy:
        if strategy.endswith(".DefaultTopicNamingStrategy"):
            return cls.DEFAULT
        return cls.TABLE if strategy.endswith("TableTopicNamingStrategy") else cls.SCHEMA


@dataclass(frozen=True)
class TopicNaming:
    """``topic.naming.strategy``: default (schema) ``<prefix>.<keyspace>.<table>``,
    ``DefaultTopicNamingStrategy`` ``<prefix>.<shard>.<table>`` (one topic per shard and table,
    as Debezium 3.5 writes it), or ``TableTopicNamingStrategy`` ``<prefix-or-override>.<table>``.
    Schema-change, heartbeat and transaction topics are the same under the first two."""

    prefix: str
    delimiter: str = "."
    strategy: TopicStrategy = TopicStrategy.SCHEMA
    override_data_change_prefix: str | None = None

    @classmethod
    def from_strategy(
        cls,
        prefix: str,
        strategy: str = "io.debezium.schema.SchemaTopicNamingStrategy",
        delimiter: str = ".",
        override_data_change_prefix: str | None = None,
    ) -> TopicNaming:
        kind = TopicStrategy.of(strategy)
        return cls(prefix, delimiter, kind, override_data_change_prefix if kind is TopicStrategy.TABLE else None)

    @property
    def per_shard(self) -> bool:
        """One topic per shard and table (so per-topic state is per shard too)."""
        return self.strategy is TopicStrategy.DEFAULT

    def data_topic(self, keyspace: str, table: str, shard: str) -> str:
        d = self.delimiter
        if self.strategy is TopicStrategy.TABLE:
            return sanitize_topic(f"{self.override_data_change_prefix or self.prefix}{d}{table}")
        # Debezium's AbstractTopicNamingStrategy.mkString leaves out blank parts.
        middle = shard if self.strategy is TopicStrategy.DEFAULT else keyspace
        return sanitize_topic(d.join(p for p in (self.prefix, middle, table) if p.strip()))

    def data_topics(self, keyspace: str, table: str, shards: Iterable[str]) -> set[str]:
        """Every topic the table's rows of these shards go to."""
        return {self.data_topic(keyspace, table, s) for s in shards}


def producer_partitioner_config() -> dict[str, str]:
    """librdkafka setting that partitions keyed records exactly like the Java client
    (null keys go to a random partition, as the Java client's sticky partitioner may)."""
    return {"partitioner": "murmur2_random"}
