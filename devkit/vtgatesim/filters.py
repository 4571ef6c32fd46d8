"""VStream filter rules: which tables match, and per-rule row/column filtering (keyrange, select)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from cdcworker import keyrange

from . import sql as sqlp
from .binlog import Image
from .schema import TableSchema
from .topology import keyspace_id


class FilterError(Exception):
    pass


@dataclass
class TablePlan:
    """How one table is streamed: None columns = all; predicates over text images."""

    columns: list[int] | None = None
    where: sqlp.Expr | None = None
    keyrange: keyrange.KeyRange | None = None
    vindex_col: int | None = None

    @property
    def passthrough(self) -> bool:
        return self.columns is None and self.where is None and self.keyrange is None


@dataclass
class Rules:
    rules: list[tuple[str, str]]
    _re: dict[str, re.Pattern[str]] = field(default_factory=dict)

    def rule_for(self, table: str) -> tuple[str, str] | None:
        """First matching rule (Go regexp semantics: unanchored search) or None."""
        for match, flt in self.rules:
            if match.startswith("/"):
                rx = self._re.get(match)
                if rx is None:
                    rx = self._re[match] = re.compile(match[1:])
                if rx.search(table):
                    return match, flt
            elif match == table:
                return match, flt
        return None

    def plan(self, schema: TableSchema, vindex_column: str, sharded: bool) -> TablePlan | None:
        r = self.rule_for(schema.name)
        if r is None:
            return None
        flt = r[1].strip()
        if not flt:
            return TablePlan()
        if not flt.lower().startswith("select"):
            kr = keyrange.parse_shard(flt) if flt != "0" else keyrange.KeyRange()
            return TablePlan(keyrange=kr, vindex_col=schema.index(vindex_column) if sharded else None)
        try:
            stmt = sqlp.parse(flt)
        except (sqlp.SQLSyntaxError, sqlp.SQLUnsupported) as e:
            raise FilterError(str(e)) from None
        if not isinstance(stmt, sqlp.Select):
            raise FilterError(f"unexpected: {flt}")
        plan = TablePlan()
        if stmt.columns is not None:
            plan.columns = []
            for ce, _ in stmt.columns:
                if ce[0] != "col" or not schema.has(ce[1]):
                    raise FilterError(f"unsupported: {flt}")
                plan.columns.append(schema.index(ce[1]))
        where = stmt.where
        if where is not None:
            plan.where = where
            plan.vindex_col = schema.index(vindex_column) if sharded and schema.has(vindex_column) else None
        return plan


def row_matches(plan: TablePlan, schema: TableSchema, img: Image) -> bool:
    if plan.keyrange is not None:
        if plan.vindex_col is None:
            return True
        v = img[plan.vindex_col]
        return v is not None and plan.keyrange.contains(keyspace_id(v))
    if plan.where is not None:
        return bool(_eval(plan.where, schema, img, plan))
    return True


def project(plan: TablePlan, img: Image) -> Image:
    if plan.columns is None:
        return img
    return tuple(img[i] for i in plan.columns)


def _val(e: sqlp.Expr, schema: TableSchema, img: Image) -> Any:
    if e[0] == "col":
        v = img[schema.index(e[1])]
        if v is None:
            return None
        ct = schema.column(e[1]).ct
        if ct.storage in ("INTEGER", "REAL"):
            try:
                return Decimal(v.decode())
            except InvalidOperation:
                return v.decode()
        return v.decode(errors="replace")
    if e[0] == "lit":
        v = e[1]
        if isinstance(v, int | float):
            return Decimal(str(v))
        return v
    raise FilterError(f"unsupported expression {e[0]} in filter")


def _eval(e: sqlp.Expr, schema: TableSchema, img: Image, plan: TablePlan) -> Any:
    k = e[0]
    if k == "and":
        return _eval(e[1], schema, img, plan) and _eval(e[2], schema, img, plan)
    if k == "or":
        return _eval(e[1], schema, img, plan) or _eval(e[2], schema, img, plan)
    if k == "not":
        return not _eval(e[1], schema, img, plan)
    if k == "func" and e[1] == "IN_KEYRANGE":
        kr = keyrange.parse_shard(e[2][-1][1])
        col = plan.vindex_col if len(e[2]) == 1 else schema.index(e[2][0][1])
        if col is None or img[col] is None:
            return False
        return kr.contains(keyspace_id(img[col]))
    if k == "isnull":
        return (_val(e[1], schema, img) is None) != e[2]
    if k == "in":
        v = _val(e[1], schema, img)
        return (v in [_val(x, schema, img) for x in e[2]]) != e[3]
    if k == "between":
        v = _val(e[1], schema, img)
        lo, hi = _val(e[2], schema, img), _val(e[3], schema, img)
        return (v is not None and lo <= v <= hi) != e[4]
    if k == "cmp":
        a, b = _val(e[2], schema, img), _val(e[3], schema, img)
        if a is None or b is None:
            return False
        op = e[1]
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
                "<=>": a == b}[op]
    raise FilterError(f"unsupported expression {k} in filter")
