"""MySQL56 GTID sets, as far as watermarks need them: parse and "is this position covered".

A Vitess position is the *full executed set* after a transaction, so "transaction P happened at or
before watermark H" is ``H ⊇ P``. Comparing sets instead of counters stays correct across
reparents (a new primary adds a second server uuid to the set).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


class GtidError(ValueError):
    """Not a MySQL56 GTID set this module understands."""


@dataclass(frozen=True, slots=True)
class GtidSet:
    """server uuid -> sorted, merged closed intervals."""

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


def _merge(ivs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    ivs.sort()
    out: list[tuple[int, int]] = []
    for a, b in ivs:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


@lru_cache(maxsize=4096)
def parse(position: str) -> GtidSet:
    """Parse ``MySQL56/uuid:1-5:7,uuid2:1-3`` (a bare set is accepted too)."""
    body = position
    if "/" in position:
        flavor, body = position.split("/", 1)
        if flavor != "MySQL56":
            raise GtidError(f"unsupported GTID flavor {flavor!r} in {position!r}")
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
    return GtidSet(tuple(sorted((sid, _merge(ivs)) for sid, ivs in sets.items())))


def covers(watermark: str, position: str) -> bool:
    """True when ``position`` (a transaction's end position) is at or before ``watermark``."""
    return parse(watermark).contains(parse(position))
