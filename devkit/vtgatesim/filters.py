"""VStream filter rules: which tables match, and per-rule row/column filtering, as the tablet
vstreamer plans them (`planbuilder.go`: `buildREPlan`, `buildTablePlan`, `analyzeWhere`, `analyzeExpr`).

A rule's filter is "" (every row and column), a keyrange such as "-80" (rows whose vindex keyspace
id is in it), or `select cols from t where ...`. The select list takes columns and `keyspace_id()`;
the WHERE clause is AND-ed conditions only: `col op literal` (=, !=, <, <=, >, >=), `col in (...)`,
`col is not null` and `in_keyrange(...)`. Anything else is refused with upstream's error text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from vitessapi import query_pb2
from vtgatesim import keyrange

from . import sql as sqlp
from .binlog import Image
from .schema import TableSchema
from .topology import keyspace_id


class FilterError(Exception):
    """A filter the planbuilder refuses; ``code`` is the vtrpc code its Go error carries."""

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


KEYSPACE_ID = -1  # a select-list entry computed from the row's vindex column: keyspace_id()
# analyzeExpr: the field of keyspace_id() (no table/org_name; binary collation, BINARY_FLAG)
KEYSPACE_ID_FIELD = query_pb2.Field(name="keyspace_id", type=query_pb2.VARBINARY, charset=63, flags=128)
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Cond:
    """One AND-ed condition (planbuilder `Filter`): a comparison op, "in", "notnull" or "keyrange"
    (`col` is then the vindex column). `values` are literals already in the column's terms."""

    op: str
    col: int
    values: tuple[Any, ...] = ()
    keyrange: keyrange.KeyRange | None = None


@dataclass
class TablePlan:
    """How one table is streamed: `columns` None = all, else row-image indexes (KEYSPACE_ID for
    keyspace_id()); a row is sent when every condition holds."""

    columns: list[int] | None = None
    conds: list[Cond] = field(default_factory=list)
    vindex_col: int | None = None

    @property
    def passthrough(self) -> bool:
        return self.columns is None and not self.conds


# Python `re` compile errors that Go's regexp/syntax also reports, as Go words them.
_GO_REGEXP_ERRORS = {
    "missing ), unterminated subpattern": "missing closing )",
    "unbalanced parenthesis": "unexpected )",
    "unterminated character set": "missing closing ]",
    "nothing to repeat": "missing argument to repetition operator",
    "multiple repeat": "invalid nested repetition operator",
}


def compile_regexp(expr: str) -> re.Pattern[str]:
    """`expr` compiled, or FilterError with Go's text (``error parsing regexp: <code>: `<expr>` ``):
    Vitess compiles `/regex` keyspaces and table matches with Go's regexp."""
    try:
        return re.compile(expr)
    except re.error as e:
        code = _GO_REGEXP_ERRORS.get(e.msg, e.msg)
        pos = e.pos or 0
        # Go quotes the whole expression for parentheses, the class for `[`, the operator(s) for repeats
        part = {"missing closing ]": expr[pos:], "missing argument to repetition operator": expr[pos:pos + 1],
                "invalid nested repetition operator": expr[pos - 1:pos + 1]}.get(code, expr)
        raise FilterError(f"error parsing regexp: {code}: `{part}`") from None


