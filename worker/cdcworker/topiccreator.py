"""Create a topic the first time the task writes to it (Kafka Connect's ``maybeCreateTopic``).

The creation group (``config.topic_creation``) decides partitions, replication factor and topic
configs. Nothing here runs per record: callers ask once per topic, on its first use (a table's
first ROW, the first transaction or heartbeat record), and ``known`` remembers the answer for the
life of the task. One CreateTopics call per new topic: TOPIC_ALREADY_EXISTS means it was there (or
another task created it meanwhile), so Connect's DescribeTopics round trip before it is not needed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdcworker import kafkaclients
from cdcworker.config import KafkaConfig, TopicCreationGroup
from cdcworker.kafkaerrors import TopicSizing, broker_count, creation_refusal
from cdcworker.sink import SinkError

log = logging.getLogger(__name__)


class TopicCreationError(SinkError):
    """A missing topic could not be created: the task stops without advancing offsets."""


class TopicCreator:
    def __init__(self, admin_config: Mapping[str, object], groups: Sequence[TopicCreationGroup], timeout: float = 30.0) -> None:
        if not groups:
            raise ValueError("no topic creation group")
        self._config = dict(admin_config)
        self._groups = tuple(groups)  # the last one (default) takes every topic
        self._timeout = timeout
        self._admin: AdminClient | None = None
        self.known: set[str] = set()  # topics created or found to exist

    def group_for(self, topic: str) -> TopicCreationGroup:
        return next((g for g in self._groups if g.matches(topic)), self._groups[-1])

    def ensure(self, topic: str) -> None:
        """Create ``topic`` with its group's settings unless it is known to exist."""
        if topic in self.known:
            return
        group = self.group_for(topic)
        new = NewTopic(
            topic, num_partitions=group.partitions, replication_factor=group.replication_factor, config=dict(group.configs)
        )
        if self._admin is None:
            self._admin = kafkaclients.admin(self._config, "topic creator")
        future = self._admin.create_topics([new], operation_timeout=self._timeout)[topic]
        try:
            future.result(self._timeout)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                refusal = creation_refusal(err, topic, group_sizing(group), broker_count(self._admin))
                if refusal is not None:
                    raise refusal from exc
                raise TopicCreationError(
                    f"cannot create topic {topic!r} (topic creation group {group.name!r}: {group.partitions} "
                    f"partitions, replication factor {group.replication_factor}): {err.str()}; let the task "
                    "create topics (ACLs) or create the topic yourself, then restart the task"
                ) from exc
            log.info("topic %r already exists", topic)
        else:
            log.info(
                "created topic %r with topic creation group %r (%d partitions, replication factor %d)",
                topic, group.name, group.partitions, group.replication_factor,
            )
        self.known.add(topic)


def group_sizing(group: TopicCreationGroup) -> TopicSizing:
    """A group's sizing under its property names (``topic.creation.<group>.partitions`` ...)."""
    prefix = f"topic.creation.{group.name}."
    return TopicSizing(f"{prefix}partitions", group.partitions, f"{prefix}replication.factor", group.replication_factor)


def topic_creator(kafka: KafkaConfig) -> TopicCreator | None:
    """The creator for a ``KafkaConfig``; None when topics are left to the broker."""
    if not kafka.topic_creation:
        return None
    return TopicCreator(kafka.client_config("admin"), kafka.topic_creation)
