"""The backfill's VTGate edge: shard-targeted queries and watermark positions over gRPC.

Watermarks are stream positions (see docs/backfill.md): a VStream started at ``current`` on one
shard first sends the shard's current executed GTID set (``VGTID, OTHER``). The window stream is
that same call, filtered to the chunk's table: it is opened (low watermark) before the chunk is
read, and after the high watermark has been taken it is read until its position covers it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from cdcworker.backfill.gtid import covers
from cdcworker.filters.tables import table_rule
from cdcworker.source.channel import ChannelSettings, open_channel
from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2, vtgateservice_pb2_grpc

_T = binlogdata_pb2.VEventType
INT64, VARCHAR, VARBINARY, NULL_TYPE = 265, 6165, 10262, 0
WINDOW_TIMEOUT_S = 600.0


class QueryError(RuntimeError):
    """VTGate rejected a query (the application-level error of Execute/StreamExecute)."""


def bind_variables(binds: Mapping[str, object]) -> dict[str, query_pb2.BindVariable]:
    out: dict[str, query_pb2.BindVariable] = {}
    for name, v in binds.items():
        if v is None:
            out[name] = query_pb2.BindVariable(type=NULL_TYPE)  # type: ignore[arg-type]
        elif isinstance(v, bool | int):
            out[name] = query_pb2.BindVariable(type=INT64, value=str(int(v)).encode())  # type: ignore[arg-type]
        elif isinstance(v, bytes):
            out[name] = query_pb2.BindVariable(type=VARBINARY, value=v)  # type: ignore[arg-type]
        else:
            out[name] = query_pb2.BindVariable(type=VARCHAR, value=str(v).encode())  # type: ignore[arg-type]
    return out


def _layout(field_event: Any) -> list[tuple[str, int]]:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    return [(f.name, f.type) for f in field_event.fields]


@dataclass
class Window:
    """The shard's changes to one table after ``low``: ``read_until(high)`` collects them."""

    call: Any  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    low: str
    shard: str
    events: Iterator[Any]  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    field_event: Any = None  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    changes: list[tuple[Any, Any]] = field(default_factory=list)  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    transactions: int = 0
    # A FIELD event with another column layout than the window's first (a DDL inside the window):
    # its rows cannot all be read with one layout, nor merged with a read taken under either.
    schema_changed: bool = False

    def read_until(self, high: str) -> list[tuple[Any, Any]]:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """(before, after) raw rows of every change with position <= ``high``, in commit order."""
        if covers(self.low, high):
            return []
        pending: list[tuple[Any, Any]] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        for resp in self.events:
            for ev in resp.events:
                t = ev.type
                if t == _T.ROW:
                    for rc in ev.row_event.row_changes:
                        pending.append(
                            (rc.before if rc.HasField("before") else None, rc.after if rc.HasField("after") else None)
                        )
                elif t == _T.FIELD:
                    if self.field_event is not None and _layout(self.field_event) != _layout(ev.field_event):
                        self.schema_changed = True
                    self.field_event = ev.field_event
                elif t == _T.ROLLBACK:
                    pending.clear()
                elif t == _T.VGTID:
                    pos = next((sg.gtid for sg in ev.vgtid.shard_gtids if sg.shard == self.shard), None)
                    # Rows come before their transaction's VGTID: the transaction is complete here.
                    self.changes.extend(pending)
                    pending.clear()
                    self.transactions += 1
                    if pos is not None and covers(pos, high):
                        return self.changes
        raise QueryError(f"window stream on {self.shard} ended before reaching {high}")

    def close(self) -> None:
        self.call.cancel()


