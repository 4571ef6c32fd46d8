"""A drain that stops every worker deletes the generation's Deployments in one call (issue 30):
its pods still exiting remain its tasks (not strays, never restarted), nothing of it is created
again while it drains, and a stop during the drain is clean only once they have exited."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from operator_local_fixtures import names, put_connector, two_tasks_running

from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import reconcile

FOUR = ("-40", "40-80", "80-c0", "c0-")


def _status(cluster: LocalCluster) -> dict[str, Any]:
    return (cluster.connector("default", "c") or {}).get("status") or {}


def test_a_stop_during_a_whole_drain_is_clean_only_once_its_workers_exited(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path: Path) -> None:
    async with two_tasks_running(tmp_path, FOUR) as (cluster, source, ctx):
        put_connector(cluster, tasks=4)
        await reconcile(ctx, "default", "c")
        assert names(cluster, DEPLOYMENTS) == []  # deleted whole; the ConfigMap stays
        assert names(cluster, CONFIG_MAPS) == ["c-g0-workers", "c-g1-workers"]
        assert [m for _, r, m in source.events if r == "StoppedWorker"] == [
            "deleted the Deployments of generation 0 to drain it (its ConfigMap stays until every worker has "
            "exited): c-g0-t0, c-g0-t1"]
        # The workers are still exiting: the drain goes on, they are its tasks, not strays, and
        # nothing of generation 0 or 1 is created meanwhile.
        await reconcile(ctx, "default", "c")
        status = _status(cluster)
        assert status["assignment"]["phase"] == "Draining"
        assert not any(c["type"] == "Degraded" and c["status"] == "True" for c in status["conditions"]), status
        assert names(cluster, DEPLOYMENTS) == []
        # Stopped meanwhile: not clean while a worker of the drained generation is left.
        body = cluster.connector("default", "c") or {}
        cluster.put_connector({**body, "spec": {**body["spec"], "state": "stopped"}})
        await reconcile(ctx, "default", "c")
        assert _status(cluster)["assignment"]["phase"] == "Stopped"
        assert _status(cluster)["assignment"]["stoppedCleanly"] is False
        source.pods[:] = [source.pods[1]]
        await reconcile(ctx, "default", "c")
        assert _status(cluster)["assignment"]["stoppedCleanly"] is False
        source.pods[:] = []
        await reconcile(ctx, "default", "c")
        assert _status(cluster)["assignment"]["stoppedCleanly"] is True
        assert names(cluster, DEPLOYMENTS) == []  # stopped: nothing runs
