"""A worker pod running without its task's Deployment is reported, not ignored.

The operator sees workers through their Deployments. A pod left running without one (its
Deployment deleted with ``--cascade=orphan``, a pod copied by hand) streams its shards under an old
task key beside the current workers, and nothing said so. The reconcile runs against the local-mode
cluster (the same ``ClusterApi`` as Kubernetes) with scripted pods.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cdcoperator.adoption import Adoption
from cdcoperator.discovery import Discovery
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import ReconcileContext, reconcile
from cdcoperator.taskstatus import PodSummary


def _pod(name: str, generation: int, task: int, phase: str = "Running", deleting: bool = False) -> PodSummary:
    return PodSummary(name=name, generation=generation, task=task, phase=phase, deleting=deleting, ip=None,
                      port=None, ready=False, waiting_reason=None, exit_code=None, termination_message="", restarts=0)


def test_a_worker_pod_without_its_deployment_is_degraded_and_named(tmp_path: Path) -> None:
    asyncio.run(_stray(tmp_path))


async def _stray(tmp_path: Path) -> None:
    import aiohttp

    cluster = LocalCluster(tmp_path)
    cluster.put_connector({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "c"},
        "spec": {"source": {"vitess": {"vtgate": "127.0.0.1:1", "keyspace": "ks"}},
                 "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}, "tasks": 2}})
    pods: list[PodSummary] = []
    events: list[tuple[str, str, str]] = []

    async def discover(_cr: Any) -> Discovery:
        return Discovery(("-80", "80-"), ("-80", "80-"), "vtctld")

    async def scan(_cr: Any) -> Adoption:
        return Adoption()

    async with aiohttp.ClientSession() as http:
        ctx = ReconcileContext(kube=cluster, http=http, emit=lambda _b, t, r, m: events.append((t, r, m)),
                               pods=lambda ns, c: pods, discover=discover, scan_offsets=scan)
        await reconcile(ctx, "default", "c")
        assert _degraded(cluster)["reason"] != "StrayWorkers"
        # Generation 0's pods, one of generation 7 left running without a Deployment, and one that
        # is already terminating.
        pods[:] = [_pod("c-g0-t0-a", 0, 0), _pod("c-g0-t1-a", 0, 1), _pod("c-g7-t3-z", 7, 3),
                   _pod("c-g6-t0-y", 6, 0, deleting=True)]
        await reconcile(ctx, "default", "c")
        await reconcile(ctx, "default", "c")
        d = _degraded(cluster)
        assert (d["status"], d["reason"]) == ("True", "StrayWorkers")
        assert "c-g7-t3-z (generation 7, task 3)" in d["message"] and "c-g6-t0-y" not in d["message"]
        assert [r for t, r, _ in events if t == "Warning"] == ["StrayWorkers"]  # reported once while it stands
        pods[:] = pods[:2]  # deleted
        await reconcile(ctx, "default", "c")
    assert _degraded(cluster)["status"] == "False"


def _degraded(cluster: LocalCluster) -> dict[str, Any]:
    conditions = ((cluster.connector("default", "c") or {}).get("status") or {}).get("conditions") or []
    return next(dict(c) for c in conditions if c["type"] == "Degraded")
