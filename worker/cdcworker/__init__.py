"""shardcdc worker: streams Vitess shards over VStream into Kafka as Debezium-compatible events."""

__version__ = "0.1.0"
