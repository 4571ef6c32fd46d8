"""A real single-node Apache Kafka broker (KRaft) on loopback, for tests, the demo and benchmarks."""

from localkafka.broker import KafkaBroker, kafka_home
from localkafka.client import ConsumedRecord, await_markers, consume_all, create_topics, produce
from localkafka.security import BrokerSecurity

__all__ = [
    "BrokerSecurity", "ConsumedRecord", "KafkaBroker", "await_markers", "consume_all", "create_topics", "kafka_home", "produce",
]
