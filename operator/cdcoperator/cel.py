"""A small evaluator for the subset of CEL the CdcConnector CRD's ``x-kubernetes-validations`` use.

Local mode has no API server to run the CRD's rules, and the CEL libraries on PyPI bring native
regex/date libraries or a CLI stack with them; the rules themselves use little: literals (strings,
integers, booleans, lists), ``self``/``oldSelf``, field selection and indexing, ``! && || == != <
<= > >= in + -``, ``has()``, ``size()``, the string functions ``matches startsWith endsWith
contains``, and the ``exists``/``all`` macros. That subset is parsed here (recursive descent, CEL's
precedence) and evaluated over plain JSON values. Anything else raises :class:`CelError`, and a
test parses every rule of the CRD, so a new rule outside the subset fails the build rather than
local mode.

Semantics follow CEL where the rules can tell: ``matches`` is RE2's unanchored search (Python's
``re`` agrees on the patterns used), ``size`` counts code points, selecting a missing field is an
error (``no such key``) unless inside ``has()``, and ``&&``/``||`` absorb an error when the other
side decides the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cdcworker.jsontypes import JsonMapping, JsonValue

__all__ = ["CelError", "compile_rule", "evaluate"]


class CelError(ValueError):
    """The expression is outside the supported subset, or failed to evaluate (e.g. ``no such key``)."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+)
  | (?P<str>[rR]?'(?:\\.|[^'\\])*'|[rR]?"(?:\\.|[^"\\])*")
  | (?P<op>&&|\|\||==|!=|<=|>=|[!<>+\-*/%()\[\].,?:])
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
""", re.VERBOSE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?"}


def _unquote(text: str) -> str:
    raw = text[0] in "rR"
    body = text[2:-1] if raw else text[1:-1]
    if raw:
        return body
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise CelError(f"unsupported escape \\{nxt}")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise CelError(f"unexpected character {text[pos]!r} at {pos} in {text!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group()))
    out.append(("end", ""))
    return out


# --- the tree -------------------------------------------------------------------------------------------

Node = tuple[Any, ...]  # ("lit", v) ("id", name) ("sel", obj, field) ("idx", obj, key) ("call", target|None, name, args)
                        # ("not", x) ("neg", x) ("bin", op, a, b) ("has", sel) ("macro", name, target, var, body) ("list", items)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i]

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.i]
        if value is not None and tok[1] != value:
            raise CelError(f"expected {value!r}, got {tok[1] or 'end'!r} in {self.text!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.expr()
        if self.peek()[0] != "end":
            raise CelError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        return node

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.peek()[1] == "?":
            self.take("?")
            yes = self.expr()
            self.take(":")
            return ("cond", cond, yes, self.expr())
        return cond

    _LEVELS: Sequence[frozenset[str]] = (
        frozenset({"||"}), frozenset({"&&"}), frozenset({"==", "!=", "<", "<=", ">", ">=", "in"}),
        frozenset({"+", "-"}), frozenset({"*", "/", "%"}),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek()[1] in self._LEVELS[level] and self.peek()[0] in ("op", "id"):
            op = self.take()[1]
            node = ("bin", op, node, self.binary(level + 1))
        return node

    def unary(self) -> Node:
        if self.peek()[1] == "!":
            self.take()
            return ("not", self.unary())
        if self.peek()[1] == "-":
            self.take()
            return ("neg", self.unary())
        return self.member()

    def args(self) -> list[Node]:
        self.take("(")
        out: list[Node] = []
        while self.peek()[1] != ")":
            out.append(self.expr())
            if self.peek()[1] != ",":
                break
            self.take(",")
        self.take(")")
        return out

    def member(self) -> Node:
        node = self.primary()
        while True:
            tok = self.peek()[1]
            if tok == ".":
                self.take()
                kind, name = self.take()
                if kind != "id":
                    raise CelError(f"expected a field name after '.', got {name!r} in {self.text!r}")
                if self.peek()[1] == "(":
                    if name in ("exists", "all", "exists_one"):
                        self.take("(")
                        kind, var = self.take()
                        if kind != "id":
                            raise CelError(f"{name}() needs a variable name in {self.text!r}")
                        self.take(",")
                        body = self.expr()
                        self.take(")")
                        node = ("macro", name, node, var, body)
                    else:
                        node = ("call", node, name, self.args())
                else:
                    node = ("sel", node, name)
            elif tok == "[":
                self.take()
                key = self.expr()
                self.take("]")
                node = ("idx", node, key)
            else:
                return node

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            return ("lit", int(value))
        if kind == "str":
            return ("lit", _unquote(value))
        if kind == "id":
            if value in ("true", "false"):
                return ("lit", value == "true")
            if value == "null":
                return ("lit", None)
            if self.peek()[1] == "(":
                if value == "has":
                    (arg,) = self.args()
                    if arg[0] != "sel":
                        raise CelError(f"has() needs a field selection in {self.text!r}")
                    return ("has", arg)
                return ("call", None, value, self.args())
            return ("id", value)
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        if value == "[":
            items: list[Node] = []
            while self.peek()[1] != "]":
                items.append(self.expr())
                if self.peek()[1] != ",":
                    break
                self.take(",")
            self.take("]")
            return ("list", items)
        raise CelError(f"unexpected {value or 'end'!r} in {self.text!r}")


# --- evaluation -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Err:
    """An evaluation error carried as a value, so ``&&``/``||`` can absorb it as CEL does."""

    message: str


def _check(v: object) -> JsonValue:
    if isinstance(v, _Err):
        raise CelError(v.message)
    return v


def _size(v: object) -> int:
    if isinstance(v, str | list | dict):
        return len(v)
    raise CelError(f"no matching overload for size({type(v).__name__})")


def _string_fn(name: str) -> Callable[[JsonValue, JsonValue], bool]:
    def fn(s: object, arg: object) -> bool:
        if not isinstance(s, str) or not isinstance(arg, str):
            raise CelError(f"no matching overload for {name}")
        if name == "matches":
            return re.search(arg, s) is not None
        if name == "startsWith":
            return s.startswith(arg)
        if name == "endsWith":
            return s.endswith(arg)
        return arg in s

    return fn


_METHODS = {n: _string_fn(n) for n in ("matches", "startsWith", "endsWith", "contains")}


def _eval(node: Node, env: JsonMapping) -> JsonValue:
    try:
        return _eval_strict(node, env)
    except CelError as exc:
        return _Err(str(exc))


def _eval_strict(node: Node, env: JsonMapping) -> JsonValue:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "id":
        if node[1] not in env:
            raise CelError(f"undeclared reference to {node[1]!r}")
        return env[node[1]]
    if kind == "list":
        return [_check(_eval(n, env)) for n in node[1]]
    if kind == "sel":
        obj = _check(_eval(node[1], env))
        if not isinstance(obj, Mapping) or node[2] not in obj:
            raise CelError(f"no such key: {node[2]}")
        return obj[node[2]]
    if kind == "idx":
        obj, key = _check(_eval(node[1], env)), _check(_eval(node[2], env))
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            raise CelError(f"no such key: {key}") from None
    if kind == "has":
        obj = _check(_eval(node[1][1], env))
        return isinstance(obj, Mapping) and node[1][2] in obj
    if kind == "not":
        v = _check(_eval(node[1], env))
        if not isinstance(v, bool):
            raise CelError("no matching overload for '!'")
        return not v
    if kind == "neg":
        return -_check(_eval(node[1], env))
    if kind == "cond":
        return _eval(node[2] if _check(_eval(node[1], env)) else node[3], env)
    if kind == "call":
        _, target, name, args = node
        values = [_check(_eval(a, env)) for a in args]
        if target is None:
            if name == "size" and len(values) == 1:
                return _size(values[0])
            raise CelError(f"unsupported function {name}()")
        obj = _check(_eval(target, env))
        if name == "size" and not values:
            return _size(obj)
        if name in _METHODS and len(values) == 1:
            return _METHODS[name](obj, values[0])
        raise CelError(f"unsupported function {name}()")
    if kind == "macro":
        _, name, target, var, body = node
        obj = _check(_eval(target, env))
        if not isinstance(obj, list | dict):
            raise CelError(f"{name}() needs a list or map")
        results = [_eval(body, {**env, var: item}) for item in obj]
        if name == "exists_one":
            return sum(1 for r in map(_check, results) if r is True) == 1
        decisive = name == "exists"  # exists: any true wins; all: any false wins
        if any(r is decisive for r in results):
            return decisive
        for r in results:
            _check(r)
        return not decisive
    if kind == "bin":
        return _binary(node[1], node[2], node[3], env)
    raise CelError(f"unsupported node {kind}")


def _binary(op: str, a_node: Node, b_node: Node, env: JsonMapping) -> JsonValue:
    if op in ("&&", "||"):
        a, b = _eval(a_node, env), _eval(b_node, env)
        decisive = op == "||"
        if a is decisive or b is decisive:
            return decisive
        a, b = _check(a), _check(b)
        if not isinstance(a, bool) or not isinstance(b, bool):
            raise CelError(f"no matching overload for '{op}'")
        return a and b if op == "&&" else a or b
    a, b = _check(_eval(a_node, env)), _check(_eval(b_node, env))
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "in":
        if isinstance(b, list | dict):
            return a in b
        raise CelError("no matching overload for 'in'")
    if op in ("<", "<=", ">", ">="):
        if type(a) is not type(b) or not isinstance(a, int | str) or isinstance(a, bool):
            raise CelError(f"no matching overload for '{op}'")
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if op == "+" and type(a) is type(b) and isinstance(a, int | str | list):
        return a + b
    if op in ("-", "*", "/", "%") and type(a) is int and type(b) is int:
        if op in ("/", "%") and b == 0:
            raise CelError("division by zero")
        return {"-": a - b, "*": a * b, "/": int(a / b), "%": a - b * int(a / b)}[op]
    raise CelError(f"no matching overload for '{op}'")


@lru_cache(maxsize=256)
def compile_rule(text: str) -> Node:
    """Parse an expression (cached); raises :class:`CelError` outside the supported subset."""
    return _Parser(text).parse()


def evaluate(text: str, variables: JsonMapping) -> JsonValue:
    """Evaluate ``text`` with ``variables`` (e.g. ``self``, ``oldSelf``); raises :class:`CelError`."""
    return _check(_eval(compile_rule(text), variables))
