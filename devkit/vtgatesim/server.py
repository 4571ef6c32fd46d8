"""gRPC servicers: vtgateservice.Vitess (VStream, Execute, StreamExecute) and vtctlservice.Vtctld."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc

from vitessapi import (
    query_pb2,
    topodata_pb2,
    vtctldata_pb2,
    vtctlservice_pb2_grpc,
    vtgate_pb2,
    vtrpc_pb2,
)

from . import sql as sqlp
from . import wire
from .executor import STREAM_BATCH_ROWS, Executor, Result, RowStream, VTError, bind_value
from .topology import CELL, Keyspace, Shard
from .vstream import VStream

if TYPE_CHECKING:
    from .sim import VTGateSim

STREAM_EXECUTE_ROWS = STREAM_BATCH_ROWS


def _status(code: int) -> grpc.StatusCode:
    for sc in grpc.StatusCode:
        if sc.value[0] == code:
            return sc
    return grpc.StatusCode.UNKNOWN


def _result_proto(res: Result, included: int) -> query_pb2.QueryResult:
    qr = query_pb2.QueryResult(rows_affected=res.rows_affected, insert_id=res.insert_id)
    for f in res.fields:
        if included == query_pb2.ExecuteOptions.ALL:
            qr.fields.add(**f)
        elif included == query_pb2.ExecuteOptions.TYPE_ONLY:
            qr.fields.add(type=f["type"])
        else:
            qr.fields.add(name=f["name"], type=f["type"])
    for r in res.rows:
        row = qr.rows.add()
        row.lengths.extend(-1 if v is None else len(v) for v in r)
        row.values = b"".join(v for v in r if v is not None)
    return qr


class VitessService:
    """vtgateservice.Vitess, registered by hand so VStream can yield pre-encoded bytes."""

    def __init__(self, sim: VTGateSim) -> None:
        self.sim = sim
        self.txns = SessionTransactions(sim)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler("vtgateservice.Vitess", {
            "VStream": grpc.unary_stream_rpc_method_handler(
                self.vstream, request_deserializer=vtgate_pb2.VStreamRequest.FromString,
                response_serializer=None),  # responses are already-serialized VStreamResponse bytes
            # Execute/StreamExecute also answer in bytes: SELECT rows are sent as pre-encoded query.Rows
            "Execute": grpc.unary_unary_rpc_method_handler(
                self.execute, request_deserializer=vtgate_pb2.ExecuteRequest.FromString, response_serializer=None),
            "StreamExecute": grpc.unary_stream_rpc_method_handler(
                self.stream_execute, request_deserializer=vtgate_pb2.StreamExecuteRequest.FromString,
                response_serializer=None),
        })

    def vstream(self, req: vtgate_pb2.VStreamRequest, ctx: grpc.ServicerContext) -> Iterator[bytes]:
        sim = self.sim
        sim.vstream_calls.append((req, tuple((k, v) for k, v in ctx.invocation_metadata())))
        try:
            vs = VStream(sim, req, sim.faults.take())
        except VTError as e:
            ctx.abort(_status(e.code), e.message)
        with sim.streams_lock:
            sim.streams.append(vs)
        ctx.add_callback(vs.cancel)
        try:
            vs.start()
            yield from vs.responses()
        except VTError as e:
            ctx.abort(_status(e.code), e.message)
        finally:
            vs.cancel()
            with sim.streams_lock:
                if vs in sim.streams:
                    sim.streams.remove(vs)

    def _run(self, session: vtgate_pb2.Session, query: query_pb2.BoundQuery) -> Result:
        binds = {k: bind_value(v) for k, v in query.bind_variables.items()}
        return self.sim.execute(query.sql, session.target_string, binds)

    def _stream_select(self, session: vtgate_pb2.Session, query: query_pb2.BoundQuery) -> RowStream | None:
        binds = {k: bind_value(v) for k, v in query.bind_variables.items()}
        return self.sim.executor.stream_select(query.sql, session.target_string, binds)

    def execute(self, req: vtgate_pb2.ExecuteRequest, ctx: grpc.ServicerContext) -> bytes:
        self.sim.execute_calls.append((req.query.sql, tuple((k, v) for k, v in ctx.invocation_metadata())))
        session = vtgate_pb2.Session()
        session.CopyFrom(req.session)
        if not session.SessionUUID:
            session.SessionUUID = str(uuid.uuid4())
        included = req.session.options.included_fields
        try:
            # a SELECT outside a transaction: pre-encoded rows; anything else through the session
            stream = None if session.in_transaction else self._stream_select(session, req.query)
            if stream is not None:
                head = _result_proto(Result(fields=stream.fields), included).SerializeToString()
                rows = b"".join(b"".join(batch) for batch in stream.batches)
                return wire.f_msg(2, session.SerializeToString()) + wire.f_msg(3, head + rows)
            binds = {k: bind_value(v) for k, v in req.query.bind_variables.items()}
            res = self.txns.execute(session, req.query.sql, binds)
        except VTError as e:
            rpc_error = vtrpc_pb2.RPCError(code=e.code, message=e.message)  # type: ignore[arg-type]
            return vtgate_pb2.ExecuteResponse(error=rpc_error, session=session).SerializeToString()
        return vtgate_pb2.ExecuteResponse(session=session, result=_result_proto(res, included)).SerializeToString()

    def stream_execute(self, req: vtgate_pb2.StreamExecuteRequest, ctx: grpc.ServicerContext) -> Iterator[bytes]:
        """Fields first, then rows in batches of STREAM_EXECUTE_ROWS (always autocommit)."""
        included = req.session.options.included_fields
        try:
            stream = self._stream_select(req.session, req.query)
            if stream is None:
                res = self._run(req.session, req.query)
        except VTError as e:
            ctx.abort(_status(e.code), e.message)
        if stream is not None:
            head = _result_proto(Result(fields=stream.fields), included).SerializeToString()
            yield wire.f_msg(1, head)
            for batch in stream.batches:
                yield wire.f_msg(1, b"".join(batch))
            return
        yield vtgate_pb2.StreamExecuteResponse(result=_result_proto(Result(fields=res.fields), included)
                                               ).SerializeToString()
        for i in range(0, len(res.rows), STREAM_EXECUTE_ROWS):
            part = _result_proto(Result(rows=res.rows[i:i + STREAM_EXECUTE_ROWS]), included)
            yield vtgate_pb2.StreamExecuteResponse(result=part).SerializeToString()
        if not res.rows and (res.rows_affected or res.insert_id):
            yield vtgate_pb2.StreamExecuteResponse(
                result=query_pb2.QueryResult(rows_affected=res.rows_affected, insert_id=res.insert_id)
            ).SerializeToString()


class SessionTransactions:
    """Multi-statement transactions over Execute (BEGIN; DML/SELECT...; COMMIT in one session).

    The client echoes the Session back on every call, as with vtgate; the open transaction is found by
    `SessionUUID`. Statements run for real but are rolled back after each call (so the caller gets their
    results and sees its own writes); COMMIT replays them as one transaction, giving one binlog
    transaction per shard written. DDL commits implicitly, as in MySQL.
    """

    def __init__(self, sim: VTGateSim) -> None:
        self.sim = sim
        self.lock = threading.Lock()
        self.open: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        self.ids = itertools.count(1_700_000_000_000_000_001)

    def execute(self, session: vtgate_pb2.Session, sql: str, binds: dict[str, Any]) -> Result:
        stmt = Executor.parse(sql)
        key = session.SessionUUID
        if isinstance(stmt, sqlp.TxControl):
            if stmt.what == "BEGIN":
                if session.in_transaction:
                    self.commit(session)  # BEGIN inside a transaction commits it first (MySQL)
                with self.lock:
                    self.open[key] = []
                session.in_transaction = True
            elif stmt.what == "COMMIT":
                self.commit(session)
            else:
                with self.lock:
                    self.open.pop(key, None)
                self._close(session)
            return Result()
        if session.in_transaction:
            if isinstance(stmt, sqlp.Select | sqlp.Insert | sqlp.Update | sqlp.Delete):
                with self.lock:
                    pending = list(self.open.get(key, []))
                res, touched = self.sim.executor.execute_batch([*pending, (sql, session.target_string, binds)],
                                                               commit=False)
                with self.lock:
                    self.open.setdefault(key, []).append((sql, session.target_string, binds))
                have = {(s.target.keyspace, s.target.shard) for s in session.shard_sessions}
                for ks, shard in touched:
                    if (ks, shard.name) not in have:
                        have.add((ks, shard.name))
                        session.shard_sessions.add(
                            target=query_pb2.Target(keyspace=ks, shard=shard.name, tablet_type=topodata_pb2.PRIMARY),
                            transaction_id=next(self.ids),
                            tablet_alias=topodata_pb2.TabletAlias(cell=CELL, uid=shard.tablet_uid))
                return res
            if isinstance(stmt, sqlp.CreateTable | sqlp.AlterAddColumns):
                self.commit(session)  # DDL causes an implicit commit
        return self.sim.execute(sql, session.target_string, binds)

    def commit(self, session: vtgate_pb2.Session) -> None:
        with self.lock:
            stmts = self.open.pop(session.SessionUUID, [])
        self._close(session)
        if stmts:
            self.sim.executor.execute_batch(stmts, commit=True)

    @staticmethod
    def _close(session: vtgate_pb2.Session) -> None:
        session.in_transaction = False
        del session.shard_sessions[:]


def _key_range(shard: Shard) -> topodata_pb2.KeyRange | None:
    if shard.name == "0":
        return None
    kr = shard.key_range
    return topodata_pb2.KeyRange(start=kr.start, end=kr.end)


def _shard_proto(shard: Shard) -> topodata_pb2.Shard:
    s = topodata_pb2.Shard(primary_alias=topodata_pb2.TabletAlias(cell=CELL, uid=shard.tablet_uid),
                           is_primary_serving=shard.serving)
    kr = _key_range(shard)
    if kr is not None:
        s.key_range.CopyFrom(kr)
    return s


def _srv_keyspace(ks: Keyspace) -> topodata_pb2.SrvKeyspace:
    sk = topodata_pb2.SrvKeyspace()
    for tt in (topodata_pb2.PRIMARY, topodata_pb2.REPLICA, topodata_pb2.RDONLY):
        part = sk.partitions.add(served_type=tt)
        for s in ks.serving_shards():
            ref = part.shard_references.add(name=s.name)
            kr = _key_range(s)
            if kr is not None:
                ref.key_range.CopyFrom(kr)
    return sk


class VtctldService(vtctlservice_pb2_grpc.VtctldServicer):
    def __init__(self, sim: VTGateSim) -> None:
        self.sim = sim

    def _ks(self, name: str, ctx: grpc.ServicerContext) -> Keyspace:
        ks = self.sim.topo.keyspaces.get(name)
        if ks is None:
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"node doesn't exist: keyspaces/{name}/Keyspace")
        return ks

    def GetKeyspace(self, request: Any, context: grpc.ServicerContext) -> Any:
        ks = self._ks(request.keyspace, context)
        return vtctldata_pb2.GetKeyspaceResponse(keyspace=vtctldata_pb2.Keyspace(
            name=ks.name, keyspace=topodata_pb2.Keyspace(sidecar_db_name="_vt", durability_policy="none")))

    def GetKeyspaces(self, request: Any, context: grpc.ServicerContext) -> Any:
        return vtctldata_pb2.GetKeyspacesResponse(keyspaces=[
            vtctldata_pb2.Keyspace(name=n, keyspace=topodata_pb2.Keyspace(sidecar_db_name="_vt",
                                                                          durability_policy="none"))
            for n in sorted(self.sim.topo.keyspaces)])

    def FindAllShardsInKeyspace(self, request: Any, context: grpc.ServicerContext) -> Any:
        ks = self._ks(request.keyspace, context)
        resp = vtctldata_pb2.FindAllShardsInKeyspaceResponse()
        for name, s in ks.shards.items():
            if not s.deleted:
                resp.shards[name].CopyFrom(vtctldata_pb2.Shard(keyspace=ks.name, name=name, shard=_shard_proto(s)))
        return resp

    def GetShard(self, request: Any, context: grpc.ServicerContext) -> Any:
        ks = self._ks(request.keyspace, context)
        s = ks.shards.get(request.shard_name)
        if s is None or s.deleted:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"node doesn't exist: keyspaces/{ks.name}/shards/{request.shard_name}/Shard")
        return vtctldata_pb2.GetShardResponse(shard=vtctldata_pb2.Shard(keyspace=ks.name, name=s.name,
                                                                        shard=_shard_proto(s)))

    def GetSrvKeyspaces(self, request: Any, context: grpc.ServicerContext) -> Any:
        ks = self._ks(request.keyspace, context)
        resp = vtctldata_pb2.GetSrvKeyspacesResponse()
        cells = list(request.cells) or [CELL]
        for c in cells:
            if c == CELL:
                resp.srv_keyspaces[c].CopyFrom(_srv_keyspace(ks))
        return resp

    def GetTablets(self, request: Any, context: grpc.ServicerContext) -> Any:
        resp = vtctldata_pb2.GetTabletsResponse()
        for ks in self.sim.topo.keyspaces.values():
            if request.keyspace and ks.name != request.keyspace:
                continue
            for s in ks.shards.values():
                if s.deleted or (request.shard and s.name != request.shard):
                    continue
                t = resp.tablets.add(alias=topodata_pb2.TabletAlias(cell=CELL, uid=s.tablet_uid),
                                     hostname="localhost", keyspace=ks.name, shard=s.name,
                                     type=topodata_pb2.PRIMARY, mysql_hostname="localhost", mysql_port=3306)
                t.port_map["grpc"] = self.sim.port
                kr = _key_range(s)
                if kr is not None:
                    t.key_range.CopyFrom(kr)
        return resp


def build_server(sim: VTGateSim, port: int, tls: tuple[bytes, bytes] | None,
                 host: str = "127.0.0.1") -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="vtgatesim"),
                         options=[("grpc.max_send_message_length", 16 * 1024 * 1024),
                                  ("grpc.max_receive_message_length", 16 * 1024 * 1024),
                                  ("grpc.so_reuseport", 0)])
    from .control import handler as control_handler

    server.add_generic_rpc_handlers((VitessService(sim).handler(), control_handler(sim)))
    vtctlservice_pb2_grpc.add_VtctldServicer_to_server(VtctldService(sim), server)
    addr = f"{host}:{port}"
    if tls is not None:
        creds = grpc.ssl_server_credentials([tls])
        bound = server.add_secure_port(addr, creds)
    else:
        bound = server.add_insecure_port(addr)
    if bound == 0:
        raise OSError(f"cannot bind {addr}")
    return server, bound
