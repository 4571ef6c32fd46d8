"""Stored offsets that vanished: a task that had positions must not silently start over.

Issue 28, case 7: a tombstoned or deleted offsets record of a connector that had streamed made
the worker start from the configuration and copy everything again, silently (rows deleted at the
source meanwhile stayed in the topics for good). The worker cannot tell "never ran" from "its
offsets were lost" by itself, so the operator tells it: ``shardcdc.task.offsets.expected`` is true
once the operator saw this task store positions. A start that then finds no stored position for
some shard stops with :class:`OffsetsLostError` (one line, and ``reason: OffsetsLost`` in the
termination message the operator reads) until the user restores the positions or accepts a new
snapshot (``shardcdc.io/offsets-lost=restore|resnapshot``, docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from cdcworker.offsets.migration import MigrationError, StoredOffsetError

__all__ = ["LOST_ANNOTATION", "REASON", "OffsetsLostError", "check_not_lost", "lost_reason"]

REASON = "OffsetsLost"
LOST_ANNOTATION = "shardcdc.io/offsets-lost"


class OffsetsLostError(StoredOffsetError):
    """The operator saw this task store positions, and none are stored for ``shards`` now."""

    reason = REASON

    def __init__(self, connector_name: str, key: str, topic: str, shards: tuple[str, ...]) -> None:
        # StoredOffsetError's handling (no traceback, the termination message), its own message.
        MigrationError.__init__(
            self,
            f"{REASON}: the stored offsets of task key {key} for shard(s) {', '.join(shards)} are gone from topic "
            f"{topic!r} (tombstoned or deleted), although this task had stored positions; not starting over as "
            f"snapshot.mode says. Fix: `kubectl annotate cdc/{connector_name} {LOST_ANNOTATION}=restore` writes back "
            f"the last positions the operator saw (status condition OffsetsLost), or "
            f"`{LOST_ANNOTATION}=resnapshot` starts over (in local mode: `shardcdc annotate {connector_name} "
            f"{LOST_ANNOTATION}=...`)")
        self.key = key.encode()
        self.problem = "offsets lost"
        self.shards = shards


def check_not_lost(
    sources: Mapping[str, str], *, expected: bool, connector_name: str, key: str, topic: str
) -> None:
    """Raise :class:`OffsetsLostError` when positions were expected and some shard would start from
    the configuration (``sources``: shard -> where its start came from, ``TaskStart.sources``)."""
    if not expected:
        return
    fresh = tuple(shard for shard, source in sources.items() if source == "config")
    if fresh:
        raise OffsetsLostError(connector_name, key, topic, fresh)


def lost_reason(exc: BaseException) -> dict[str, str]:
    """``{"reason": "OffsetsLost"}`` for the termination message when ``exc`` is that stop, else {}:
    the operator tells this stop from other failures by it (``cdcoperator.offsetslost``)."""
    return {"reason": REASON} if isinstance(exc, OffsetsLostError) else {}
