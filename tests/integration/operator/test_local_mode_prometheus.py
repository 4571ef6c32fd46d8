"""Local mode for Prometheus (``cdcoperator.local.prometheus``): target files as Kubernetes discovery
would label the pods, the operator's metrics on a port, and a taken port refused in one line."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

from local_mode_fixtures import shardcdc
from observability_fixtures import parse

from cdcoperator.local.prometheus import OperatorMetricsServer, operator_target, pod_targets, write_targets


def pod(name: str, ip: str | None, labels: dict[str, str], ports: list[tuple[str, int]]) -> dict[str, Any]:
    return {"metadata": {"namespace": "shop", "name": name, "labels": labels},
            "spec": {"containers": [{"name": "worker", "ports": [{"name": n, "containerPort": p} for n, p in ports]}]},
            "status": {**({"podIP": ip} if ip else {}), "conditions": [{"type": "Ready", "status": "True"}]}}


def test_pod_targets_carry_the_kubernetes_discovery_labels() -> None:
    pods = [pod("orders-g1-t0-0", "127.0.0.1", {"shardcdc.io/task": "0", "app.kubernetes.io/name": "shardcdc-worker"},
                [("metrics", 40001)]),
            pod("orders-g1-t1-0", None, {"shardcdc.io/task": "1"}, [("metrics", 40002)])]  # not started: no target
    (group,) = pod_targets(pods)
    assert group == {"targets": ["127.0.0.1:40001"], "labels": {
        "__meta_kubernetes_namespace": "shop", "__meta_kubernetes_pod_name": "orders-g1-t0-0",
        "__meta_kubernetes_pod_ip": "127.0.0.1", "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_label_shardcdc_io_task": "0", "__meta_kubernetes_pod_labelpresent_shardcdc_io_task": "true",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "shardcdc-worker",
        "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name": "true",
        "__meta_kubernetes_pod_container_name": "worker", "__meta_kubernetes_pod_container_port_name": "metrics",
        "__meta_kubernetes_pod_container_port_number": "40001"}}


def test_operator_metrics_served_and_targeted(tmp_path: Path) -> None:
    server = OperatorMetricsServer(0)
    try:
        server.observe({"metadata": {"namespace": "shop", "name": "orders", "generation": 1},
                        "spec": {"tasks": 1}, "status": {"observedGeneration": 1, "conditions": [
                            {"type": "Ready", "status": "True"}], "assignment": {"generation": 0, "tasks": 1,
                                                                             "taskStates": [{"id": 0, "phase": "Failed"}]}}})
        with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=10) as resp:
            samples = parse(resp.read().decode())
        lv = frozenset({("namespace", "shop"), ("connector", "orders")})
        assert samples[("shardcdc_operator_connector_ready", lv)] == 1.0
        assert samples[("shardcdc_operator_task_phase", lv | {("task", "0"), ("phase", "Failed")})] == 1.0
        write_targets(tmp_path / "operator.json", operator_target("shop", "orders", server.address))
        (group,) = json.loads((tmp_path / "operator.json").read_text())
        assert group["targets"] == [server.address]
        assert group["labels"]["__meta_kubernetes_pod_label_app_kubernetes_io_component"] == "operator"
        assert group["labels"]["__meta_kubernetes_pod_container_port_name"] == "metrics"
        assert [p.name for p in tmp_path.iterdir()] == ["operator.json"]  # no temporary file left
    finally:
        server.close()


def test_a_taken_metrics_port_is_one_clear_line(tmp_path: Path) -> None:
    manifest = tmp_path / "c.yaml"
    manifest.write_text(json.dumps({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "orders"},
        "spec": {"source": {"vitess": {"vtgate": "127.0.0.1:1", "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": "127.0.0.1:1", "topicPrefix": "shop"}}}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = shardcdc("run", "-f", str(manifest), "--state-dir", str(tmp_path / "state"), "--metrics-port", str(port))
    assert r.returncode == 2
    assert r.stderr == f"shardcdc run: --metrics-port {port}: Address already in use\n"
