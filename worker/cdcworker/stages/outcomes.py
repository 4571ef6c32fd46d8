"""One table from the exceptions a stream raises to what the task does next.

The stream stage catches one exception per connection; ``outcome_of`` says whether it is a
hand-off step, a reshard, a stop, a reconnect or the task's failure. An exception not in the
table is a bug and propagates (the task fails with a traceback). ``SETUP_FAILURES`` are the
errors of set-up that mean "something to fix" (a setting, a stored offset) or "start again" (no
producer id in time): the task fails with the message alone, which the operator shows in the
connector's status.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import grpc

from cdcworker.filters import AnonymisedColumns, EventConversionError
from cdcworker.kafkaerrors import KafkaSettingError, ProducerIdTimeout
from cdcworker.offsets import Vgtid
from cdcworker.offsets.migration import StoredOffsetError
from cdcworker.sink import SinkError
from cdcworker.streaming import ProtocolError, ReassignmentNeeded
from cdcworker.txmeta import EpochError


@dataclass(frozen=True, slots=True)
class TaskResult:
    exit_code: int  # exitcodes.OK / FAILED / REASSIGNMENT_NEEDED
    reason: str
    position: Vgtid | None
    done: bool = False  # the task's work is finished (snapshot.mode=initial_only): nothing to restart


class HandoffChange(Exception):
    """A backfill hand-off state moves on (held, catch-up, rejoined): restart the stream."""


class StreamEnded(Exception):
    """VTGate completed the stream without an error (Debezium only logs this and stalls)."""


class Outcome(enum.Enum):
    HANDOFF = "handoff"  # flush, advance the hand-off states, store them, stream again
    REASSIGN = "reassign"  # a reshard journal: store its target positions, exit for the next generation
    STOP = "stop"  # interrupted by a stop (a full Kafka queue gave up): leave the loop
    RECONNECT = "reconnect"  # the stream broke: rewind to the durable position, back off, reconnect
    FAIL = "fail"  # the task fails with the exception's message


# First match wins (subclasses before their bases).
OUTCOMES: tuple[tuple[type[BaseException], Outcome], ...] = (
    (HandoffChange, Outcome.HANDOFF),
    (ReassignmentNeeded, Outcome.REASSIGN),
    (InterruptedError, Outcome.STOP),
    (grpc.RpcError, Outcome.RECONNECT),
    (StreamEnded, Outcome.RECONNECT),
    (AnonymisedColumns, Outcome.RECONNECT),  # the filter changed under an anonymised column: stream again
    (ProtocolError, Outcome.FAIL),
    (SinkError, Outcome.FAIL),
    (EventConversionError, Outcome.FAIL),
    (EpochError, Outcome.FAIL),  # ordered transaction metadata on a position it cannot rank
)

# Set-up errors that fail the task with one clear message and no traceback.
SETUP_FAILURES: tuple[type[Exception], ...] = (KafkaSettingError, StoredOffsetError, ProducerIdTimeout)


def outcome_of(exc: BaseException) -> Outcome | None:
    """What the task does after ``exc`` ended a stream; None: not expected (re-raise it)."""
    for kind, outcome in OUTCOMES:
        if isinstance(exc, kind):
            return outcome
    return None
