"""A small VTGate gRPC client for tests: statements, transactions, and a table's rows as MySQL text
(the shape ``shardcdc_cli.materialise.compare`` takes, like ``VTGateSim.source_truth``)."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

import grpc

from vitessapi import query_pb2, vtgate_pb2, vtgateservice_pb2_grpc
from vtgatesim.wire import row_values


class VTGateError(RuntimeError):
    """VTGate answered with an error: ``code`` (vtrpc) and its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (vtrpc code {code})")
        self.code, self.message = code, message


class VTGateClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.stub = vtgateservice_pb2_grpc.VitessStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> VTGateClient:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _call(self, session: vtgate_pb2.Session, sql: str, timeout: float) -> vtgate_pb2.ExecuteResponse:
        res = self.stub.Execute(vtgate_pb2.ExecuteRequest(session=session, query=query_pb2.BoundQuery(sql=sql)),
                                timeout=timeout)
        if res.error.code or res.error.message:
            raise VTGateError(res.error.code, res.error.message)
        return res

    def execute(self, sql: str, target: str = "", timeout: float = 60.0) -> query_pb2.QueryResult:
        """One statement in autocommit."""
        return self._call(vtgate_pb2.Session(target_string=target, autocommit=True), sql, timeout).result

    def transaction(self, statements: Sequence[str], target: str = "", timeout: float = 60.0) -> None:
        """``begin``, the statements, ``commit`` in one session (a rollback when one fails)."""
        session = self._call(vtgate_pb2.Session(target_string=target, autocommit=True), "begin", timeout).session
        try:
            for sql in statements:
                session = self._call(session, sql, timeout).session
        except BaseException:
            self._call(session, "rollback", timeout)
            raise
        self._call(session, "commit", timeout)

    def rows(self, sql: str, target: str = "") -> list[dict[str, bytes | None]]:
        res = self.execute(sql, target)
        names = [f.name for f in res.fields]
        return [dict(zip(names, row_values(r.lengths, r.values), strict=True)) for r in res.rows]

    def source_truth(self, keyspace: str, table: str, columns: Sequence[str], key: str = "id", page: int = 5000
                     ) -> list[dict[str, bytes | None]]:
        """Every row of ``table`` across the keyspace's shards, by ``key``, read in pages (a tablet
        refuses a result over 10 000 rows: ``Row count exceeded``). The columns are named:
        ``select *`` across shards needs VTGate's schema tracking (VT09015 until it has the table)."""
        out: list[dict[str, bytes | None]] = []
        after = ""
        while True:
            found = self.rows(f"select {', '.join(columns)} from {table} {after} order by {key} limit {page}", keyspace)
            out.extend(found)
            if len(found) < page:
                return out
            last = (found[-1][key] or b"").decode().replace("'", "''")
            after = f"where {key} > '{last}'"
