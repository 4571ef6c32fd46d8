"""Topic names and Kafka's Java-client default partitioning."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rem = length & 3
    if rem == 3:
        h ^= data[n4 + 2] << 16
    if rem >= 2:
        h ^= data[n4 + 1] << 8
    if rem >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, num_partitions: int) -> int:
    """The partition the Java producer's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def producer_partitioner_config() -> dict[str, str]:
    """librdkafka setting that partitions keyed records exactly like the Java client
    (null keys go to a random partition, as the Java client's sticky partitioner may)."""
    return {"partitioner": "murmur2_random"}
