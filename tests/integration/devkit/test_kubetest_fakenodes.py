"""``python -m kubetest.fakenodes``: FakeNodes as its own process (as ``bench/operator_scale.py`` runs it).

Against the real API server: a Deployment of one replica gets one Running/Ready pod whose metrics
port serves a streaming status document; scaled to zero, the pod goes; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from polling import wait_for

from cdcoperator.local.children import start_bound, stop_group
from kubetest import kube_control_plane_fixture
from kubetest.fakenodes import streaming_doc

NS = "fakenodes"


def deployment(replicas: int) -> dict[str, Any]:
    labels = {"shardcdc.io/connector": "c", "shardcdc.io/generation": "0", "shardcdc.io/task": "0"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "c-g0-t0", "namespace": NS, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "worker", "image": "shardcdc/worker:test"}]}}}}


def test_fakenodes_process_runs_pods_of_deployments(tmp_path: Path) -> None:
    (plane,) = list(kube_control_plane_fixture())
    plane.ensure_namespace(NS)

    def pods() -> list[dict[str, Any]]:
        r = plane.kubectl("-n", NS, "get", "pods", "-o", "json", check=True)
        return list(json.loads(r.stdout)["items"])

    log = tmp_path / "fakenodes.log"
    with log.open("wb") as out:
        proc = start_bound([sys.executable, "-m", "kubetest.fakenodes", "--namespace", NS, "--kubeconfig",
                            str(plane.kubeconfig_path)], stdout=out, stderr=subprocess.STDOUT)
    try:
        plane.kubectl("apply", "-f", "-", input=json.dumps(deployment(1)), check=True)

        def running() -> dict[str, Any] | None:
            found = pods()
            ok = len(found) == 1 and found[0]["status"].get("phase") == "Running" and any(
                c["type"] == "Ready" and c["status"] == "True" for c in found[0]["status"].get("conditions") or ())
            return found[0] if ok else None

        pod = wait_for(running, 30, "the Deployment's pod Running")
        assert pod["metadata"]["name"] == "c-g0-t0-0"
        assert pod["metadata"]["labels"] == deployment(1)["metadata"]["labels"]
        (port,) = pod["spec"]["containers"][0]["ports"]
        assert (port["name"], pod["status"]["podIP"]) == ("metrics", "127.0.0.1")
        with urllib.request.urlopen(f"http://127.0.0.1:{port['containerPort']}/status", timeout=10) as resp:
            assert json.load(resp) == streaming_doc()

        plane.kubectl("apply", "-f", "-", input=json.dumps(deployment(0)), check=True)
        wait_for(lambda: pods() == [], 30, "the pod deleted after the scale to zero")
    finally:
        stop_group(proc, timeout=30)
        plane.kubectl("-n", NS, "delete", "deployment", "c-g0-t0", "--ignore-not-found")
    assert proc.returncode == 0, log.read_text()
    assert log.read_text() == f"fake nodes serving namespace {NS}\n"
