"""``topicread.visible_topic`` (the offsets store's and the backfill progress store's wait after
creating their topic) waits for a topic created a moment ago to show in the metadata, unknown or
leaderless at first, instead of failing the task; a real error still fails at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError

from cdcworker.topicread import TopicNotVisible, visible_topic

TOPIC = "c1-offsets"


@dataclass
class Meta:
    error: KafkaError | None
    partitions: dict[int, object] = field(default_factory=dict)


@dataclass
class Answers:
    """list_topics answers in turn (the last repeats); counts the calls."""

    metas: list[Meta | None]
    calls: int = 0

    def list_topics(self, topic: str, timeout: float) -> Any:  # Any: ClusterMetadata's shape
        meta = self.metas[min(self.calls, len(self.metas) - 1)]
        self.calls += 1
        return type("ClusterMetadata", (), {"topics": {} if meta is None else {topic: meta}})()


def test_a_topic_unknown_then_leaderless_is_waited_for() -> None:
    ready = Meta(None, dict.fromkeys(range(25), object()))
    admin = Answers([None, Meta(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)), Meta(None), ready])
    assert len(visible_topic(admin, TOPIC, 5.0).partitions) == 25
    assert admin.calls == 4


def test_a_real_error_fails_at_once_with_its_name() -> None:
    admin = Answers([Meta(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))])
    with pytest.raises(TopicNotVisible, match=r"c1-offsets.*TOPIC_AUTHORIZATION_FAILED") as info:
        visible_topic(admin, TOPIC, 5.0)
    assert admin.calls == 1 and not info.value.timed_out


def test_a_topic_that_never_shows_fails_after_the_timeout() -> None:
    admin = Answers([Meta(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))])
    with pytest.raises(TopicNotVisible, match="UNKNOWN_TOPIC_OR_PART") as info:
        visible_topic(admin, TOPIC, 0.3)
    assert admin.calls >= 2 and info.value.timed_out
