"""Which VStream failures are retried, and how long to wait before reconnecting.

Debezium retries every gRPC status, which turns permanent problems (a journal whose participants
span tasks, a GTID set the source no longer has, bad credentials) into endless restart loops. Here
only transient statuses are retried; the rest stop the worker with a message that says what to do.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import grpc

JOURNAL_PARTICIPANTS_MESSAGE = "not all journaling participants are in the stream"
# vstream_manager.keyspaceHasBeenResharded when a VGTID shard is gone from the topology.
_SHARD_GONE = re.compile(r"shard provided in VGTID, (\S+), not found in the (\S+) keyspace")

_RETRIABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
    }
)


@dataclass(frozen=True, slots=True)
class Verdict:
    retriable: bool
    reason: str


def classify(error: grpc.RpcError, follows_journals: bool = False) -> Verdict:
    """Decide whether a VStream failure is worth a reconnect, with an actionable reason if not.

    ``follows_journals``: the task reads reshard journals itself (per-task mode). VTGate ends the
    stream after a journal whose other source shards it does not stream; the task reconnects
    without the shards that delivered it (``cdcworker.journals``) or, if the error overtook the
    journal event, from the same position, where the journal comes again."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else str(error)) or ""
    if JOURNAL_PARTICIPANTS_MESSAGE in details:
        if follows_journals:
            return Verdict(True, "reshard journal: streaming the task's other source shards up to it")
        return Verdict(False, f"reshard journal spans shards outside this task ({details}); reassignment needed")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in details.lower():
        return Verdict(False, f"a VStream response exceeded vitess.grpc.max_inbound_message_size ({details}); raise it")
    gone = _SHARD_GONE.search(details)
    if gone is not None:
        shard, keyspace = gone.groups()
        return Verdict(
            False,
            f"the stored position names shard {keyspace}/{shard}, which no longer exists: the keyspace was "
            "resharded while this worker was not streaming and the old shards were deleted before it could read "
            "them up to the reshard, so the changes between the stored position and the reshard cannot be read "
            "any more. To continue, take a new snapshot (snapshot.mode=initial with this connector's offsets "
            "removed, or a new topic.prefix), or accept the gap by starting from the current shards "
            f"(vitess.vgtid=current with the offsets removed). VTGate said: {details}",
        )
    if "GTIDSet Mismatch" in details or "gtidset mismatch" in details.lower():
        return Verdict(False, f"the stored position is no longer available on the source ({details})")
    if code in _RETRIABLE:
        return Verdict(True, f"{code.name}: {details}")
    hints = {
        grpc.StatusCode.UNAUTHENTICATED: "check database.user / database.password",
        grpc.StatusCode.PERMISSION_DENIED: "check the VTGate ACLs for this user",
        grpc.StatusCode.INVALID_ARGUMENT: "check vitess.keyspace, vitess.shard and vitess.vgtid",
        grpc.StatusCode.NOT_FOUND: "check vitess.keyspace and vitess.shard",
    }
    hint = hints.get(code, "see the VTGate logs")
    return Verdict(False, f"{code.name}: {details} ({hint})")


class Backoff:
    """Capped exponential backoff with full jitter; ``max_retries < 0`` means unlimited.

    The attempt counter resets whenever the stream makes progress, so a worker that reconnects
    once a day never runs out of retries (Debezium's counter carries across restarts, DBZ-6670).
    """

    def __init__(self, initial_ms: int = 200, max_ms: int = 10_000, max_retries: int = -1, seed: int | None = None) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.max_retries = max_retries
        self.attempts = 0
        self._rng = random.Random(seed)

    def exhausted(self) -> bool:
        return self.max_retries >= 0 and self.attempts >= self.max_retries

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt; counts the attempt."""
        cap = min(self.max_ms, self.initial_ms * (2 ** min(self.attempts, 20)))
        self.attempts += 1
        return self._rng.uniform(cap / 2, cap) / 1000.0

    def reset(self) -> None:
        self.attempts = 0
