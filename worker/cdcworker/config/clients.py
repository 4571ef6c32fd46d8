"""The worker's client settings, one home for the streaming task and the backfill.

``channel_settings``: the VTGate gRPC channel; ``encoder_config``: how records are encoded and
named; ``producer_config``: librdkafka's producer settings. The backfill's jobs and catch-up use
the same three, so a backfill writes records and talks to VTGate exactly as the stream does.
"""

from __future__ import annotations

from pathlib import Path

from cdcworker.config import WorkerConfig
from cdcworker.events import EncoderConfig, TopicNaming, TypeOptions, producer_partitioner_config
from cdcworker.events.encoder import context_headers, new_run_id
from cdcworker.features import tx_block_schema
from cdcworker.source.channel import ChannelSettings, TlsSettings


def channel_settings(config: WorkerConfig) -> ChannelSettings:
    src = config.source
    tls = None
    if src.tls.enabled:
        tls = TlsSettings(
            ca_file=Path(src.tls.ca_file) if src.tls.ca_file else None,
            cert_file=Path(src.tls.cert_file) if src.tls.cert_file else None,
            key_file=Path(src.tls.key_file) if src.tls.key_file else None,
            server_name=src.tls.server_name,
        )
    return ChannelSettings(
        target=src.address,
        tls=tls,
        user=src.user,
        password=src.password.reveal() if src.password else None,
        headers=src.grpc_headers,
        max_inbound_message_size=src.max_inbound_message_size,
        keepalive_ms=src.keepalive_interval_ms or 0,
    )


def encoder_config(config: WorkerConfig, run_id: str | None = None) -> EncoderConfig:
    b = config.behaviour
    naming = TopicNaming.from_strategy(
        config.topic_prefix,
        config.topics.naming_strategy,
        config.topics.delimiter,
        config.topics.data_change_prefix if config.topics.table_naming else None,
    )
    headers: tuple[tuple[str, bytes], ...] = ()
    if b.extended_headers_enabled:
        headers = tuple(context_headers(config.topic_prefix, config.task.context_task_id, run_id=run_id or new_run_id()))
    return EncoderConfig(
        logical_name=config.topic_prefix,
        naming=naming,
        types=TypeOptions(
            decimal_handling_mode=b.decimal_handling_mode,
            time_precision_mode=b.time_precision_mode,
            bigint_unsigned_handling_mode=b.bigint_unsigned_handling_mode,
            binary_handling_mode=b.binary_handling_mode,
            include_unknown_datatypes=b.include_unknown_datatypes,
        ),
        key_schemas_enable=config.converters.key_schemas_enable,
        value_schemas_enable=config.converters.value_schemas_enable,
        tombstones_on_delete=b.tombstones_on_delete,
        replace_null_with_default=config.converters.value_replace_null_with_default,
        headers=headers,
        tx_block_schema=tx_block_schema(config),
    )


def producer_config(config: WorkerConfig) -> dict[str, object]:
    """librdkafka settings: idempotent, ordered, partitioned like the Java client, bounded memory."""
    conf: dict[str, object] = {
        "enable.idempotence": True,
        "acks": "all",
        # Throughput without hurting latency: 5 ms of linger, large batches, and lz4. Debezium's
        # values repeat their schema in every record, so lz4 shrinks a batch ~10x for little CPU,
        # spent on librdkafka's own thread (no GIL): the broker then writes, copies and checksums a
        # tenth of the bytes and acks sooner (BENCHMARKS.md, fifth measurement).
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": max(config.behaviour.max_queue_size * 4, 10_000),
        # librdkafka's buffer is the worker's largest memory user (its copies of the records, on
        # the producing thread's heap). 16 MiB holds ~150 ms of records at 100,000 rows/s, enough
        # to keep 1 MB batches flowing, and keeps the peak RSS near 120-130 MB while a 1,000,000-row
        # transaction streams (64 MiB: 175-230 MB, no faster; BENCHMARKS.md, "Worker latency and memory").
        "queue.buffering.max.kbytes": 16384,
        **producer_partitioner_config(),
    }
    conf.update(config.kafka.client_config("producer"))
    return conf
