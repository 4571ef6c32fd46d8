"""Topic naming and Java-client partitioning."""

from __future__ import annotations

import pytest

from cdcworker.events.topics import TopicNaming, murmur2, partition_for, producer_partitioner_config


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Kafka's UtilsTest.testMurmur2 vectors.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_for_is_to_positive_mod() -> None:
    # toPositive(-973932308) = 1173551340; 1173551340 % 7 = 3, % 12 = 0.
    assert partition_for(b"21", 7) == 3
    assert partition_for(b"21", 12) == 0
    # toPositive(479470107) = 479470107 (already positive); % 10 = 7.
    assert partition_for(b"abc", 10) == 7
    assert partition_for(b"abc", 1) == 0


def test_partitioner_config_is_murmur2_random() -> None:
    assert producer_partitioner_config() == {"partitioner": "murmur2_random"}


def test_default_topic_name() -> None:
    assert TopicNaming("fulfillment").data_topic("commerce", "products", "-80") == "fulfillment.commerce.products"


def test_topic_delimiter() -> None:
    assert TopicNaming("srv", delimiter="_").data_topic("ks", "t", "-80") == "srv_ks_t"


def test_table_topic_naming_strategy() -> None:
    n = TopicNaming.from_strategy("srv", "io.debezium.connector.vitess.TableTopicNamingStrategy")
    assert n.data_topic("ks", "orders", "-80") == "srv.orders"
    o = TopicNaming.from_strategy(
        "srv", "io.debezium.connector.vitess.TableTopicNamingStrategy", override_data_change_prefix="cdc"
    )
    assert o.data_topic("ks", "orders", "-80") == "cdc.orders"
    # The override only applies to the table strategy.
    d = TopicNaming.from_strategy("srv", override_data_change_prefix="cdc")
    assert d.data_topic("ks", "orders", "-80") == "srv.ks.orders"


def test_default_topic_naming_strategy_names_a_topic_per_shard() -> None:
    """Debezium 3.5: ``TableId.databaseParts()`` (catalog = shard, table), joined without blank parts."""
    n = TopicNaming.from_strategy("srv", "io.debezium.schema.DefaultTopicNamingStrategy")
    assert n.per_shard
    assert n.data_topic("commerce", "orders", "-80") == "srv.-80.orders"
    assert n.data_topics("commerce", "orders", ["-80", "80-"]) == {"srv.-80.orders", "srv.80-.orders"}
    assert TopicNaming.from_strategy("srv", "io.debezium.schema.DefaultTopicNamingStrategy", "_").data_topic(
        "ks", "t", "0") == "srv_0_t"
    assert not TopicNaming.from_strategy("srv").per_shard


def test_invalid_topic_characters_are_replaced() -> None:
    assert TopicNaming("srv").data_topic("ks", "we$ird tab", "-80") == "srv.ks.we_ird_tab"
    assert TopicNaming("srv").data_topic("ks", "dash-ed", "-80") == "srv.ks.dash-ed"
