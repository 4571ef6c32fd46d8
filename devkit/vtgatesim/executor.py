"""Execute SQL against the simulated cluster: routing, row images, commits into the shard binlogs."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime as dt
import functools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from . import binlog as bl
from . import mysqltypes, wire
from . import sql as sqlp
from .mysqltypes import MySQLError
from .schema import NOW, TableSchema, column_from_def, table_from_create
from .store import ShardStore, q
from .topology import CELL, Keyspace, Shard, Topology

INT64 = 265
VARCHAR = 6165
VARBINARY = 10262
UINT32 = 776


class VTError(Exception):
    """An error as vtgate reports it: a vtrpc code and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# vtrpc codes
INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION = 3, 5, 6, 9
UNIMPLEMENTED, INTERNAL, UNAVAILABLE, UNKNOWN = 12, 13, 14, 2

# Every vindex here is a `hash` vindex named `hash` (topology.py).
PRIMARY_VINDEX_UPDATE = "VT12001: unsupported: you cannot UPDATE primary vindex columns; invalid update on vindex: hash"

# The vtrpc code of a tablet's MySQL error, for the errnos this server raises: Vitess v24
# ``sqlerror.SQLError.VtRpcErrorCode`` (the code follows the errno, not the SQLSTATE; an errno it
# does not list is UNKNOWN). Measured on real Vitess: 1054 is NotFound (docs/fidelity.md).
_ERRNO_CODES = {
    1050: ALREADY_EXISTS, 1062: ALREADY_EXISTS, 1054: NOT_FOUND, 1146: NOT_FOUND,
    1241: FAILED_PRECONDITION, 1264: FAILED_PRECONDITION, 1291: FAILED_PRECONDITION,
    **dict.fromkeys((1048, 1060, 1063, 1067, 1068, 1072, 1074, 1097, 1115, 1136, 1140, 1273, 1292, 1366, 1367, 1406),
                    INVALID_ARGUMENT),
}
_GRPC_NAMES = {ALREADY_EXISTS: "AlreadyExists", NOT_FOUND: "NotFound", INVALID_ARGUMENT: "InvalidArgument",
               FAILED_PRECONDITION: "FailedPrecondition"}


def mysql_error_to_vt(e: MySQLError, target: str) -> VTError:
    code = _ERRNO_CODES.get(e.errno, UNKNOWN)
    gcode = _GRPC_NAMES.get(code, "Unknown")
    return VTError(code, f"target: {target}: vttablet: rpc error: code = {gcode} desc = {e.message} "
                         f"(errno {e.errno}) (sqlstate {e.sqlstate})")


@dataclass
class Result:
    """An Execute result: fields as query.Field kwargs dicts and rows as MySQL text values."""

    fields: list[dict[str, Any]] = field(default_factory=list)
    rows: list[list[bytes | None]] = field(default_factory=list)
    rows_affected: int = 0
    insert_id: int = 0


@dataclass
class Target:
    keyspace: str = ""
    shard: str = ""
    tablet_type: str = "primary"

    @classmethod
    def parse(cls, s: str) -> Target:
        s = s or ""
        ttype = "primary"
        if "@" in s:
            s, ttype = s.split("@", 1)
        ks, _, shard = s.partition(":")
        if not shard and "/" in ks:
            ks, _, shard = ks.partition("/")
        return cls(ks, shard, ttype.lower() or "primary")

    def __str__(self) -> str:
        return f"{self.keyspace}.{self.shard or '0'}.{self.tablet_type}"


class ShardTxn:
    """Row changes of one shard transaction; applied to SQLite at once, committed to the binlog at the end."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.statements: list[tuple[TableSchema, list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]]] = []
        shard.store.begin()

    def record(self, schema: TableSchema, before: tuple[Any, ...] | None, after: tuple[Any, ...] | None) -> None:
        if self.statements and self.statements[-1][0] is schema:
            self.statements[-1][1].append((before, after))
        else:
            self.statements.append((schema, [(before, after)]))

    def new_statement(self) -> None:
        self.statements.append((None, []))  # type: ignore[arg-type]

    def commit(self, now: int | None = None, database: str | None = None) -> bl.Entry | None:
        """SQLite commit plus a binlog transaction (none if nothing changed, as MySQL RBR)."""
        self.shard.store.commit()
        stmts = [(s, ch) for s, ch in self.statements if s is not None and ch]
        if not stmts:
            return None
        rows: list[bl.RowsEvent] = []
        for schema, changes in stmts:
            text = [(binlog_image(schema, b), binlog_image(schema, a)) for b, a in changes]
            rows.extend(bl.make_rows_events(schema, text))
        return self.shard.binlog.append(bl.TXN, now or int(time.time()), rows=rows,
                                        database=database or self.shard.database)

    def rollback(self) -> None:
        self.shard.store.rollback()


def image_text(schema: TableSchema, row: tuple[Any, ...] | None) -> tuple[bytes | None, ...] | None:
    """A row as MySQL's text protocol returns it: copy phase ROWs, Execute results, source truth."""
    if row is None:
        return None
    cols = schema.columns
    return tuple(None if v is None else mysqltypes.to_text(cols[i].ct, v) for i, v in enumerate(row))


def binlog_image(schema: TableSchema, row: tuple[Any, ...] | None) -> tuple[bytes | None, ...] | None:
    """A row image as the vstreamer renders it from the binlog (streaming-phase ROW events).

    Vitess decodes binlog rows itself (rbr.go), so FLOAT/DOUBLE come out in Go 'E' format, ZEROFILL is
    dropped and DECIMAL has the released-Vitess quirks (see mysqltypes.to_binlog_text).
    """
    if row is None:
        return None
    cols = schema.columns
    legacy = BINLOG_LEGACY_DECIMAL
    return tuple(None if v is None else mysqltypes.to_binlog_text(cols[i].ct, v, legacy_decimal=legacy)
                 for i, v in enumerate(row))


