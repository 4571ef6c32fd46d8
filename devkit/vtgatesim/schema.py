"""Table schemas: columns with their MySQL types and the per-column flags MySQL derives from DDL."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vitessapi import query_pb2

from . import mysqltypes
from .sql import ColumnDef, CreateTable, KeyDef

# MySqlFlag bits
NOT_NULL_FLAG = 1
PRI_KEY_FLAG = 2
UNIQUE_KEY_FLAG = 4
MULTIPLE_KEY_FLAG = 8
AUTO_INCREMENT_FLAG = 512
TIMESTAMP_FLAG = 1024
NO_DEFAULT_VALUE_FLAG = 4096
ON_UPDATE_NOW_FLAG = 8192
PART_KEY_FLAG = 16384

NOW = object()  # marker for DEFAULT CURRENT_TIMESTAMP


@dataclass
class Column:
    name: str
    ct: mysqltypes.ColumnType
    nullable: bool = True
    default: Any = None  # stored value, None, or NOW
    has_default: bool = False
    auto_increment: bool = False
    on_update_now: bool = False
    flags: int = 0


@dataclass
class TableSchema:
    name: str
    columns: list[Column]
    pk: list[str]
    unique_keys: list[tuple[str, list[str]]] = field(default_factory=list)
    keys: list[tuple[str, list[str]]] = field(default_factory=list)
    version: int = 1  # bumped by DDL: the vstreamer then sends a fresh FIELD
    _index: dict[str, int] = field(default_factory=dict, repr=False)
    _fields_cache: dict[tuple[str, str], list[query_pb2.Field]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.recompute()

    def recompute(self) -> None:
        self._index = {c.name.lower(): i for i, c in enumerate(self.columns)}
        self._fields_cache.clear()
        pk = {c.lower() for c in self.pk}
        for c in self.columns:
            f = c.ct.type_flags
            if not c.nullable or c.name.lower() in pk:
                f |= NOT_NULL_FLAG
            if c.name.lower() in pk:
                f |= PRI_KEY_FLAG | PART_KEY_FLAG
            if c.auto_increment:
                f |= AUTO_INCREMENT_FLAG
            if c.on_update_now:
                f |= ON_UPDATE_NOW_FLAG
            if (f & NOT_NULL_FLAG) and not c.has_default and not c.auto_increment:
                f |= NO_DEFAULT_VALUE_FLAG
            c.flags = f
        for _name, cols in self.unique_keys:
            for i, cn in enumerate(cols):
                col = self.columns[self._index[cn.lower()]]
                col.flags |= PART_KEY_FLAG
                if len(cols) == 1:
                    col.flags |= UNIQUE_KEY_FLAG
                elif i == 0:
                    col.flags |= MULTIPLE_KEY_FLAG
        for _name, cols in self.keys:
            for i, cn in enumerate(cols):
                col = self.columns[self._index[cn.lower()]]
                col.flags |= PART_KEY_FLAG
                if i == 0:
                    col.flags |= MULTIPLE_KEY_FLAG

    def index(self, name: str) -> int:
        return self._index[name.lower()]

    def has(self, name: str) -> bool:
        return name.lower() in self._index

    def column(self, name: str) -> Column:
        return self.columns[self._index[name.lower()]]

    @property
    def pk_indexes(self) -> list[int]:
        return [self.index(c) for c in self.pk]

    @property
    def copy_key(self) -> list[str]:
        """What the vstreamer orders a copy by and reports as lastpk (rowstreamer.buildPKColumns):
        the primary key; else a PK equivalent, the unique key with the fewest columns that are all
        NOT NULL (first declared on a tie); else every column of the table."""
        if self.pk:
            return self.pk
        candidates = [cols for _n, cols in self.unique_keys if all(not self.column(c).nullable for c in cols)]
        if candidates:
            return [self.column(c).name for c in min(candidates, key=len)]
        return [c.name for c in self.columns]

    @property
    def copy_key_indexes(self) -> list[int]:
        return [self.index(c) for c in self.copy_key]

    def fields(self, database: str, anonymise: bool = False) -> list[query_pb2.Field]:
        """query.Field list as the vstreamer / tablet reports it (full metadata)."""
        key = (database, "anon" if anonymise else "")
        cached = self._fields_cache.get(key)
        if cached is None:
            cached = []
            for i, c in enumerate(self.columns):
                name = f"@{i + 1}" if anonymise else c.name
                cached.append(
                    query_pb2.Field(
                        name=name, type=c.ct.vitess_type,  # type: ignore[arg-type]
                        table=self.name, org_table=self.name,
                        database=database, org_name=name, column_length=c.ct.column_length,
                        charset=c.ct.charset, decimals=c.ct.decimals, flags=c.flags,
                        column_type=c.ct.column_type,
                    )
                )
            self._fields_cache[key] = cached
        return cached

    def pk_fields(self, database: str) -> list[query_pb2.Field]:
        """The lastpk QueryResult fields (copy key columns): name and type only, as vstreamer sends them."""
        out = []
        for cn in self.copy_key:
            c = self.column(cn)
            out.append(query_pb2.Field(name=c.name, type=c.ct.vitess_type))  # type: ignore[arg-type]
        return out


def column_from_def(cd: ColumnDef) -> Column:
    ct = mysqltypes.parse_column_type(cd.type_sql)
    col = Column(name=cd.name, ct=ct, nullable=cd.nullable, has_default=cd.has_default,
                 auto_increment=cd.auto_increment, on_update_now=cd.on_update_now)
    if cd.has_default and cd.default is not None:
        d = cd.default
        if d[0] == "func" and d[1] == "NOW":
            col.default = NOW
        elif d[0] == "lit":
            col.default = None if d[1] is None else mysqltypes.normalize(ct, d[1])
        else:
            raise mysqltypes.MySQLError(1067, "42000", f"Invalid default value for '{cd.name}'")
    elif not cd.has_default and ct.column_type.startswith("timestamp") and not cd.nullable:
        col.default = None
    return col


def table_from_create(stmt: CreateTable) -> TableSchema:
    cols = [column_from_def(cd) for cd in stmt.columns]
    pk: list[str] = []
    uniques: list[tuple[str, list[str]]] = []
    keys: list[tuple[str, list[str]]] = []
    names = {c.name.lower() for c in cols}
    kd: KeyDef
    for kd in stmt.keys:
        for cn in kd.columns:
            if cn.lower() not in names:
                raise mysqltypes.MySQLError(1072, "42000", f"Key column '{cn}' doesn't exist in table")
        if kd.kind == "PRIMARY":
            if pk:
                raise mysqltypes.MySQLError(1068, "42000", "Multiple primary key defined")
            pk = [next(c.name for c in cols if c.name.lower() == cn.lower()) for cn in kd.columns]
        elif kd.kind == "UNIQUE":
            uniques.append((kd.name, kd.columns))
        else:
            keys.append((kd.name, kd.columns))
    # No primary key is fine, as in MySQL/InnoDB: rows are identified by their whole image, and the
    # vstreamer copies by a PK equivalent or all columns (TableSchema.copy_key).
    return TableSchema(name=stmt.table, columns=cols, pk=pk, unique_keys=uniques, keys=keys)
