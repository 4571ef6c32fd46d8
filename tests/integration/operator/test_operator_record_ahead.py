"""A changed generation record is stored before the operator acts on it.

Acting on a plan removes what it was planned from: draining stops the workers that reported a
reshard journal (their pods, whose termination messages hold it, go away), and a new generation
removes the previous one's Deployments. When the status
write after that failed (a conflict, the API server briefly away), the next reconcile planned from
the old record without them: the journal was gone, the old shards no longer served, and the
connector waited for a journal that would never be reported again, beside a generation it no longer
knew. Here the reconcile runs against the local-mode cluster (the same ``ClusterApi`` as
Kubernetes) with the status write after applying made to fail once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from operator_local_fixtures import Scripted, pod, put_connector

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import reconcile
from cdcoperator.taskstatus import PodSummary
from cdcworker import exitcodes

OLD = ("-80", "80-")
NEW = ("-40", "40-80", "80-c0", "c0-")
POSITIONS = {s: f"MySQL56/{i:08d}-1111-2222-3333-444455556666:1-{10 + i}" for i, s in enumerate(NEW)}


class FlakyCluster(LocalCluster):
    """While ``fail`` is set, a status write made after the operator acted (applied or deleted a
    child object) fails."""

    fail = False
    acted = False

    async def apply(self, obj: Mapping[str, Any], live: Mapping[str, Any] | None) -> str:
        self.acted = True
        return await super().apply(obj, live)

    async def delete(self, kind: Any, namespace: str, name: str) -> bool:
        self.acted = True
        return await super().delete(kind, namespace, name)

    async def delete_generation(self, kind: Any, namespace: str, connector: str, generation: int,
                                tasks: Sequence[int] = ()) -> list[str]:
        self.acted = True
        return await super().delete_generation(kind, namespace, connector, generation, tasks)

    async def patch_connector_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        if self.fail and self.acted:
            raise ConnectionError("the API server went away")
        await super().patch_connector_status(namespace, name, status)


def _exited_at_the_journal(task: int) -> PodSummary:
    journal = {"journal": {"participants": list(OLD), "positions": POSITIONS}}
    return pod(f"c-g0-t{task}-x", 0, task, waiting_reason="CrashLoopBackOff", exit_code=exitcodes.REASSIGNMENT_NEEDED,
               termination_message=json.dumps(journal), restarts=1)


def test_a_reshard_survives_a_failed_status_write(tmp_path: Path) -> None:
    asyncio.run(_reshard_with_a_failed_status_write(tmp_path))


async def _reshard_with_a_failed_status_write(tmp_path: Path) -> None:
    import aiohttp

    cluster = FlakyCluster(tmp_path)
    put_connector(cluster)
    source = Scripted(serving=OLD, discovered=tuple(sorted({*OLD, *NEW})))

    async with aiohttp.ClientSession() as http:
        ctx = source.context(cluster, http)
        await reconcile(ctx, "default", "c")
        assert _assignment(cluster)["generation"] == 0

        # Both workers stopped at the reshard journal; the old shards stop serving.
        source.serving = NEW
        source.pods = [_exited_at_the_journal(0), _exited_at_the_journal(1)]
        cluster.fail, cluster.acted = True, False
        with pytest.raises(ConnectionError):
            await reconcile(ctx, "default", "c")
        cluster.fail = False
        # Applied: generation 0 is drained (no replicas), so its pods and their termination
        # messages, which held the journal, are gone.
        assert _deployments(cluster) == {"c-g0-t0": 0, "c-g0-t1": 0}
        source.pods = []

        # Generation 1 starts; its status write after acting fails too. The record written ahead
        # replaced the draining one whole: no stale ``pending`` (with its journals) beside it.
        cluster.fail, cluster.acted = True, False
        with pytest.raises(ConnectionError):
            await reconcile(ctx, "default", "c")
        cluster.fail = False
        ahead = _assignment(cluster)
        assert (ahead["generation"], ahead["phase"], "pending" in ahead) == (1, "Running", False)
        assert [t.get("phase") for t in ahead["taskStates"]] == [None, None]  # runtime fields come with the full write

        await reconcile(ctx, "default", "c")
    a = _assignment(cluster)
    assert (a["generation"], a["previousTasks"], a["shards"]) == (1, 2, list(NEW))
    assert a["journalPositions"] == [{"shard": s, "gtid": POSITIONS[s]} for s in NEW]
    assert a["phase"] == "Running" and "pending" not in a
    assert [t["phase"] for t in a["taskStates"]] == ["Pending", "Pending"]  # the full write, diffed after the record
    assert _deployments(cluster) == {"c-g1-t0": 1, "c-g1-t1": 1}
    # Generation 0's objects went with it (one deletecollection per kind), its ConfigMap included.
    assert sorted(c["metadata"]["name"] for c in cluster.children(CONFIG_MAPS, "default", "c")) == ["c-g1-workers"]
    # The pod index was told what each plan runs: both workers, none (the drain), then the new two.
    assert source.expected == [(0, 2), (0, 0), (1, 2), (1, 2)]


def _assignment(cluster: LocalCluster) -> dict[str, Any]:
    return dict(((cluster.connector("default", "c") or {}).get("status") or {}).get("assignment") or {})


def _deployments(cluster: LocalCluster) -> dict[str, int]:
    """Worker Deployments and their replicas."""
    return {d["metadata"]["name"]: int(d["spec"]["replicas"]) for d in cluster.children(DEPLOYMENTS, "default", "c")
            if (d["metadata"].get("labels") or {}).get(naming.LABEL_GENERATION) is not None}
