"""An event for each step of following a reshard, read off the ``Resharding`` condition's transitions."""

from __future__ import annotations

from typing import Any

from cdcoperator.conditions import ConditionSpec
from cdcoperator.planner import Action, Event, Generation, Plan
from cdcoperator.reconcile import reshard_events

GEN = Generation(1, 2, 2, (("-40", "80-c0"), ("40-80", "c0-")))


def _plan(status: bool, reason: str, message: str = "") -> Plan:
    return Plan(Action.KEEP, GEN, conditions=(ConditionSpec("Ready", True, "AllTasksStreaming"),
                                              ConditionSpec("Resharding", status, reason, message)))


def _stored(status: str, reason: str) -> list[dict[str, Any]]:
    return [{"type": "Resharding", "status": status, "reason": reason}]


def test_each_step_once() -> None:
    awaiting = _plan(True, "AwaitingJournal", "shards -80, 80- are no longer serving")
    assert reshard_events(None, _plan(False, "NoReshard")) == ()
    assert reshard_events(_stored("False", "NoReshard"), awaiting) == (
        Event("Normal", "Resharding", "shards -80, 80- are no longer serving"),)
    assert reshard_events(_stored("True", "AwaitingJournal"), awaiting) == ()  # resync: nothing new
    assert reshard_events(_stored("True", "AwaitingJournal"), _plan(True, "GenerationStarted", "gen 1")) == (
        Event("Normal", "Resharding", "gen 1"),)
    assert reshard_events(_stored("True", "GenerationStarted"), _plan(False, "NoReshard")) == (
        Event("Normal", "ReshardCompleted", "generation 1 streams 4 shards: -40, 40-80, 80-c0, c0-"),)
    assert reshard_events(_stored("False", "NoReshard"), _plan(False, "NoReshard")) == ()
