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

from operator_local_fixtures import Scripted, pod, put_connector

from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import reconcile


def test_a_worker_pod_without_its_deployment_is_degraded_and_named(tmp_path: Path) -> None:
    asyncio.run(_stray(tmp_path))


async def _stray(tmp_path: Path) -> None:
    import aiohttp

    cluster = LocalCluster(tmp_path)
    put_connector(cluster)
    source = Scripted(serving=("-80", "80-"), discovered=("-80", "80-"))
    events, pods = source.events, source.pods

    async with aiohttp.ClientSession() as http:
        ctx = source.context(cluster, http)
        await reconcile(ctx, "default", "c")
        assert _degraded(cluster)["reason"] != "StrayWorkers"
        # Generation 0's pods, one of generation 7 left running without a Deployment, and one that
        # is already terminating.
        pods[:] = [pod("c-g0-t0-a", 0, 0), pod("c-g0-t1-a", 0, 1), pod("c-g7-t3-z", 7, 3),
                   pod("c-g6-t0-y", 6, 0, deleting=True)]
        await reconcile(ctx, "default", "c")
        await reconcile(ctx, "default", "c")
        d = _degraded(cluster)
        assert (d["status"], d["reason"]) == ("True", "StrayWorkers")
        assert "c-g7-t3-z (generation 7, task 3)" in d["message"] and "c-g6-t0-y" not in d["message"]
        assert [r for t, r, _ in events if t == "Warning"] == ["StrayWorkers"]  # reported once while it stands
        # Another stray appears: that set is news, reported once more.
        pods.append(pod("c-g5-t1-x", 5, 1))
        await reconcile(ctx, "default", "c")
        await reconcile(ctx, "default", "c")
        warnings = [m for t, r, m in events if t == "Warning"]
        assert len(warnings) == 2 and "c-g5-t1-x (generation 5, task 1)" in warnings[1]
        pods[:] = pods[:2]  # deleted
        await reconcile(ctx, "default", "c")
    assert _degraded(cluster)["status"] == "False"


def _degraded(cluster: LocalCluster) -> dict[str, Any]:
    conditions = ((cluster.connector("default", "c") or {}).get("status") or {}).get("conditions") or []
    return next(dict(c) for c in conditions if c["type"] == "Degraded")
