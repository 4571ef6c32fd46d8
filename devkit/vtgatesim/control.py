"""`vtgatesim.Control`: a small gRPC service for driving a running simulator from another process
(the `workload` and `reshard` CLI sub-actions). Not a Vitess API: requests and responses are JSON.

Methods (unary, JSON object in and out):
  Reshard  {"keyspace", "targets": [names] | int, "delete_old": bool} -> {"journal_id", "participants", "targets"}
  Workload {"keyspace", "transactions", "rate", "seed", "table"} -> {"transactions", "rows"}
  Positions {"keyspace"} -> {shard: gtid position}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    from .sim import VTGateSim

SERVICE = "vtgatesim.Control"


def handler(sim: VTGateSim) -> grpc.GenericRpcHandler:
    def wrap(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> grpc.RpcMethodHandler:
        def call(req: bytes, ctx: grpc.ServicerContext) -> bytes:
            try:
                out = fn(json.loads(req or b"{}"))
            except (KeyError, LookupError, ValueError, TypeError) as e:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(e).__name__}: {e}")
            return json.dumps(out).encode()

        return grpc.unary_unary_rpc_method_handler(call, request_deserializer=None, response_serializer=None)

    def reshard(a: dict[str, Any]) -> dict[str, Any]:
        j = sim.reshard(a["keyspace"], a["targets"], delete_old=bool(a.get("delete_old", False)))
        return {"journal_id": j.id, "participants": [p.shard for p in j.participants],
                "targets": [s.shard for s in j.shard_gtids]}

    def workload(a: dict[str, Any]) -> dict[str, Any]:
        from .workload import Workload

        wl = Workload(sim, a["keyspace"], table=a.get("table", "items"), seed=int(a.get("seed", 1)))
        wl.ensure_table()
        wl.run(transactions=int(a["transactions"]), rate=float(a.get("rate", 0.0)))
        return {"transactions": wl.stats.transactions, "rows": wl.stats.rows}

    def positions(a: dict[str, Any]) -> dict[str, Any]:
        return sim.positions(a["keyspace"])

    return grpc.method_handlers_generic_handler(SERVICE, {
        "Reshard": wrap(reshard), "Workload": wrap(workload), "Positions": wrap(positions)})


def call(address: str, method: str, request: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
    """Client side: one Control call against a running simulator (plaintext loopback)."""
    with grpc.insecure_channel(address) as ch:
        fn = ch.unary_unary(f"/{SERVICE}/{method}", request_serializer=None, response_deserializer=None)
        out: dict[str, Any] = json.loads(fn(json.dumps(request).encode(), timeout=timeout))
        return out
