"""topic.creation.*: missing topics are created on first use, with their creation group's settings.

Against a broker that does not auto-create topics, so every topic the worker writes to exists only
because the worker created it, with exactly the partitions and configs of its group.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
from worker_fixtures import running_task, wait_for, worker_config

from cdcworker import exitcodes
from cdcworker.config import load_config
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

DDL = [
    "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(64), PRIMARY KEY (id))",
    "CREATE TABLE orders (id BIGINT NOT NULL, total BIGINT, PRIMARY KEY (id))",
    "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR(64), PRIMARY KEY (id))",
    "CREATE TABLE empty (id BIGINT NOT NULL, PRIMARY KEY (id))",
]


@pytest.fixture(scope="module")
def strict_broker() -> Iterator[KafkaBroker]:
    """A broker without auto-creation: a topic exists only if the worker created it."""
    with KafkaBroker(extra_config={"auto.create.topics.enable": "false"}) as broker:
        yield broker


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("commerce", ["-80", "80-"], ddl=DDL)
        for i in (1, 2, 3):
            s.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'c{i}')", "commerce")
            s.execute(f"INSERT INTO orders (id, total) VALUES ({i}, {i * 10})", "commerce")
            s.execute(f"INSERT INTO items (id, name) VALUES ({i}, 'i{i}')", "commerce")
        yield s


def _groups(prefix: str) -> dict[str, str]:
    return {
        "topic.creation.default.partitions": "2",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.retention.ms": "7200000",
        "topic.creation.groups": "big,rest",
        # First match wins: orders matches both groups and is created by big.
        "topic.creation.big.include": rf"{prefix}\.commerce\.orders, {prefix}\.commerce\.nothing",
        "topic.creation.big.partitions": "5",
        "topic.creation.big.max.message.bytes": "2000000",
        "topic.creation.rest.include": rf"{prefix}\.commerce\..*",
        "topic.creation.rest.exclude": rf"{prefix}\.commerce\.customer",
        "topic.creation.rest.cleanup.policy": "compact",
    }


def _topics(broker: KafkaBroker, prefix: str) -> dict[str, int]:
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    return {name: len(t.partitions) for name, t in meta.topics.items() if prefix in name and "offsets" not in name}


def _configs(broker: KafkaBroker, topic: str) -> dict[str, str]:
    """The topic's own (dynamic) configs, as set at creation."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer arrives
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def _count_creations(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Topics named in every CreateTopics request of this process."""
    requested: Counter[str] = Counter()
    create = AdminClient.create_topics

    def counting(self: AdminClient, new_topics: list[Any], **kwargs: Any) -> Any:
        requested.update(t.topic for t in new_topics)
        return create(self, new_topics, **kwargs)

    monkeypatch.setattr(AdminClient, "create_topics", counting)
    return requested


def test_topics_are_created_on_first_use_with_their_groups_settings(
    sim: VTGateSim, strict_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = "tc1"
    extra = {
        "snapshot.mode": "initial",
        "provide.transaction.metadata": "true",
        "heartbeat.interval.ms": "1000",
        **_groups(prefix),
    }
    cfg = worker_config(strict_broker, sim.address, "commerce", prefix=prefix, extra=extra)
    requested = _count_creations(monkeypatch)
    heartbeat = f"__debezium-heartbeat.{prefix}"
    data = [f"{prefix}.commerce.{t}" for t in ("customer", "orders", "items")]
    with running_task(cfg) as run:
        # 9 copied rows, then one streamed change per table.
        wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 9, what="the copied rows")
        sim.execute("INSERT INTO customer (id, email) VALUES (4, 'c4')", "commerce")
        sim.execute("INSERT INTO orders (id, total) VALUES (4, 40)", "commerce")
        sim.execute("INSERT INTO items (id, name) VALUES (4, 'i4')", "commerce")
        wait_for(lambda: heartbeat in _topics(strict_broker, prefix), what="the heartbeat topic")
        wait_for(lambda: all(len(consume_all(strict_broker.bootstrap, t)) == 4 for t in data), what="4 records per table")
        assert run.task.sink is not None and run.task.sink.topics is not None
        known = set(run.task.sink.topics.known)
        result = run.stop()
    assert result.exit_code == exitcodes.OK, result.reason

    # Exactly the topics written to: the empty table's FIELD event alone creates nothing.
    assert _topics(strict_broker, prefix) == {
        f"{prefix}.commerce.customer": 2,  # default group (excluded from rest)
        f"{prefix}.commerce.orders": 5,  # big: its own partitions
        f"{prefix}.commerce.items": 2,  # rest: the default group's partitions
        f"{prefix}.transaction": 2,
        heartbeat: 2,
    }
    assert known == set(_topics(strict_broker, prefix))
    # One CreateTopics per topic (the offsets topic is the offset store's own request).
    assert {t: n for t, n in requested.items() if t != cfg.kafka.offsets_topic} == dict.fromkeys(known, 1)
    # Topic configs are a group's own (not inherited from default).
    assert _configs(strict_broker, f"{prefix}.commerce.customer") == {"retention.ms": "7200000"}
    assert _configs(strict_broker, f"{prefix}.commerce.orders") == {"max.message.bytes": "2000000"}
    assert _configs(strict_broker, f"{prefix}.commerce.items") == {"cleanup.policy": "compact"}
    assert _configs(strict_broker, f"{prefix}.transaction") == {"retention.ms": "7200000"}
    for topic in data:
        ids = sorted(json.loads(r.value)["payload"]["after"]["id"] for r in consume_all(strict_broker.bootstrap, topic))
        assert ids == [1, 2, 3, 4], topic

    # A restart asks again (a new task knows no topic) and takes TOPIC_ALREADY_EXISTS as success.
    requested.clear()
    sim.execute("INSERT INTO orders (id, total) VALUES (5, 50)", "commerce")
    with running_task(cfg) as run:
        wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 1, what="the new order")
        result = run.stop()
    assert result.exit_code == exitcodes.OK, result.reason
    assert requested[f"{prefix}.commerce.orders"] == 1
    assert [json.loads(r.value)["payload"]["after"]["id"] for r in consume_all(strict_broker.bootstrap, data[1])][-1] == 5
    assert _topics(strict_broker, prefix)[f"{prefix}.commerce.orders"] == 5


def test_a_topic_that_cannot_be_created_fails_the_task_with_the_reason(sim: VTGateSim, strict_broker: KafkaBroker) -> None:
    prefix = "tc2"
    extra = {"snapshot.mode": "initial", "topic.creation.default.replication.factor": "3"}
    cfg = worker_config(strict_broker, sim.address, "commerce", prefix=prefix, extra=extra)
    with running_task(cfg) as run:
        result = run.wait(60)
    assert result.exit_code == exitcodes.FAILED
    # A setting Kafka refuses: one line naming it, its value and the broker count (issue 27).
    assert result.reason == (
        f"cannot create topic '{prefix}.commerce.customer': topic.creation.default.replication.factor=3 but the "
        "Kafka cluster has 1 broker; set topic.creation.default.replication.factor to at most 1 (or -1 for the "
        "broker's default.replication.factor)"
    ), result.reason
    assert _topics(strict_broker, prefix) == {}


def _load(extra: dict[str, str]) -> Any:
    base = {"name": "c", "topic.prefix": "p", "database.hostname": "h", "vitess.keyspace": "k", "bootstrap.servers": "b:9092"}
    return load_config([], env={}, overrides={**base, **extra})


def test_topic_creation_is_used_only_when_configured_as_in_kafka_connect() -> None:
    assert _load({}).kafka.topic_creation == ()
    assert _load({"topic.creation.enable": "true"}).kafka.topic_creation == ()
    assert _load({"topic.creation.enable": "false", "topic.creation.default.partitions": "3"}).kafka.topic_creation == ()
    (default,) = _load({"topic.creation.default.replication.factor": "1"}).kafka.topic_creation
    assert (default.name, default.partitions, default.replication_factor, dict(default.configs)) == ("default", 1, 1, {})


def test_groups_match_in_order_and_inherit_sizes_but_not_configs() -> None:
    from cdcworker.topiccreator import TopicCreator

    groups = _load(_groups("p")).kafka.topic_creation
    creator = TopicCreator({}, groups)
    chosen = {t: creator.group_for(t) for t in ("p.commerce.orders", "p.commerce.items", "p.commerce.customer", "p.transaction", "P.commerce.items")}
    assert {t: (g.name, g.partitions, g.replication_factor, dict(g.configs)) for t, g in chosen.items()} == {
        "p.commerce.orders": ("big", 5, 1, {"max.message.bytes": "2000000"}),
        "p.commerce.items": ("rest", 2, 1, {"cleanup.policy": "compact"}),
        "p.commerce.customer": ("default", 2, 1, {"retention.ms": "7200000"}),
        "p.transaction": ("default", 2, 1, {"retention.ms": "7200000"}),
        "P.commerce.items": ("default", 2, 1, {"retention.ms": "7200000"}),  # Java regexes are case-sensitive
    }
    # A group without include takes no topic.
    (lone, _) = _load({"topic.creation.groups": "lone", "topic.creation.lone.partitions": "9"}).kafka.topic_creation
    assert not lone.matches("p.commerce.orders") and lone.partitions == 9


def test_topic_creation_problems_are_listed() -> None:
    from cdcworker.config import ConfigError

    with pytest.raises(ConfigError) as info:
        _load(
            {
                "topic.creation.groups": "a,b,a",
                "topic.creation.a.include": "(unclosed",
                "topic.creation.a.partitions": "0",
                "topic.creation.b.replication.factor": "40000",
                "topic.creation.c.partitions": "2",
                "topic.creation.default.partitions": "0",
            }
        )
    assert info.value.messages == [
        "topic.creation.groups: lists a more than once",
        "topic.creation.default.partitions: number of partitions must be positive, or -1 to use the broker's default",
        "topic.creation.a.include: '(unclosed' is not a valid regular expression: missing ), unterminated subpattern at position 0",
        "topic.creation.a.partitions: number of partitions must be positive, or -1 to use the broker's default",
        "topic.creation.b.replication.factor: replication factor must be positive and at most 32767, or -1 to use the broker's default",
        "topic.creation.c.partitions: group 'c' is not listed in topic.creation.groups",
    ]
    warned = _load({"topic.creation.default.include": "x.*", "topic.creation.default.replication.factor": "1"})
    assert warned.warnings == ("topic.creation.default.include is ignored: the default group takes every topic no other group takes",)
