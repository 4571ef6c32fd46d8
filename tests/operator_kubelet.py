"""End to end without a kubelet: the operator's Deployments in a real API server, run as local processes.

``ApiKubelet`` is local mode's :class:`ProcessKubelet` pointed at a real kube-apiserver: it lists
the Deployments of a namespace, runs each one's pod template as a worker process (command, args,
env, the ConfigMap/Secret files it mounts, read from the API server), and writes what it runs
back as Pod objects with status (Running/Ready, CrashLoopBackOff, ``lastState.terminated`` with
exit status and termination message), so the operator's pod index and its ``/status`` reads see
exactly what they would see in a cluster. Nothing else (no scheduler, no controllers) runs.

It also records at every pass which generations have a running worker process, so a test can
assert that two generations never ran at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdcoperator.apply import KubeApi
from cdcoperator.local.kubelet import DEPLOYMENT_ANNOTATION, ProcessKubelet, decode_secret
from cdcoperator.naming import LABEL_CONNECTOR, LABEL_GENERATION


class ApiKubelet:
    def __init__(self, kube: KubeApi, namespace: str, workdir: Path, period: float = 0.2,
                 extra_env: Mapping[str, str] | None = None, restart_backoff: float = 2.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.errors: list[str] = []
        self.live_generations: list[tuple[str, frozenset[int]]] = []  # (connector, generations with processes)
        self._written: dict[str, Any] = {}  # pod name -> status last written
        self._specs: dict[str, Any] = {}  # pod name -> spec of the Pod object in the API server
        self.kubelet = ProcessKubelet(self._source, self._resolve, workdir, period=period, restart_backoff=restart_backoff,
                                      extra_env=extra_env, on_change=lambda _bodies: self.kubelet.wake())

    def __enter__(self) -> ApiKubelet:
        self.kubelet.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kubelet.close()
        self.errors.extend(self.kubelet.errors)

    def _path(self, kind: str, name: str = "", sub: str = "") -> str:
        prefix = "/apis/apps/v1" if kind == "deployments" else "/api/v1"
        return f"{prefix}/namespaces/{self.namespace}/{kind}" + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    def _resolve(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        obj = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}", allow=(404,))
        if obj is None:
            return None
        if kind == "Secret":
            return decode_secret(obj)
        return {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}

    def _source(self) -> list[dict[str, Any]]:
        """Called by the kubelet's loop: first publish its pods to the API server, then list Deployments."""
        try:
            self._mirror(self.kubelet.pods())
        except Exception as exc:  # retried at the next pass; the test sees the errors
            self.errors.append(repr(exc))
        out = self.kube.request("GET", self._path("deployments"), query={"labelSelector": LABEL_CONNECTOR})
        return list((out or {}).get("items") or [])

    def _mirror(self, bodies: list[dict[str, Any]]) -> None:
        gens: dict[str, set[int]] = {}
        for body in bodies:
            labels = body["metadata"]["labels"]
            if "running" in (body["status"]["containerStatuses"][0].get("state") or {}):
                gens.setdefault(labels[LABEL_CONNECTOR], set()).add(int(labels[LABEL_GENERATION]))
        for connector, g in gens.items():
            self.live_generations.append((connector, frozenset(g)))
        names = set()
        for body in bodies:
            name = body["metadata"]["name"]
            names.add(name)
            if name in self._written and self._specs.get(name) != body["spec"]:
                # A restarted container gets fresh host ports (ProcessKubelet), but a Pod's spec is
                # immutable: the Pod is created again with them, or the operator would keep reading
                # /status on the old port (and never see the worker's reshard journal).
                self.kube.request("DELETE", self._path("pods", name), {"gracePeriodSeconds": 0}, allow=(404,))
                del self._written[name]
            if name not in self._written:
                meta = {k: v for k, v in body["metadata"].items() if k not in ("deletionTimestamp", "creationTimestamp")}
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body["spec"]}
                if self.kube.request("POST", self._path("pods"), pod, allow=(409,)) is None:
                    continue  # the old object is still being deleted: the next pass creates it
                self._written[name] = None
                self._specs[name] = json.loads(json.dumps(body["spec"]))
            if self._written[name] != body["status"]:
                self.kube.request("PATCH", self._path("pods", name, "status"), {"status": body["status"]},
                                content_type="application/merge-patch+json")
                self._written[name] = json.loads(json.dumps(body["status"]))
        for name in set(self._written) - names:
            self.kube.request("DELETE", self._path("pods", name), {"gracePeriodSeconds": 0}, allow=(404,))
            del self._written[name]
            self._specs.pop(name, None)

    def pods(self) -> list[dict[str, Any]]:
        return [b for b in self.kubelet.pods() if b["metadata"]["annotations"].get(DEPLOYMENT_ANNOTATION)]
