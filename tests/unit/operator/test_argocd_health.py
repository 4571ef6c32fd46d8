"""The ArgoCD health check of CdcConnector (deploy/argocd/health.lua) under a real Lua 5.1 interpreter.

ArgoCD runs health scripts with gopher-lua (Lua 5.1) and only the base, table, string and math
libraries; ``lupa.lua51`` embeds the reference Lua 5.1, and the test removes the other libraries so
a script that needs them fails here too. Cases use ArgoCD's own ``health_test.yaml`` format
(``tests/fixtures/argocd``), and a second set feeds the status the operator's planner really writes
for a scale, a reshard, a pause and a failure, so the script follows the operator's reasons.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lupa.lua51 as lua51  # a pinned dev dependency: a missing interpreter must fail the suite, not skip it
import pytest
import yaml

from cdcoperator.discovery import Discovery
from cdcoperator.model import ConnectorResource
from cdcoperator.planner import Generation, TaskPhase, TaskReport, generation_from_status, plan
from cdcoperator.reconcile import build_status

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = (ROOT / "deploy" / "argocd" / "health.lua").read_text()
FIXTURES = ROOT / "tests" / "fixtures" / "argocd"
CASES = yaml.safe_load((FIXTURES / "health_test.yaml").read_text())["tests"]
# What gopher-lua in ArgoCD does not open (it has base, table, string, math).
UNAVAILABLE = ("io", "os", "require", "dofile", "loadfile", "package", "debug", "module")


def _to_lua(lua: Any, value: Any) -> Any:
    """JSON-like Python data as ArgoCD hands it to Lua: objects and arrays as tables (arrays from 1)."""
    if isinstance(value, Mapping):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")  # YAML timestamps: ArgoCD sees the JSON string
    return value


def health(obj: Mapping[str, Any]) -> dict[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    assert lua.eval("_VERSION") == "Lua 5.1"
    g = lua.globals()
    for name in UNAVAILABLE:
        g[name] = None
    g.obj = _to_lua(lua, obj)
    result = lua.execute(SCRIPT)
    assert result is not None, "the script returned nothing"
    out = dict(result)
    assert set(out) <= {"status", "message"}, out
    assert out["status"] in ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")
    return {"status": str(out["status"]), "message": str(out.get("message", ""))}


@pytest.mark.parametrize("case", CASES, ids=[Path(c["inputPath"]).stem for c in CASES])
def test_fixture(case: Mapping[str, Any]) -> None:
    obj = yaml.safe_load((FIXTURES / case["inputPath"]).read_text())
    assert health(obj) == case["healthStatus"]


def test_every_fixture_is_listed() -> None:
    listed = {c["inputPath"] for c in CASES}
    assert listed == {f"testdata/{p.name}" for p in (FIXTURES / "testdata").glob("*.yaml")}
    assert {c["healthStatus"]["status"] for c in CASES} == {"Healthy", "Progressing", "Degraded", "Suspended"}


def test_argocd_cm_embeds_the_same_script() -> None:
    cm = yaml.safe_load((ROOT / "deploy" / "argocd" / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"]["resource.customizations.health.shardcdc.io_CdcConnector"] == SCRIPT


# --- the status the operator really writes ------------------------------------------------------------

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FOUR = ("-40", "40-80", "80-c0", "c0-")


def _body(tasks: int, state: str = "running", generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u", "generation": generation},
        "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "orders"}},
                 "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "orders"},
                 "tasks": tasks, "state": state},
    }


def _reconcile(body: dict[str, Any], serving: tuple[str, ...], reports: list[TaskReport]) -> dict[str, Any]:
    """One pure reconcile: plan, then the status the operator would write; the body gets it back."""
    cr = ConnectorResource.from_body(body)
    existing = body.get("status") or {}
    current = generation_from_status(existing.get("assignment"))
    p = plan(cr.spec, serving, current, reports)
    body["status"] = build_status(cr, existing, p, Discovery(serving, serving, "vtgate"), reports, NOW)
    return body


def _streaming(g: Generation | dict[str, Any]) -> list[TaskReport]:
    gen, tasks = (g["generation"], g["tasks"]) if isinstance(g, dict) else (g.generation, g.tasks)
    return [TaskReport(gen, t, TaskPhase.STREAMING, pod=f"p{t}", lag_ms=1000) for t in range(tasks)]


def test_operator_status_through_a_scale_a_failure_and_a_stop() -> None:
    body = _reconcile(_body(tasks=2), FOUR, [])
    assert health(body)["status"] == "Progressing"  # generation 0 starting
    body = _reconcile(body, FOUR, _streaming(body["status"]["assignment"]))
    assert health(body) == {"status": "Healthy",
                            "message": "AllTasksStreaming: 2 tasks streaming 4 shards in generation 0"}

    # kubectl scale: the API server bumps metadata.generation before the operator has seen it.
    body["spec"]["tasks"], body["metadata"]["generation"] = 4, 2
    assert health(body) == {"status": "Progressing",
                            "message": "Waiting for the operator to observe generation 2 (observed 1)"}
    body = _reconcile(body, FOUR, _streaming(body["status"]["assignment"]))
    assert health(body)["status"] == "Progressing"
    assert health(body)["message"].startswith("Draining: stopping the 2 workers of generation 0")
    exited = [TaskReport(0, t, TaskPhase.EXITED) for t in range(2)]
    body = _reconcile(body, FOUR, exited)
    assert body["status"]["assignment"]["generation"] == 1
    assert health(body)["status"] == "Progressing"
    body = _reconcile(body, FOUR, _streaming(body["status"]["assignment"]))
    assert health(body)["status"] == "Healthy"

    failed = _streaming(body["status"]["assignment"])
    failed[3] = TaskReport(1, 3, TaskPhase.FAILED, message="exit code 1: vtgate unavailable")
    body = _reconcile(body, FOUR, failed)
    assert health(body) == {"status": "Degraded", "message": "TasksFailed: task 3: exit code 1: vtgate unavailable"}

    body["spec"]["state"], body["metadata"]["generation"] = "stopped", 3
    body = _reconcile(body, FOUR, _streaming(body["status"]["assignment"]))
    assert health(body) == {"status": "Progressing", "message": "Stopping: waiting for 4 workers to exit"}
    body = _reconcile(body, FOUR, [TaskReport(1, t, TaskPhase.EXITED) for t in range(4)])
    assert health(body) == {"status": "Suspended", "message": "Stopped: spec.state is stopped"}

    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body["metadata"]["finalizers"] = ["shardcdc.io/finalizer"]
    assert health(body) == {"status": "Progressing",
                            "message": "Deleting: removing the workers (finalizers: shardcdc.io/finalizer)"}


def test_operator_status_for_lost_shards_is_degraded() -> None:
    body = _reconcile(_body(tasks=2, generation=1), ("-80", "80-"), [])
    body = _reconcile(body, ("-80", "80-"), _streaming(body["status"]["assignment"]))
    assert health(body)["status"] == "Healthy"
    body = _reconcile(body, ("-80",), _streaming(body["status"]["assignment"]))
    h = health(body)
    assert h["status"] == "Degraded" and h["message"].startswith("ShardsLost: shards 80- of generation 0")

