"""Removing an exited generation (issue 30): one ``deletecollection`` per kind by the generation's
labels when all of it goes, which is how the planner removes; one DELETE per task otherwise."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.planner import TaskRef
from cdcoperator.reconcile import whole_generations


def dep(gen: int, task: int, connector: str = "c") -> dict[str, object]:
    return {"metadata": {"name": naming.task_object_name(connector, gen, task),
                         "labels": naming.task_labels(connector, gen, task)}}


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
        for connector, gen, task in (("c", 0, 0), ("c", 0, 1), ("c", 1, 0), ("d", 0, 0)):
            obj = {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": naming.task_object_name(connector, gen, task), "namespace": "ns",
                                "labels": naming.task_labels(connector, gen, task)}, "data": {}}
            assert await cluster.apply(obj, None) == "created"
        gone = await cluster.delete_generation(CONFIG_MAPS, "ns", "c", 0)
        assert await cluster.delete_generation(DEPLOYMENTS, "ns", "c", 0) == []
        left = sorted(o["metadata"]["name"] for o in cluster.children(CONFIG_MAPS, "ns"))
        return gone, left

    gone, left = asyncio.run(scenario())
    assert gone == ["c-g0-t0", "c-g0-t1"]
    assert left == ["c-g1-t0", "d-g0-t0"]