# Released Vitess (<= v24) renders binlog DECIMALs with the quirks fixed by vitessio/vitess#20228/#20232.
BINLOG_LEGACY_DECIMAL = True


def now_text(fsp: int = 0) -> str:
    t = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{t.microsecond:06d}"[: fsp + 1] if fsp else "")


def bind_value(bv: Any) -> Any:
    """query.BindVariable -> Python value."""
    t = bv.type
    if t == 28:  # TUPLE
        return [bind_value(v) for v in bv.values]
    raw = bytes(bv.value)
    if t == 0:
        return None
    if t & 256:  # ISINTEGRAL
        return int(raw)
    if t & 1024:
        return float(raw)
    if t == 18:
        return Decimal(raw.decode())
    if t & 8192:  # ISBINARY
        return raw
    return raw.decode()


class Evaluator:
    """Evaluates value expressions in Python (INSERT values, SET clauses)."""

    def __init__(self, binds: dict[str, Any]) -> None:
        self.binds = binds

    def value(self, e: sqlp.Expr, row: dict[str, Any] | None = None, new: dict[str, Any] | None = None) -> Any:
        kind = e[0]
        if kind == "lit":
            return e[1]
        if kind == "param":
            if e[1] not in self.binds:
                raise MySQLError(1105, "HY000", f"VT03024: '{e[1]}' bind variable does not exists")
            return self.binds[e[1]]
        if kind == "col":
            if row is None or e[1].lower() not in row:
                raise MySQLError(1054, "42S22", f"Unknown column '{e[1]}' in 'field list'")
            return row[e[1].lower()]
        if kind == "neg":
            v = self.value(e[1], row, new)
            return None if v is None else -_num(v)
        if kind == "binop":
            a, b = self.value(e[2], row, new), self.value(e[3], row, new)
            if a is None or b is None:
                return None
            a, b = _num(a), _num(b)
            op = e[1]
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return None if b == 0 else Decimal(a) / Decimal(b)
            return None if b == 0 else a % b
        if kind == "func":
            name, args = e[1], e[2]
            if name in ("NOW", "UTC_TIMESTAMP"):
                return now_text(6)
            if name == "VALUES":
                if new is None or args[0][0] != "col":
                    raise MySQLError(1054, "42S22", "Unknown column in 'field list'")
                return new[args[0][1].lower()]
            vals = [self.value(a, row, new) for a in args]
            if name == "CONCAT":
                if any(v is None for v in vals):
                    return None
                return "".join(v.decode() if isinstance(v, bytes) else str(v) for v in vals)
            if name in ("IFNULL", "COALESCE"):
                return next((v for v in vals if v is not None), None)
            if name == "UPPER":
                return None if vals[0] is None else str(vals[0]).upper()
            if name == "LOWER":
                return None if vals[0] is None else str(vals[0]).lower()
            if name == "LENGTH":
                return None if vals[0] is None else len(vals[0] if isinstance(vals[0], bytes) else str(vals[0]).encode())
        raise MySQLError(1105, "HY000", f"VT12001: unsupported: expression {e[0]} in this context")


def _num(v: Any) -> Any:
    if isinstance(v, int | float | Decimal):
        return v
    if isinstance(v, bytes):
        v = v.decode()
    try:
        return int(v)
    except ValueError:
        return Decimal(v)


class WhereSQL:
    """Translates a WHERE expression into SQLite SQL over stored values."""

    def __init__(self, schema: TableSchema, binds: dict[str, Any]) -> None:
        self.schema = schema
        self.ev = Evaluator(binds)
        self.params: list[Any] = []

    def col(self, name: str) -> str:
        if not self.schema.has(name):
            raise MySQLError(1054, "42S22", f"Unknown column '{name}' in 'where clause'")
        return q(self.schema.column(name).name)

    def lit_for(self, colexpr: sqlp.Expr | None, e: sqlp.Expr) -> str:
        v = self.ev.value(e)
        if colexpr is not None and colexpr[0] == "col" and v is not None:
            ct = self.schema.column(colexpr[1]).ct
            with contextlib.suppress(MySQLError):
                v = mysqltypes.normalize(ct, v)
        if isinstance(v, Decimal):
            v = float(v) if v != v.to_integral_value() else int(v)
        self.params.append(v)
        return "?"

    def sql(self, e: sqlp.Expr) -> str:
        k = e[0]
        if k == "col":
            return self.col(e[1])
        if k in ("lit", "param"):
            return self.lit_for(None, e)
        if k == "and":
            return f"({self.sql(e[1])} AND {self.sql(e[2])})"
        if k == "or":
            return f"({self.sql(e[1])} OR {self.sql(e[2])})"
        if k == "not":
            return f"(NOT {self.sql(e[1])})"
        if k == "cmp":
            op, a, b = e[1], e[2], e[3]
            sop = "IS" if op == "<=>" else op
            if a[0] == "tuple" and b[0] == "tuple":
                if len(a[1]) != len(b[1]):
                    raise MySQLError(1241, "21000", f"Operand should contain {len(a[1])} column(s)")
                left = ", ".join(self.operand(x, None) for x in a[1])
                right = ", ".join(self.operand(y, x) for x, y in zip(a[1], b[1], strict=True))
                return f"(({left}) {sop} ({right}))"
            return f"({self.operand(a, b)} {sop} {self.operand(b, a)})"
        if k == "in":
            items = ", ".join(self.operand(x, e[1]) for x in e[2])
            return f"({self.operand(e[1], None)} {'NOT ' if e[3] else ''}IN ({items}))"
        if k == "isnull":
            return f"({self.operand(e[1], None)} IS {'NOT ' if e[2] else ''}NULL)"
        if k == "between":
            x = self.operand(e[1], None)
            return f"({x} {'NOT ' if e[4] else ''}BETWEEN {self.operand(e[2], e[1])} AND {self.operand(e[3], e[1])})"
        if k == "like":
            return f"({self.operand(e[1], None)} {'NOT ' if e[3] else ''}LIKE {self.operand(e[2], None)})"
        if k == "binop":
            return f"({self.operand(e[2], None)} {e[1]} {self.operand(e[3], None)})"
        raise MySQLError(1105, "HY000", f"VT12001: unsupported: {k} in WHERE")

    def operand(self, e: sqlp.Expr, other: sqlp.Expr | None) -> str:
        if e[0] in ("lit", "param", "neg"):
            return self.lit_for(other, e)
        return self.sql(e)


