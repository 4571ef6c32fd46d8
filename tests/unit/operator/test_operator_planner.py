"""The operator's pure planner, tested like Debezium's VitessConnectorTest matrix, plus conditions and status."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from cdcoperator import conditions as cond
from cdcoperator.adoption import Adoption, adoption_from_status, adoption_to_status, analyze
from cdcoperator.model import ConnectorSpec
from cdcoperator.planner import (
    HISTORY_LIMIT,
    Action,
    Generation,
    GenPhase,
    Journal,
    PendingChange,
    Plan,
    TaskPhase,
    TaskPlan,
    TaskRef,
    TaskReport,
    desired_shards,
    generation_from_status,
    generation_to_status,
    plan,
)
from cdcworker.offsets.keys import OffsetPartition, offset_record_key
from cdcworker.offsets.value import offset_value_at
from cdcworker.offsets.vgtid import Vgtid

FOUR = ["-40", "40-80", "80-c0", "c0-"]


def spec(tasks: int = 2, state: str = "running", shards: Sequence[str] | None = None) -> ConnectorSpec:
    vitess: dict[str, Any] = {"vtgate": "vtgate:15991", "keyspace": "commerce"}
    if shards is not None:
        vitess["shards"] = list(shards)
    return ConnectorSpec.from_dict(
        {
            "source": {"vitess": vitess},
            "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "shop"},
            "tasks": tasks,
            "state": state,
        }
    )


def streaming(g: Generation) -> list[TaskReport]:
    return [TaskReport(g.generation, t, TaskPhase.STREAMING, pod=f"p{t}") for t in range(g.task_count)]


def persist(p: Plan) -> Generation:
    """What the next reconcile reads back: the record through status.assignment."""
    assert p.generation is not None
    back = generation_from_status(generation_to_status(p.generation))
    assert back == p.generation
    return back


def condition(p: Plan, type_: str) -> cond.ConditionSpec:
    (found,) = [c for c in p.conditions if c.type == type_]
    return found


def start(tasks: int, shards: Sequence[str]) -> Generation:
    p = plan(spec(tasks), shards, None)
    assert p.action is Action.START
    return persist(p)


def migrate(g: Generation, s: ConnectorSpec, serving: Sequence[str]) -> tuple[Plan, Plan]:
    """Drive one generation change: drain (workers streaming), then start once they have exited."""
    drain = plan(s, serving, g, streaming(g))
    assert drain.action is Action.DRAIN
    assert drain.stop == tuple(TaskRef(g.generation, t) for t in range(g.task_count))
    assert all(not w.run for w in drain.workers)
    drained = persist(drain)
    exited = [TaskReport(g.generation, t, TaskPhase.EXITED) for t in range(g.task_count)]
    started = plan(s, serving, drained, exited)
    assert started.action is Action.START
    return drain, started


# --- round-robin over Java-sorted shards --------------------------------------------------------------


def test_round_robin_over_java_sorted_shards() -> None:
    p = plan(spec(2), ["c0-", "80-c0", "-40", "40-80"], None)
    assert p.action is Action.START
    assert p.generation == Generation(0, 2, -1, (("-40", "80-c0"), ("40-80", "c0-")))
    assert p.workers == (
        TaskPlan(0, 0, 2, -1, ("-40", "80-c0"), True),
        TaskPlan(0, 1, 2, -1, ("40-80", "c0-"), True),
    )
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "GenerationStarted")]


def test_round_robin_debezium_example_uneven_shards() -> None:
    # VitessConnector.taskConfigs: -80,80-90,90- over 2 tasks gives task0 = -80,90- and task1 = 80-90.
    p = plan(spec(2), ["90-", "-80", "80-90"], None)
    assert p.generation is not None
    assert p.generation.assignment == (("-80", "90-"), ("80-90",))


def test_java_order_is_code_unit_order_not_key_range_order() -> None:
    # '-' (0x2d) sorts before digits and digits before letters; upper case before lower case.
    p = plan(spec(1), ["a0-", "-", "0", "A0-B0", "-10"], None)
    assert p.generation is not None
    assert p.generation.assignment == (("-", "-10", "0", "A0-B0", "a0-"),)


def test_tasks_capped_at_shard_count() -> None:
    p = plan(spec(8), ["-80", "80-"], None)
    assert p.generation == Generation(0, 2, -1, (("-80",), ("80-",)))
    assert condition(p, cond.READY).status is False
    assert condition(p, cond.PROGRESSING) == cond.ConditionSpec(
        cond.PROGRESSING, True, "GenerationStarted", "starting 2 workers of generation 0"
    )


def test_steady_state_ready_and_stable() -> None:
    g = start(2, FOUR)
    p = plan(spec(2), FOUR, g, streaming(g))
    assert p.action is Action.KEEP
    assert p.generation == g
    assert p.stop == () and p.remove == ()
    assert condition(p, cond.READY) == cond.ConditionSpec(
        cond.READY, True, "AllTasksStreaming", "2 tasks streaming 4 shards in generation 0"
    )
    assert condition(p, cond.PROGRESSING).status is False
    assert condition(p, cond.DEGRADED) == cond.ConditionSpec(cond.DEGRADED, False, "AsExpected", "")
    assert condition(p, cond.RESHARDING).status is False
    assert condition(p, cond.PAUSED) == cond.ConditionSpec(cond.PAUSED, False, "Running", "")
    assert p.events == ()


def test_initial_only_tasks_that_completed_are_ready_not_failed() -> None:
    """snapshot.mode initial_only under the operator: the workers finished the copy and idle
    (state completed); the connector is Ready and stable, not Degraded nor re-planned."""
    g = start(2, FOUR)
    done = [TaskReport(g.generation, t, TaskPhase.COMPLETED, pod=f"p{t}") for t in range(g.task_count)]
    p = plan(spec(2), FOUR, g, done)
    assert p.action is Action.KEEP and p.generation == g and p.stop == () and p.remove == ()
    assert all(w.run for w in p.workers)  # kept running: an exit would be restarted by the Deployment
    assert condition(p, cond.READY) == cond.ConditionSpec(
        cond.READY, True, "SnapshotCompleted",
        "snapshot.mode initial_only: 2 tasks copied 4 shards in generation 0; nothing streams")
    assert condition(p, cond.PROGRESSING).status is False
    assert condition(p, cond.DEGRADED).status is False
    half = [done[0], TaskReport(g.generation, 1, TaskPhase.SNAPSHOTTING, pod="p1")]
    assert condition(plan(spec(2), FOUR, g, half), cond.READY) == cond.ConditionSpec(
        cond.READY, False, "TasksNotStreaming", "task 1: Snapshotting")


# --- scale up/down and migrations ---------------------------------------------------------------------


def test_scale_up_drains_then_starts_next_generation() -> None:
    g = start(2, FOUR)
    drain, started = migrate(g, spec(4), FOUR)
    assert drain.generation is not None
    assert drain.generation.phase is GenPhase.DRAINING
    assert drain.generation.pending == PendingChange(tuple(FOUR), 4, "Scale")
    assert drain.generation.generation == 0  # never two generations at once
    assert [(e.reason, e.message) for e in drain.events] == [
        ("Draining", "stopping the 2 workers of generation 0 to start generation 1; tasks 2 -> 4 (Scale)")
    ]
    assert condition(drain, cond.READY).reason == "GenerationChange"
    assert condition(drain, cond.PROGRESSING).reason == "Draining"
    assert started.generation == Generation(1, 4, 2, (("-40",), ("40-80",), ("80-c0",), ("c0-",)), history=((0, 2),))
    assert started.remove == (TaskRef(0, 0), TaskRef(0, 1))
    assert [w.run for w in started.workers] == [True] * 4
    # While it drains, the next generation's workers are known (their ConfigMaps are written
    # ahead) exactly as the start plans them; nothing of generation 1 is planned to run yet.
    assert drain.prepare == started.workers
    assert all(w.generation == 0 for w in drain.workers) and started.prepare == ()
    # Every worker stops and no journal is followed: the Deployments go in one call.
    assert (drain.drain_whole, started.drain_whole) == (0, None)


def test_drain_waits_until_every_worker_exited() -> None:
    g = start(2, FOUR)
    drained = persist(plan(spec(4), FOUR, g, streaming(g)))
    # One worker is gone, the other still running: keep draining, stop only the live one.
    p = plan(spec(4), FOUR, drained, [TaskReport(0, 0, TaskPhase.EXITED), TaskReport(0, 1, TaskPhase.STREAMING)])
    assert p.action is Action.DRAIN
    assert p.stop == (TaskRef(0, 1),)
    assert p.generation == drained
    assert p.events == ()  # the drain was already announced


def test_scale_down_four_to_one() -> None:
    g = start(4, FOUR)
    _, started = migrate(g, spec(1), FOUR)
    assert started.generation == Generation(1, 1, 4, (tuple(FOUR),), history=((0, 4),))


def test_migration_single_task_single_shard_is_no_generation() -> None:
    # Debezium throws when a generation is bumped without a change; here nothing is bumped.
    g = start(1, ["0"])
    p = plan(spec(2), ["0"], g, streaming(g))
    assert p.action is Action.KEEP
    assert p.generation == g


def test_migration_double() -> None:
    g = start(1, ["-80", "80-"])
    _, started = migrate(g, spec(2), ["-80", "80-"])
    assert started.generation == Generation(1, 2, 1, (("-80",), ("80-",)), history=((0, 1),))


def test_migration_quad_and_back() -> None:
    g = start(1, FOUR)
    _, up = migrate(g, spec(4), FOUR)
    g1 = persist(up)
    assert g1 == Generation(1, 4, 1, (("-40",), ("40-80",), ("80-c0",), ("c0-",)), history=((0, 1),))
    _, down = migrate(g1, spec(2), FOUR)
    assert down.generation == Generation(2, 2, 4, (("-40", "80-c0"), ("40-80", "c0-")), history=((1, 4), (0, 1)))


def test_generations_carry_the_chain_of_earlier_generations() -> None:
    # 2 -> 3 tasks with the third never scheduled (Pending until drained), then back to 2: the
    # new workers get generation 1 and 0's task counts, so they can take c0- from generation 0.
    g0 = start(2, FOUR)
    assert g0.history == () and "history" not in generation_to_status(g0)
    _, up = migrate(g0, spec(3), FOUR)
    g1 = persist(up)
    assert g1.history == ((0, 2),)  # even the first change: a generation-0 task may never have run
    assert [w.history for w in up.workers] == [((0, 2),)] * 3
    drain = plan(spec(2), FOUR, g1, [TaskReport(1, 0, TaskPhase.STREAMING, pod="p0"),
                                     TaskReport(1, 1, TaskPhase.STREAMING, pod="p1"),
                                     TaskReport(1, 2, TaskPhase.PENDING)])
    assert drain.stop == (TaskRef(1, 0), TaskRef(1, 1), TaskRef(1, 2))
    down = plan(spec(2), FOUR, persist(drain), [TaskReport(1, t, TaskPhase.EXITED) for t in range(3)])
    g2 = persist(down)
    assert (g2.generation, g2.prev_task_count, g2.history) == (2, 3, ((1, 3), (0, 2)))
    assert generation_to_status(g2)["history"] == [{"generation": 1, "tasks": 3}, {"generation": 0, "tasks": 2}]
    # The record keeps the newest HISTORY_LIMIT generations.
    g = g2
    for n in range(HISTORY_LIMIT + 3):
        _, nxt = migrate(g, spec(1 if n % 2 == 0 else 2), FOUR)
        g = persist(nxt)
    assert len(g.history) == HISTORY_LIMIT
    assert g.history[0] == (g.generation - 1, g.prev_task_count)
    assert [gen for gen, _ in g.history] == list(range(g.generation - 1, g.generation - 1 - HISTORY_LIMIT, -1))
    # A record edited by hand into something unreadable counts as no chain (Debezium's rule).
    assert generation_from_status({**generation_to_status(g), "history": [{"generation": 1}]}).history == ()


def test_adopted_first_generation_carries_the_offsets_topic_chain() -> None:
    adopted = Adoption(generation=3, tasks=2, keys=("task0_2_3",), shards=tuple(FOUR), chain=((3, 2), (1, 4)))
    p = plan(spec(2), FOUR, None, [], adopted=adopted)
    assert p.generation is not None
    assert (p.generation.generation, p.generation.prev_task_count, p.generation.history) == (4, 2, ((3, 2), (1, 4)))
    assert adoption_from_status(adoption_to_status(adopted)) == adopted

def test_previous_tasks_is_the_actual_count_not_spec() -> None:
    # spec.tasks 8 over 2 shards ran 2 tasks; the next generation's previous count is 2.
    g = start(8, ["-80", "80-"])
    assert g.task_count == 2
    _, started = migrate(g, spec(1), ["-80", "80-"])
    assert started.generation is not None
    assert started.generation.prev_task_count == 2


def test_spec_tasks_change_above_shard_count_changes_nothing() -> None:
    g = start(4, FOUR)
    p = plan(spec(16), FOUR, g, streaming(g))
    assert p.action is Action.KEEP and p.generation == g


# --- resharding ---------------------------------------------------------------------------------------


def test_split_followed_through_journal() -> None:
    g = start(2, ["-80", "80-"])
    journal = Journal.of(["-80"], {"40-80": "MySQL56/b:1-9", "-40": "MySQL56/a:1-7"})
    reports = [
        TaskReport(0, 0, TaskPhase.REASSIGNMENT_NEEDED, journal=journal),
        TaskReport(0, 1, TaskPhase.STREAMING),
    ]
    drain = plan(spec(2), ["-80", "80-"], g, reports)  # discovery has not caught up yet
    assert drain.action is Action.DRAIN
    assert drain.drain_whole is None  # a reshard's workers report journals from their pods: stopped one by one
    assert drain.stop == (TaskRef(0, 1),)  # task 0 already exited at the journal
    assert drain.generation is not None
    assert drain.generation.pending == PendingChange(("-40", "40-80", "80-"), 2, "Reshard", (journal,))
    assert condition(drain, cond.RESHARDING) == cond.ConditionSpec(
        cond.RESHARDING, True, "FollowingJournal",
        "workers reached a reshard journal; the next generation streams -40, 40-80",
    )
    drained = persist(drain)
    # Both workers are gone now (no reports): the journal survives in status and the next generation starts.
    started = plan(spec(2), ["-40", "40-80", "80-"], drained, [])
    assert started.action is Action.START
    assert started.generation == Generation(
        1, 2, 2, (("-40", "80-"), ("40-80",)),
        journal_positions=(("-40", "MySQL56/a:1-7"), ("40-80", "MySQL56/b:1-9")), history=((0, 2),),
    )
    assert condition(started, cond.RESHARDING).status is True
    steady = plan(spec(2), ["-40", "40-80", "80-"], persist(started), streaming(persist(started)))
    assert steady.action is Action.KEEP
    assert condition(steady, cond.RESHARDING).status is False


def test_merge_followed_through_journal() -> None:
    g = start(2, ["-40", "40-80", "80-"])
    journal = Journal.of(["-40", "40-80"], {"-80": "MySQL56/m:1-3"})
    reports = [
        TaskReport(0, 0, TaskPhase.REASSIGNMENT_NEEDED, journal=journal),
        TaskReport(0, 1, TaskPhase.REASSIGNMENT_NEEDED, journal=journal),
    ]
    p = plan(spec(2), ["-80", "80-"], g, reports)
    assert p.action is Action.START  # nobody left to drain
    assert p.generation == Generation(1, 2, 2, (("-80",), ("80-",)), journal_positions=(("-80", "MySQL56/m:1-3"),),
                                           history=((0, 2),))


def test_merge_across_tasks_waits_for_every_participant_to_reach_the_journal() -> None:
    """-40 (task 0) and 40-80 (task 1) merge into -80. Task 0 reaches the journal first; task 1 is
    behind and must stream 40-80 up to the cut-over too, or its changes before it are lost: it
    keeps running, task 0 (restarted by its Deployment) is stopped. Once task 1 has reported the
    journal as well, the generation drains and the next one starts."""
    g = start(2, ["-40", "40-80", "80-"])
    assert g.assignment == (("-40", "80-"), ("40-80",))
    journal = Journal.of(["-40", "40-80"], {"-80": "MySQL56/m:1-3"})
    reports = [TaskReport(0, 0, TaskPhase.REASSIGNMENT_NEEDED, journal=journal, running=True),
               TaskReport(0, 1, TaskPhase.STREAMING, pod="p1")]
    waiting = plan(spec(2), ["-80", "80-"], g, reports)
    assert waiting.action is Action.DRAIN and waiting.stop == (TaskRef(0, 0),)
    assert [(w.task_id, w.run) for w in waiting.workers] == [(0, False), (1, True)]
    assert waiting.generation is not None and waiting.generation.pending is not None
    assert waiting.generation.pending.journals == (journal,)
    assert [e.reason for e in waiting.events] == ["AwaitingJournal"]
    assert waiting.prepare == ()  # awaiting a journal: the pending change still moves, nothing is written ahead
    assert waiting.drain_whole is None
    # Both reached it and are being stopped: their terminating pods serve no status document
    # (Starting); they must not be started again as if behind.
    stopping = plan(spec(2), ["-80", "80-"], persist(waiting),
                    [TaskReport(0, 0, TaskPhase.STARTING, pod="p0"), TaskReport(0, 1, TaskPhase.STARTING, pod="p1")])
    assert stopping.action is Action.DRAIN and not any(w.run for w in stopping.workers)
    # Task 0 stopped (no report of it any more); task 1 reaches the journal: drain, then start.
    both = [TaskReport(0, 1, TaskPhase.REASSIGNMENT_NEEDED, journal=journal)]
    started = plan(spec(2), ["-80", "80-"], persist(waiting), both)
    assert started.action is Action.START
    assert started.generation is not None and started.generation.shards == ("-80", "80-")
    assert started.generation.journal_positions == (("-80", "MySQL56/m:1-3"),)


def test_restarted_worker_after_the_journal_is_stopped_before_the_next_generation() -> None:
    """Kubernetes restarts a Deployment's container after the reshard exit: its process runs
    until the operator stops it, so the next generation waits (never two generations at once)."""
    g = start(2, ["-40", "40-80", "80-"])
    journal = Journal.of(["-40", "40-80"], {"-80": "MySQL56/m:1-3"})
    reports = [
        TaskReport(0, 0, TaskPhase.REASSIGNMENT_NEEDED, journal=journal, running=True),
        TaskReport(0, 1, TaskPhase.REASSIGNMENT_NEEDED, journal=journal),
    ]
    drain = plan(spec(2), ["-80", "80-"], g, reports)
    assert drain.action is Action.DRAIN
    assert drain.stop == (TaskRef(0, 0),)
    assert drain.generation is not None and drain.generation.pending == PendingChange(("-80", "80-"), 2, "Reshard", (journal,))
    started = plan(spec(2), ["-80", "80-"], persist(drain), [TaskReport(0, 1, TaskPhase.REASSIGNMENT_NEEDED, journal=journal)])
    assert started.action is Action.START
    assert started.generation == Generation(1, 2, 2, (("-80",), ("80-",)), journal_positions=(("-80", "MySQL56/m:1-3"),),
                                           history=((0, 2),))


def test_serving_split_without_journal_waits_for_it() -> None:
    g = start(2, ["-80", "80-"])
    p = plan(spec(2), ["-40", "40-80", "80-"], g, streaming(g))
    assert p.action is Action.KEEP
    assert p.generation == g
    assert condition(p, cond.RESHARDING) == cond.ConditionSpec(
        cond.RESHARDING, True, "AwaitingJournal",
        "shards -80 are no longer serving; waiting for their workers to reach the reshard journal",
    )
    assert condition(p, cond.DEGRADED).status is False


def test_serving_shards_lost_are_refused() -> None:
    g = start(2, ["-80", "80-"])
    p = plan(spec(2), ["-80"], g, streaming(g))
    assert p.action is Action.KEEP
    assert p.generation == g
    assert [r.reason for r in p.refusals] == ["ShardsLost"]
    degraded = condition(p, cond.DEGRADED)
    assert (degraded.status, degraded.reason) == (True, "ShardsLost")
    assert degraded.message.startswith("shards 80- of generation 0 are no longer selected and no selected serving")
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "ShardsLost")]


def test_partial_cover_is_lost_shard() -> None:
    g = start(1, ["-80", "80-"])
    p = plan(spec(1), ["-80", "80-c0"], g, streaming(g))  # c0- gone: 80- only half covered
    assert [r.reason for r in p.refusals] == ["ShardsLost"]
    assert p.refusals[0].message.startswith("shards 80- of generation 0 are no longer selected")


def test_explicit_shard_list_narrowed_is_refused_and_grown_starts_generation() -> None:
    g = start(2, ["-80", "80-"])
    narrowed = plan(spec(2, shards=["-80"]), ["-80", "80-"], g, streaming(g))
    assert [r.reason for r in narrowed.refusals] == ["ShardsLost"]
    g1 = start(2, ["-80"])
    grown = plan(spec(2, shards=["-80", "80-"]), ["-80", "80-"], g1, streaming(g1))
    assert grown.action is Action.DRAIN
    assert grown.generation is not None
    assert grown.generation.pending == PendingChange(("-80", "80-"), 2, "ShardsAdded")


def test_desired_shards_follow_explicit_list_by_key_range() -> None:
    s = spec(2, shards=["-80"])
    assert desired_shards(s, ["-40", "40-80", "80-"]) == ("-40", "40-80")
    assert desired_shards(spec(2), ["80-", "-80"]) == ("-80", "80-")


# --- states -------------------------------------------------------------------------------------------


def test_pause_stops_workers_and_keeps_generation() -> None:
    g = start(2, FOUR)
    p = plan(spec(2, "paused"), FOUR, g, streaming(g))
    assert p.action is Action.STOP and p.drain_whole is None  # paused: the Deployments stay, at zero
    assert p.stop == (TaskRef(0, 0), TaskRef(0, 1))
    assert [w.run for w in p.workers] == [False, False]
    assert p.generation == Generation(0, 2, -1, g.assignment, phase=GenPhase.PAUSED)
    assert condition(p, cond.PAUSED) == cond.ConditionSpec(cond.PAUSED, True, "Paused", "spec.state is paused")
    assert condition(p, cond.READY).reason == "Paused"
    assert condition(p, cond.PROGRESSING).reason == "Stopping"
    paused = persist(p)
    done = plan(spec(2, "paused"), FOUR, paused, [])
    assert done.generation is not None and not done.generation.stopped_cleanly
    assert condition(done, cond.PROGRESSING).status is False
    assert done.events == ()


def test_stop_records_clean_stop_once_workers_exited_then_resume() -> None:
    g = start(2, FOUR)
    stopping = persist(plan(spec(2, "stopped"), FOUR, g, streaming(g)))
    assert stopping.phase is GenPhase.STOPPED and not stopping.stopped_cleanly
    stopped = plan(spec(2, "stopped"), FOUR, stopping, [])
    assert stopped.generation is not None and stopped.generation.stopped_cleanly
    assert [e.reason for e in stopped.events] == ["StoppedCleanly"]
    resumed = plan(spec(2), FOUR, persist(stopped), [])
    assert resumed.action is Action.KEEP
    assert resumed.generation == g
    assert [w.run for w in resumed.workers] == [True, True]
    assert [e.reason for e in resumed.events] == ["Resumed"]


def test_scale_while_paused_is_pending_then_applied_on_resume() -> None:
    g = start(2, FOUR)
    paused = persist(plan(spec(2, "paused"), FOUR, g, []))
    p = plan(spec(4, "paused"), FOUR, paused, [])
    assert p.action is Action.STOP
    assert p.generation is not None and p.generation.pending == PendingChange(tuple(FOUR), 4, "Scale")
    resumed = plan(spec(4), FOUR, persist(p), [])
    assert resumed.action is Action.START
    assert resumed.generation == Generation(1, 4, 2, (("-40",), ("40-80",), ("80-c0",), ("c0-",)), history=((0, 2),))


def test_paused_before_first_generation_starts_nothing() -> None:
    p = plan(spec(2, "paused"), FOUR, None)
    assert (p.action, p.generation, p.workers) == (Action.STOP, None, ())
    assert condition(p, cond.PAUSED).status is True


# --- health -------------------------------------------------------------------------------------------


def test_ready_false_when_any_task_not_streaming() -> None:
    g = start(2, FOUR)
    p = plan(spec(2), FOUR, g, [TaskReport(0, 0, TaskPhase.STREAMING), TaskReport(0, 1, TaskPhase.SNAPSHOTTING)])
    assert condition(p, cond.READY) == cond.ConditionSpec(cond.READY, False, "TasksNotStreaming", "task 1: Snapshotting")
    assert condition(p, cond.PROGRESSING) == cond.ConditionSpec(
        cond.PROGRESSING, True, "TasksStarting", "task 1: Snapshotting"
    )
    missing = plan(spec(2), FOUR, g, [TaskReport(0, 0, TaskPhase.STREAMING)])
    assert condition(missing, cond.READY).message == "task 1: Pending"


def test_failed_task_degrades() -> None:
    g = start(2, FOUR)
    reports = [TaskReport(0, 0, TaskPhase.FAILED, message="UNAVAILABLE: vtgate down"), TaskReport(0, 1, TaskPhase.STREAMING)]
    p = plan(spec(2), FOUR, g, reports)
    assert condition(p, cond.READY).message == "task 0: Failed"
    assert condition(p, cond.DEGRADED) == cond.ConditionSpec(
        cond.DEGRADED, True, "TasksFailed", "task 0: UNAVAILABLE: vtgate down"
    )


def test_source_unreachable() -> None:
    first = plan(spec(2), None, None, source_error="connection refused")
    assert (first.action, first.generation) == (Action.WAIT, None)
    assert condition(first, cond.DEGRADED) == cond.ConditionSpec(
        cond.DEGRADED, True, "SourceUnreachable", "cannot list the shards of keyspace commerce: connection refused"
    )
    g = start(2, FOUR)
    later = plan(spec(2), None, g, streaming(g), source_error="timeout")
    assert later.action is Action.KEEP and later.generation == g
    assert condition(later, cond.DEGRADED).reason == "SourceUnreachable"
    assert condition(later, cond.READY).status is True  # the workers still stream


def test_no_shards() -> None:
    p = plan(spec(2), [], None)
    assert p.action is Action.WAIT
    assert condition(p, cond.DEGRADED).reason == "NoShards"


def test_leftover_objects_of_old_generations_are_removed() -> None:
    g = Generation(3, 1, 2, (tuple(FOUR),))
    p = plan(spec(1), FOUR, g, [TaskReport(2, 1, TaskPhase.EXITED), TaskReport(2, 0, TaskPhase.EXITED),
                                 TaskReport(3, 0, TaskPhase.STREAMING)])
    assert p.action is Action.KEEP
    assert p.remove == (TaskRef(2, 0), TaskRef(2, 1))


# --- idempotence --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "serving", "phase"),
    [
        (spec(2), FOUR, TaskPhase.STREAMING),
        (spec(4), FOUR, TaskPhase.STREAMING),
        (spec(2, "paused"), FOUR, TaskPhase.STREAMING),
        (spec(2), ["-80", "80-"], TaskPhase.STREAMING),
        (spec(2), ["-40", "40-80", "80-c0"], TaskPhase.STARTING),
        (spec(4), FOUR, TaskPhase.EXITED),
    ],
)
def test_planning_twice_gives_the_same_plan(s: ConnectorSpec, serving: list[str], phase: TaskPhase) -> None:
    g = start(2, FOUR)
    reports = [TaskReport(0, t, phase) for t in range(2)]
    assert plan(s, serving, g, reports) == plan(s, serving, g, reports)


def test_persisted_record_is_a_fixed_point() -> None:
    g = start(2, FOUR)
    p = plan(spec(2), FOUR, g, streaming(g))
    assert persist(p) == g
    again = plan(spec(2), FOUR, persist(p), streaming(g))
    assert again == p


# --- status and conditions ----------------------------------------------------------------------------


def test_generation_status_shape() -> None:
    j = Journal.of(["-80"], {"-40": "a", "40-80": "b"})
    g = Generation(2, 2, 1, (("-40", "80-"), ("40-80",)), GenPhase.DRAINING,
                   PendingChange(("-40", "40-80", "80-"), 2, "Reshard", (j,)), False, (("x", "y"),))
    assert generation_to_status(g) == {
        "generation": 2,
        "tasks": 2,
        "previousTasks": 1,
        "phase": "Draining",
        "shards": ["-40", "40-80", "80-"],
        "stoppedCleanly": False,
        "taskStates": [{"id": 0, "shards": ["-40", "80-"]}, {"id": 1, "shards": ["40-80"]}],
        "journalPositions": [{"shard": "x", "gtid": "y"}],
        "pending": {
            "shards": ["-40", "40-80", "80-"],
            "tasks": 2,
            "reason": "Reshard",
            "journals": [{"participants": ["-80"], "positions": [{"shard": "-40", "gtid": "a"},
                                                                 {"shard": "40-80", "gtid": "b"}]}],
        },
    }
    assert generation_from_status(generation_to_status(g)) == g
    assert generation_from_status(None) is None
    assert generation_from_status({}) is None


def test_condition_transition_time_kept_unless_status_changes() -> None:
    t0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
    t1 = t0 + dt.timedelta(minutes=5)
    first = cond.merge_conditions(None, [cond.ConditionSpec("Ready", False, "TasksNotStreaming", "task 1: Pending")],
                                  observed_generation=1, now=t0)
    assert first == [{"type": "Ready", "status": "False", "observedGeneration": 1,
                      "lastTransitionTime": "2024-05-01T12:00:00Z", "reason": "TasksNotStreaming",
                      "message": "task 1: Pending"}]
    same_status = cond.merge_conditions(first, [cond.ConditionSpec("Ready", False, "GenerationChange", "x")],
                                        observed_generation=2, now=t1)
    assert same_status[0]["lastTransitionTime"] == "2024-05-01T12:00:00Z"
    assert (same_status[0]["reason"], same_status[0]["observedGeneration"]) == ("GenerationChange", 2)
    flipped = cond.merge_conditions(same_status, [cond.ConditionSpec("Ready", True, "AllTasksStreaming")],
                                    observed_generation=2, now=t1)
    assert flipped[0]["lastTransitionTime"] == "2024-05-01T12:05:00Z"
    assert flipped[0]["status"] == "True"
    # Other owners' conditions are kept, order is stable, re-applying is a no-op.
    other = [{"type": "BackfillRunning", "status": "False", "observedGeneration": 1,
              "lastTransitionTime": "2024-05-01T11:00:00Z", "reason": "Idle", "message": ""}, *flipped]
    merged = cond.merge_conditions(other, [cond.ConditionSpec("Ready", True, "AllTasksStreaming")],
                                   observed_generation=2, now=t1 + dt.timedelta(hours=1))
    assert merged == other
    assert cond.find(merged, "BackfillRunning") == other[0]
    assert cond.find(merged, "Paused") is None


# --- adopting existing offsets before the first generation (migration from Debezium) ----------------------


def test_first_generation_after_adopted_per_task_offsets() -> None:
    adopted = Adoption(generation=3, tasks=2, keys=("task0_2_3", "task1_2_3"), shards=tuple(FOUR))
    p = plan(spec(4), FOUR, None, adopted=adopted)
    assert p.action is Action.START
    g = persist(p)
    assert (g.generation, g.task_count, g.prev_task_count, g.assignment) == (4, 4, 2, (("-40",), ("40-80",), ("80-c0",),
                                                                                 ("c0-",)))
    assert [w.prev_task_count for w in p.workers] == [2] * 4
    assert [(e.type, e.reason, e.message) for e in p.events] == [
        ("Normal", "AdoptedOffsets", "found per-task offsets of generation 3 with 2 tasks (task0_2_3, task1_2_3) "
         "for shards -40, 40-80, 80-c0, c0-; starting at generation 4 with previous tasks 2, so every shard "
         "resumes from them"),
        ("Normal", "GenerationStarted", "generation 4 started: 4 tasks over 4 shards (previous tasks 2; "
         "AdoptedOffsets)")]
    # Adoption only shapes the first generation: later plans ignore it.
    assert plan(spec(4), FOUR, g, streaming(g), adopted=Adoption(generation=9, tasks=1)) == plan(
        spec(4), FOUR, g, streaming(g))


def test_plain_server_offset_is_generation_zero() -> None:
    p = plan(spec(2), ["-80", "80-"], None, adopted=Adoption(server_key=True, shards=("-80", "80-")))
    g = persist(p)
    assert (g.generation, g.task_count, g.prev_task_count) == (0, 2, -1)
    assert [(e.reason, e.message) for e in p.events] == [
        ("AdoptedOffsets", 'found the offset {"server": "shop"} for shards -80, 80-; generation 0 resumes from it'),
        ("GenerationStarted", "generation 0 started: 2 tasks over 2 shards")]


def test_nothing_to_adopt_starts_generation_zero_quietly() -> None:
    assert plan(spec(2), ["-80", "80-"], None, adopted=Adoption()) == plan(spec(2), ["-80", "80-"], None)


def test_incomplete_or_skipped_adoption_is_a_warning() -> None:
    p = plan(spec(2), ["-80", "80-"], None, adopted=Adoption(generation=1, tasks=2, keys=("task1_2_1",),
                                                             shards=("80-",)))
    assert (persist(p).generation, p.events[0].type) == (2, "Warning")
    assert "(incomplete: 2 keys expected)" in p.events[0].message
    skipped = plan(spec(2), ["-80", "80-"], None, adopted=Adoption(skipped="needs credentials"))
    assert persist(skipped).generation == 0
    assert (skipped.events[0].type, skipped.events[0].message) == (
        "Warning", "offsets were not scanned: needs credentials; generation 0 starts from the plain server key, "
        "if any")


def test_unreadable_offsets_start_nothing() -> None:
    p = plan(spec(2), ["-80", "80-"], None, offsets_error="broker down")
    assert (p.action, p.generation, p.workers) == (Action.WAIT, None, ())
    message = ("cannot read offsets topic shardcdc-offsets to adopt existing offsets before the first generation: "
               "broker down")
    assert (condition(p, cond.READY).status, condition(p, cond.READY).reason) == (False, "OffsetsUnreadable")
    assert condition(p, cond.DEGRADED).message == message
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "OffsetsUnreadable")]


def test_adopted_shards_resharded_while_stopped_are_resumed_then_followed() -> None:
    # Debezium stopped on -80/80-; the keyspace was split meanwhile (DBZ-6011): resume the stored
    # shards so the workers reach the journal, instead of starting the new shards from nowhere.
    adopted = Adoption(generation=0, tasks=1, keys=("task0_1_0",), shards=("-80", "80-"))
    g = persist(plan(spec(2), FOUR, None, adopted=adopted))
    assert (g.generation, g.prev_task_count, g.shards) == (1, 1, ("-80", "80-"))
    after = plan(spec(2), FOUR, g, streaming(g))
    assert condition(after, cond.RESHARDING).reason == "AwaitingJournal"
    # Shards added since (nothing stored for them) are just streamed from the start.
    added = persist(plan(spec(2), FOUR, None, adopted=Adoption(generation=0, tasks=1, shards=("-40", "40-80"))))
    assert added.shards == tuple(FOUR)


def _record(connector: str, server: str, task_key: str | None, shards: dict[str, str]) -> tuple[bytes, bytes]:
    partition = OffsetPartition(server, task_key)
    value = offset_value_at(Vgtid.of("commerce", shards))
    return offset_record_key(connector, partition), value.to_bytes()


def test_analyze_offsets_topic_records() -> None:
    records = dict([
        _record("shop", "shop", None, {"-80": "MySQL56/a:1-3", "80-": "MySQL56/b:1-3"}),
        _record("shop", "shop", "task0_1_2", {"-80": "MySQL56/a:1-4", "80-": "MySQL56/b:1-4"}),
        _record("shop", "shop", "task1_2_3", {"80-": "MySQL56/b:1-9"}),
        _record("shop", "shop", "task0_2_3", {"-80": "MySQL56/a:1-9"}),
        _record("shop", "other", "task0_1_8", {"-80": "MySQL56/a:1-1"}),
        _record("other", "shop", "task0_1_7", {"-80": "MySQL56/a:1-1"}),
    ])
    a = analyze(records, "shop", "shop", "commerce")
    assert a == Adoption(generation=3, tasks=2, keys=("task0_2_3", "task1_2_3"), server_key=True,
                         shards=("-80", "80-"), chain=((3, 2), (2, 1)))
    assert (a.first_generation, a.previous_tasks, a.complete) == (4, 2, True)
    assert adoption_from_status(adoption_to_status(a)) == a
    assert analyze(records, "shop", "other", "commerce").generation == 8
    plain = {k: v for k, v in records.items() if b"task_key" not in k}
    assert analyze(plain, "shop", "shop", "commerce") == Adoption(server_key=True, shards=("-80", "80-"))
    assert analyze(plain, "shop", "shop", "elsewhere").shards == ()
    assert analyze({}, "shop", "shop", "commerce") == Adoption()
    assert not Adoption().found and adoption_from_status(None) is None


# --- workers of an unrecorded generation ------------------------------------------------------------


def test_first_generation_whose_record_was_lost_is_stopped_before_the_next_starts() -> None:
    # A reconcile created generation 0's workers, then its status write failed: the record is
    # missing, the workers run, and the offsets scan now finds their keys. Starting generation 1
    # beside them would run two generations at once.
    adopted = Adoption(generation=0, tasks=2, keys=("task0_2_0", "task1_2_0"), shards=tuple(FOUR))
    running = [TaskReport(0, 0, TaskPhase.STREAMING), TaskReport(0, 1, TaskPhase.STREAMING)]
    p = plan(spec(2), FOUR, None, running, adopted=adopted)
    assert p.action is Action.WAIT and p.generation is None and p.workers == ()
    assert p.stop == (TaskRef(0, 0), TaskRef(0, 1)) and p.remove == ()
    assert condition(p, cond.PROGRESSING).reason == "StoppingUnrecordedWorkers"
    assert not p.ready
    # Once they have exited: the next generation starts from their offsets and their objects go.
    exited = [TaskReport(0, 0, TaskPhase.EXITED), TaskReport(0, 1, TaskPhase.EXITED)]
    p = plan(spec(2), FOUR, None, exited, adopted=adopted)
    assert p.action is Action.START and p.generation is not None
    assert (p.generation.generation, p.generation.prev_task_count) == (1, 2)
    assert p.remove == (TaskRef(0, 0), TaskRef(0, 1))


def test_unrecorded_generation_of_a_scale_is_stopped_and_its_extra_task_removed() -> None:
    # Generation 1 (4 tasks) was started but not recorded; then spec.tasks became 3. Its fourth
    # task must not keep streaming beside the task that now owns its shard.
    g = start(2, FOUR)
    drained = persist(plan(spec(4), FOUR, g, streaming(g)))
    exited0 = [TaskReport(0, t, TaskPhase.EXITED) for t in range(2)]
    strangers = [TaskReport(1, t, TaskPhase.STREAMING) for t in range(4)]
    p = plan(spec(3), FOUR, drained, exited0 + strangers)
    assert p.action is Action.WAIT and p.generation == drained
    assert p.stop == tuple(TaskRef(1, t) for t in range(4))
    assert all(not w.run for w in p.workers)
    gone = [TaskReport(1, t, TaskPhase.EXITED) for t in range(4)]
    p = plan(spec(3), FOUR, drained, exited0 + gone)
    assert p.action is Action.START and p.generation is not None and p.generation.task_count == 3
    assert TaskRef(1, 3) in p.remove  # the extra task's objects go
    assert not {TaskRef(1, t) for t in range(3)} & set(p.remove)  # the new generation's names are kept


def test_unrecorded_workers_beside_a_running_generation_are_stopped() -> None:
    g = start(2, FOUR)
    p = plan(spec(2), FOUR, g, [*streaming(g), TaskReport(1, 0, TaskPhase.STREAMING)])
    assert p.action is Action.KEEP and p.stop == (TaskRef(1, 0),)
    p = plan(spec(2), FOUR, g, [*streaming(g), TaskReport(1, 0, TaskPhase.EXITED)])
    assert p.action is Action.KEEP and p.remove == (TaskRef(1, 0),) and p.stop == ()
