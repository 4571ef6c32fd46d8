"""Which tables are captured, and the VStream filter rules that keep the rest off the wire.

Debezium's include/exclude lists are anchored, case-insensitive regexes on ``keyspace.table``. The
connector checks every table on the client (``TableFilter``), and also pushes what it can down to
VTGate as ``/regex`` rules (``vstream_rules``), so rows of tables nobody wants are never sent.

Unlike Debezium, which lists the tables once at start and sends one rule per table (tables created
later are missed until a restart), the rules here are regexes: a table created after the start is
matched by VTGate like any other. A rule is matched by the vstreamer (Go RE2, unanchored search on
the bare table name, ``strings.Trim(match, "/")``), so only patterns that mean the same in RE2 are
pushed down; anything else falls back to ``/.*`` and client-side filtering, which is always on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Rule = tuple[str, str]  # (match, filter) of a binlogdata.Rule
ALL_TABLES: tuple[Rule, ...] = (("/.*", ""),)

# Constructs RE2 lacks or reads differently from Python/Java: lookaround, backreferences, possessive
# and atomic groups, \Z, inline flags other than the ones we set, and '/' (vstreamer trims slashes).
_NOT_RE2 = re.compile(r"\(\?[=!<>]|\(\?[a-zA-Z]|\\[1-9]|\\Z|\\G|[*+?}]\+|/|\\[pP]\{")
_META = set(".^$*+?{}[]()|\\")


@dataclass
class TableFilter:
    """Client-side table filter: ``included("ks", "t")``; results are cached per name."""

    include: tuple[re.Pattern[str], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()
    _cache: dict[tuple[str, str], bool] = field(default_factory=dict, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.include or self.exclude)

    def included(self, keyspace: str, table: str) -> bool:
        key = (keyspace, table)
        hit = self._cache.get(key)
        if hit is None:
            name = f"{keyspace}.{table}"
            if self.include:
                hit = any(p.fullmatch(name) for p in self.include)
            else:
                hit = not any(p.fullmatch(name) for p in self.exclude)
            self._cache[key] = hit
        return hit


def _split(pattern: str) -> tuple[str, str] | None:
    """``(keyspace, table regex)`` when the keyspace half (before the first ``\\.`` or ``.``) is literal."""
    for sep in ("\\.", "."):
        i = pattern.find(sep)
        while i > 0 and sep == "." and pattern[i - 1] == "\\":
            i = pattern.find(sep, i + 1)
        if i > 0:
            ks = _literal(pattern[:i])
            if ks is not None:
                return ks, pattern[i + len(sep):]
    return None


def _re2_safe(expr: str) -> bool:
    return not _NOT_RE2.search(expr)


def _literal(expr: str) -> str | None:
    """The string an escaped-literal regex matches (``orders\\_v2`` → ``orders_v2``), else None."""
    out = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c == "\\":
            if i + 1 >= len(expr) or expr[i + 1].isalnum():
                return None  # \d, \w, ... are classes, not literals
            out.append(expr[i + 1])
            i += 2
            continue
        if c in _META:
            return None
        out.append(c)
        i += 1
    return "".join(out)


def escape_re2(s: str) -> str:
    """``s`` as an RE2 literal (VTGate's regex rules)."""
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in s)


def table_rule(table: str) -> str:
    """A VStream rule's ``match`` for exactly ``table``, every row and column. A regex: a plain
    table name's rule needs a SELECT as its filter once streaming (an empty one fails the stream
    at the table's first event; only the copy phase reads it as ``select *``)."""
    return "/^" + escape_re2(table) + "$"


_Trie = dict[str, "_Trie"]  # one character to the rest of the names that go on with it


def complement_regex(names: Iterable[str]) -> str:
    """An RE2 regex (no lookaround) matching every string except ``names`` (case-insensitive)."""
    trie: _Trie = {}
    end = "\0end"
    for n in names:
        node = trie
        for ch in n.lower():
            node = node.setdefault(ch, {})
        node[end] = {}

    def neg(node: _Trie) -> str:
        chars = sorted(c for c in node if c != end)
        terminal = end in node
        if not chars:
            return ".+"  # the name itself is excluded; anything longer is not
        alts = [] if terminal else [""]
        alts.append("[^" + "".join(escape_re2(c) for c in chars) + "].*")
        alts.extend(escape_re2(c) + "(?:" + neg(node[c]) + ")" for c in chars)
        return "|".join(alts)

    return "(?is)^(?:" + neg(trie) + ")$"


def vstream_rules(
    keyspace: str,
    include: Sequence[re.Pattern[str]],
    exclude: Sequence[re.Pattern[str]],
    always: Sequence[str] = (),
) -> tuple[Rule, ...]:
    """Filter rules for the VStream request; ``always`` tables (the signal table) are always read.

    Falls back to every table when a pattern cannot be expressed for VTGate; the client-side
    ``TableFilter`` keeps the output exact either way.
    """
    if not include and not exclude:
        return ALL_TABLES
    first = tuple(("/^" + escape_re2(t) + "$", "") for t in always)
    if include:
        parts = []
        for p in include:
            split = _split(p.pattern)
            if split is None:
                return ALL_TABLES  # a regex keyspace half: no push-down
            ks, rest = split
            if ks.lower() != keyspace.lower():
                continue  # another keyspace's pattern never matches here
            if not rest or not _re2_safe(rest):
                return ALL_TABLES
            parts.append("(?:" + rest + ")")
        if not parts:
            return first or (("/^$", ""),)  # nothing of this keyspace is wanted
        return (*first, ("/(?i)^(?:" + "|".join(parts) + ")$", ""))
    excluded = []
    for p in exclude:
        split = _split(p.pattern)
        if split is None:
            return ALL_TABLES
        ks, rest = split
        if ks.lower() != keyspace.lower():
            continue  # another keyspace
        lit = _literal(rest)
        if lit is None:
            return ALL_TABLES
        excluded.append(lit)
    if not excluded:
        return ALL_TABLES
    return (*first, ("/" + complement_regex(excluded), ""))
