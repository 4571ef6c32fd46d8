"""Removing an exited generation (issue 30): one ``deletecollection`` per kind by the generation's
labels when all of it goes, which is how the planner removes; one DELETE per task otherwise. A
drain that stops every worker deletes the generation's Deployments at once (``Plan.drain_whole``):
its workers still running are its tasks, not strays, and its ConfigMap goes once they have exited."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS, split_evenly
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.planner import Action, Generation, GenPhase, Plan, TaskRef
from cdcoperator.reconcile import configs_behind, draining_generation, observed_tasks, whole_generations
from cdcoperator.taskstatus import PodSummary


def dep(gen: int, task: int, connector: str = "c") -> dict[str, object]:
    return {"metadata": {"name": naming.task_object_name(connector, gen, task),
                         "labels": naming.task_labels(connector, gen, task)}}


def cm(gen: int, connector: str = "c") -> dict[str, object]:
    """A generation's ConfigMap (no task label)."""
    return {"metadata": {"name": naming.generation_config_name(connector, gen),
                         "labels": naming.generation_object_labels(connector, gen)}}


def test_a_generation_goes_whole_only_when_every_task_of_it_is_removed() -> None:
    deployments = [dep(0, 0), dep(0, 1), dep(1, 0), dep(1, 1), dep(2, 0)]
    remove = [TaskRef(1, 1), TaskRef(0, 1), TaskRef(0, 0), TaskRef(1, 0)]
    assert whole_generations(remove, deployments) == ([0, 1], [])
    # Generation 1's task 1 stays: its other task goes alone; generation 0 still goes whole.
    assert whole_generations([TaskRef(0, 0), TaskRef(0, 1), TaskRef(1, 0)], deployments) == ([0], [TaskRef(1, 0)])
    # A task without a Deployment (its ConfigMap left) is part of its generation's removal.
    assert whole_generations([TaskRef(3, 0)], deployments) == ([3], [])
    assert whole_generations([], deployments) == ([], [])


def test_local_mode_deletes_exactly_the_generations_objects(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        cluster = LocalCluster(tmp_path)
        # Generations' ConfigMaps, and one a task had of its own before they were shared (an
        # operator upgrade leaves it): the generation's labels select both.
        for connector, gen in (("c", 0), ("c", 1), ("d", 0)):
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "data": {},
                   "metadata": {**cm(gen, connector)["metadata"], "namespace": "ns"}}  # type: ignore[dict-item]
            assert await cluster.apply(obj, None) == "created"
        legacy = {"apiVersion": "v1", "kind": "ConfigMap", "data": {},
                  "metadata": {"name": naming.task_object_name("c", 0, 1), "namespace": "ns",
                               "labels": naming.task_labels("c", 0, 1)}}
        assert await cluster.apply(legacy, None) == "created"
        gone = await cluster.delete_generation(CONFIG_MAPS, "ns", "c", 0)
        assert await cluster.delete_generation(DEPLOYMENTS, "ns", "c", 0) == []
        left = sorted(o["metadata"]["name"] for o in cluster.children(CONFIG_MAPS, "ns"))
        return gone, left

    gone, left = asyncio.run(scenario())
    assert gone == ["c-g0-t1", "c-g0-workers"]
    assert left == ["c-g1-workers", "d-g0-workers"]


def pod(gen: int, task: int) -> PodSummary:
    return PodSummary(name=f"c-g{gen}-t{task}-x", generation=gen, task=task, phase="Running", deleting=False,
                      ip="10.0.0.1", port=8083, ready=True, waiting_reason=None, exit_code=None,
                      termination_message="", restarts=0)


def test_a_drained_generations_workers_are_reported_after_its_deployments_went() -> None:
    draining = Generation(1, 2, 1, (("-80",), ("80-",)), phase=GenPhase.DRAINING)
    assert draining_generation(draining) == 1
    assert draining_generation(Generation(1, 2, 1, (("-80",), ("80-",)))) is None
    # Paused or stopped during a drain: the workers still exiting keep the stop from being clean.
    assert draining_generation(Generation(1, 2, 1, (("-80",), ("80-",)), phase=GenPhase.STOPPED)) == 1
    pods = [pod(1, 0), pod(1, 1), pod(0, 0)]
    # Deployments gone: generation 1's pods are its tasks (replicas 0: stopping); generation 0's
    # pod has no Deployment and is not draining, so it stays a stray for the caller to report.
    assert observed_tasks([dep(2, 0) | {"spec": {"replicas": 1}}], pods, 1) == [(1, 0, 0), (1, 1, 0), (2, 0, 1)]
    assert observed_tasks([], pods, None) == []
    # A Deployment still there keeps its own replica count.
    assert observed_tasks([dep(1, 0) | {"spec": {"replicas": 1}}], pods, 1) == [(1, 0, 1), (1, 1, 0)]


def test_configmaps_of_a_generation_drained_whole_go_once_the_next_one_starts() -> None:
    start = Plan(action=Action.START, generation=Generation(2, 1, 2, (("-",),)))
    config_maps = [cm(0), cm(1), cm(2), cm(3)]
    # Generation 1 has ConfigMaps and no Deployment: drained whole, exited. Generation 0 is being
    # removed whole already; generation 3 (newer) is configs_ahead's business.
    assert configs_behind(start, [dep(2, 0)], config_maps, removed=[0]) == [1]
    assert configs_behind(start, [dep(1, 1), dep(2, 0)], config_maps, removed=[]) == [0]
    assert configs_behind(Plan(action=Action.KEEP, generation=None), [], config_maps, removed=[]) == []


def test_a_generations_deletion_is_split_evenly_over_concurrent_calls() -> None:
    assert split_evenly([], 8) == []
    assert split_evenly([0, 1, 2], 8) == [[0, 1, 2]]  # fewer than 16 tasks: one call
    runs = split_evenly(list(range(1024)), 8)
    assert [len(r) for r in runs] == [128] * 8 and [t for r in runs for t in r] == list(range(1024))
    runs = split_evenly(list(range(50)), 8)
    assert [len(r) for r in runs] == [16, 17, 17] and [t for r in runs for t in r] == list(range(50))
