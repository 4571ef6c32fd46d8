"""Ad-hoc snapshots: the request a signal makes, and the engine contract that runs it.

``SnapshotEngine`` is the seam between the signal dispatcher and whatever reads the tables: the
first engine (``VStreamCopyEngine``) re-runs a VStream copy of the named tables for this task's
shards next to the live stream; the Spark backfill engine (issue 7) plugs in by implementing the
same two methods.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# An additional condition must be a plain WHERE expression: no statement separators or comments.
_UNSAFE_CONDITION = re.compile(r";|--|/\*|\*/|#")


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """One ``execute-snapshot`` signal: which tables, with which row conditions."""

    id: str
    data_collections: tuple[str, ...]  # "keyspace.table" (as Debezium names Vitess tables)
    conditions: Mapping[str, str] = field(default_factory=dict)  # data collection -> WHERE expression
    kind: str = "incremental"  # Debezium's "incremental" or "blocking"; both run the same copy here

    def tables(self, keyspace: str) -> list[str]:
        """Bare table names of this keyspace (other keyspaces' collections belong to other connectors)."""
        out = []
        for dc in self.data_collections:
            ks, dot, table = dc.partition(".")
            if not dot:
                out.append(ks)
            elif ks.lower() == keyspace.lower():
                out.append(table)
        return out

    def condition(self, keyspace: str, table: str) -> str | None:
        for dc, cond in self.conditions.items():
            if dc.lower() in (f"{keyspace}.{table}".lower(), table.lower()):
                return cond
        return None


def validate_condition(cond: str) -> str:
    """Reject conditions that could end the filter statement early (they go into a VStream rule)."""
    if _UNSAFE_CONDITION.search(cond):
        raise ValueError(f"additional-condition {cond!r} must be a single WHERE expression")
    return cond.strip()


@runtime_checkable
class SnapshotEngine(Protocol):
    """Runs ad-hoc snapshots for one task. Both calls return at once; the work happens elsewhere."""

    def start(self, request: SnapshotRequest) -> None:
        """Begin (or queue) a snapshot of ``request.data_collections``."""

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        """``stop-snapshot``: stop the named collections (all of them when empty) of one or all requests."""


__all__ = ["SnapshotEngine", "SnapshotRequest", "validate_condition"]
