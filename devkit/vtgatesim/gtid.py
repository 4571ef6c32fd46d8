"""MySQL56 GTID sets as the simulator needs them: one contiguous `1-N` run per server uuid.

Formatting follows `replication.EncodePosition`: `MySQL56/` + SIDs sorted and comma-separated,
each `uuid:a-b` (or `uuid:a` when a == b). Parsing accepts any interval list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAVOR = "MySQL56"


class GtidParseError(ValueError):
    pass


@dataclass
class GtidSet:
    """uuid -> list of closed intervals [(a, b), ...] sorted and non-overlapping."""

    intervals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        """Parse `MySQL56/<set>` (or a bare set)."""
        body = text
        if "/" in text:
            flavor, body = text.split("/", 1)
            if flavor != FLAVOR:
                raise GtidParseError(f"parse error: unknown GTIDSet flavor {flavor!r}")
        out: dict[str, list[tuple[int, int]]] = {}
        if not body.strip():
            return cls(out)
        for part in body.split(","):
            part = part.strip()
            if not part:
                continue
            pieces = part.split(":")
            if len(pieces) < 2:
                raise GtidParseError(f"invalid MySQL 5.6 GTID set ({text!r}): expected uuid:interval")
            sid = pieces[0].strip().lower()
            if len(sid.replace("-", "")) != 32:
                raise GtidParseError(f"invalid MySQL 5.6 SID {sid!r}")
            ivs = out.setdefault(sid, [])
            for iv in pieces[1:]:
                try:
                    if "-" in iv:
                        a, b = iv.split("-", 1)
                        ivs.append((int(a), int(b)))
                    else:
                        ivs.append((int(iv), int(iv)))
                except ValueError as e:
                    raise GtidParseError(f"invalid MySQL 5.6 GTID interval {iv!r}") from e
            ivs.sort()
        return cls(out)

    @classmethod
    def runs(cls, runs: dict[str, int]) -> GtidSet:
        """{uuid: N} -> each uuid `1-N` (N == 0 entries are skipped)."""
        return cls({u: [(1, n)] for u, n in runs.items() if n > 0})

    def contains_gtid(self, sid: str, seq: int) -> bool:
        return any(a <= seq <= b for a, b in self.intervals.get(sid, ()))

    def contains(self, other: GtidSet) -> bool:
        """Every GTID of `other` is in self."""
        for sid, ivs in other.intervals.items():
            mine = self.intervals.get(sid, [])
            for a, b in ivs:
                if not any(x <= a and b <= y for x, y in mine):
                    return False
        return True

    def __str__(self) -> str:
        parts = []
        for sid in sorted(self.intervals):
            ivs = self.intervals[sid]
            if ivs:
                parts.append(sid + ":" + ":".join(f"{a}-{b}" if a != b else str(a) for a, b in ivs))
        return ",".join(parts)

    def position(self) -> str:
        return f"{FLAVOR}/{self}"


def format_runs(runs: dict[str, int]) -> str:
    """Fast path for the executed set `{uuid: N}` -> `MySQL56/uuid:1-N,...`."""
    return FLAVOR + "/" + ",".join(
        f"{sid}:1-{n}" if n > 1 else f"{sid}:1" for sid, n in sorted(runs.items()) if n > 0
    )
