"""A small SQL parser for the statements the simulator serves through Execute/StreamExecute.

Grammar (case-insensitive, optional leading `/*...*/` comments, optional trailing `;`):
  SELECT {*|expr [AS a], ...} FROM t [WHERE e] [ORDER BY e [ASC|DESC], ...] [LIMIT n [OFFSET m] | LIMIT m, n]
  INSERT [IGNORE] INTO t [(c, ...)] VALUES (...), ... [ON DUPLICATE KEY UPDATE c = e, ...]
  REPLACE INTO t [(c, ...)] VALUES (...), ...
  UPDATE t SET c = e, ... [WHERE e] [LIMIT n]      DELETE FROM t [WHERE e] [LIMIT n]
  SHOW VITESS_SHARDS [LIKE 'p'] | SHOW VITESS_TABLETS | SHOW [FULL] TABLES [LIKE 'p']
  CREATE TABLE [IF NOT EXISTS] t (...)            ALTER TABLE t ADD [COLUMN] c type ..., ...
  BEGIN | START TRANSACTION | COMMIT | ROLLBACK   SET ... (accepted, ignored)
Expressions: literals, columns, :bind vars, (a, b) tuples, = <=> != <> < <= > >=, IN, IS [NOT] NULL,
BETWEEN, LIKE, AND/OR/NOT, + - * /, and functions (COUNT/MIN/MAX/NOW/VALUES/...).
Anything else raises SQLSyntaxError / SQLUnsupported; nothing is silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

Expr = tuple[Any, ...]


class SQLSyntaxError(Exception):
    """Vitess: `syntax error at position N near 'tok'` (errno 1149, sqlstate 42000)."""


class SQLUnsupported(Exception):
    """Vitess: `VT12001: unsupported: ...`."""


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|/\*.*?\*/|--[^\n]*|\#[^\n]*)
  | (?P<hex>[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+)
  | (?P<bit>[bB]'[01]*')
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<bq>`(?:[^`]|``)+`)
  | (?P<bind>:[A-Za-z_][A-Za-z0-9_]*|\?)
  | (?P<var>@@?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><=>|<=|>=|!=|<>|\|\||&&|[-+*/%=<>(),.;])
    """,
    re.VERBOSE | re.DOTALL,
)

_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "b": "\b"}


def _unquote(s: str) -> str:
    q = s[0]
    body = s[1:-1].replace(q + q, q)
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


@dataclass(slots=True)
class Tok:
    kind: str  # id, num, str, hex, bit, bind, var, op, eof
    text: str
    pos: int
    value: Any = None

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "id" else self.text


