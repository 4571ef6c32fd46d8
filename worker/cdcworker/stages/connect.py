"""Connect: the VTGate channel, the offsets store, the Kafka sink, and the VStream request."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grpc

from cdcworker.config import WorkerConfig
from cdcworker.config.clients import channel_settings, producer_config
from cdcworker.nativesink import sink_classes
from cdcworker.offsets import Vgtid
from cdcworker.offsets.store import OffsetStore
from cdcworker.offsets.writes import TaskOffsets
from cdcworker.sink import KafkaSink
from cdcworker.source.channel import open_channel
from cdcworker.source.shards import serving_shards
from cdcworker.streaming import raw_responses
from cdcworker.topiccreator import topic_creator
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

Metadata = tuple[tuple[str, str], ...]  # gRPC call metadata (credentials, headers)


@dataclasses.dataclass
class Connection:
    """What a task talks to: VTGate (``channel``, ``stub``, ``vstream``) and its offsets ``store``."""

    channel: grpc.Channel
    metadata: Metadata
    store: OffsetStore
    stub: vtgateservice_pb2_grpc.VitessStub
    # The task's own stream: responses as bytes when the native scanner + encoder are on (rows go
    # to the encoder without a Python object per event); else parsed by upb (``stub.VStream``).
    vstream: Callable[..., Any]  # Any: a gRPC multi-callable's response iterator

    def close(self, store_timeout: float | None) -> None:
        self.store.close(store_timeout)
        self.channel.close()


def connect(cfg: WorkerConfig) -> Connection:
    settings = channel_settings(cfg)
    channel = open_channel(settings)
    store = OffsetStore(
        cfg.kafka.client_config("producer"),
        cfg.kafka.offsets_topic,
        partitions=cfg.kafka.offsets_partitions,
        replication_factor=cfg.kafka.offsets_replication_factor,
    )
    stub = vtgateservice_pb2_grpc.VitessStub(channel)
    vstream = (
        channel.unary_stream(
            "/vtgateservice.Vitess/VStream",
            request_serializer=vtgate_pb2.VStreamRequest.SerializeToString,
            response_deserializer=None,
        )
        if raw_responses()
        else stub.VStream
    )
    return Connection(channel, settings.call_metadata(), store, stub, vstream)


def discover_shards(channel: grpc.Channel, config: WorkerConfig, metadata: Metadata) -> list[str]:
    """Serving shards of the keyspace via ``SHOW VITESS_SHARDS`` (as Debezium's VitessMetadata)."""
    return serving_shards(channel, config.source.keyspace, metadata)


def make_sink(cfg: WorkerConfig, store: OffsetStore, offsets: TaskOffsets, start: Vgtid,
              stopping: Callable[[], bool] = lambda: False) -> KafkaSink:
    """The Kafka sink: at-least-once, or exactly-once with the offset written in each transaction."""
    conf = producer_config(cfg)
    alo, eos = sink_classes()  # the native producer when built (nativesink)
    if not cfg.kafka.transactional:
        sink = alo(conf)
    else:
        conf["transactional.id"] = cfg.kafka.transactional_id

        def write(producer: Any, position: Vgtid) -> None:  # Any: the sink's producer (native or confluent-kafka)
            store.produce(producer, cfg.name, offsets.partition, offsets.value(position))

        sink = eos(
            conf,
            write,
            # A Kafka transaction costs a few ms to commit: batch several poll batches.
            max_batch_records=max(cfg.behaviour.max_batch_size, 1) * 4,
            max_batch_seconds=max(cfg.behaviour.poll_interval_ms, 1) / 1000.0,
            stopping=stopping,
        )
        offsets.transactional = True
    sink.topics = topic_creator(cfg.kafka)
    sink.set_durable(start)  # nothing new is durable until the first commit point
    offsets.last_written = start
    return sink


def vstream_request(cfg: WorkerConfig, position: Vgtid, journal_stops: bool,
                    rules: tuple[tuple[str, str], ...]) -> vtgate_pb2.VStreamRequest:
    flags = vtgate_pb2.VStreamFlags(
        heartbeat_interval=cfg.source.heartbeat_interval_seconds,
        stop_on_reshard=cfg.source.stop_on_reshard,
        stream_keyspace_heartbeats=cfg.source.stream_keyspace_heartbeats,
        include_reshard_journal_events=journal_stops,
        exclude_keyspace_from_table_name=cfg.source.exclude_keyspace_from_table_name,
    )
    tablet_type = cfg.source.tablet_type.upper()
    return vtgate_pb2.VStreamRequest(
        tablet_type="PRIMARY" if tablet_type == "MASTER" else tablet_type,
        vgtid=position.to_proto(),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=m, filter=f) for m, f in rules]),
        flags=flags,
    )
