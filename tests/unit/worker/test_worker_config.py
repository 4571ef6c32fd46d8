"""Worker configuration: catalogue defaults, file/env/provider loading, validation messages, redaction."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cdcworker.config import (
    PROPERTIES,
    ConfigError,
    WorkerConfig,
    catalogue,
    load_config,
    load_config_or_exit,
    operator_owned,
    property_to_env,
)
from cdcworker.config.loader import env_to_property, parse_properties

BASE = {
    "name": "inventory-connector",
    "topic.prefix": "fulfillment",
    "database.hostname": "vtgate",
    "vitess.keyspace": "commerce",
}


def load(
    overrides: dict[str, str] | None = None,
    files: list[Path] | None = None,
    env: dict[str, str] | None = None,
) -> WorkerConfig:
    return load_config(files or [], env=env or {}, overrides={**BASE, **(overrides or {})})


def problems(overrides: dict[str, str], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(overrides, env=env)
    return info.value.messages


# --- defaults -----------------------------------------------------------------------------------------------------

# Debezium Vitess connector defaults (VitessConnectorConfig, CommonConnectorConfig, Kafka Connect JsonConverter).
DEBEZIUM_DEFAULTS = {
    "database.port": 15991,
    "vitess.vgtid": "current",
    "vitess.tablet.type": "MASTER",
    "vitess.stop_on_reshard": False,
    "vitess.stream.keyspace.heartbeats": False,
    "vitess.exclude.keyspace.from.table.name": False,
    "vitess.exclude.empty.shards": False,
    "vitess.keepalive.interval.ms": 9_223_372_036_854_775_807,
    "vitess.grpc.max_inbound_message_size": 4_194_304,
    "vitess.grpc.default.load.balancing.policy": "pick_first",
    "vitess.shard.epoch.map": "",
    "vitess.inherit.epoch": False,
    "vitess.connector.generation": 0,
    "vitess.offset.storage.per.task": False,
    "vitess.offset.storage.task.key.gen": -1,
    "vitess.prev.num.tasks": -1,
    "tasks.max": 1,
    "snapshot.mode": "initial",
    "tombstones.on.delete": True,
    "decimal.handling.mode": "precise",
    "time.precision.mode": "adaptive_time_microseconds",
    "bigint.unsigned.handling.mode": "string",
    "binary.handling.mode": "bytes",
    "include.unknown.datatypes": False,
    "override.datetime.to.nullable": False,
    "schema.name.adjustment.mode": "none",
    "field.name.adjustment.mode": "none",
    "max.queue.size": 8192,
    "max.queue.size.in.bytes": 0,
    "max.batch.size": 2048,
    "poll.interval.ms": 500,
    "errors.max.retries": -1,
    "retriable.restart.connector.wait.ms": 10_000,
    "skipped.operations": ("t",),
    "include.schema.changes": False,
    "extended.headers.enabled": True,
    "event.processing.failure.handling.mode": "fail",
    "provide.transaction.metadata": False,
    "transaction.metadata.factory": "io.debezium.pipeline.txmetadata.DefaultTransactionMetadataFactory",
    "topic.naming.strategy": "io.debezium.schema.SchemaTopicNamingStrategy",
    "topic.delimiter": ".",
    "topic.cache.size": 10_000,
    "topic.transaction": "transaction",
    "topic.heartbeat.prefix": "__debezium-heartbeat",
    "heartbeat.interval.ms": 0,
    "signal.enabled.channels": ("source",),
    "key.converter.schemas.enable": True,
    "value.converter.schemas.enable": True,
    "offset.flush.interval.ms": 60_000,
    "offset.flush.timeout.ms": 5_000,
    "exactly.once.support": "requested",
    "vitess.shard": None,
    "database.user": None,
    "database.password": None,
    "table.include.list": None,
    "message.key.columns": None,
    "vitess.grpc.headers": None,
}


def test_catalogue_defaults_are_debeziums() -> None:
    assert {k: PROPERTIES[k].default for k in DEBEZIUM_DEFAULTS} == DEBEZIUM_DEFAULTS
    config = load()
    assert {k: config.properties[k] for k in DEBEZIUM_DEFAULTS} == DEBEZIUM_DEFAULTS


def test_default_config_derived_values() -> None:
    config = load()
    assert config.source.address == "vtgate:15991"
    assert config.source.keepalive_interval_ms is None
    assert config.source.start_gtid == ""  # snapshot.mode=initial copies first, whatever vitess.vgtid says
    assert config.task.task_key is None
    assert config.task.context_task_id == "0"
    assert config.offset_partition == {"server": "fulfillment"}
    assert config.topics.transaction_topic == "fulfillment.transaction"
    assert config.topics.heartbeat_topic == "__debezium-heartbeat.fulfillment"
    assert config.topics.schema_change_topic == "fulfillment"
    assert config.signals.kafka_topic == "fulfillment-signal"
    assert config.kafka.transactional is False
    assert config.kafka.transactional_id is None
    assert config.kafka.client_config("producer") == {
        "bootstrap.servers": "localhost:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert config.filters.skipped_operations == frozenset({"t"})
    assert config.warnings == ()


def test_operator_owned_names() -> None:
    assert operator_owned() == (
        "name",
        "topic.prefix",
        "tasks.max",
        "database.user",
        "database.password",
        "vitess.offset.storage.per.task",
        "vitess.offset.storage.task.key.gen",
        "vitess.prev.num.tasks",
        "shardcdc.task.id",
        "shardcdc.task.count",
        "shardcdc.task.generation",
        "shardcdc.task.prev.count",
        "shardcdc.task.history",
        "shardcdc.task.offsets.expected",
        "shardcdc.task.shards",
    )
    rows = {row["name"]: row for row in catalogue()}
    assert rows["database.port"] == {
        "name": "database.port",
        "type": "int",
        "default": "15991",
        "allowed": [],
        "description": "Port of the VTGate gRPC server.",
        "operatorOwned": False,
        "required": False,
        "group": "vitess",
    }
    assert rows["tombstones.on.delete"]["default"] == "true"
    assert rows["column.truncate.to.20.chars"]["pattern"] == r"column\.truncate\.to\.(\d+)\.chars"
    assert rows["producer.*"]["type"] == "passthrough"


# --- validation messages ---------------------------------------------------------------------------------------------


def test_every_problem_in_one_message() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            env={"SHARDCDC_SNAPSHOT_MOD": "never"},
            overrides={
                "name": "c",
                "topic.prefix": "bad prefix",
                "database.port": "15991x",
                "decimal.handling.mode": "exact",
                "tombstones.on.delete": "yes",
                "tasks.max": "3",
                "max.batch.size": "9000",
                "table.include.list": "commerce.a",
                "table.exclude.list": "commerce.b",
                "transforms": "unwrap",
                "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            },
        )
    assert str(info.value) == (
        "invalid shardcdc configuration: 11 problems\n"
        "  - database.port: '15991x' is not an integer\n"
        "  - decimal.handling.mode: 'exact' is not one of: precise, double, string\n"
        "  - snapshot.mod: unknown property (from environment variable SHARDCDC_SNAPSHOT_MOD); "
        "did you mean 'snapshot.mode'?\n"
        "  - tombstones.on.delete: 'yes' is not a boolean (true or false)\n"
        "  - database.hostname: required property is missing\n"
        "  - vitess.keyspace: required property is missing\n"
        "  - topic.prefix: 'bad prefix' may only contain letters, digits, '-', '.' and '_'\n"
        "  - vitess.offset.storage.per.task: needs to be enabled when tasks.max > 1\n"
        "  - table.exclude.list: cannot be used together with table.include.list\n"
        "  - max.queue.size: 8192 must be larger than max.batch.size (9000)\n"
        "  - transforms.unwrap.type: 'io.debezium.transforms.ExtractNewRecordState' is not supported; shardcdc "
        "implements only FilterTransactionTopicRecords, RemoveField, UseLocalVgtid of "
        "io.debezium.connector.vitess.transforms"
    )
    assert [p.key for p in info.value.problems][:2] == ["database.port", "decimal.handling.mode"]


def test_unknown_property_without_close_match() -> None:
    assert problems({"zzz.qqq": "1"}) == ["zzz.qqq: unknown property (from override)"]


def test_ranges_and_adaptive_time_precision() -> None:
    assert problems(
        {
            "database.port": "70000",
            "max.queue.size": "0",
            "time.precision.mode": "ADAPTIVE",
            "errors.max.retries": "99999999999",
        }
    ) == [
        "database.port: 70000 is above the maximum 65535",
        "errors.max.retries: '99999999999' is out of range for an int",
        "max.queue.size: 0 is below the minimum 1",
        "time.precision.mode: 'adaptive' is no longer supported; use adaptive_time_microseconds, connect or isostring",
    ]


def test_enums_are_case_insensitive_and_canonical() -> None:
    config = load(
        {
            "vitess.tablet.type": "replica",
            "snapshot.mode": "NEVER",
            "binary.handling.mode": "Base64-URL-Safe",
            "event.processing.failure.handling.mode": "ignore",
        }
    )
    assert config.source.tablet_type == "REPLICA"
    assert config.source.snapshot_mode == "never"
    assert config.behaviour.binary_handling_mode == "base64-url-safe"
    assert config.behaviour.failure_handling_mode == "skip"


def test_per_task_rules_follow_debezium() -> None:
    assert problems({"vitess.offset.storage.per.task": "true"}) == [
        "vitess.offset.storage.task.key.gen: must be 0 or more when vitess.offset.storage.per.task is enabled",
    ]
    assert problems(
        {"vitess.offset.storage.per.task": "true", "vitess.offset.storage.task.key.gen": "0"}
    ) == [
        "vitess.prev.num.tasks: must be 1 or more when vitess.offset.storage.task.key.gen is 0 or more",
    ]
    assert problems({"shardcdc.task.count": "2", "shardcdc.task.id": "2"}) == [
        "shardcdc.task.count: 2 exceeds tasks.max (1)",
        "shardcdc.task.count: more than one task needs vitess.offset.storage.per.task=true",
        "shardcdc.task.id: 2 must be less than shardcdc.task.count (2)",
        "shardcdc.task.shards: required when shardcdc.task.count > 1 (each task streams its own shards)",
    ]
    assert problems({"connector.class": "io.debezium.connector.mysql.MySqlConnector"}) == [
        "connector.class: 'io.debezium.connector.mysql.MySqlConnector' is not io.debezium.connector.vitess.VitessConnector"
    ]


def test_task_identity_and_offset_partition() -> None:
    config = load(
        {
            "tasks.max": "4",
            "vitess.offset.storage.per.task": "true",
            "vitess.offset.storage.task.key.gen": "2",
            "vitess.prev.num.tasks": "2",
            "shardcdc.task.id": "1",
            "shardcdc.task.count": "4",
            "shardcdc.task.shards": "40-80",
            "exactly.once.support": "required",
        }
    )
    assert config.task_key == "task1_4_2"
    assert list(config.offset_partition.items()) == [("server", "fulfillment"), ("task_key", "task1_4_2")]
    assert config.task.previous_task_keys() == ("task0_2_1", "task1_2_1")
    assert config.task.shards == ("40-80",)
    assert config.kafka.transactional is True
    assert config.kafka.transactional_id == "inventory-connector-task1_4_2"


def test_task_history_is_the_chain_from_the_previous_generation() -> None:
    base = {"tasks.max": "1", "vitess.offset.storage.per.task": "true", "vitess.prev.num.tasks": "2",
            "vitess.offset.storage.task.key.gen": "3"}
    assert load({**base, "shardcdc.task.history": "2:2,1:3,0:1"}).task.history == ((2, 2), (1, 3), (0, 1))
    assert load(base).task.history == ()
    assert problems({**base, "shardcdc.task.history": "2:2,x"}) == [
        "shardcdc.task.history: 'x' is not <generation>:<tasks> with generation >= 0 and tasks >= 1",
    ]
    assert problems({**base, "shardcdc.task.history": "2:0"}) == [
        "shardcdc.task.history: '2:0' is not <generation>:<tasks> with generation >= 0 and tasks >= 1",
    ]
    assert problems({**base, "shardcdc.task.history": "1:3"}) == [
        "shardcdc.task.history: starts with 1:3; it must start with the previous generation, 2:2 (vitess.prev.num.tasks)",
    ]
    assert problems({**base, "shardcdc.task.history": "2:3"}) == [
        "shardcdc.task.history: starts with 2:3; it must start with the previous generation, 2:2 (vitess.prev.num.tasks)",
    ]
    assert problems({**base, "shardcdc.task.history": "2:2,0:1,1:2"}) == [
        "shardcdc.task.history: generation 1 must be older than 0 (newest first)",
    ]


def test_task_identity_aliases_must_agree() -> None:
    base = {"tasks.max": "2", "vitess.offset.storage.per.task": "true", "vitess.prev.num.tasks": "1"}
    config = load(
        {**base, "shardcdc.task.generation": "1", "shardcdc.task.count": "2", "shardcdc.task.shards": "-80"}
    )
    assert config.task_key == "task0_2_1"
    assert problems({**base, "shardcdc.task.generation": "1", "vitess.offset.storage.task.key.gen": "2"}) == [
        "shardcdc.task.generation: 1 conflicts with vitess.offset.storage.task.key.gen=2; set one or make them equal",
    ]
    assert problems({"vitess.shard": "-80,80-,-80", "shardcdc.task.shards": "80-,c0-"}) == [
        "vitess.shard: lists -80 more than once",
        "shardcdc.task.shards: c0- not in vitess.shard (-80, 80-, -80)",
    ]


VGTID = json.dumps(
    [
        {"keyspace": "commerce", "shard": "-80", "gtid": "MySQL56/a:1-5"},
        {"keyspace": "commerce", "shard": "80-", "gtid": "MySQL56/b:1-9", "table_p_ks": []},
    ]
)


def test_vgtid_rules() -> None:
    config = load({"vitess.vgtid": VGTID, "vitess.shard": "80-,-80", "snapshot.mode": "never"})
    assert config.source.start_gtid == VGTID
    assert config.warnings == ()
    assert problems({"vitess.vgtid": VGTID}) == [
        "vitess.vgtid: a VGTID needs vitess.shard listing the same shards"
    ]
    assert problems({"vitess.vgtid": VGTID, "vitess.shard": "-80"}) == [
        "vitess.vgtid: must give a position for every shard of vitess.shard"
    ]
    assert problems({"vitess.vgtid": VGTID, "vitess.shard": "-80,c0-"}) == [
        "vitess.vgtid: shards -80, 80- do not match vitess.shard (-80, c0-)"
    ]
    assert problems({"vitess.vgtid": "[{", "vitess.shard": "-80"}) == [
        "vitess.vgtid: is not 'current', '' or a VGTID JSON array: Expecting property name enclosed in double quotes "
        "at position 2"
    ]
    assert problems(
        {
            "vitess.vgtid": VGTID.replace("commerce", "other", 1),
            "vitess.shard": "-80,80-",
            "snapshot.mode": "never",
        }
    ) == ["vitess.vgtid: entry 0 is for keyspace 'other', not vitess.keyspace 'commerce'"]
    warned = load({"vitess.vgtid": VGTID, "vitess.shard": "-80,80-"})
    assert warned.warnings == (
        "vitess.vgtid is ignored while snapshot.mode=initial (Debezium copies from the start); "
        "set snapshot.mode=never to start at this VGTID",
    )


def test_formats_of_structured_strings() -> None:
    assert problems(
        {
            "vitess.grpc.headers": "x-a:1,broken,x-b:2:3",
            "custom.metric.tags": "k1=v1,9bad=v",
            "message.key.columns": "commerce.a:id;nocolon;commerce.b:(",
            "skipped.operations": "c,x",
            "vitess.shard.epoch.map": '{"-80":"one"}',
            "vitess.inherit.epoch": "true",
            "signal.data.collection": "other.signals",
        }
    ) == [
        'vitess.shard.epoch.map: must be a JSON object of shard to epoch, e.g. {"-80":0,"80-":1}',
        "vitess.inherit.epoch: needs transaction.metadata.factory="
        "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory",
        "skipped.operations: x not in: c, u, d, t, none",
        "vitess.grpc.headers: entry 'broken' is not name:value",
        "vitess.grpc.headers: entry 'x-b:2:3' is not name:value",
        "custom.metric.tags: '9bad' is not a valid metric label name",
        "message.key.columns: entry 'nocolon' is not <keyspace>.<table>:<column regex>,...",
        "message.key.columns: '(' is not a valid regular expression: missing ), unterminated subpattern at position 0",
        "signal.data.collection: keyspace 'other' is not vitess.keyspace",
    ]
    config = load(
        {
            "vitess.grpc.headers": "x-envoy-upstream-rq-timeout-ms:0,x-envoy-max-retries:2",
            "custom.metric.tags": "k1=v1,k2=v2",
            "message.key.columns": "commerce.a:id,^c.*;commerce.b:x",
        }
    )
    assert config.source.grpc_headers == (
        ("x-envoy-upstream-rq-timeout-ms", "0"),
        ("x-envoy-max-retries", "2"),
    )
    assert config.behaviour.custom_metric_tags == (("k1", "v1"), ("k2", "v2"))
    [(table_a, cols_a), (table_b, cols_b)] = config.filters.message_key_columns
    assert table_a.fullmatch("COMMERCE.A") and [c.pattern for c in cols_a] == ["id", "^c.*"]
    assert table_b.pattern == "commerce.b" and [c.pattern for c in cols_b] == ["x"]


def test_filters_and_pattern_properties() -> None:
    config = load(
        {
            "table.include.list": r"commerce\.orders,commerce\.cust.*",
            "column.exclude.list": r"commerce\.orders\.secret",
            "column.truncate.to.20.chars": r"commerce\.orders\.note",
            "column.truncate.to.5.chars": r"commerce\.orders\.a,commerce\.orders\.b",
            "column.mask.with.10.chars": r"commerce\.cust\.ssn",
            "column.propagate.source.type": r".*\.price",
            "skipped.operations": "none",
        }
    )
    assert [p.pattern for p in config.filters.table_include] == [r"commerce\.orders", r"commerce\.cust.*"]
    assert config.filters.table_include[1].fullmatch("Commerce.Customers")
    assert [(n, [p.pattern for p in ps]) for n, ps in config.filters.column_truncate] == [
        (5, [r"commerce\.orders\.a", r"commerce\.orders\.b"]),
        (20, [r"commerce\.orders\.note"]),
    ]
    assert [(n, [p.pattern for p in ps]) for n, ps in config.filters.column_mask] == [
        (10, [r"commerce\.cust\.ssn"])
    ]
    assert config.filters.skipped_operations == frozenset()
    assert problems(
        {
            "column.truncate.to.0.chars": "a",
            "column.mask.with.3.chars": "a(",
            "column.truncate.to.x.chars": "a",
        }
    ) == [
        "column.mask.with.3.chars: 'a(' is not a valid regular expression: missing ), unterminated subpattern at position 1",
        "column.truncate.to.0.chars: the length in the property name must be a positive integer",
        "column.truncate.to.x.chars: unknown property (from override); did you mean 'column.truncate.to.20.chars'?",
    ]


def test_debezium_transforms_for_efficient_transaction_metadata() -> None:
    # The seed document's example, verbatim.
    config = load(
        {
            "provide.transaction.metadata": "true",
            "transaction.metadata.factory": "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory",
            "transforms": "filterTransactionTopicRecords,removeField,useLocalVgtid",
            "transforms.filterTransactionTopicRecords.type": "io.debezium.connector.vitess.transforms.FilterTransactionTopicRecords",
            "transforms.removeField.type": "io.debezium.connector.vitess.transforms.RemoveField",
            "transforms.removeField.field_names": "transaction.id",
            "transforms.useLocalVgtid.type": "io.debezium.connector.vitess.transforms.UseLocalVgtid",
        }
    )
    assert config.transactions.provide_metadata and config.transactions.ordered
    assert config.transforms.filter_transaction_topic_records
    assert config.transforms.remove_fields == ("transaction.id",)
    assert config.transforms.use_local_vgtid
    assert [t.alias for t in config.transforms.chain] == [
        "filterTransactionTopicRecords",
        "removeField",
        "useLocalVgtid",
    ]
    assert problems(
        {
            "transforms": "rf,x",
            "transforms.rf.type": "io.debezium.connector.vitess.transforms.RemoveField",
            "transforms.rf.negate": "true",
            "transforms.orphan.type": "io.debezium.connector.vitess.transforms.UseLocalVgtid",
        }
    ) == [
        "transforms.orphan.type: alias 'orphan' is not listed in transforms",
        "transforms.rf.negate: not a setting of RemoveField",
        "transforms.rf.field_names: required for RemoveField",
        "transforms.x.type: required for every alias listed in transforms",
    ]


def test_exactly_once_conflicts() -> None:
    assert problems(
        {
            "exactly.once.source.support": "enabled",
            "producer.enable.idempotence": "false",
            "producer.acks": "1",
            "producer.max.in.flight.requests.per.connection": "10",
            "producer.transactional.id": "mine",
            "consumer.isolation.level": "read_uncommitted",
        }
    ) == [
        "producer.transactional.id: is derived by shardcdc from name and task key; remove it",
        "producer.enable.idempotence: must be true for exactly-once delivery",
        "producer.acks: must be all for exactly-once delivery",
        "producer.max.in.flight.requests.per.connection: must be 5 or less for exactly-once delivery",
        "consumer.isolation.level: must be read_committed for exactly-once delivery",
    ]
    # Without exactly-once the same producer settings are the user's business.
    config = load(
        {
            "producer.acks": "1",
            "producer.linger.ms": "5",
            "exactly.once.source.support": "enabled",
            "exactly.once.support": "disabled",
        }
    )
    assert config.kafka.transactional is False
    assert dict(config.kafka.producer) == {"acks": "1", "linger.ms": "5"}


def test_producer_buffer_is_bounded_and_the_user_setting_wins() -> None:
    from cdcworker.config.clients import producer_config

    # librdkafka's record buffer bounds the worker's memory (BENCHMARKS.md, "Memory"); a
    # producer.* property is passed through over shardcdc's defaults.
    conf = producer_config(load({}))
    assert conf["queue.buffering.max.kbytes"] == 16384
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    conf = producer_config(load({"producer.queue.buffering.max.kbytes": "65536", "producer.linger.ms": "0"}))
    assert conf["queue.buffering.max.kbytes"] == "65536" and conf["linger.ms"] == "0"


def test_tls_rules(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert problems(
        {"shardcdc.vitess.tls.ca.file": str(ca), "shardcdc.vitess.tls.cert.file": str(tmp_path / "no.pem")}
    ) == [
        "shardcdc.vitess.tls.ca.file: needs shardcdc.vitess.tls.enabled=true",
        "shardcdc.vitess.tls.key.file: must be set together with shardcdc.vitess.tls.cert.file",
        f"shardcdc.vitess.tls.cert.file: file {tmp_path / 'no.pem'} does not exist",
    ]
    config = load({"shardcdc.vitess.tls.enabled": "true", "shardcdc.vitess.tls.ca.file": str(ca)})
    assert config.source.tls.enabled and config.source.tls.ca_file == str(ca)


def test_kafka_client_settings_pass_through_translated_for_librdkafka() -> None:
    config = load(
        {
            "bootstrap.servers": "k1:9092, k2:9092",
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
            'password="p";',
            "producer.compression.type": "lz4",
            "admin.request.timeout.ms": "1000",
            "topic.creation.default.cleanup.policy": "compact",
        }
    )
    assert config.kafka.client_config("producer") == {
        "bootstrap.servers": "k1:9092,k2:9092",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "security.protocol": "SASL_SSL",
        "compression.type": "lz4",
    }
    assert config.kafka.client_config("admin")["request.timeout.ms"] == "1000"
    assert dict(config.kafka.topic_creation[-1].configs) == {"cleanup.policy": "compact"}
    assert config.redacted()["sasl.jaas.config"] == "[hidden]"


# --- file formats ------------------------------------------------------------------------------------------------


def test_java_properties_syntax() -> None:
    text = (
        "# comment\n"
        "! also a comment \\\n"
        "name = inventory\\\n"
        "       -connector\n"
        "topic.prefix:fulfillment\n"
        "database.hostname vtgate\n"
        "   vitess.keyspace=co\\u006dmerce\n"
        "key\\ with\\=sep = a\\tb\\\\\n"
        "empty=\n"
        "\n"
        "trailing = value   \r\n"
        "odd\\\\\\\n"
        "  = continued\n"
    )
    assert parse_properties(text) == [
        (3, "name", "inventory-connector"),
        (5, "topic.prefix", "fulfillment"),
        (6, "database.hostname", "vtgate"),
        (7, "vitess.keyspace", "commerce"),
        (8, "key with=sep", "a\tb\\"),
        (9, "empty", ""),
        (11, "trailing", "value   "),
        (12, "odd\\", "continued"),
    ]


def test_properties_file_with_env_override(tmp_path: Path) -> None:
    path = tmp_path / "connector.properties"
    path.write_text(
        "name=inventory-connector\ntopic.prefix=fulfillment\ndatabase.hostname=vtgate\n"
        "vitess.keyspace=commerce\ndatabase.port=1\nsnapshot.modee=never\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config([path], env={"SHARDCDC_DATABASE_PORT": "15999"})
    assert info.value.messages == [
        f"snapshot.modee: unknown property (from {path}:6); did you mean 'snapshot.mode'?"
    ]
    path.write_text(path.read_text().replace("snapshot.modee", "snapshot.mode"))
    config = load_config(
        [path],
        env={
            "SHARDCDC_DATABASE_PORT": "15999",
            "SHARDCDC_VITESS_STOP___ON___RESHARD": "true",
            "SHARDCDC_LOG_LEVEL": "debug",
            "OTHER_VAR": "x",
        },
    )
    assert config.source.port == 15999
    assert config.source.stop_on_reshard is True
    assert config.source.snapshot_mode == "never"


def test_env_name_mapping() -> None:
    for key in (
        "database.hostname",
        "vitess.grpc.max_inbound_message_size",
        "topic.heartbeat.prefix",
        "signal.kafka.topic",
        "a-b.c_d",
    ):
        assert env_to_property(property_to_env(key)) == key
    assert property_to_env("vitess.stop_on_reshard") == "SHARDCDC_VITESS_STOP___ON___RESHARD"
    assert property_to_env("a-b") == "SHARDCDC_A__B"


def test_yaml_nested_and_json_connect_payload(tmp_path: Path) -> None:
    yml = tmp_path / "c.yaml"
    yml.write_text(
        "name: inventory-connector\n"
        "topic:\n  prefix: fulfillment\n"
        "database:\n  hostname: vtgate\n  port: 15992\n"
        "vitess:\n  keyspace: commerce\n  shard: ['-80', '80-']\n  stop_on_reshard: true\n"
        "tombstones.on.delete: false\n"
        "heartbeat.interval.ms: null\n"
    )
    config = load_config([yml], env={})
    assert (config.source.port, config.source.shards, config.source.stop_on_reshard) == (
        15992,
        ("-80", "80-"),
        True,
    )
    assert config.behaviour.tombstones_on_delete is False
    assert config.behaviour.heartbeat_interval_ms == 0
    js = tmp_path / "c.json"
    js.write_text(
        json.dumps(
            {
                "name": "from-rest",
                "config": {
                    "connector.class": "io.debezium.connector.vitess.VitessConnector",
                    "topic.prefix": "p",
                    "database.hostname": "h",
                    "database.port": "15991",
                    "vitess.keyspace": "ks",
                    "tasks.max": 1,
                },
            }
        )
    )
    config = load_config([js], env={})
    assert (config.name, config.topic_prefix, config.task.tasks_max) == ("from-rest", "p", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text("database.port: 1\ndatabase:\n  port: 2\nlist: [{a: 1}]\n")
    with pytest.raises(ConfigError) as info:
        load_config([bad, tmp_path / "missing.json"], env={}, overrides=BASE)
    assert info.value.messages == [
        f"database.port: set twice in {bad} (as a dotted key and as a nested mapping)",
        f"list: a list of scalars is expected in {bad}",
        f"<file>: cannot read configuration file {tmp_path / 'missing.json'}: No such file or directory",
    ]


# --- config providers and secrets ------------------------------------------------------------------------------------


def test_config_providers(tmp_path: Path) -> None:
    creds = tmp_path / "creds.properties"
    creds.write_text("user=vitess\npassword=s3cr3t-from-props\n")
    secret_file = tmp_path / "kafka-password"
    secret_file.write_text("kafka-s3cr3t\n")
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "port").write_text("15993")
    config = load(
        {
            "config.providers": "file,directory,env",
            "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
            "config.providers.directory.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "database.user": f"${{file:{creds}:user}}",
            "database.password": f"${{file:{creds}:password}}",
            "producer.sasl.password": f"${{file:{secret_file}}}",
            "database.port": f"${{directory:{secret_dir}:port}}",
            "vitess.keyspace": "${env:KS}",
        },
        env={"KS": "commerce2"},
    )
    assert config.source.user == "vitess"
    assert config.source.password is not None and config.source.password.reveal() == "s3cr3t-from-props"
    assert config.kafka.producer["sasl.password"] == "kafka-s3cr3t"
    assert config.source.port == 15993
    assert config.source.keyspace == "commerce2"
    assert config.redacted()["database.user"] == "[hidden]"  # provider-resolved values are secret
    assert config.redacted()["vitess.keyspace"] == "[hidden]"


def test_config_provider_failures_hide_values(tmp_path: Path) -> None:
    secret_file = tmp_path / "port"
    secret_file.write_text("not-a-port")
    assert problems(
        {
            "database.user": "${file:/nonexistent/creds.properties:user}",
            "database.password": f"${{file:{secret_file}:nokey}}",
            "vitess.keyspace": "${env:MISSING_VAR}",
            "topic.prefix": "${vault:secret/x:y}",
            "database.port": f"${{file:{secret_file}}}",
            "config.providers": "file",
            "config.providers.file.class": "com.example.Nope",
        }
    ) == [
        "config.providers.file.class: 'com.example.Nope' is not supported; use one of: "
        "org.apache.kafka.common.config.provider.FileConfigProvider, "
        "org.apache.kafka.common.config.provider.DirectoryConfigProvider, "
        "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        f"database.password: cannot resolve config provider reference: key 'nokey' not found in {secret_file}",
        "database.user: cannot resolve config provider reference: cannot read /nonexistent/creds.properties: "
        "No such file or directory",
        "topic.prefix: cannot resolve config provider reference: unknown config provider 'vault' "
        "(built in: file, directory, env)",
        "vitess.keyspace: cannot resolve config provider reference: environment variable MISSING_VAR is not set",
        "database.port: [hidden] is not an integer",
    ]


def test_secrets_never_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text('org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                             'password="pw-from-file-XYZ";')
    caplog.set_level(logging.DEBUG)
    config = load(
        {
            "database.user": "u",
            "database.password": "literal-pw-ABC",
            "producer.ssl.key.password": "key-pw-DEF",
            "sasl.jaas.config": f"${{file:{password_file}}}",
            "vitess.vgtid": "current",
        }
    )
    text = caplog.text + repr(config) + str(config) + repr(config.source) + repr(config.kafka)
    assert config.kafka.client_config("producer")["sasl.password"] == "pw-from-file-XYZ"
    assert "configuration loaded" in caplog.text and "vitess.keyspace" in caplog.text
    for secret in ("literal-pw-ABC", "key-pw-DEF", "pw-from-file-XYZ"):
        assert secret not in text
    assert config.redacted() == {
        "database.hostname": "vtgate",
        "database.password": "[hidden]",
        "database.user": "u",
        "name": "inventory-connector",
        "producer.ssl.key.password": "[hidden]",
        "sasl.jaas.config": "[hidden]",
        "topic.prefix": "fulfillment",
        "vitess.keyspace": "commerce",
        "vitess.vgtid": "current",
    }
    assert str(config.source.password) == "[hidden]"


def test_load_config_or_exit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        load_config_or_exit(env={}, overrides={"database.password": "hunter2"})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "invalid shardcdc configuration: 5 problems\n"
        "  - name: required property is missing\n"
        "  - topic.prefix: required property is missing\n"
        "  - database.hostname: required property is missing\n"
        "  - vitess.keyspace: required property is missing\n"
        "  - database.password: set without database.user; static credentials need both\n"
    )
    assert load_config_or_exit(env={}, overrides=BASE).name == "inventory-connector"


def test_tooling_environment_variables_are_not_read_as_properties() -> None:
    from cdcworker.config.loader import RawConfig, read_env

    raw = RawConfig()
    read_env(
        {
            "SHARDCDC_KAFKA_HOME": "/cache/kafka",
            "SHARDCDC_CACHE": "/cache",
            "SHARDCDC_OPERATOR_RESYNC_SECONDS": "5",
            "SHARDCDC_TOPIC_PREFIX": "fromenv",
        },
        raw,
    )
    assert dict(raw.values) == {"topic.prefix": "fromenv"}
