"""``metav1.Condition`` helpers (KEP-1623 shape): merge desired conditions into the stored list.

``lastTransitionTime`` changes only when a condition's ``status`` changes, so a reason or message
update does not look like a transition, and re-applying the same conditions changes nothing
(status is written only when it changes).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = [
    "BACKFILL_RUNNING",
    "CONDITION_TYPES",
    "DEGRADED",
    "PAUSED",
    "PROGRESSING",
    "READY",
    "RESHARDING",
    "ConditionSpec",
    "find",
    "format_time",
    "merge_conditions",
]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
RESHARDING = "Resharding"
BACKFILL_RUNNING = "BackfillRunning"
PAUSED = "Paused"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, RESHARDING, BACKFILL_RUNNING, PAUSED)


@dataclass(frozen=True, slots=True)
class ConditionSpec:
    """A desired condition, without the bookkeeping fields the merge fills in."""

    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""

    @property
    def status_str(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def format_time(now: _dt.datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server stores metav1.Time."""
    return now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: Iterable[JsonMapping] | None, type_: str) -> JsonMapping | None:
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def merge_conditions(
    existing: Sequence[JsonMapping] | None,
    desired: Iterable[ConditionSpec],
    *,
    observed_generation: int,
    now: _dt.datetime,
) -> list[JsonObject]:
    """The new ``status.conditions``: desired ones merged over existing ones.

    Conditions not in ``desired`` are kept unchanged (another concern, e.g. backfills, owns them).
    Order: existing order first, then new types in the order given, so the list is stable.
    """
    stamp = format_time(now)
    by_type: dict[str, JsonObject] = {str(c.get("type")): dict(c) for c in existing or ()}
    order = [str(c.get("type")) for c in existing or ()]
    for spec in desired:
        old = by_type.get(spec.type)
        transition = stamp
        if old is not None and old.get("status") == spec.status_str and old.get("lastTransitionTime"):
            transition = str(old["lastTransitionTime"])
        by_type[spec.type] = {
            "type": spec.type,
            "status": spec.status_str,
            "observedGeneration": observed_generation,
            "lastTransitionTime": transition,
            "reason": spec.reason,
            "message": spec.message,
        }
        if spec.type not in order:
            order.append(spec.type)
    return [by_type[t] for t in order]
