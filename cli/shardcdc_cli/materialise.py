"""Materialise change-event topics and compare them with the source: the proof of no loss.

Records are applied in order per key (Kafka keeps per-partition order and a key lives on one
partition): ``c``/``u``/``r`` set the row to ``after``, ``d`` and tombstones remove it. The result
must equal the source table. Duplicates (the same change delivered twice) are counted separately:
at-least-once may produce some, exactly-once must not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from cdcworker.jsontypes import JsonMapping, JsonObject, JsonValue


class RecordLike(Protocol):
    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def _payload(data: bytes) -> JsonValue:
    doc = orjson.loads(data)
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        return doc["payload"]
    return doc


@dataclass
class Materialised:
    rows: dict[bytes, JsonObject] = field(default_factory=dict)
    applied: int = 0
    tombstones: int = 0
    duplicates: int = 0

    def by_column(self, column: str) -> dict[JsonValue, JsonObject]:
        return {row[column]: row for row in self.rows.values()}


def _identity(payload: JsonMapping) -> bytes:
    """What makes a change unique: everything but the processing-time fields."""
    stripped = {k: v for k, v in payload.items() if k not in ("ts_ms", "ts_us", "ts_ns")}
    return orjson.dumps(stripped, option=orjson.OPT_SORT_KEYS)


def materialise(records: Iterable[RecordLike]) -> Materialised:
    state = Materialised()
    seen: Counter[bytes] = Counter()
    for rec in records:
        if rec.key is None:
            continue
        if rec.value is None:
            state.rows.pop(rec.key, None)
            state.tombstones += 1
            continue
        payload = _payload(rec.value)
        ident = _identity(payload)
        seen[ident] += 1
        if seen[ident] > 1:
            state.duplicates += 1
        op = payload["op"]
        if op in ("c", "u", "r"):
            state.rows[rec.key] = payload["after"]
        elif op == "d":
            state.rows.pop(rec.key, None)
        state.applied += 1
    return state


def as_text(value: object) -> str | None:
    """A converted event value in MySQL text form, for comparison with the source."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _same_value(source: str | None, event: str | None) -> bool:
    """Equal as text, or as numbers: released Vitess renders binlog DECIMALs like ``.12`` for 0.12
    (copy and SELECT say ``0.12``), and Debezium passes the string through unchanged."""
    if source == event:
        return True
    if source is None or event is None:
        return False
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(source) == Decimal(event)
    except InvalidOperation:
        return False


@dataclass(frozen=True)
class Difference:
    missing: dict[str, JsonObject]
    unexpected: dict[str, JsonObject]
    changed: dict[str, tuple[JsonObject, JsonObject]]

    @property
    def empty(self) -> bool:
        return not (self.missing or self.unexpected or self.changed)

    def summary(self, limit: int = 5) -> str:
        parts = [f"{len(self.missing)} missing, {len(self.unexpected)} unexpected, {len(self.changed)} changed"]
        for label, items in (("missing", self.missing), ("unexpected", self.unexpected), ("changed", self.changed)):
            for key in list(items)[:limit]:
                parts.append(f"  {label} {key}: {items[key]}")
        return "\n".join(parts)


def compare(
    state: Materialised,
    truth: Sequence[Mapping[str, bytes | None]],
    key_column: str,
    columns: Sequence[str] | None = None,
) -> Difference:
    """Compare materialised rows with the source's rows (MySQL text values) by ``key_column``."""
    got = {as_text(row[key_column]): row for row in state.rows.values()}
    want = {_text(row[key_column]): row for row in truth}
    missing = {str(k): dict(want[k]) for k in want.keys() - got.keys()}
    unexpected = {str(k): dict(got[k]) for k in got.keys() - want.keys()}
    changed: dict[str, tuple[JsonObject, JsonObject]] = {}
    for k in want.keys() & got.keys():
        src, out = want[k], got[k]
        cols = columns or list(src)
        src_text = {c: _text(src[c]) for c in cols}
        out_text = {c: as_text(out.get(c)) for c in cols}
        if any(not _same_value(src_text[c], out_text[c]) for c in cols):
            changed[str(k)] = (src_text, out_text)
    return Difference(missing, unexpected, changed)
