"""Local mode for Prometheus: the operator's metrics and target files for ``file_sd_configs``.

In a cluster Prometheus finds the workers and the operator through Kubernetes discovery
(``kubernetes_sd_configs``, role pod). Local mode has no API to discover, so ``shardcdc run
--metrics-port`` writes the same targets as files: one target group per pod port, carrying the
``__meta_kubernetes_*`` labels Kubernetes discovery would give that pod. The relabelling of
``deploy/prometheus/scrape-configs.yaml`` then works unchanged on either source, with only its
``kubernetes_sd_configs`` swapped for ``file_sd_configs`` over these files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from cdcoperator.metrics import ConnectorMetrics
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["OPERATOR_FILE", "WORKERS_FILE", "OperatorMetricsServer", "operator_target", "pod_targets", "write_targets"]

WORKERS_FILE = "workers.json"
OPERATOR_FILE = "operator.json"
_META = "__meta_kubernetes_"


def _label_name(name: str) -> str:
    """A Kubernetes label as Prometheus names it (``shardcdc.io/task`` -> ``shardcdc_io_task``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _pod_labels(pod: JsonMapping) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    out = {f"{_META}namespace": str(meta.get("namespace") or ""), f"{_META}pod_name": str(meta.get("name") or "")}
    for key, value in (meta.get("labels") or {}).items():
        out[f"{_META}pod_label_{_label_name(key)}"] = str(value)
        out[f"{_META}pod_labelpresent_{_label_name(key)}"] = "true"
    return out


def pod_targets(pods: Sequence[JsonMapping]) -> list[JsonObject]:
    """file_sd target groups of every started pod's named container ports, as Kubernetes discovery
    (role pod) labels them. A pod that exited and waits to restart keeps its target (it is down)."""
    groups = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or ())
        base = {**_pod_labels(pod), f"{_META}pod_ip": str(ip), f"{_META}pod_ready": str(ready).lower()}
        for container in (pod.get("spec") or {}).get("containers") or ():
            for port in container.get("ports") or ():
                labels = {**base, f"{_META}pod_container_name": str(container.get("name") or ""),
                          f"{_META}pod_container_port_name": str(port.get("name") or ""),
                          f"{_META}pod_container_port_number": str(port["containerPort"])}
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def operator_target(namespace: str, connector: str, address: str) -> list[JsonObject]:
    """The local operator's /metrics as the chart's operator pod would be discovered."""
    pod = {"metadata": {"namespace": namespace, "name": f"shardcdc-local-{connector}",
                        "labels": {"app.kubernetes.io/name": "shardcdc", "app.kubernetes.io/component": "operator"}},
           "status": {"podIP": address.rsplit(":", 1)[0], "conditions": [{"type": "Ready", "status": "True"}]},
           "spec": {"containers": [{"name": "operator", "ports": [
               {"name": "metrics", "containerPort": int(address.rsplit(":", 1)[1])}]}]}}
    return pod_targets([pod])


def write_targets(path: Path, groups: Sequence[JsonMapping]) -> None:
    """Replace ``path`` atomically (Prometheus watches it and must never read half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(list(groups), indent=1, sort_keys=True))
    os.replace(tmp, path)


class OperatorMetricsServer:
    """The operator's collector (``cdcoperator.metrics``) on a loopback port, fed by ``observe``."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        self.store = ConnectorMetrics()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.store)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.address = f"{host}:{self._server.server_port}"

    def observe(self, body: JsonMapping | None) -> None:
        """The connector as the last reconcile left it (local mode's watch event)."""
        if body:
            self.store.observe("MODIFIED", body)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
