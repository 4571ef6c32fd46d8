"""The serving shards of a keyspace, as Debezium's ``VitessMetadata`` finds them."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from vitessapi import vtgate_pb2, vtgateservice_pb2_grpc

__all__ = ["serving_shards"]


def serving_shards(channel: grpc.Channel, keyspace: str, metadata: Sequence[tuple[str, str]] = ()) -> list[str]:
    """``SHOW VITESS_SHARDS LIKE '<keyspace>/%'`` through VTGate ``Execute``."""
    stub = vtgateservice_pb2_grpc.VitessStub(channel)
    request = vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(autocommit=True),
        query={"sql": f"/*vt+ WORKLOAD_NAME=shardcdc */ SHOW VITESS_SHARDS LIKE '{keyspace}/%'"},
    )
    response = stub.Execute(request, metadata=tuple(metadata), timeout=30)
    if response.HasField("error") and response.error.message:
        raise RuntimeError(f"SHOW VITESS_SHARDS failed: {response.error.message}")
    shards = []
    for row in response.result.rows:
        ks, _, shard = bytes(row.values).decode().partition("/")
        if ks == keyspace:
            shards.append(shard)
    if not shards:
        raise RuntimeError(f"keyspace {keyspace!r} has no serving shards (or does not exist)")
    return shards
