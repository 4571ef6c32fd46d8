"""Offsets: VGTID positions stored in Kafka Connect's offsets-topic format, and generation migration.

A user moving between Debezium's Vitess connector and shardcdc with the same offsets topic and
connector name continues from the other's positions: keys and values are byte-identical to what
Connect + Debezium write (reference ``debezium-vitess-behaviour.md`` §2).

Public API
==========

Positions (``vgtid``)
    ``Vgtid`` (ordered ``ShardGtid`` tuple), ``ShardGtid(keyspace, shard, gtid, table_p_ks)``,
    ``TableLastPK(table_name, lastpk)``, ``LastPK(fields, rows)``, ``PKField``, ``PKRow``.
    ``Vgtid.from_json / to_json`` (Debezium's exact text), ``from_proto / to_proto``
    (``binlogdata.VGtid``), ``update(other)`` (per-shard replace, new shards appended),
    ``only(shards)``, ``get(shard)``, ``copying``. ``CURRENT_GTID = "current"``, ``EMPTY_GTID = ""``.

Keys (``keys``)
    ``OffsetPartition(server, task_key=None)`` (``.for_task(server, i, n, gen)``, ``.as_map()``),
    ``offset_record_key(connector_name, partition) -> bytes`` (e.g.
    ``["conn",{"server":"p","task_key":"task0_2_1"}]``), ``parse_offset_record_key``,
    ``partition_from_map``, ``task_key_name(i, n, gen)``, ``TaskKey.parse``.

Values (``value``)
    ``OffsetValue(fields)``: ``build(vgtid, transaction_id=None, collection_counts=None, extra=())``
    (Debezium's field order), ``from_bytes`` / ``to_bytes`` (parsed values re-serialize to the
    same bytes), ``vgtid``, ``with_vgtid(v)``, ``transaction_id``, ``collection_counts``.

Migration (``migration``, pure)
    ``plan_tasks(lookup, server=, keyspace=, tasks_max=, gen=, prev_task_count=, current_shards=,
    vgtid_setting=)`` -> ``[TaskAssignment(task_id, task_count, gen, shards, start, sources)]``
    for the operator; ``resolve_task_start(lookup, server=, keyspace=, shards=, task_id=,
    task_count=, gen=, prev_task_count=, vgtid_setting=)`` -> ``TaskStart(vgtid, sources, stored)``
    for a worker (``task_id=None``: per-task mode off). ``assign_shards(shards, tasks_max)``
    (round-robin over Java-sorted shards), ``java_sorted``, ``read_generation``,
    ``configured_start``, ``lookup_in(records, connector_name)``. Errors: ``MigrationError`` and
    its subclasses ``MissingOffsetsError`` (``.missing``), ``ShardLossError``,
    ``SameGenerationError``.

Store (``store``, I/O)
    ``OffsetStore(client_config, topic, partitions=25, replication_factor=-1)``:
    ``ensure_topic()``, ``load()`` (latest value per key, tombstones delete), ``records``,
    ``get(name, partition)``, ``lookup(name)``, ``write(name, partition, value_or_None)``
    (at-least-once: produce + wait for the ack), ``produce(producer, name, partition, value)``
    (inside the caller's Kafka transaction; then ``remember(key, value)`` after commit),
    ``partition_for(key)``.

Java compatibility (``javacompat``)
    ``murmur2``, ``java_murmur2_partition(key, n)`` (Kafka's default partitioner for keyed
    records), ``jackson_dumps`` (writeValueAsString), ``jackson_bytes`` (writeValueAsBytes), ``java_hashmap_order``, ``java_string_hash``.

The store imports confluent-kafka; everything else is pure and cheap to import.
"""

from cdcworker.offsets.javacompat import (
    jackson_bytes,
    jackson_dumps,
    java_hashmap_order,
    java_murmur2_partition,
    murmur2,
)
from cdcworker.offsets.keys import (
    OffsetPartition,
    TaskKey,
    offset_record_key,
    parse_offset_record_key,
    partition_from_map,
    task_key_name,
)
from cdcworker.offsets.migration import (
    MigrationError,
    MissingOffsetsError,
    OffsetLookup,
    SameGenerationError,
    ShardLossError,
    TaskAssignment,
    TaskStart,
    assign_shards,
    configured_start,
    java_sorted,
    lookup_in,
    plan_tasks,
    read_generation,
    resolve_task_start,
)
from cdcworker.offsets.value import OffsetValue
from cdcworker.offsets.vgtid import (
    CURRENT_GTID,
    EMPTY_GTID,
    LastPK,
    PKField,
    PKRow,
    ShardGtid,
    TableLastPK,
    Vgtid,
)

__all__ = [
    "CURRENT_GTID",
    "EMPTY_GTID",
    "LastPK",
    "MigrationError",
    "MissingOffsetsError",
    "OffsetLookup",
    "OffsetPartition",
    "OffsetValue",
    "PKField",
    "PKRow",
    "SameGenerationError",
    "ShardGtid",
    "ShardLossError",
    "TableLastPK",
    "TaskAssignment",
    "TaskKey",
    "TaskStart",
    "Vgtid",
    "assign_shards",
    "configured_start",
    "jackson_bytes",
    "jackson_dumps",
    "java_hashmap_order",
    "java_murmur2_partition",
    "java_sorted",
    "lookup_in",
    "murmur2",
    "offset_record_key",
    "parse_offset_record_key",
    "partition_from_map",
    "plan_tasks",
    "read_generation",
    "resolve_task_start",
    "task_key_name",
]