class VTGateClient:
    """One gRPC channel to VTGate; every call is targeted at ``keyspace:shard@tablet_type``."""

    def __init__(self, settings: ChannelSettings, keyspace: str, tablet_type: str = "PRIMARY") -> None:
        self.keyspace = keyspace
        tt = tablet_type.upper()
        self.tablet_type = "PRIMARY" if tt == "MASTER" else tt
        self.channel = open_channel(settings)
        self.metadata = settings.call_metadata()
        self.stub = vtgateservice_pb2_grpc.VitessStub(self.channel)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.channel.close()

    def _session(self, shard: str | None) -> vtgate_pb2.Session:
        target = f"{self.keyspace}:{shard}" if shard else self.keyspace
        return vtgate_pb2.Session(
            autocommit=True,
            target_string=f"{target}@{self.tablet_type.lower()}",
            options=query_pb2.ExecuteOptions(included_fields=query_pb2.ExecuteOptions.ALL),
        )

    def execute(self, sql: str, binds: Mapping[str, object] | None = None, shard: str | None = None) -> query_pb2.QueryResult:
        req = vtgate_pb2.ExecuteRequest(
            session=self._session(shard),
            query=query_pb2.BoundQuery(sql=sql, bind_variables=bind_variables(binds or {})),
        )
        resp = self.stub.Execute(req, metadata=self.metadata, timeout=120)
        if resp.HasField("error") and resp.error.message:
            raise QueryError(resp.error.message)
        result: query_pb2.QueryResult = resp.result
        return result

    def stream_execute(
        self, sql: str, binds: Mapping[str, object] | None = None, shard: str | None = None
    ) -> tuple[Sequence[Any], list[Any]]:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        """Fields and all rows (``query.Row``) of one streamed statement."""
        req = vtgate_pb2.StreamExecuteRequest(
            session=self._session(shard),
            query=query_pb2.BoundQuery(sql=sql, bind_variables=bind_variables(binds or {})),
        )
        fields: Sequence[Any] = ()  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        rows: list[Any] = []  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        try:
            for resp in self.stub.StreamExecute(req, metadata=self.metadata, timeout=WINDOW_TIMEOUT_S):
                r = resp.result
                if r.fields:
                    fields = r.fields
                if r.rows:
                    rows.extend(r.rows)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
                raise QueryError(exc.details() or str(exc)) from None
            raise
        return fields, rows

    def _vstream(self, shard: str, table: str | None, timeout: float = 0.0) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        # "/^$" matches no table: the stream carries positions only.
        rules = [binlogdata_pb2.Rule(match=table_rule(table) if table else "/^$")]
        req = vtgate_pb2.VStreamRequest(
            tablet_type=self.tablet_type,
            vgtid=binlogdata_pb2.VGtid(
                shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=self.keyspace, shard=shard, gtid="current")]
            ),
            filter=binlogdata_pb2.Filter(rules=rules),
        )
        return self.stub.VStream(req, metadata=self.metadata, timeout=timeout or WINDOW_TIMEOUT_S)

    @staticmethod
    def _first_position(events: Iterator[Any], shard: str) -> str:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        for resp in events:
            for ev in resp.events:
                if ev.type == _T.VGTID:
                    for sg in ev.vgtid.shard_gtids:
                        if sg.shard == shard:
                            return str(sg.gtid)
        raise QueryError(f"VStream at 'current' on {shard} ended without a position")

    def current_position(self, shard: str, timeout: float = 0.0) -> str:
        """The shard's executed GTID set now (a high watermark); ``timeout`` seconds at most."""
        call = self._vstream(shard, None, timeout)
        try:
            return self._first_position(iter(call), shard)
        finally:
            call.cancel()

    def open_window(self, shard: str, table: str) -> Window:
        """Start the window stream for ``table`` on ``shard``; its first position is the low watermark."""
        call = self._vstream(shard, table)
        events = iter(call)
        try:
            low = self._first_position(events, shard)
        except BaseException:
            call.cancel()
            raise
        return Window(call, low, shard, events)

    def shards(self) -> list[str]:
        res = self.execute(f"SHOW VITESS_SHARDS LIKE '{self.keyspace}/%'")
        out = []
        for row in res.rows:
            ks, _, shard = bytes(row.values).decode().partition("/")
            if ks == self.keyspace:
                out.append(shard)
        return out

    def tables(self) -> list[str]:
        res = self.execute("SHOW TABLES")
        return [bytes(r.values)[: r.lengths[0]].decode() for r in res.rows]