@dataclass
class Rules:
    rules: list[tuple[str, str]]
    _re: dict[str, re.Pattern[str]] = field(default_factory=dict)

    def rule_for(self, table: str) -> tuple[str, str] | None:
        """First matching rule (Go regexp semantics: unanchored search) or None; FilterError for a bad regex."""
        for match, flt in self.rules:
            if match.startswith("/"):
                rx = self._re.get(match)
                if rx is None:
                    rx = self._re[match] = compile_regexp(match.strip("/"))
                if rx.search(table):
                    return match, flt
            elif match == table:
                return match, flt
        return None

    def missing_tables(self, present: set[str]) -> list[str]:
        """Table-name rules (not regexes) naming a table the shard does not have, in rule order."""
        return [m for m, _ in self.rules if not m.startswith("/") and m not in present]

    def matches(self, table: str) -> bool:
        """planbuilder `ruleMatches` (DDL routing): a regex that does not compile matches nothing."""
        try:
            return self.rule_for(table) is not None
        except FilterError:
            return False

    def plan(self, schema: TableSchema, vindex_column: str, sharded: bool, copying: bool = False) -> TablePlan | None:
        """The table's plan. ``copying``: for the copy phase's row streamer, which reads a table
        name's empty filter as ``select * from <table>`` (uvstreamer ``getQuery``); the binlog
        vstreamer's ``buildTablePlan`` parses the filter as SQL, and an empty one fails."""
        r = self.rule_for(schema.name)
        if r is None:
            return None
        flt = r[1].strip()
        if not flt and not copying and not r[0].startswith("/"):
            raise FilterError("Query was empty", code="INVALID_ARGUMENT")  # sqlparser.ErrEmpty
        if not flt:
            return TablePlan()
        vindex = _Vindex(schema, vindex_column, sharded)
        if not r[0].startswith("/"):
            return _select_plan(schema, flt, vindex)  # buildTablePlan: a table name's filter is a select
        # buildREPlan: a regex rule's filter is a keyrange over the primary vindex
        col = vindex.column()
        return TablePlan(conds=[Cond("keyrange", col, keyrange=_keyrange(flt, f"error parsing keyrange: {flt}"))])


@dataclass
class _Vindex:
    """The table's primary vindex column, looked up only when a plan needs it (FindColVindex)."""

    schema: TableSchema
    name: str
    sharded: bool

    def column(self) -> int:
        if not self.sharded:
            # the vschema of an unsharded keyspace lists tables without vindexes
            raise FilterError(f"table {self.schema.name} has no primary vindex")
        return _column(self.schema, self.name)


def _column(schema: TableSchema, name: str) -> int:
    if not schema.has(name):
        raise FilterError(f"column {name} not found in table {schema.name}")
    return schema.index(name)


def _keyrange(spec: str, multiple: str) -> keyrange.KeyRange:
    """key.ParseShardingSpec for exactly one range ("0" is the whole keyspace); `multiple` is the
    caller's error for a spec of several ranges ("-40-80")."""
    if spec == "0":
        return keyrange.KeyRange()
    if "-" not in spec:
        raise FilterError(f'malformed spec: doesn\'t define a range: "{spec}"')
    if spec.count("-") > 1:
        raise FilterError(multiple)
    try:
        return keyrange.parse_shard(spec)
    except ValueError as e:
        raise FilterError(str(e)) from None


def _select_plan(schema: TableSchema, flt: str, vindex: _Vindex) -> TablePlan:
    """buildTablePlan: a `select` over the rule's table."""
    try:
        stmt = sqlp.parse(flt)
    except (sqlp.SQLSyntaxError, sqlp.SQLUnsupported) as e:
        raise FilterError(str(e)) from None
    if not isinstance(stmt, sqlp.Select):
        raise FilterError(f"unsupported: {flt}")
    if stmt.table != schema.name:
        raise FilterError(f"unsupported: select expression table {stmt.table} does not match the table entry "
                          f"name {schema.name}")
    plan = TablePlan()
    if stmt.where is not None:
        plan.conds = [_cond(schema, e, vindex) for e in _conjuncts(stmt.where)]
    if stmt.columns is not None:
        plan.columns = [_select_column(schema, e, vindex) for e, _alias in stmt.columns]
    if KEYSPACE_ID in (plan.columns or []):
        plan.vindex_col = vindex.column()
    return plan


def _conjuncts(e: sqlp.Expr) -> list[sqlp.Expr]:
    """splitAndExpression: only AND is split; OR, NOT and the rest stay whole (and are refused)."""
    return [*_conjuncts(e[1]), *_conjuncts(e[2])] if e[0] == "and" else [e]


