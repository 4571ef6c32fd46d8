"""Applying children: what the operator no longer wants is removed, what others added is kept.

A JSON merge patch only removes map keys it nulls; ``prepare_apply`` nulls the keys the previous
apply recorded (``shardcdc.io/applied-keys``) and the spec dropped since. Proved against a real
kube-apiserver (KubeApi) and the local-mode cluster (LocalCluster), with the same steps.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cdcoperator.apply import (
    API_CONCURRENCY_ENV,
    APPLIED_KEYS_ANNOTATION,
    DEFAULT_API_CONCURRENCY,
    DEPLOYMENTS,
    ClusterApi,
    KubeApi,
    api_concurrency,
    prepare_apply,
)
from cdcoperator.local.cluster import LocalCluster
from kubetest import KubeControlPlane, kube_control_plane_fixture

NS = "applying"
RESTART = "shardcdc.io/restartedAt"


def deployment(labels: dict[str, str], node_selector: dict[str, str] | None, env: list[dict[str, str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "worker", "image": "shardcdc:1", "env": env}]}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "c-g0-t0", "namespace": NS, "labels": {"shardcdc.io/connector": "c"},
                     "annotations": {"team": "data"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}},
                 "template": {"metadata": {"labels": {"app": "w", **labels}}, "spec": spec}},
    }


def test_prepare_apply_nulls_only_dropped_keys_we_applied() -> None:
    first = deployment({"team": "a", "tier": "x"}, {"disk": "ssd"}, [{"name": "A", "value": "1"}])
    desired, patch, _ = prepare_apply(first, None)
    live = copy.deepcopy(desired)
    live["spec"]["template"]["metadata"]["annotations"] = {RESTART: "t"}  # added by someone else
    second = deployment({"team": "a"}, None, [])
    _, patch, _ = prepare_apply(second, live)
    template = patch["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "w", "team": "a", "tier": None}
    assert template["spec"]["nodeSelector"] is None
    assert template["spec"]["containers"][0]["env"] == []  # lists are replaced wholesale anyway
    assert "annotations" not in template["metadata"]  # never applied by us: left alone
    assert patch["metadata"]["annotations"]["team"] == "data"
    assert json.loads(patch["metadata"]["annotations"][APPLIED_KEYS_ANNOTATION])["spec"]["template"]["metadata"] == \
        {"labels": {"app": 0, "team": 0}}
    # A live object without (or with a garbled) record: no removals, as a plain merge patch.
    for garbled in (None, "not json", "[1]"):
        old = copy.deepcopy(live)
        old["metadata"]["annotations"][APPLIED_KEYS_ANNOTATION] = garbled
        _, patch, _ = prepare_apply(second, old)
        assert patch["spec"]["template"]["metadata"]["labels"] == {"app": "w", "team": "a"}


async def _steps(api: ClusterApi, get: Any) -> None:
    assert await api.apply(deployment({"team": "a", "tier": "x"}, {"disk": "ssd"}, [{"name": "A", "value": "1"}]),
                           None) == "created"
    await api.annotate_pod_template(NS, "c-g0-t0", RESTART, "t1")
    live = await get()
    assert await api.apply(deployment({"team": "b"}, None, []), live) == "patched"
    live = await get()
    template = live["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "w", "team": "b"}
    assert "nodeSelector" not in template["spec"]
    assert template["metadata"]["annotations"] == {RESTART: "t1"}  # the restart stamp stays
    assert await api.apply(deployment({"team": "b"}, None, []), live) == "unchanged"
    assert await api.apply(deployment({"team": "b"}, {"zone": "z1"}, []), live) == "patched"
    assert (await get())["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "z1"}
    # A worker stopped with set_replicas (an unrecorded generation) or scaled by hand, then wanted
    # again unchanged: the hash still matches, the replica count does not; before, it stayed at 0.
    await api.set_replicas(NS, "c-g0-t0", 0)
    assert await api.apply(deployment({"team": "b"}, {"zone": "z1"}, []), await get()) == "patched"
    live = await get()
    assert live["spec"]["replicas"] == 1
    assert await api.apply(deployment({"team": "b"}, {"zone": "z1"}, []), live) == "unchanged"


def test_local_cluster_removes_dropped_keys(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)

    async def get() -> dict[str, Any]:
        (dep,) = await cluster.list_children(DEPLOYMENTS, NS, "c")
        return dep

    asyncio.run(_steps(cluster, get))


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        p.kubectl("create", "namespace", NS, check=True)
        yield p


def test_api_server_removes_dropped_keys(plane: KubeControlPlane) -> None:
    with plane.api_client() as client:
        kube = KubeApi(client)

        async def get() -> dict[str, Any]:
            out = await kube.call("GET", DEPLOYMENTS.path(NS, "c-g0-t0"))
            assert out is not None
            return out

        asyncio.run(_steps(kube, get))


class _BarrierApi:
    """A stand-in for the kubernetes ApiClient whose calls meet at a barrier of ``width``: they
    return only when ``width`` of them are in flight at once (BrokenBarrierError otherwise)."""

    def __init__(self, width: int) -> None:
        self.barrier = threading.Barrier(width, timeout=30)
        self.lock = threading.Lock()
        self.in_flight = self.most = self.calls = 0

    def param_serialize(self, method: str, path: str, **_: Any) -> tuple[Any, ...]:
        return method, path, {}, None, None

    def call_api(self, *_: Any, **__: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            self.most = max(self.most, self.in_flight)
        self.barrier.wait()
        with self.lock:
            self.in_flight -= 1
        return SimpleNamespace(status=200, read=lambda: b"{}")

    def close(self) -> None:
        pass


def test_kube_api_runs_calls_concurrently_up_to_its_bound() -> None:
    """A generation's objects are applied concurrently, ``concurrency`` calls at a time (issue 30):
    20 calls through a bound of 4 meet 4 at a time at the barrier, and never 5 are in flight."""
    fake = _BarrierApi(4)
    kube = KubeApi(cast(Any, fake), concurrency=4)

    async def many() -> list[Any]:
        return await asyncio.gather(*(kube.call("GET", f"/api/v1/x{i}") for i in range(20)))

    try:
        assert asyncio.run(many()) == [{}] * 20
    finally:
        kube.close()
    assert (fake.calls, fake.most) == (20, 4)


def test_api_concurrency_setting() -> None:
    assert api_concurrency({}) == DEFAULT_API_CONCURRENCY
    assert api_concurrency({API_CONCURRENCY_ENV: "64"}) == 64
    for bad in ("0", "many", "-3", "1000"):
        with pytest.raises(ValueError, match=f"{API_CONCURRENCY_ENV}='{bad}': must be a whole number from 1 to 256"):
            api_concurrency({API_CONCURRENCY_ENV: bad})
