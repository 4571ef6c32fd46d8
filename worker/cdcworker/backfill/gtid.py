"""Vitess positions, as far as watermarks need them: parse and "is this position covered".

A Vitess position is the *full executed set* after a transaction, so "transaction P happened at or
before watermark H" is ``H ⊇ P``. Two flavors exist (Vitess's ``replication.EncodePosition``):

* ``MySQL56/uuid:1-5:7,uuid2:1-3``: server uuid -> intervals. Comparing sets instead of counters
  stays correct across reparents (a new primary adds a second server uuid to the set).
* ``MariaDB/0-1135409253-41[,1-7-3]``: per replication domain the *last* GTID
  ``<domain>-<server>-<sequence>``. With ``gtid_strict_mode`` (Vitess's mariadb10.cnf sets it) a
  domain's sequence numbers only grow, whichever server wrote them, so the domain stands for every
  sequence from 1 to the last; Vitess's ``MariadbGTIDSet.Contains`` compares sequences per domain and
  ignores the server id, and so does this module.

Both become one :class:`GtidSet` (key -> intervals), so containment has one implementation; keys of
the two flavors never meet, so a set of one flavor never covers a position of the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

MYSQL56 = "MySQL56"
MARIADB = "MariaDB"
FLAVORS = (MYSQL56, MARIADB)


class GtidError(ValueError):
    """Not a GTID set this module understands."""


@dataclass(frozen=True, slots=True)
class GtidSet:
    """server uuid (MySQL56) or ``MariaDB:<domain>`` -> sorted, merged closed intervals."""

    intervals: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]

    def contains(self, other: GtidSet) -> bool:
        """Every GTID of ``other`` is in this set."""
        mine = dict(self.intervals)
        for sid, ivs in other.intervals:
            have = mine.get(sid)
            if have is None:
                return False
            for a, b in ivs:
                if not any(x <= a and b <= y for x, y in have):
                    return False
        return True


def is_position(gtid: str) -> bool:
    """A real executed-set position (``MySQL56/...`` or ``MariaDB/...``), not ``current``, the empty
    copy-from-scratch start or another marker."""
    flavor, sep, _ = gtid.partition("/")
    return bool(sep) and flavor in FLAVORS


def _merge(ivs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    ivs.sort()
    out: list[tuple[int, int]] = []
    for a, b in ivs:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _int(text: str, position: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise GtidError(f"bad GTID number {text!r} in {position!r}") from None
    if value < 0:
        raise GtidError(f"bad GTID number {text!r} in {position!r}")
    return value


def _mysql56(body: str, position: str) -> dict[str, list[tuple[int, int]]]:
    sets: dict[str, list[tuple[int, int]]] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        sid, *ranges = part.split(":")
        if not ranges:
            raise GtidError(f"GTID set entry {part!r} has no interval")
        dst = sets.setdefault(sid.strip().lower(), [])
        for r in ranges:
            lo, sep, hi = r.partition("-")
            try:
                dst.append((int(lo), int(hi) if sep else int(lo)))
            except ValueError:
                raise GtidError(f"bad GTID interval {r!r} in {position!r}") from None
    return sets


def _mariadb(body: str, position: str) -> dict[str, list[tuple[int, int]]]:
    """``0-1-41,1-7-3``: one ``domain-server-sequence`` per domain (Vitess refuses two for one)."""
    sets: dict[str, list[tuple[int, int]]] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        pieces = part.split("-")
        if len(pieces) != 3:
            raise GtidError(f"MariaDB GTID {part!r} in {position!r} is not <domain>-<server>-<sequence>")
        domain, _server, seq = (_int(p, position) for p in pieces)
        key = f"{MARIADB}:{domain}"
        if key in sets:
            raise GtidError(f"MariaDB GTID set {position!r} names domain {domain} twice")
        sets[key] = [(0, seq)]  # strict mode: the domain's whole history up to seq
    return sets


@lru_cache(maxsize=4096)
def parse(position: str) -> GtidSet:
    """Parse ``MySQL56/<set>`` or ``MariaDB/<gtids>``; a bare set (no flavor) is read as MySQL56."""
    flavor, body = MYSQL56, position
    if "/" in position:
        flavor, body = position.split("/", 1)
    if flavor == MYSQL56:
        sets = _mysql56(body, position)
    elif flavor == MARIADB:
        sets = _mariadb(body, position)
    else:
        raise GtidError(f"unsupported GTID flavor {flavor!r} in {position!r} (known: {', '.join(FLAVORS)})")
    return GtidSet(tuple(sorted((sid, _merge(ivs)) for sid, ivs in sets.items())))


def covers(watermark: str, position: str) -> bool:
    """True when ``position`` (a transaction's end position) is at or before ``watermark``."""
    return parse(watermark).contains(parse(position))