class Executor:
    """Runs parsed statements against the topology under the cluster write lock."""

    def __init__(self, topo: Topology, on_commit: Callable[[Shard, bl.Entry], None] | None = None) -> None:
        self.topo = topo
        self.on_commit = on_commit
        # Commit timestamps (binlog event seconds); tests replace it to write history "in the past".
        self.clock: Callable[[], float] = time.time

    # -- entry point
    @staticmethod
    def parse(sql: str) -> sqlp.Statement:
        """Parse one statement, with vtgate's errors for what the parser rejects."""
        try:
            return sqlp.parse(sql)
        except sqlp.SQLSyntaxError as e:
            raise VTError(INVALID_ARGUMENT, f"{e} (errno 1149) (sqlstate 42000)") from None
        except sqlp.SQLUnsupported as e:
            raise VTError(UNIMPLEMENTED, str(e)) from None

    def execute_batch(self, statements: Sequence[tuple[str, str, dict[str, Any]]], commit: bool
                      ) -> tuple[Result, list[tuple[str, Shard]]]:
        """Run SELECT/DML statements (sql, target, binds) as one transaction under the cluster lock.

        Every shard touched gets one binlog transaction at commit, with the row changes of all the
        statements in order; with commit=False everything is rolled back (used to run the statements of
        an open Execute session so far plus the new one). Returns the last statement's result and the
        (keyspace, shard) pairs written to.
        """
        res = Result()
        txns: dict[int, ShardTxn] = {}
        touched: list[tuple[str, Shard]] = []
        with self.topo.lock:
            # a replay that is rolled back must not consume auto-increment values (same ids on the next replay)
            sequences = {name: dict(ks.sequences) for name, ks in self.topo.keyspaces.items()}

            def undo() -> None:
                for t in txns.values():
                    t.rollback()
                for name, seqs in sequences.items():
                    self.topo.keyspaces[name].sequences = seqs

            try:
                for sql, target, binds in statements:
                    tgt = Target.parse(target)
                    stmt = self.parse(sql)
                    ks = self.resolve_keyspace(stmt, tgt)
                    shards = self.target_shards(ks, tgt)
                    self.check_vschema(ks, shards, stmt, bool(tgt.shard))
                    tname = f"{ks.name}.{tgt.shard or '0'}.{tgt.tablet_type}"
                    before = set(txns)
                    try:
                        if isinstance(stmt, sqlp.Select):
                            res = self.select(ks, shards, stmt, binds)
                        elif isinstance(stmt, sqlp.Insert | sqlp.Update | sqlp.Delete):
                            res = self.dml(ks, shards, stmt, binds, bool(tgt.shard), txns)
                        else:
                            raise MySQLError(1105, "HY000", "VT12001: unsupported: statement in a transaction")
                    except MySQLError as e:
                        raise mysql_error_to_vt(e, tname) from None
                    touched += [(ks.name, txns[k].shard) for k in txns if k not in before]
            except BaseException:
                undo()
                raise
            if not commit:
                undo()
                return res, touched
            now = int(self.clock())
            for t in txns.values():
                self._commit_entry(t.shard, t.commit(now))
        return res, touched

    def execute(self, sql: str, target: str = "", binds: dict[str, Any] | None = None) -> Result:
        tgt = Target.parse(target)
        stmt = self.parse(sql)
        binds = binds or {}
        if isinstance(stmt, sqlp.Show):
            return self.show(stmt, tgt)
        if isinstance(stmt, sqlp.TxControl | sqlp.SetStmt):
            return Result()
        with self.topo.lock:
            ks = self.resolve_keyspace(stmt, tgt)
            shards = self.target_shards(ks, tgt)
            self.check_vschema(ks, shards, stmt, bool(tgt.shard))
            tname = f"{ks.name}.{tgt.shard or '0'}.{tgt.tablet_type}"
            try:
                if isinstance(stmt, sqlp.Select):
                    return self.select(ks, shards, stmt, binds)
                if isinstance(stmt, sqlp.CreateTable):
                    return self.create_table(ks, shards, stmt, sql)
                if isinstance(stmt, sqlp.AlterAddColumns):
                    return self.alter_add(ks, shards, stmt, sql)
                return self.dml(ks, shards, stmt, binds, bool(tgt.shard))
            except MySQLError as e:
                raise mysql_error_to_vt(e, tname) from None

    def resolve_keyspace(self, stmt: sqlp.Statement, tgt: Target) -> Keyspace:
        name = getattr(stmt, "keyspace", None) or tgt.keyspace
        if name:
            if name not in self.topo.keyspaces:
                raise VTError(INVALID_ARGUMENT, f"VT05003: unknown database '{name}' in vschema")
            return self.topo.keyspaces[name]
        table = getattr(stmt, "table", "")
        hits = [ks for ks in self.topo.keyspaces.values()
                if any(s.store.table(table) for s in ks.serving_shards())]
        if len(hits) == 1:
            return hits[0]
        if not hits and len(self.topo.keyspaces) == 1:
            return next(iter(self.topo.keyspaces.values()))
        if not hits:
            raise VTError(NOT_FOUND, f"VT05004: table '{table}' does not exist")
        raise VTError(FAILED_PRECONDITION, f"VT09005: no database selected: ambiguous table '{table}'")

    def target_shards(self, ks: Keyspace, tgt: Target) -> list[Shard]:
        if tgt.shard:
            s = ks.shards.get(tgt.shard)
            if s is None or s.deleted:
                raise VTError(UNAVAILABLE, f"target: {ks.name}.{tgt.shard}.{tgt.tablet_type}: no healthy tablet available "
                                           f"for 'keyspace:\"{ks.name}\" shard:\"{tgt.shard}\" tablet_type:PRIMARY'")
            return [s]
        return ks.serving_shards()

    # -- SHOW
    def show(self, stmt: sqlp.Show, tgt: Target | None = None) -> Result:
        rx = sqlp.like_to_regex(stmt.like) if stmt.like is not None else None
        res = Result()
        if stmt.what == "VITESS_SHARDS":
            res.fields = [{"name": "Shards", "type": VARCHAR}]
            for ks in sorted(self.topo.keyspaces.values(), key=lambda k: k.name):
                for s in ks.serving_shards():
                    v = f"{ks.name}/{s.name}"
                    if rx is None or rx.match(v):
                        res.rows.append([v.encode()])
        elif stmt.what == "VITESS_TABLETS":
            names = ["Cell", "Keyspace", "Shard", "TabletType", "State", "Alias", "Hostname", "PrimaryTermStartTime"]
            res.fields = [{"name": n, "type": VARCHAR} for n in names]
            for ks in sorted(self.topo.keyspaces.values(), key=lambda k: k.name):
                for s in ks.serving_shards():
                    row = [CELL, ks.name, s.name, "PRIMARY", "SERVING", f"{CELL}-{s.tablet_uid:010d}",
                           "localhost", "2024-01-01T00:00:00Z"]
                    res.rows.append([v.encode() for v in row])
        else:
            # vtgate routes SHOW TABLES to the session's keyspace (the only keyspace if there is just one)
            # and renames the column after the keyspace, not the vt_<ks> MySQL database.
            name = tgt.keyspace if tgt is not None and tgt.keyspace else ""
            if not name:
                if len(self.topo.keyspaces) != 1:
                    raise VTError(FAILED_PRECONDITION, "VT09005: No database selected: use keyspace<:shard><@type> "
                                                       "or keyspace<[range]><@type> (<> are optional)")
                name = next(iter(self.topo.keyspaces))
            if name not in self.topo.keyspaces:
                raise VTError(INVALID_ARGUMENT, f"VT05003: unknown database '{name}' in vschema")
            tables: set[str] = set()
            for s in self.topo.keyspaces[name].serving_shards():
                tables.update(t.name for t in s.store.tables.values())
            res.fields = [{"name": f"Tables_in_{name}", "type": VARCHAR}]
            if stmt.what == "FULL_TABLES":
                res.fields.append({"name": "Table_type", "type": VARCHAR})
            for t in sorted(tables):
                if rx is None or rx.match(t):
                    trow: list[bytes | None] = [t.encode()]
                    if stmt.what == "FULL_TABLES":
                        trow.append(b"BASE TABLE")
                    res.rows.append(trow)
        return res

    # -- DDL
    def create_table(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.CreateTable, text: str) -> Result:
        for s in shards:
            if s.store.table(stmt.table):
                if stmt.if_not_exists:
                    continue
                raise MySQLError(1050, "42S01", f"Table '{stmt.table}' already exists")
            schema = table_from_create(stmt)
            s.store.create_table(schema)
            self._commit_entry(s, s.binlog.append(bl.DDL, int(self.clock()), statement=_strip_comments(text),
                                                  ddl_table=schema.name, database=s.database))
        return Result()

    def alter_add(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.AlterAddColumns, text: str) -> Result:
        for s in shards:
            schema = s.store.table(stmt.table)
            if schema is None:
                raise MySQLError(1146, "42S02", f"Table '{s.database}.{stmt.table}' doesn't exist")
            for cd in stmt.columns:
                if schema.has(cd.name):
                    raise MySQLError(1060, "42S21", f"Duplicate column name '{cd.name}'")
            start = len(schema.columns)
            # A new schema object: binlog entries written before the DDL keep the old one.
            schema = TableSchema(name=schema.name, columns=[dataclasses.replace(c) for c in schema.columns]
                                 + [column_from_def(cd) for cd in stmt.columns], pk=list(schema.pk),
                                 unique_keys=list(schema.unique_keys), keys=list(schema.keys),
                                 version=schema.version + 1)
            s.store.tables[schema.name.lower()] = schema
            s.store.add_columns(schema, start)
            self._commit_entry(s, s.binlog.append(bl.DDL, int(self.clock()), statement=_strip_comments(text),
                                                  ddl_table=schema.name, database=s.database))
        return Result()

    def _commit_entry(self, shard: Shard, entry: bl.Entry | None) -> None:
        if entry is not None and self.on_commit is not None:
            self.on_commit(shard, entry)

    @staticmethod
    def check_vschema(ks: Keyspace, shards: list[Shard], stmt: sqlp.Statement, shard_targeted: bool) -> None:
        """VTGate plans a statement on a sharded keyspace from its VSchema: a table it does not know
        is refused by the planner (vtrpc UNKNOWN), before any tablet sees the statement. Targeted at
        a shard, or in an unsharded keyspace, the tablet answers (MySQL error 1146)."""
        if not ks.sharded or shard_targeted or not shards:
            return
        if not isinstance(stmt, sqlp.Select | sqlp.Insert | sqlp.Update | sqlp.Delete):
            return
        table = stmt.table
        if table and table.lower() != "dual" and shards[0].store.table(table) is None:
            raise VTError(UNKNOWN, f"table {table} not found")

    # -- SELECT
    def table_of(self, shard: Shard, name: str) -> TableSchema:
        t = shard.store.table(name)
        if t is None:
            raise MySQLError(1146, "42S02", f"Table '{shard.database}.{name}' doesn't exist")
        return t

    def select(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Select, binds: dict[str, Any]) -> Result:
        res, kinds, raw = self.select_raw(ks, shards, stmt, binds)
        res.rows = [render_row(kinds, r) for r in raw]
        return res

    def select_raw(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Select, binds: dict[str, Any],
                   keys_only: bool = False) -> tuple[Result, list[Any], list[tuple[Any, ...]]]:
        """A SELECT's fields (in a row-less Result), output kinds and stored rows; `render_row` turns
        each into MySQL text. Split so streaming can render outside the cluster lock.

        ``keys_only`` (one shard): the same statement, fields and kinds, but each stored row is just
        its primary key, for a reader whose rows are all in the encoded-row cache."""
        schema = self.table_of(shards[0], stmt.table)
        cols = stmt.columns or [(("col", c.name), c.name) for c in schema.columns]
        aggs = [e[0] == "func" and e[1] in ("COUNT", "MIN", "MAX", "SUM") for e, _ in cols]
        if any(aggs) and not all(aggs):
            raise MySQLError(1140, "42000", "VT12001: unsupported: mixing aggregates and columns without GROUP BY")
        res = Result()
        sel_sql: list[str] = []
        kinds: list[Any] = []
        for e, alias in cols:
            if e[0] == "col":
                c = schema.column(e[1]) if schema.has(e[1]) else None
                if c is None:
                    raise MySQLError(1054, "42S22", f"Unknown column '{e[1]}' in 'field list'")
                sel_sql.append(q(c.name))
                kinds.append(c)
                res.fields.append(_field(schema, c, alias, shards[0].database))
            elif e[0] == "func" and e[1] == "COUNT":
                arg = "*" if e[2][0] == ("star",) else q(schema.column(e[2][0][1]).name)
                sel_sql.append(f"count({arg})")
                kinds.append("count")
                res.fields.append({"name": alias, "type": INT64, "flags": 32897 - 128, "column_length": 21})
            elif e[0] == "func" and e[1] in ("MIN", "MAX", "SUM") and e[2] and e[2][0][0] == "col":
                c = schema.column(e[2][0][1])
                sel_sql.append(f"{e[1].lower()}({q(c.name)})")
                kinds.append((e[1], c))
                res.fields.append(_field(schema, c, alias, shards[0].database) | {"flags": 0})
            else:
                raise MySQLError(1105, "HY000", f"VT12001: unsupported: select expression {alias}")
        if keys_only:
            sel_sql = [q(c) for c in schema.pk]
        base = f"SELECT {', '.join(sel_sql)} FROM {q(schema.name)}"
        w = WhereSQL(schema, binds)
        if stmt.where is not None:
            base += " WHERE " + w.sql(stmt.where)
        order_idx: list[tuple[int, bool]] = []
        if stmt.order_by and not any(aggs):
            parts = []
            for e, desc in stmt.order_by:
                if e[0] != "col":
                    raise MySQLError(1105, "HY000", "VT12001: unsupported: ORDER BY expression")
                parts.append(w.col(e[1]) + (" DESC" if desc else ""))
                # index of the order column in the output, appending a hidden one if needed
                name = schema.column(e[1]).name
                idx = next((i for i, (ce, _) in enumerate(cols) if ce[0] == "col" and ce[1].lower() == name.lower()), -1)
                order_idx.append((idx, desc))
            base += " ORDER BY " + ", ".join(parts)
        single = len(shards) == 1
        if stmt.limit is not None and (single or stmt.offset == 0):
            base += f" LIMIT {stmt.limit + (0 if single else stmt.offset)}"
            if single and stmt.offset:
                base += f" OFFSET {stmt.offset}"
        raw: list[tuple[Any, ...]] = []
        for s in shards:
            self.table_of(s, stmt.table)
            raw.extend(s.store.select_sql(base, w.params))
        if any(aggs) and not single:
            raw = [_merge_aggs(kinds, raw)]
        elif not single:
            for idx, desc in reversed(order_idx):
                if idx >= 0:
                    raw.sort(key=functools.partial(_order_key, idx), reverse=desc)
            if stmt.limit is not None:
                raw = raw[stmt.offset: stmt.offset + stmt.limit]
        return res, kinds, raw

    def stream_select(self, sql: str, target: str = "", binds: dict[str, Any] | None = None) -> RowStream | None:
        """A plain SELECT for the wire: fields now, `query.Row` encodings in batches as they are
        rendered (outside the lock, from the rows read under it). None for any other statement.

        A single-shard read of whole rows of a table with a primary key uses the shard's
        encoded-row cache (see store.py): hits are taken under the lock with the read, so the
        stream is one consistent snapshot; misses are rendered afterwards and cached.
        """
        stmt = self.parse(sql)
        if not isinstance(stmt, sqlp.Select):
            return None
        tgt = Target.parse(target)
        with self.topo.lock:
            ks = self.resolve_keyspace(stmt, tgt)
            shards = self.target_shards(ks, tgt)
            self.check_vschema(ks, shards, stmt, bool(tgt.shard))
            tname = f"{ks.name}.{tgt.shard or '0'}.{tgt.tablet_type}"
            cached = self._all_cached(ks, shards, stmt, binds or {}, tname)
            if cached is not None:
                return cached
            try:
                res, kinds, raw = self.select_raw(ks, shards, stmt, binds or {})
            except MySQLError as e:
                raise mysql_error_to_vt(e, tname) from None
            store = shards[0].store
            schema = store.table(stmt.table)
            whole = (len(shards) == 1 and schema is not None and bool(schema.pk)
                     and len(kinds) == len(schema.columns)
                     and all(k is c for k, c in zip(kinds, schema.columns, strict=True)))
            if whole:
                assert schema is not None
                cache = store.cached_rows(schema)
                key = store.pk_key(schema)
                hits: list[bytes | None] = [cache.get(key(r)) for r in raw] if cache else [None] * len(raw)
                seen = store.writes
        if not whole:
            return RowStream(res.fields, _render_batches(kinds, raw))
        assert schema is not None
        return RowStream(res.fields, _cached_batches(store, schema, seen, key, kinds, raw, hits))

    def _all_cached(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Select, binds: dict[str, Any],
                    tname: str) -> RowStream | None:
        """``SELECT *`` on one shard, table keyed by an integer primary key and no other index (the
        SQLite rowid is then the only access path, so reading the keys alone visits the rows in the
        same order as reading them whole), every row in the encoded-row cache: the stream from the keys alone, without reading and decoding every column (the
        backfill's chunk reads of a warm table). None otherwise: the caller reads whole rows.
        Called under the cluster lock, so keys and cache hits are one snapshot."""
        if len(shards) != 1 or stmt.columns is not None:
            return None
        store = shards[0].store
        schema = store.table(stmt.table)
        if (schema is None or len(schema.pk) != 1 or schema.unique_keys
                or schema.column(schema.pk[0]).ct.storage != "INTEGER"):
            return None
        cache = store.cached_rows(schema)
        if not cache:
            return None
        bounds = _key_range(stmt.where, schema.pk[0], binds) if stmt.limit is None and not stmt.order_by else None
        ordered = store.ordered_rows(schema) if bounds is not None else None
        if ordered is not None and bounds is not None:
            keys_sorted, rows = ordered
            lo, hi = bounds
            i = 0 if lo is None else bisect.bisect_left(keys_sorted, lo)
            j = len(keys_sorted) if hi is None else bisect.bisect_left(keys_sorted, hi)
            db = shards[0].database
            fields = [_field(schema, c, c.name, db) for c in schema.columns]  # select_raw's, for SELECT *
            return RowStream(fields, (rows[k:min(k + STREAM_BATCH_ROWS, j)] for k in range(i, j, STREAM_BATCH_ROWS)))
        try:
            res, _kinds, keys = self.select_raw(ks, shards, stmt, binds, keys_only=True)
        except MySQLError as e:
            raise mysql_error_to_vt(e, tname) from None
        get = cache.get
        hits = [get(k[0]) for k in keys]
        if None in hits:
            return None
        return RowStream(res.fields, (hits[i:i + STREAM_BATCH_ROWS] for i in range(0, len(hits), STREAM_BATCH_ROWS)))  # type: ignore[misc]

    # -- DML
    def dml(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Statement, binds: dict[str, Any],
            shard_targeted: bool, open_txns: dict[int, ShardTxn] | None = None) -> Result:
        """One DML statement; autocommit, or into `open_txns` (the caller commits or rolls back)."""
        txns: dict[int, ShardTxn] = {} if open_txns is None else open_txns
        for t0 in txns.values():
            t0.new_statement()  # MySQL writes each statement's rows as their own Rows_events

        def txn(s: Shard) -> ShardTxn:
            t = txns.get(id(s))
            if t is None:
                t = txns[id(s)] = ShardTxn(s)
            return t

        res = Result()
        try:
            if isinstance(stmt, sqlp.Insert):
                self.insert(ks, shards, stmt, binds, shard_targeted, txn, res)
            elif isinstance(stmt, sqlp.Update):
                self.update(ks, shards, stmt, binds, shard_targeted, txn, res)
            elif isinstance(stmt, sqlp.Delete):
                self.delete(shards, stmt, binds, txn, res)
            else:
                raise MySQLError(1105, "HY000", "VT12001: unsupported statement")
        except BaseException:
            if open_txns is None:
                for t in txns.values():
                    t.rollback()
            raise
        if open_txns is not None:
            return res
        now = int(self.clock())
        for t in txns.values():
            self._commit_entry(t.shard, t.commit(now))
        return res

    def _full_row(self, ks: Keyspace, schema: TableSchema, given: dict[str, Any], sharded_seq: bool) -> list[Any]:
        row: list[Any] = []
        for c in schema.columns:
            key = c.name.lower()
            if key in given:
                v = given[key]
                if v is None and c.auto_increment:
                    v = self._next_auto(ks, schema, sharded_seq)
                elif v is None and not c.nullable:
                    raise MySQLError(1048, "23000", f"Column '{c.name}' cannot be null")
            elif c.auto_increment:
                v = self._next_auto(ks, schema, sharded_seq)
            elif c.has_default:
                v = c.default
                if v is NOW:
                    v = now_text(c.ct.decimals)
                    v = mysqltypes.normalize(c.ct, v)
                row.append(v)
                continue
            elif not c.nullable:
                if c.ct.column_type.startswith("timestamp"):
                    v = now_text(c.ct.decimals)
                else:
                    raise MySQLError(1364, "HY000", f"Field '{c.name}' doesn't have a default value")
            else:
                v = None
            if v is not None:
                v = mysqltypes.normalize(c.ct, v)
                if c.auto_increment:
                    seq_key = schema.name.lower()
                    ks.sequences[seq_key] = max(ks.sequences.get(seq_key, 0), int(v))  # type: ignore[call-overload]
            row.append(v)
        return row

    def _next_auto(self, ks: Keyspace, schema: TableSchema, _sharded: bool) -> int:
        # One counter per keyspace table: a Vitess sequence for sharded keyspaces, auto_increment otherwise.
        key = schema.name.lower()
        if key not in ks.sequences:
            mx = 0
            pkcol = next(c for c in schema.columns if c.auto_increment)
            for s in ks.serving_shards():
                r = s.store.select_sql(f"SELECT max({q(pkcol.name)}) FROM {q(schema.name)}", [])
                if r and r[0][0] is not None:
                    mx = max(mx, int(r[0][0]))
            ks.sequences[key] = mx
        ks.sequences[key] += 1
        return ks.sequences[key]

    def route(self, ks: Keyspace, schema: TableSchema, row: Sequence[Any], shards: list[Shard],
              shard_targeted: bool) -> Shard:
        if shard_targeted or not ks.sharded:
            return shards[0]
        vcol = ks.vindex_column(schema.name)
        v = row[schema.index(vcol)]
        if v is None:
            raise MySQLError(1105, "HY000", f"VT09001: could not map [NULL] to a keyspace id (vindex column {vcol})")
        return ks.shard_for_value(v)

    def insert(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Insert, binds: dict[str, Any],
               shard_targeted: bool, txn: Callable[[Shard], ShardTxn], res: Result) -> None:
        schema = self.table_of(shards[0], stmt.table)
        names = [c.name for c in schema.columns] if stmt.columns is None else stmt.columns
        for n in names:
            if not schema.has(n):
                raise MySQLError(1054, "42S22", f"Unknown column '{n}' in 'field list'")
        ev = Evaluator(binds)
        for vals in stmt.rows:
            if len(vals) != len(names):
                raise MySQLError(1136, "21S01", "Column count doesn't match value count at row 1")
            given = {n.lower(): ev.value(v) for n, v in zip(names, vals, strict=True)}
            row = self._full_row(ks, schema, given, ks.sharded)
            ai = next((i for i, c in enumerate(schema.columns) if c.auto_increment), None)
            if ai is not None and (given.get(schema.columns[ai].name.lower()) in (None, 0)):
                res.insert_id = res.insert_id or int(row[ai])
            shard = self.route(ks, schema, row, shards, shard_targeted)
            st = shard.store
            t = txn(shard)
            conflict = st.find_unique(schema, row)
            if conflict is None:
                st.insert(schema, row)
                t.record(schema, None, tuple(row))
                res.rows_affected += 1
                continue
            key, old = conflict
            if stmt.replace:
                other = [k for k, _ in schema.unique_keys]
                if key == "PRIMARY" and not other:
                    st.update(schema, old, row)
                    t.record(schema, old, tuple(row))
                else:
                    st.delete(schema, old)
                    t.record(schema, old, None)
                    while (c2 := st.find_unique(schema, row)) is not None:
                        st.delete(schema, c2[1])
                        t.record(schema, c2[1], None)
                    st.insert(schema, row)
                    t.record(schema, None, tuple(row))
                res.rows_affected += 2
            elif stmt.on_dup:
                oldd = {c.name.lower(): v for c, v in zip(schema.columns, old, strict=True)}
                newd = {c.name.lower(): v for c, v in zip(schema.columns, row, strict=True)}
                upd = list(old)
                for cn, e in stmt.on_dup:
                    if not schema.has(cn):
                        raise MySQLError(1054, "42S22", f"Unknown column '{cn}' in 'field list'")
                    i = schema.index(cn)
                    v = ev.value(e, oldd, newd)
                    upd[i] = None if v is None else mysqltypes.normalize(schema.columns[i].ct, v)
                    oldd[cn.lower()] = upd[i]
                if tuple(upd) != old:
                    st.update(schema, old, upd)
                    t.record(schema, old, tuple(upd))
                    res.rows_affected += 2
            elif stmt.ignore:
                continue
            else:
                kcols = schema.pk if key == "PRIMARY" else next(c for k, c in schema.unique_keys if k == key)
                shown = "-".join(_dup_text(schema, row, c) for c in kcols)
                raise MySQLError(1062, "23000", f"Duplicate entry '{shown}' for key '{key}'")

    def _matching(self, shard: Shard, schema: TableSchema, where: sqlp.Expr | None, limit: int | None,
                  binds: dict[str, Any]) -> list[tuple[Any, ...]]:
        cols = ", ".join(q(c.name) for c in schema.columns)
        sql = f"SELECT {cols} FROM {q(schema.name)}"
        w = WhereSQL(schema, binds)
        if where is not None:
            sql += " WHERE " + w.sql(where)
        sql += " ORDER BY " + ", ".join(q(c) for c in schema.copy_key)
        if limit is not None:
            sql += f" LIMIT {limit}"
        return [tuple(r) for r in shard.store.select_sql(sql, w.params)]

    def update(self, ks: Keyspace, shards: list[Shard], stmt: sqlp.Update, binds: dict[str, Any],
               shard_targeted: bool, txn: Callable[[Shard], ShardTxn], res: Result) -> None:
        ev = Evaluator(binds)
        schema0 = self.table_of(shards[0], stmt.table)
        for cn, _ in stmt.sets:
            if not schema0.has(cn):
                raise MySQLError(1054, "42S22", f"Unknown column '{cn}' in 'field list'")
        if ks.sharded and not shard_targeted:
            vcol = ks.vindex_column(stmt.table).lower()
            if any(cn.lower() == vcol for cn, _ in stmt.sets):
                # Vitess v24's planner refuses this (operators/update.go, buildChangedVindexesValues)
                # before reading a row, whatever the new value; UNIMPLEMENTED is MySQL error 1235.
                raise VTError(UNIMPLEMENTED, PRIMARY_VINDEX_UPDATE)
        for s in shards:
            schema = self.table_of(s, stmt.table)
            for old in self._matching(s, schema, stmt.where, stmt.limit, binds):
                rowd = {c.name.lower(): v for c, v in zip(schema.columns, old, strict=True)}
                new = list(old)
                for cn, e in stmt.sets:
                    i = schema.index(cn)
                    v = ev.value(e, rowd)
                    c = schema.columns[i]
                    if v is None and not c.nullable:
                        raise MySQLError(1048, "23000", f"Column '{c.name}' cannot be null")
                    new[i] = None if v is None else mysqltypes.normalize(c.ct, v)
                for i, c in enumerate(schema.columns):
                    if (c.on_update_now and not any(cn.lower() == c.name.lower() for cn, _ in stmt.sets)
                            and tuple(new) != old):
                        new[i] = mysqltypes.normalize(c.ct, now_text(c.ct.decimals))
                if tuple(new) == old:
                    continue  # MySQL logs no row for an unchanged row
                # The vindex column is unchanged (refused above), so the row stays on its shard.
                if any(new[i] != old[i] for i in schema.pk_indexes):
                    conflict = s.store.get_by_pk(schema, [new[i] for i in schema.pk_indexes])
                    if conflict is not None:
                        shown = "-".join(_dup_text(schema, new, c) for c in schema.pk)
                        raise MySQLError(1062, "23000", f"Duplicate entry '{shown}' for key 'PRIMARY'")
                t = txn(s)  # the shard's SQLite transaction begins before its first write: a rollback undoes it
                s.store.update(schema, old, new)
                t.record(schema, old, tuple(new))
                res.rows_affected += 1

    def delete(self, shards: list[Shard], stmt: sqlp.Delete, binds: dict[str, Any],
               txn: Callable[[Shard], ShardTxn], res: Result) -> None:
        for s in shards:
            schema = self.table_of(s, stmt.table)
            for old in self._matching(s, schema, stmt.where, stmt.limit, binds):
                t = txn(s)  # before the write, as in update
                s.store.delete(schema, old)
                t.record(schema, old, None)
                res.rows_affected += 1


