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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cdcoperator import naming
from cdcoperator.adoption import Adoption
from cdcoperator.apply import DEPLOYMENTS
from cdcoperator.discovery import Discovery
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import ReconcileContext, reconcile
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

    async def patch_connector_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        if self.fail and self.acted:
            raise ConnectionError("the API server went away")
        await super().patch_connector_status(namespace, name, status)


def _exited_at_the_journal(task: int) -> PodSummary:
    journal = {"journal": {"participants": list(OLD), "positions": POSITIONS}}
    return PodSummary(name=f"c-g0-t{task}-x", generation=0, task=task, phase="Running", deleting=False, ip=None,
                      port=None, ready=False, waiting_reason="CrashLoopBackOff",
                      exit_code=exitcodes.REASSIGNMENT_NEEDED, termination_message=json.dumps(journal), restarts=1)


def test_a_reshard_survives_a_failed_status_write(tmp_path: Path) -> None:
    asyncio.run(_reshard_with_a_failed_status_write(tmp_path))


async def _reshard_with_a_failed_status_write(tmp_path: Path) -> None:
    import aiohttp

    cluster = FlakyCluster(tmp_path)
    cluster.put_connector({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "c"},
        "spec": {"source": {"vitess": {"vtgate": "127.0.0.1:1", "keyspace": "ks"}},
                 "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}, "tasks": 2}})
    serving: dict[str, tuple[str, ...]] = {"now": OLD}
    pods: dict[str, list[PodSummary]] = {"now": []}

    async def discover(_cr: Any) -> Discovery:
        return Discovery(serving["now"], tuple(sorted({*OLD, *NEW})), "vtctld")

    async def scan(_cr: Any) -> Adoption:
        return Adoption()

    async with aiohttp.ClientSession() as http:
        ctx = ReconcileContext(kube=cluster, http=http, emit=lambda *a: None, pods=lambda ns, c: pods["now"],
                               discover=discover, scan_offsets=scan)
        await reconcile(ctx, "default", "c")
        assert _assignment(cluster)["generation"] == 0

        # Both workers stopped at the reshard journal; the old shards stop serving.
        serving["now"] = NEW
        pods["now"] = [_exited_at_the_journal(0), _exited_at_the_journal(1)]
        cluster.fail, cluster.acted = True, False
        with pytest.raises(ConnectionError):
            await reconcile(ctx, "default", "c")
        cluster.fail = False
        # Applied: generation 0 is drained (no replicas), so its pods and their termination
        # messages, which held the journal, are gone.
        assert _deployments(cluster) == {"c-g0-t0": 0, "c-g0-t1": 0}
        pods["now"] = []

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


def _assignment(cluster: LocalCluster) -> dict[str, Any]:
    return dict(((cluster.connector("default", "c") or {}).get("status") or {}).get("assignment") or {})


def _deployments(cluster: LocalCluster) -> dict[str, int]:
    """Worker Deployments and their replicas."""
    return {d["metadata"]["name"]: int(d["spec"]["replicas"]) for d in cluster.children(DEPLOYMENTS, "default", "c")
            if (d["metadata"].get("labels") or {}).get(naming.LABEL_GENERATION) is not None}
