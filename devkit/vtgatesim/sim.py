"""`VTGateSim`: the in-process API tests, the demo and benchmarks use."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from . import binlog as bl
from . import reshard as rs
from .executor import UNAVAILABLE, Executor, Result, VTError
from .faults import FaultPlan, Faults
from .topology import Keyspace, Topology
from .vstream import DEFAULT_PACKET_SIZE, VStream

HEARTBEAT_DDL = ("CREATE TABLE heartbeat (keyspaceShard VARBINARY(256) NOT NULL, tabletUid INT UNSIGNED NOT NULL, "
                 "ts BIGINT UNSIGNED NOT NULL, PRIMARY KEY (keyspaceShard))")


class VTGateSim:
    """A simulated Vitess cluster (topology, SQL stores, binlogs) with vtgate/vtctld gRPC services."""

    def __init__(self, packet_size: int = DEFAULT_PACKET_SIZE, tls: tuple[bytes, bytes] | None = None) -> None:
        self.topo = Topology()
        self.executor = Executor(self.topo)
        self.faults = Faults()
        self.packet_size = packet_size
        self.streams_lock = threading.Lock()
        self.streams: list[VStream] = []
        self.vstream_calls: list[tuple[Any, tuple[tuple[str, str | bytes], ...]]] = []  # (request, metadata), for tests
        # (sql, metadata) of the latest Execute calls, for tests (bounded: workloads execute a lot)
        self.execute_calls: collections.deque[tuple[str, tuple[tuple[str, str | bytes], ...]]] = \
            collections.deque(maxlen=256)
        self.tablet_restarts = 0  # tablet streams vtgate restarted after a retryable error
        self.skew_pauses = 0  # times minimize_skew held a shard stream back
        self.skew_timeout = 600.0  # seconds a paused stream waits before its tablet stream is restarted (10 min)
        self.tablet_heartbeat_interval = 0.9  # an idle tablet's HEARTBEAT period (what minimize_skew aligns on)
        self.tls = tls  # (private key PEM, certificate chain PEM)
        self.port = 0
        # The bound interface: loopback unless `serve --host` says otherwise (a pod serves its peers).
        self.host = "127.0.0.1"
        self._server: Any = None
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None

    # -- server
    @property
    def address(self) -> str:
        """Where a local client reaches the server (loopback when it listens on every interface)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "[::]") else self.host
        return f"{host}:{self.port}"

    def start(self, port: int = 0, host: str | None = None) -> VTGateSim:
        from .server import build_server

        self.host = host or self.host
        self._server, self.port = build_server(self, port or self.port, self.tls, self.host)
        self._server.start()
        return self

    def stop(self, grace: float | None = 0) -> None:
        self._hb_stop.set()
        with self.streams_lock:
            streams = list(self.streams)
        for vs in streams:
            vs.cancel()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def restart(self) -> None:
        """Stop the gRPC server (open calls fail with UNAVAILABLE) and start it again on the same port.

        Data, binlogs and positions are kept; clients reconnect (a channel does so by itself)."""
        port = self.port
        with self.streams_lock:
            streams = list(self.streams)
        for vs in streams:  # as if the process died: the transport breaks under every open stream
            vs.fail(VTError(UNAVAILABLE, "Socket closed"))
        if self._server is not None:
            self._server.stop(0).wait()
        self.start(port)

    def __enter__(self) -> VTGateSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- data
    def create_keyspace(self, name: str, shards: list[str] | int | None = None, vindex_column: str = "id",
                        vindex_columns: dict[str, str] | None = None, ddl: list[str] | None = None) -> Keyspace:
        with self.topo.lock:
            ks = self.topo.create_keyspace(name, shards, vindex_column, vindex_columns)
        for stmt in ddl or []:
            self.execute(stmt, name)
        return ks

    def execute(self, sql: str, target: str = "", binds: dict[str, Any] | None = None) -> Result:
        return self.executor.execute(sql, target, binds)

    def execute_transaction(self, statements: list[str], target: str = "",
                            binds: dict[str, Any] | None = None) -> Result:
        """Several DML statements as one transaction: one binlog transaction per shard written.

        Returns the last statement's result (as `BEGIN; ...; COMMIT` over Execute would)."""
        res, _ = self.executor.execute_batch([(s, target, binds or {}) for s in statements], commit=True)
        return res

    def is_sharded(self, keyspace: str) -> bool:
        return self.topo.keyspace(keyspace).sharded

    def source_truth(self, keyspace: str, table: str) -> list[dict[str, bytes | None]]:
        """All rows of a table across the serving shards, as MySQL text, ordered by primary key
        (by the copy key for a table without one: PK equivalent or all columns)."""
        from .executor import image_text

        out: list[tuple[Any, dict[str, bytes | None]]] = []
        with self.topo.lock:
            for s in self.topo.keyspace(keyspace).serving_shards():
                schema = s.store.table(table)
                if schema is None:
                    raise LookupError(f"table {keyspace}.{table} not found on {s.name}")
                for r in s.store.all_rows(schema):
                    img = image_text(schema, r)
                    assert img is not None
                    key = tuple((0,) if r[i] is None else (1, r[i]) for i in schema.copy_key_indexes)
                    out.append((key, {c.name: v for c, v in zip(schema.columns, img, strict=True)}))
        out.sort(key=lambda kv: kv[0])
        return [d for _, d in out]

    def position(self, keyspace: str, shard: str) -> str:
        return self.topo.shard(keyspace, shard).binlog.position

    def positions(self, keyspace: str) -> dict[str, str]:
        return {s.name: s.binlog.position for s in self.topo.keyspace(keyspace).serving_shards()}

    def other(self, keyspace: str, shard: str, statement: str = "GRANT SELECT ON *.* TO 'x'") -> None:
        """A non-row, non-DDL binlog event (e.g. GRANT): streams see VGTID, OTHER."""
        with self.topo.lock:
            s = self.topo.shard(keyspace, shard)
            s.binlog.append(bl.OTHER, int(time.time()), statement=statement, database=s.database)

    # -- operations
    def reparent(self, keyspace: str, shard: str) -> str:
        """Promote a new primary: later GTIDs use a new server uuid (the set then lists two uuids)."""
        with self.topo.lock:
            s = self.topo.shard(keyspace, shard)
            new = self.topo.new_uuid(f"{keyspace}/{shard}/reparent/{s.binlog.position}")
            s.binlog.reparent(new)
            s.server_uuid = new
            s.tablet_uid += 1
            return new

    def reshard(self, keyspace: str, targets: list[str] | int, delete_old: bool = False) -> Any:
        from vtgatesim import keyrange

        names = keyrange.even_shard_names(targets) if isinstance(targets, int) else list(targets)
        if names == ["-"]:
            names = ["0"]
        return rs.reshard(self, keyspace, names, delete_old)

    def delete_shards(self, keyspace: str, names: list[str]) -> None:
        rs.delete_shards(self, keyspace, names)

    def throttle(self, keyspace: str, shard: str, on: bool = True) -> None:
        """The tablet throttler on ``keyspace/shard``'s primary: its vstreamers stop sending row
        changes until ``on=False`` (VTGate's own heartbeats go on: the stream looks idle)."""
        with self.topo.lock:
            s = self.topo.shard(keyspace, shard)
        (s.unthrottled.clear if on else s.unthrottled.set)()

    def write_heartbeat(self, keyspace: str) -> None:
        """One heartbeat-writer upsert of `_vt.heartbeat` on every serving primary of `keyspace`."""
        from .executor import ShardTxn

        with self.topo.lock:
            for s in self.topo.keyspace(keyspace).serving_shards():
                store = s.store
                schema = store.sidecar.get("heartbeat")
                if schema is None:
                    from . import sql as sqlp
                    from .schema import table_from_create

                    stmt = sqlp.parse(HEARTBEAT_DDL)
                    assert isinstance(stmt, sqlp.CreateTable)
                    schema = table_from_create(stmt)
                    store.sidecar["heartbeat"] = schema
                    store.conn.execute('CREATE TABLE "_vt_heartbeat" ("keyspaceShard" BLOB PRIMARY KEY, '
                                       '"tabletUid" INTEGER, "ts" INTEGER)')
                ks_shard = f"{keyspace}/{s.name}".encode()
                row = (ks_shard, s.tablet_uid, time.time_ns())
                old = store.conn.execute('SELECT "keyspaceShard", "tabletUid", "ts" FROM "_vt_heartbeat" '
                                         'WHERE "keyspaceShard" = ?', (ks_shard,)).fetchone()
                store.conn.execute('INSERT OR REPLACE INTO "_vt_heartbeat" VALUES (?, ?, ?)', row)
                txn = ShardTxn.__new__(ShardTxn)
                txn.shard = s
                txn.statements = [(schema, [(tuple(old) if old else None, row)])]
                s.store.begin()
                txn.commit(database="_vt")

    def start_heartbeat_writer(self, keyspace: str, interval: float = 1.0) -> None:
        def loop() -> None:
            while not self._hb_stop.wait(interval):
                self.write_heartbeat(keyspace)

        self._hb_thread = threading.Thread(target=loop, daemon=True, name="vtgatesim-heartbeat")
        self._hb_thread.start()

    def inject(self, plan: FaultPlan, next_stream: bool = True) -> FaultPlan:
        """Apply `plan` to the next VStream call (or to every new call with next_stream=False)."""
        if next_stream:
            self.faults.next_stream(plan)
        else:
            self.faults.set_server(plan)
        return plan

    def active_streams(self) -> int:
        with self.streams_lock:
            return len(self.streams)