def _select_column(schema: TableSchema, e: sqlp.Expr, vindex: _Vindex) -> int:
    """analyzeExpr: a column, or keyspace_id() (the row's keyspace id from the primary vindex)."""
    if e[0] == "col":
        return _column(schema, e[1])
    if e[0] == "func" and e[1] == "KEYSPACE_ID":
        if e[2]:
            raise FilterError(f"unexpected: {sql_text(e)}")
        vindex.column()
        return KEYSPACE_ID
    if e[0] == "func":
        raise FilterError(f"unsupported function: {sql_text(e)}")
    raise FilterError(f"unsupported: {sql_text(e)}")


def _cond(schema: TableSchema, e: sqlp.Expr, vindex: _Vindex) -> Cond:
    """analyzeWhere for one conjunct."""
    k = e[0]
    if k in ("cmp", "in", "like"):
        op = e[1] if k == "cmp" else ("not " if e[-1] else "") + k
        if op not in (*_COMPARISONS, "in"):
            raise FilterError(f"comparison operator {op} not supported")
        left, right = (e[2], e[3]) if k == "cmp" else (e[1], e[2])
        if left[0] != "col":
            raise FilterError(f"unexpected: {sql_text(e)}")
        col = _column(schema, left[1])
        items = right if k == "in" else [right]
        # a Literal: IntVal or StrVal for comparisons; any literal in an IN tuple
        if not all(x[0] == "lit" and (k == "in" or _int_or_str(x[1])) for x in items):
            raise FilterError(f"unexpected: {sql_text(e)}")
        return Cond(op, col, tuple(_literal(schema, col, x[1]) for x in items))
    if k == "func" and e[1] == "IN_KEYRANGE":
        return _in_keyrange(schema, e, vindex)
    if k == "isnull" and e[2]:
        if e[1][0] != "col":
            raise FilterError(f"unexpected: {sql_text(e)}")
        return Cond("notnull", _column(schema, e[1][1]))
    raise FilterError(f"unsupported constraint: {sql_text(e)}")