def tokenize(sql: str) -> list[Tok]:
    toks: list[Tok] = []
    i = 0
    n = len(sql)
    while i < n:
        m = _TOKEN_RE.match(sql, i)
        if not m:
            raise SQLSyntaxError(f"syntax error at position {i + 1} near '{sql[i:i + 10]}'")
        kind = m.lastgroup or ""
        text = m.group()
        if kind != "ws":
            value: Any = None
            if kind == "str":
                value = _unquote(text)
            elif kind == "bq":
                kind, value = "id", text[1:-1].replace("``", "`")
                text = value
                toks.append(Tok("qid", text, i, value))
                i = m.end()
                continue
            elif kind == "hex":
                h = text[2:-1] if text[0] in "xX" else text[2:]
                value = bytes.fromhex(h if len(h) % 2 == 0 else "0" + h)
            elif kind == "bit":
                bits = text[2:-1] or "0"
                value = int(bits, 2).to_bytes((len(bits) + 7) // 8 or 1, "big")
            elif kind == "num":
                if re.fullmatch(r"\d+", text):
                    value = int(text)
                elif "e" in text.lower():
                    value = float(text)
                else:
                    value = Decimal(text)
            toks.append(Tok(kind, text, i, value))
        i = m.end()
    toks.append(Tok("eof", "", n))
    return toks


# ---------------------------------------------------------------------------
# Statements


@dataclass
class ColumnDef:
    name: str
    type_sql: str
    nullable: bool = True
    default: Expr | None = None  # ('lit', v) | ('func', 'CURRENT_TIMESTAMP', ...)
    has_default: bool = False
    auto_increment: bool = False
    primary_key: bool = False
    unique: bool = False
    on_update_now: bool = False


@dataclass
class KeyDef:
    kind: str  # PRIMARY | UNIQUE | KEY
    name: str
    columns: list[str]


@dataclass
class Select:
    table: str
    keyspace: str | None
    columns: list[tuple[Expr, str]] | None  # None = *
    where: Expr | None = None
    order_by: list[tuple[Expr, bool]] = field(default_factory=list)  # (expr, desc)
    limit: int | None = None
    offset: int = 0
    for_update: bool = False


@dataclass
class Insert:
    table: str
    keyspace: str | None
    columns: list[str] | None
    rows: list[list[Expr]]
    replace: bool = False
    ignore: bool = False
    on_dup: list[tuple[str, Expr]] = field(default_factory=list)


@dataclass
class Update:
    table: str
    keyspace: str | None
    sets: list[tuple[str, Expr]]
    where: Expr | None = None
    limit: int | None = None


@dataclass
class Delete:
    table: str
    keyspace: str | None
    where: Expr | None = None
    limit: int | None = None


@dataclass
class Show:
    what: str  # VITESS_SHARDS | VITESS_TABLETS | TABLES | FULL_TABLES
    like: str | None = None


@dataclass
class CreateTable:
    table: str
    keyspace: str | None
    columns: list[ColumnDef]
    keys: list[KeyDef]
    if_not_exists: bool = False


@dataclass
class AlterAddColumns:
    table: str
    keyspace: str | None
    columns: list[ColumnDef]


@dataclass
class TxControl:
    what: str  # BEGIN | COMMIT | ROLLBACK


@dataclass
class SetStmt:
    text: str


Statement = Select | Insert | Update | Delete | Show | CreateTable | AlterAddColumns | TxControl | SetStmt


class Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.toks = tokenize(sql)
        self.i = 0

    # -- token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def error(self) -> SQLSyntaxError:
        t = self.tok
        near = t.text if t.kind != "eof" else ""
        return SQLSyntaxError(f"syntax error at position {t.pos + len(t.text) + 1} near '{near}'")

    def peek_kw(self, *words: str) -> bool:
        for k, w in enumerate(words):
            t = self.toks[min(self.i + k, len(self.toks) - 1)]
            if t.kind != "id" or t.text.upper() != w:
                return False
        return True

    def accept_kw(self, *words: str) -> bool:
        if self.peek_kw(*words):
            self.i += len(words)
            return True
        return False

    def expect_kw(self, *words: str) -> None:
        if not self.accept_kw(*words):
            raise self.error()

    def accept_op(self, op: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == op:
            self.i += 1
            return True
        return False

    def expect_op(self, op: str) -> None:
        if not self.accept_op(op):
            raise self.error()

    def ident(self) -> str:
        t = self.tok
        if t.kind in ("id", "qid"):
            self.i += 1
            return str(t.value if t.kind == "qid" else t.text)
        raise self.error()

    def table_name(self) -> tuple[str | None, str]:
        a = self.ident()
        if self.accept_op("."):
            return a, self.ident()
        return None, a

    def int_lit(self) -> int:
        t = self.tok
        if t.kind == "num" and isinstance(t.value, int):
            self.i += 1
            return int(t.value)
        raise self.error()

    # -- statements
    def parse(self) -> Statement:
        if self.tok.kind != "id":
            raise self.error()
        kw = self.tok.text.upper()
        stmt: Statement
        if kw == "SELECT":
            stmt = self.select()
        elif kw in ("INSERT", "REPLACE"):
            stmt = self.insert()
        elif kw == "UPDATE":
            stmt = self.update()
        elif kw == "DELETE":
            stmt = self.delete()
        elif kw == "SHOW":
            stmt = self.show()
        elif kw == "CREATE":
            stmt = self.create()
        elif kw == "ALTER":
            stmt = self.alter()
        elif kw in ("BEGIN", "COMMIT", "ROLLBACK"):
            self.i += 1
            stmt = TxControl(kw)
            self.accept_kw("WORK")
        elif self.peek_kw("START", "TRANSACTION"):
            self.i += 2
            stmt = TxControl("BEGIN")
        elif kw == "SET":
            stmt = SetStmt(self.sql)
            self.i = len(self.toks) - 1
        else:
            raise SQLUnsupported(f"VT12001: unsupported: statement type {kw.lower()}")
        self.accept_op(";")
        if self.tok.kind != "eof":
            raise self.error()
        return stmt

    def select(self) -> Select:
        self.expect_kw("SELECT")
        cols: list[tuple[Expr, str]] | None
        if self.accept_op("*"):
            cols = None
        else:
            cols = []
            while True:
                start = self.tok.pos
                e = self.expr()
                end = self.tok.pos
                alias = self.sql[start:end].strip()
                if e[0] == "col":
                    alias = e[1]
                if self.accept_kw("AS") or (self.tok.kind in ("id", "qid") and self.tok.text.upper() not in ("FROM",)):
                    alias = self.ident()
                cols.append((e, alias))
                if not self.accept_op(","):
                    break
        if not self.accept_kw("FROM"):
            raise SQLUnsupported("VT12001: unsupported: SELECT without FROM")
        ks, table = self.table_name()
        s = Select(table=table, keyspace=ks, columns=cols)
        if self.accept_kw("WHERE"):
            s.where = self.expr()
        if self.accept_kw("ORDER", "BY"):
            while True:
                e = self.expr()
                desc = False
                if self.accept_kw("DESC"):
                    desc = True
                else:
                    self.accept_kw("ASC")
                s.order_by.append((e, desc))
                if not self.accept_op(","):
                    break
        if self.accept_kw("LIMIT"):
            a = self.int_lit()
            if self.accept_op(","):
                s.offset, s.limit = a, self.int_lit()
            else:
                s.limit = a
                if self.accept_kw("OFFSET"):
                    s.offset = self.int_lit()
        if self.accept_kw("FOR", "UPDATE") or self.accept_kw("LOCK", "IN", "SHARE", "MODE"):
            s.for_update = True
        return s

    def insert(self) -> Insert:
        replace = self.tok.text.upper() == "REPLACE"
        self.i += 1
        ignore = self.accept_kw("IGNORE")
        self.accept_kw("INTO")
        ks, table = self.table_name()
        cols: list[str] | None = None
        if self.accept_op("("):
            cols = [self.ident()]
            while self.accept_op(","):
                cols.append(self.ident())
            self.expect_op(")")
        if not (self.accept_kw("VALUES") or self.accept_kw("VALUE")):
            raise SQLUnsupported("VT12001: unsupported: INSERT without VALUES")
        rows: list[list[Expr]] = []
        while True:
            self.expect_op("(")
            row: list[Expr] = []
            if not self.accept_op(")"):
                row.append(self.expr())
                while self.accept_op(","):
                    row.append(self.expr())
                self.expect_op(")")
            rows.append(row)
            if not self.accept_op(","):
                break
        ins = Insert(table=table, keyspace=ks, columns=cols, rows=rows, replace=replace, ignore=ignore)
        if self.accept_kw("ON", "DUPLICATE", "KEY", "UPDATE"):
            ins.on_dup = self.assignments()
        return ins

    def assignments(self) -> list[tuple[str, Expr]]:
        out = []
        while True:
            name = self.ident()
            if self.accept_op("."):
                name = self.ident()
            self.expect_op("=")
            out.append((name, self.expr()))
            if not self.accept_op(","):
                return out

    def update(self) -> Update:
        self.expect_kw("UPDATE")
        ks, table = self.table_name()
        self.expect_kw("SET")
        u = Update(table=table, keyspace=ks, sets=self.assignments())
        if self.accept_kw("WHERE"):
            u.where = self.expr()
        if self.accept_kw("LIMIT"):
            u.limit = self.int_lit()
        return u

    def delete(self) -> Delete:
        self.expect_kw("DELETE")
        self.expect_kw("FROM")
        ks, table = self.table_name()
        d = Delete(table=table, keyspace=ks)
        if self.accept_kw("WHERE"):
            d.where = self.expr()
        if self.accept_kw("LIMIT"):
            d.limit = self.int_lit()
        return d

    def show(self) -> Show:
        self.expect_kw("SHOW")
        if self.accept_kw("VITESS_SHARDS"):
            s = Show("VITESS_SHARDS")
        elif self.accept_kw("VITESS_TABLETS"):
            s = Show("VITESS_TABLETS")
        elif self.accept_kw("FULL", "TABLES"):
            s = Show("FULL_TABLES")
        elif self.accept_kw("TABLES"):
            s = Show("TABLES")
        else:
            raise SQLUnsupported(f"VT12001: unsupported: SHOW {self.tok.text}")
        if self.accept_kw("FROM") or self.accept_kw("IN"):
            self.ident()
        if self.accept_kw("LIKE"):
            t = self.tok
            if t.kind != "str":
                raise self.error()
            self.i += 1
            s.like = str(t.value)
        return s

    def column_def(self) -> ColumnDef:
        name = self.ident()
        # The type runs until a column attribute keyword, a comma or the closing paren.
        start = self.tok.pos
        depth = 0
        stop_words = {"NOT", "NULL", "DEFAULT", "AUTO_INCREMENT", "PRIMARY", "UNIQUE", "KEY", "COMMENT",
                      "ON", "COLLATE", "GENERATED", "AS", "INVISIBLE", "VISIBLE"}
        while True:
            t = self.tok
            if t.kind == "eof" or (t.kind == "op" and t.text == ";"):
                break
            if t.kind == "op" and t.text == "(":
                depth += 1
            elif t.kind == "op" and t.text == ")":
                if depth == 0:
                    break
                depth -= 1
            elif (depth == 0 and t.kind == "op" and t.text == ",") or (depth == 0 and t.kind == "id" and t.text.upper() in stop_words):
                break
            self.i += 1
        end = self.tok.pos
        type_sql = self.sql[start:end].strip()
        if not type_sql:
            raise self.error()
        cd = ColumnDef(name=name, type_sql=type_sql)
        while True:
            if self.accept_kw("NOT", "NULL"):
                cd.nullable = False
            elif self.accept_kw("NULL"):
                cd.nullable = True
            elif self.accept_kw("DEFAULT"):
                cd.default = self.primary()
                cd.has_default = True
            elif self.accept_kw("AUTO_INCREMENT"):
                cd.auto_increment = True
            elif self.accept_kw("PRIMARY", "KEY"):
                cd.primary_key = True
            elif self.accept_kw("UNIQUE"):
                self.accept_kw("KEY")
                cd.unique = True
            elif self.accept_kw("KEY"):
                cd.primary_key = True
            elif self.accept_kw("COMMENT") or self.accept_kw("COLLATE"):
                self.i += 1
            elif self.accept_kw("ON", "UPDATE"):
                self.primary()
                cd.on_update_now = True
            elif self.accept_kw("VISIBLE") or self.accept_kw("INVISIBLE"):
                pass
            elif self.peek_kw("GENERATED") or self.peek_kw("AS"):
                raise SQLUnsupported("VT12001: unsupported: generated columns")
            else:
                return cd

    def key_columns(self) -> list[str]:
        self.expect_op("(")
        cols = []
        while True:
            cols.append(self.ident())
            if self.accept_op("("):  # prefix length
                self.int_lit()
                self.expect_op(")")
            self.accept_kw("ASC") or self.accept_kw("DESC")
            if not self.accept_op(","):
                break
        self.expect_op(")")
        return cols

    def create(self) -> CreateTable:
        self.expect_kw("CREATE")
        if not self.accept_kw("TABLE"):
            raise SQLUnsupported(f"VT12001: unsupported: CREATE {self.tok.text}")
        ine = self.accept_kw("IF", "NOT", "EXISTS")
        ks, table = self.table_name()
        self.expect_op("(")
        cols: list[ColumnDef] = []
        keys: list[KeyDef] = []
        while True:
            if (self.accept_kw("CONSTRAINT") and self.tok.kind in ("id", "qid")
                    and not self.peek_kw("PRIMARY") and not self.peek_kw("UNIQUE")):
                self.ident()
            if self.accept_kw("PRIMARY", "KEY"):
                keys.append(KeyDef("PRIMARY", "PRIMARY", self.key_columns()))
            elif self.peek_kw("UNIQUE"):
                self.i += 1
                _ = self.accept_kw("KEY") or self.accept_kw("INDEX")
                kname = self.ident() if self.tok.kind in ("id", "qid") else ""
                kc = self.key_columns()
                keys.append(KeyDef("UNIQUE", kname or kc[0], kc))
            elif self.peek_kw("KEY") or self.peek_kw("INDEX"):
                self.i += 1
                kname = self.ident() if self.tok.kind in ("id", "qid") else ""
                kc = self.key_columns()
                keys.append(KeyDef("KEY", kname or kc[0], kc))
            elif self.peek_kw("FOREIGN") or self.peek_kw("CHECK") or self.peek_kw("FULLTEXT"):
                raise SQLUnsupported(f"VT12001: unsupported: {self.tok.text.upper()} in CREATE TABLE")
            else:
                cols.append(self.column_def())
            if not self.accept_op(","):
                break
        self.expect_op(")")
        # Table options (ENGINE=..., DEFAULT CHARSET=...) are accepted and ignored.
        while self.tok.kind not in ("eof",) and not (self.tok.kind == "op" and self.tok.text == ";"):
            self.i += 1
        for c in cols:
            if c.primary_key:
                keys.insert(0, KeyDef("PRIMARY", "PRIMARY", [c.name]))
            if c.unique:
                keys.append(KeyDef("UNIQUE", c.name, [c.name]))
        return CreateTable(table=table, keyspace=ks, columns=cols, keys=keys, if_not_exists=ine)

    def alter(self) -> AlterAddColumns:
        self.expect_kw("ALTER")
        self.expect_kw("TABLE")
        ks, table = self.table_name()
        cols = []
        while True:
            if not self.accept_kw("ADD"):
                raise SQLUnsupported("VT12001: unsupported: ALTER TABLE other than ADD COLUMN")
            self.accept_kw("COLUMN")
            if self.peek_kw("INDEX") or self.peek_kw("KEY") or self.peek_kw("PRIMARY") or self.peek_kw("UNIQUE"):
                raise SQLUnsupported("VT12001: unsupported: ALTER TABLE other than ADD COLUMN")
            cols.append(self.column_def())
            self.accept_kw("FIRST")
            if self.accept_kw("AFTER"):
                raise SQLUnsupported("VT12001: unsupported: ADD COLUMN ... AFTER")
            if not self.accept_op(","):
                break
        return AlterAddColumns(table=table, keyspace=ks, columns=cols)

    # -- expressions (precedence climbing)
    def expr(self) -> Expr:
        left = self.and_expr()
        while self.accept_kw("OR") or self.accept_op("||"):
            left = ("or", left, self.and_expr())
        return left

    def and_expr(self) -> Expr:
        left = self.not_expr()
        while self.accept_kw("AND") or self.accept_op("&&"):
            left = ("and", left, self.not_expr())
        return left

    def not_expr(self) -> Expr:
        if self.accept_kw("NOT"):
            return ("not", self.not_expr())
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.additive()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in ("=", "<=>", "!=", "<>", "<", "<=", ">", ">="):
                self.i += 1
                op = "!=" if t.text == "<>" else t.text
                left = ("cmp", op, left, self.additive())
                continue
            neg = False
            save = self.i
            if self.accept_kw("IS"):
                neg = self.accept_kw("NOT")
                self.expect_kw("NULL")
                left = ("isnull", left, neg)
                continue
            if self.accept_kw("NOT"):
                neg = True
            if self.accept_kw("IN"):
                self.expect_op("(")
                items = [self.expr()]
                while self.accept_op(","):
                    items.append(self.expr())
                self.expect_op(")")
                left = ("in", left, items, neg)
                continue
            if self.accept_kw("BETWEEN"):
                lo = self.additive()
                self.expect_kw("AND")
                left = ("between", left, lo, self.additive(), neg)
                continue
            if self.accept_kw("LIKE"):
                left = ("like", left, self.additive(), neg)
                continue
            self.i = save
            return left

    def additive(self) -> Expr:
        left = self.term()
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            op = self.tok.text
            self.i += 1
            left = ("binop", op, left, self.term())
        return left

    def term(self) -> Expr:
        left = self.unary()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "%"):
            op = self.tok.text
            self.i += 1
            left = ("binop", op, left, self.unary())
        return left

    def unary(self) -> Expr:
        if self.accept_op("-"):
            e = self.unary()
            if e[0] == "lit" and isinstance(e[1], int | float | Decimal):
                return ("lit", -e[1])
            return ("neg", e)
        if self.accept_op("+"):
            return self.unary()
        return self.primary()

    def primary(self) -> Expr:
        t = self.tok
        if t.kind in ("num", "str", "hex", "bit"):
            self.i += 1
            return ("lit", t.value)
        if t.kind == "bind":
            self.i += 1
            return ("param", t.text[1:] if t.text != "?" else "?")
        if t.kind == "var":
            raise SQLUnsupported(f"VT12001: unsupported: system variable {t.text}")
        if t.kind == "op" and t.text == "(":
            self.i += 1
            items = [self.expr()]
            while self.accept_op(","):
                items.append(self.expr())
            self.expect_op(")")
            return items[0] if len(items) == 1 else ("tuple", items)
        if t.kind == "id" and t.text.upper() in ("NULL", "TRUE", "FALSE"):
            self.i += 1
            return ("lit", {"NULL": None, "TRUE": 1, "FALSE": 0}[t.text.upper()])
        if t.kind == "id" and t.text.upper() in ("CURRENT_TIMESTAMP", "NOW", "LOCALTIMESTAMP") and not (
            self.toks[self.i + 1].kind == "op" and self.toks[self.i + 1].text == "("
        ):
            self.i += 1
            return ("func", "NOW", [])
        if t.kind in ("id", "qid"):
            name = self.ident()
            if t.kind == "id" and self.accept_op("("):
                fname = name.upper()
                args: list[Expr] = []
                if self.accept_op("*"):
                    args = [("star",)]
                    self.expect_op(")")
                elif not self.accept_op(")"):
                    args.append(self.expr())
                    while self.accept_op(","):
                        args.append(self.expr())
                    self.expect_op(")")
                if fname not in _FUNCS:
                    raise SQLUnsupported(f"VT12001: unsupported: function {name}")
                return ("func", "NOW" if fname in ("CURRENT_TIMESTAMP", "LOCALTIMESTAMP") else fname, args)
            if self.accept_op("."):
                name = self.ident()  # table.column or ks.table.column: keep the column
                if self.accept_op("."):
                    name = self.ident()
            return ("col", name)
        raise self.error()


_FUNCS = {"IN_KEYRANGE", "KEYSPACE_ID", "COUNT", "MIN", "MAX", "SUM", "NOW", "CURRENT_TIMESTAMP", "LOCALTIMESTAMP", "VALUES", "CONCAT",
          "UTC_TIMESTAMP", "IFNULL", "COALESCE", "LENGTH", "UPPER", "LOWER"}


def parse(sql: str) -> Statement:
    return Parser(sql).parse()


def like_to_regex(pattern: str) -> re.Pattern[str]:
    """MySQL LIKE (with backslash escapes) -> an anchored, case-insensitive regex."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$", re.IGNORECASE | re.DOTALL)
