"""The next generation's ConfigMap is written while the current one drains (issue 30: half of a
start's creations off the path from scale to Ready); nothing of that generation runs before every
worker of the drained one has exited (no Deployment exists), the start does not write them again,
and a drain whose change is undone before the start leaves none behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

from operator_local_fixtures import names, put_connector, two_tasks_running

from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS
from cdcoperator.reconcile import reconcile

FOUR = ("-40", "40-80", "80-c0", "c0-")


def test_config_maps_ahead_of_the_start_and_gone_when_the_change_is_undone(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path: Path) -> None:
    async with two_tasks_running(tmp_path, FOUR) as (cluster, source, ctx):
        # Scale 2 -> 4: the drain stops generation 0 (its Deployments deleted in one call, its
        # workers still exiting) and writes generation 1's configuration only.
        put_connector(cluster, tasks=4)
        await reconcile(ctx, "default", "c")
        assert names(cluster, DEPLOYMENTS) == []
        assert names(cluster, CONFIG_MAPS) == ["c-g0-workers", "c-g1-workers"]
        assert ("created ConfigMap ahead of generation 1's start: c-g1-workers"
                in [m for _, _, m in source.events]), source.events
        # Undone before the workers exited (scaled back to 2): the drain ends, generation 0 runs on
        # (its Deployments again), and the ConfigMap written ahead is deleted.
        put_connector(cluster, tasks=2)
        await reconcile(ctx, "default", "c")
        assert names(cluster, CONFIG_MAPS) == ["c-g0-workers"]
        assert names(cluster, DEPLOYMENTS) == ["c-g0-t0", "c-g0-t1"]
        # Scaled again, and this time the drain completes: the start creates the Deployments and
        # finds the ConfigMap as written ahead (no ConfigMap write at the start).
        put_connector(cluster, tasks=4)
        await reconcile(ctx, "default", "c")
        ahead = {c["metadata"]["name"]: c for c in cluster.children(CONFIG_MAPS, "default", "c")}
        source.pods[:] = []
        source.events.clear()
        await reconcile(ctx, "default", "c")
        assert names(cluster, DEPLOYMENTS) == [f"c-g1-t{i}" for i in range(4)]
        assert not any("ConfigMap" in m and "created" in m for _, _, m in source.events), source.events
        # Generation 0's ConfigMap goes in the next reconcile, not in the start's.
        assert names(cluster, CONFIG_MAPS) == ["c-g0-workers", "c-g1-workers"]
        await reconcile(ctx, "default", "c")
        after = {c["metadata"]["name"]: c for c in cluster.children(CONFIG_MAPS, "default", "c")}
        assert after == {k: v for k, v in ahead.items() if "-g1-" in k}
        # Each worker's pod has its own identity over the shared file.
        shards = {d["metadata"]["name"]: {e["name"]: e.get("value") for e in
                                          d["spec"]["template"]["spec"]["containers"][0]["env"]}
                  ["SHARDCDC_SHARDCDC_TASK_SHARDS"] for d in cluster.children(DEPLOYMENTS, "default", "c")}
        assert shards == {f"c-g1-t{i}": shard for i, shard in enumerate(FOUR)}