STREAM_BATCH_ROWS = 256  # rows per StreamExecute response


@dataclass
class RowStream:
    """A streamed SELECT: fields (query.Field kwargs) and batches of rows, each a `query.Row` encoded
    as a `QueryResult.rows` entry (`wire.result_row`), so a batch joined is a row-only QueryResult."""

    fields: list[dict[str, Any]]
    batches: Iterator[list[bytes]]


def render_row(kinds: Sequence[Any], r: Sequence[Any]) -> list[bytes | None]:
    """One stored result row as MySQL text (kinds from `select_raw`)."""
    out: list[bytes | None] = []
    for kind, v in zip(kinds, r, strict=True):
        if v is None:
            out.append(None)
        elif kind == "count":
            out.append(str(v).encode())
        elif isinstance(kind, tuple):
            out.append(mysqltypes.to_text(kind[1].ct, v) if kind[0] != "SUM" else str(v).encode())
        else:
            out.append(mysqltypes.to_text(kind.ct, v))
    return out


def _render_batches(kinds: Sequence[Any], raw: Sequence[tuple[Any, ...]]) -> Iterator[list[bytes]]:
    encode = wire.result_row
    for i in range(0, len(raw), STREAM_BATCH_ROWS):
        yield [encode(render_row(kinds, r)) for r in raw[i:i + STREAM_BATCH_ROWS]]


