"""The operator's own pod index (``cdcoperator.podwatch``, issue 30: kopf's per-event handler
machinery cost 37 % of its CPU at 1,024 shards): what the watch thread hands over is indexed, and
exactly the events that complete a drain or a start kick a reconcile, also after a re-list."""

from __future__ import annotations

import asyncio
from typing import Any

from cdcoperator.podwatch import _NamespaceWatch
from cdcoperator.reconcile import change_message
from cdcoperator.taskstatus import PodSummary


def pod(gen: int, task: int, *, up: bool = True, connector: str = "c") -> PodSummary:
    return PodSummary(name=f"{connector}-g{gen}-t{task}-x", generation=gen, task=task,
                      phase="Running" if up else "Pending", deleting=False, ip="10.0.0.1", port=8080, ready=up,
                      waiting_reason=None, exit_code=None, termination_message="", restarts=0)


async def _scenario() -> list[list[tuple[str, str]]]:
    kicks: list[tuple[str, str]] = []
    watch = _NamespaceWatch(Any, "ns", asyncio.get_running_loop(), lambda ns, c: kicks.append((ns, c)))
    rounds: list[list[tuple[str, str]]] = []

    async def hand_over(*events: tuple[str | None, str, PodSummary | None]) -> None:
        for event in events:
            watch._put(*event)  # as the thread does: the loop drains them in one batch
        await asyncio.sleep(0)  # the drain scheduled with call_soon_threadsafe runs
        rounds.append(kicks[:])
        kicks.clear()

    # The first list: indexed, nothing kicked (no transition was seen happen), pods() answers.
    await hand_over((None, "", None), ("ADDED", "c", pod(0, 0)), ("ADDED", "c", pod(0, 1)),
                    ("ADDED", "d", pod(3, 0, connector="d")), ("SYNCED", "", None))
    assert watch.listed.is_set()
    assert sorted(p.name for p in watch.index.pods("c")) == ["c-g0-t0-x", "c-g0-t1-x"]
    # A drain: the first pod gone is not the last; the second is (one kick, for its connector only).
    await hand_over(("DELETED", "c", pod(0, 0)))
    await hand_over(("DELETED", "c", pod(0, 1)), ("MODIFIED", "d", pod(3, 0, connector="d")))
    # The next generation: pending pods, then ready one by one; the last one ready kicks.
    await hand_over(("ADDED", "c", pod(1, 0, up=False)), ("ADDED", "c", pod(1, 1, up=False)),
                    ("MODIFIED", "c", pod(1, 0)))
    await hand_over(("MODIFIED", "c", pod(1, 1)))
    # A re-list after a gap: a connector whose pods changed meanwhile is kicked; an unchanged one is not.
    await hand_over((None, "", None), ("ADDED", "c", pod(1, 0)), ("ADDED", "d", pod(3, 0, connector="d")),
                    ("SYNCED", "", None))
    assert [p.name for p in watch.index.pods("c")] == ["c-g1-t0-x"]
    return rounds


def test_the_index_kicks_exactly_the_transitions() -> None:
    rounds = asyncio.run(_scenario())
    assert rounds == [[], [], [("ns", "c")], [], [("ns", "c")], [("ns", "c")]]


async def _creation_one_by_one() -> list[tuple[str, str]]:
    kicks: list[tuple[str, str]] = []
    watch = _NamespaceWatch(Any, "ns", asyncio.get_running_loop(), lambda ns, c: kicks.append((ns, c)))
    watch._put(None, "", None)
    watch._put("SYNCED", "", None)
    watch.index.expect("c", 1, 3)  # the plan that started generation 1 runs three workers
    for task in range(3):
        watch._put("ADDED", "c", pod(1, task, up=False))
        await asyncio.sleep(0)
        assert kicks == []  # created, not up
        watch._put("MODIFIED", "c", pod(1, task))
        await asyncio.sleep(0)
        assert kicks == ([("ns", "c")] if task == 2 else []), task
    # Another connector (no expectation told): as before, every pod of its generation up kicks.
    watch._put("MODIFIED", "d", pod(0, 0, connector="d"))
    await asyncio.sleep(0)
    return kicks


def test_the_plans_count_holds_the_kick_until_the_last_pod_is_up() -> None:
    assert asyncio.run(_creation_one_by_one()) == [("ns", "c"), ("ns", "d")]


def test_change_events_name_their_objects_in_task_order_and_count_the_rest() -> None:
    assert change_message("created Deployment", ["c-g1-t1", "c-g1-t0"]) == "created Deployment: c-g1-t0, c-g1-t1"
    many = change_message("created ConfigMap", [f"c-g1-t{i}" for i in range(12, -1, -1)])
    assert many == ("created ConfigMap: c-g1-t0, c-g1-t1, c-g1-t2, c-g1-t3, c-g1-t4, c-g1-t5, c-g1-t6, c-g1-t7, "
                    "c-g1-t8, c-g1-t9 and 3 more (13)")