def _int_or_str(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


def _in_keyrange(schema: TableSchema, e: sqlp.Expr, vindex: _Vindex) -> Cond:
    """analyzeInKeyRange: in_keyrange('-80') on the primary vindex, or in_keyrange(col, 'hash', '-80')."""
    args = e[2]
    if len(args) == 1:
        col = vindex.column()
    elif len(args) >= 3:
        bad = next((a for a in args[:-2] if a[0] != "col"), None)
        if bad is not None:
            raise FilterError(f"[BUG] unexpected: {sql_text(bad)}")
        vtype = _sel_string(args[-2])
        if vtype != "hash":  # the simulator's only vindex type
            raise FilterError(f'vindexType "{vtype}" not found')
        if len(args) != 3:
            raise FilterError(f"unexpected: {sql_text(e)}")
        col = _column(schema, args[0][1])
    else:
        raise FilterError(f"[BUG] unexpected in_keyrange parameters: {', '.join(sql_text(a) for a in args)}")
    kr = _sel_string(args[-1])
    return Cond("keyrange", col, keyrange=_keyrange(kr, f"unexpected in_keyrange parameter: '{kr}'"))


def _sel_string(e: sqlp.Expr) -> str:
    if e[0] != "lit" or e[1] is None:
        raise FilterError(f"unsupported: {sql_text(e)}")
    return str(e[1])


def _literal(schema: TableSchema, col: int, v: Any) -> Any:
    """A literal in the terms `_cell` gives the column (numbers compare as numbers)."""
    if v is None:
        return None
    if schema.columns[col].ct.storage in ("INTEGER", "REAL"):
        try:
            return Decimal(str(v))
        except InvalidOperation:
            return str(v)
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _cell(schema: TableSchema, col: int, img: Image) -> Any:
    v = img[col]
    if v is None:
        return None
    if schema.columns[col].ct.storage in ("INTEGER", "REAL"):
        try:
            return Decimal(v.decode())
        except InvalidOperation:
            return v.decode()
    return v.decode(errors="replace")


def _holds(c: Cond, schema: TableSchema, img: Image) -> bool:
    """planbuilder `Plan.filter` for one condition: NULL never matches a comparison."""
    if c.op == "keyrange":
        v = img[c.col]
        assert c.keyrange is not None
        return v is not None and c.keyrange.contains(keyspace_id(v))
    a = _cell(schema, c.col, img)
    if a is None:
        return False
    if c.op == "notnull":
        return True
    if c.op == "in":
        return a in c.values
    b = c.values[0]
    try:
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[c.op]
    except TypeError:  # a number against a non-numeric string
        return c.op == "!="


def row_matches(plan: TablePlan, schema: TableSchema, img: Image) -> bool:
    return all(_holds(c, schema, img) for c in plan.conds)


def project(plan: TablePlan, img: Image) -> Image:
    if plan.columns is None:
        return img
    ksid = None
    if plan.vindex_col is not None and img[plan.vindex_col] is not None:
        ksid = keyspace_id(img[plan.vindex_col])
    return tuple(ksid if i == KEYSPACE_ID else img[i] for i in plan.columns)


def plan_fields(plan: TablePlan, fields: list[query_pb2.Field]) -> list[query_pb2.Field]:
    """The FIELD event's columns for a plan (`fields`: the table's)."""
    if plan.columns is None:
        return fields
    return [KEYSPACE_ID_FIELD if i == KEYSPACE_ID else fields[i] for i in plan.columns]


# -- sqlparser.String for the expressions errors quote (precedence.go: a smaller number binds tighter)
_PRECEDENCE = {"or": 16, "and": 14, "not": 13, "between": 12, "cmp": 11, "in": 11, "isnull": 11, "like": 11,
               "neg": 4}
_BINOP_PRECEDENCE = {"+": 7, "-": 7, "*": 6, "/": 6, "%": 6}


def _precedence(e: sqlp.Expr) -> int:
    if e[0] == "binop":
        return _BINOP_PRECEDENCE.get(e[1], 6)
    return _PRECEDENCE.get(e[0], 0)  # 0: an atom (never parenthesised)


def _sub(parent: sqlp.Expr, e: sqlp.Expr, left: bool) -> str:
    """printExpr: parenthesise `e` when it binds looser than `parent` (or as loosely, on the right)."""
    p, q = _precedence(parent), _precedence(e)
    text = sql_text(e)
    return f"({text})" if q and p and (q > p if left else q >= p) else text


def sql_text(e: sqlp.Expr) -> str:
    """An expression as Vitess's sqlparser.String prints it (lower-case keywords and functions)."""
    k = e[0]
    if k == "col":
        return str(e[1])
    if k == "lit":
        v = e[1]
        if v is None:
            return "null"
        if isinstance(v, str):
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if isinstance(v, bytes):
            return f"X'{v.hex().upper()}'"
        return str(v)
    if k == "param":
        return f":{e[1]}"
    if k == "func":
        return f"{e[1].lower()}({', '.join(sql_text(a) for a in e[2])})"
    if k == "tuple":
        return "(" + ", ".join(sql_text(a) for a in e[1]) + ")"
    if k in ("or", "and"):
        return f"{_sub(e, e[1], True)} {k} {_sub(e, e[2], False)}"
    if k == "not":
        return f"not {_sub(e, e[1], True)}"
    if k == "neg":
        return f"-{_sub(e, e[1], True)}"
    if k in ("cmp", "binop"):
        return f"{_sub(e, e[2], True)} {e[1]} {_sub(e, e[3], False)}"
    if k == "isnull":
        return f"{_sub(e, e[1], True)} is {'not ' if e[2] else ''}null"
    if k == "in":
        return f"{_sub(e, e[1], True)} {'not ' if e[3] else ''}in ({', '.join(sql_text(a) for a in e[2])})"
    if k == "like":
        return f"{_sub(e, e[1], True)} {'not ' if e[3] else ''}like {_sub(e, e[2], False)}"
    if k == "between":
        return (f"{_sub(e, e[1], True)} {'not ' if e[4] else ''}between {_sub(e, e[2], True)} "
                f"and {_sub(e, e[3], False)}")
    return str(e)
