"""The one table from what ends a stream to what the task does next (cdcworker.stages.outcomes).

The order of the table matters where kinds nest: an anonymised-column FIELD event is an
EventConversionError but is retried (a transient vstreamer bug), and a refused login is a
SinkError that fails the task. Every outcome has a handler in the task's router.
"""

from __future__ import annotations

import grpc
import pytest

from cdcworker.filters import AnonymisedColumns, EventConversionError
from cdcworker.kafkaerrors import KafkaAccessError, KafkaSettingError, SinkError
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.migration import StoredOffsetError
from cdcworker.stages.outcomes import SETUP_FAILURES, HandoffChange, Outcome, StreamEnded, outcome_of
from cdcworker.streaming import ProtocolError, ReassignmentNeeded
from cdcworker.task import HANDLERS
from cdcworker.txmeta import EpochError
from vitessapi import binlogdata_pb2


class _Rpc(grpc.RpcError):
    pass


@pytest.mark.parametrize(("exc", "outcome"), [
    (HandoffChange(), Outcome.HANDOFF),
    (ReassignmentNeeded(Vgtid((ShardGtid("ks", "-80", "MySQL56/u:1-5"),)), binlogdata_pb2.Journal(id=7)),
     Outcome.REASSIGN),
    (InterruptedError(), Outcome.STOP),
    (_Rpc(), Outcome.RECONNECT),
    (StreamEnded(), Outcome.RECONNECT),
    (AnonymisedColumns("@1 column names"), Outcome.RECONNECT),  # before its base EventConversionError
    (ProtocolError("a ROW event before its FIELD event"), Outcome.FAIL),
    (SinkError("Kafka rejected 1 record(s)"), Outcome.FAIL),
    (KafkaAccessError("SASL authentication failed"), Outcome.FAIL),  # the task also stops writing offsets
    (EventConversionError("cannot convert column c"), Outcome.FAIL),
    (EpochError("Error parsing GTID: MariaDB/0-1-5"), Outcome.FAIL),  # ordered metadata on MariaDB GTIDs
])
def test_each_kind_maps_to_its_outcome(exc: BaseException, outcome: Outcome) -> None:
    assert outcome_of(exc) is outcome


@pytest.mark.parametrize("exc", [ValueError("a bug"), KeyError("x"), RuntimeError("unexpected")])
def test_an_unexpected_exception_is_not_mapped_and_propagates(exc: BaseException) -> None:
    assert outcome_of(exc) is None


def test_every_outcome_has_a_handler() -> None:
    assert set(HANDLERS) == set(Outcome)


def test_setup_failures_are_the_settings_and_stored_offsets() -> None:
    assert isinstance(KafkaAccessError("x"), SETUP_FAILURES)
    assert isinstance(KafkaSettingError("x"), SETUP_FAILURES)
    assert issubclass(StoredOffsetError, SETUP_FAILURES)
    assert not isinstance(SinkError("x"), SETUP_FAILURES)