def _cached_batches(store: ShardStore, schema: TableSchema, seen: int, key: Callable[[Sequence[Any]], Any],
                    kinds: Sequence[Any], raw: Sequence[tuple[Any, ...]], hits: list[bytes | None]
                    ) -> Iterator[list[bytes]]:
    encode = wire.result_row
    for i in range(0, len(raw), STREAM_BATCH_ROWS):
        batch = hits[i:i + STREAM_BATCH_ROWS]
        if None in batch:
            new: dict[Any, bytes] = {}
            for j, b in enumerate(batch):
                if b is None:
                    r = raw[i + j]
                    batch[j] = new[key(r)] = encode(render_row(kinds, r))
            store.cache_rows(schema, seen, new)
        yield batch  # type: ignore[misc]  # every slot is filled now


def _key_range(where: sqlp.Expr | None, pk: str, binds: dict[str, Any]) -> tuple[int | None, int | None] | None:
    """``(lo, hi)`` when ``where`` is only ``pk >= lo`` and/or ``pk < hi`` with integer values (a
    backfill chunk's range, either end open); None for any other condition."""
    if where is None:
        return None, None
    terms = [where[1], where[2]] if where[0] == "and" else [where]
    bounds: dict[str, int] = {}
    for t in terms:
        if (t[0] != "cmp" or t[1] not in (">=", "<") or t[1] in bounds or t[2][0] != "col"
                or t[2][1].lower() != pk.lower() or t[3][0] not in ("lit", "param")):
            return None
        v = t[3][1] if t[3][0] == "lit" else binds.get(t[3][1])
        if type(v) is not int:
            return None
        bounds[t[1]] = v
    return bounds.get(">="), bounds.get("<")


