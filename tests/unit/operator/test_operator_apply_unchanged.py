"""KubeApi.apply: an object already applied (same hash, same replicas) costs no API call and no patch
built; a changed one is patched with the merge patch (one whose replicas alone changed, with those
alone); a missing one is created."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from cdcoperator import apply as applymod
from cdcoperator.apply import APPLIED_HASH_ANNOTATION, KubeApi, prepare_apply


class RecordingApi(KubeApi):
    """KubeApi whose calls are recorded instead of sent (POST answers with the object)."""

    def __init__(self) -> None:
        super().__init__(cast(Any, None), concurrency=1)  # no client: call() is replaced
        self.calls: list[tuple[str, str, Any]] = []

    async def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any] | None:
        self.calls.append((method, path, body))
        return dict(body) if method == "POST" else {}


def deployment(replicas: int, image: str = "worker:1") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c-g0-t0", "namespace": "ns",
                                                                      "labels": {"app": "w"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "w", "image": image}]}}}}


def live_of(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds after our create of ``obj``."""
    desired, _patch, _digest = prepare_apply(obj, None)
    return desired


def test_an_applied_object_is_unchanged_without_building_a_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    api = RecordingApi()
    live = live_of(deployment(1))

    def no_patch(*_: Any) -> Any:
        raise AssertionError("prepare_apply ran for an object already applied")

    monkeypatch.setattr(applymod, "prepare_apply", no_patch)
    assert asyncio.run(api.apply(deployment(1), live)) == "unchanged"
    assert api.calls == []


def test_a_changed_or_rescaled_object_is_patched_and_a_missing_one_created() -> None:
    api = RecordingApi()
    live = live_of(deployment(1))
    assert asyncio.run(api.apply(deployment(1, image="worker:2"), live)) == "patched"
    method, path, patch = api.calls[-1]
    assert (method, path) == ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/c-g0-t0")
    assert patch["spec"]["template"]["spec"]["containers"][0]["image"] == "worker:2"
    assert patch["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] != live["metadata"]["annotations"][
        APPLIED_HASH_ANNOTATION]
    # Same hash, but a `kubectl scale`/stop changed the replicas: brought back.
    # Only the replica count is sent then: the rest is as applied (a drain stops a whole generation).
    stopped = {**live, "spec": {**live["spec"], "replicas": 0}}
    assert asyncio.run(api.apply(deployment(1), stopped)) == "patched"
    digest = live["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
    assert api.calls[-1][2] == {"metadata": {"annotations": {APPLIED_HASH_ANNOTATION: digest}}, "spec": {"replicas": 1}}
    stop = prepare_apply(deployment(0), None)[2]  # the hash a full apply of the stopped object records
    assert asyncio.run(api.apply(deployment(0), live)) == "patched"
    assert api.calls[-1] == ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/c-g0-t0",
                             {"metadata": {"annotations": {APPLIED_HASH_ANNOTATION: stop}}, "spec": {"replicas": 0}})
    # Stopped that way, it is applied: nothing sent again.
    stopped_live = {**live, "metadata": {**live["metadata"], "annotations": {
        **live["metadata"]["annotations"], APPLIED_HASH_ANNOTATION: stop}}, "spec": {**live["spec"], "replicas": 0}}
    calls = len(api.calls)
    assert asyncio.run(api.apply(deployment(0), stopped_live)) == "unchanged" and len(api.calls) == calls
    assert asyncio.run(api.apply(deployment(1), None)) == "created"
    assert api.calls[-1][:2] == ("POST", "/apis/apps/v1/namespaces/ns/deployments")
    api.pool.shutdown()