def _field(schema: TableSchema, c: Any, alias: str, database: str) -> dict[str, Any]:
    return {"name": alias, "type": c.ct.vitess_type, "table": schema.name, "org_table": schema.name,
            "database": database, "org_name": c.name, "column_length": c.ct.column_length,
            "charset": c.ct.charset, "decimals": c.ct.decimals, "flags": c.flags, "column_type": c.ct.column_type}


def _dup_text(schema: TableSchema, row: Sequence[Any], col: str) -> str:
    c = schema.column(col)
    v = row[schema.index(col)]
    return mysqltypes.to_text(c.ct, v).decode(errors="replace") if v is not None else "NULL"


def _order_key(i: int, r: tuple[Any, ...]) -> Any:
    return (r[i] is not None, _sort_key(r[i]))


def _sort_key(v: Any) -> Any:
    if isinstance(v, str):
        return (1, v.lower())
    if isinstance(v, bytes):
        return (2, v)
    return (0, v)


def _merge_aggs(kinds: list[Any], rows: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    out: list[Any] = []
    for i, k in enumerate(kinds):
        vals = [r[i] for r in rows if r[i] is not None]
        if k == "count" or (isinstance(k, tuple) and k[0] == "SUM"):
            out.append(sum(vals) if vals or k == "count" else None)
        elif isinstance(k, tuple) and k[0] == "MIN":
            out.append(min(vals, key=_sort_key) if vals else None)
        else:
            out.append(max(vals, key=_sort_key) if vals else None)
    return tuple(out)


def _strip_comments(text: str) -> str:
    return re.sub(r"^\s*(/\*.*?\*/\s*)+", "", text, flags=re.DOTALL).strip().rstrip(";")
