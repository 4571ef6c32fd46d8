"""The operator end to end without a kubelet: a real kube-apiserver with the CRD and the operator's
RBAC, the operator (kopf, in this process) under its least-privilege ServiceAccount, and
``ApiKubelet`` (tests/operator_kubelet.py) running every Deployment it creates as real worker
processes reported back as Pods. Shared by the end-to-end tests over the VTGate test server and
over real Vitess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import env_var, install_operator, operator_runner
from operator_kubelet import ApiKubelet

from cdcoperator.apply import KubeApi
from kubetest import KubeControlPlane, kube_control_plane_fixture
from kubetest.controlplane import free_port


class Cluster:
    """The API server of one namespace, as a test reads it."""

    def __init__(self, plane: KubeControlPlane, kube: KubeApi, kubelet: ApiKubelet, namespace: str) -> None:
        self.plane, self.kube, self.kubelet, self.namespace = plane, kube, kubelet, namespace

    def kubectl(self, *args: str, input: str | None = None) -> str:
        r = self.plane.kubectl("-n", self.namespace, *args, input=input)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def get(self, name: str) -> dict[str, Any] | None:
        return self.kube.request(
            "GET", f"/apis/shardcdc.io/v1alpha1/namespaces/{self.namespace}/cdcconnectors/{name}", allow=(404,))

    def status(self, name: str) -> dict[str, Any]:
        return dict((self.get(name) or {}).get("status") or {})

    def ready(self, name: str, generation: int, tasks: int, shards: int) -> dict[str, Any] | None:
        status = self.status(name)
        a = status.get("assignment") or {}
        ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
        ok = (ready.get("status") == "True" and a.get("generation") == generation and a.get("tasks") == tasks
              and len(a.get("shards") or ()) == shards)
        return a if ok else None

    def positions(self, name: str) -> dict[str, str]:
        out = {}
        for task in (self.status(name).get("assignment") or {}).get("taskStates") or ():
            for part in (task.get("position") or "").split(";"):
                if "@" in part:
                    shard, gtid = part.split("@", 1)
                    out[shard] = gtid
        return out

    def events(self, name: str) -> list[tuple[str, str, str]]:
        out = self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/events",
                                query={"fieldSelector": f"involvedObject.name={name}"})
        items = sorted((out or {}).get("items") or [], key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [(e["type"], e["reason"], e.get("message") or "") for e in items]

    def pods(self) -> list[dict[str, Any]]:
        out = self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        return list((out or {}).get("items") or [])

    def deployments(self, name: str) -> dict[str, dict[str, Any]]:
        out = self.kube.request("GET", f"/apis/apps/v1/namespaces/{self.namespace}/deployments",
                                query={"labelSelector": f"shardcdc.io/connector={name}"})
        return {d["metadata"]["name"]: d for d in (out or {}).get("items") or []}


def operator_cluster(tmp_path_factory: pytest.TempPathFactory, namespace: str) -> Iterator[Cluster]:
    """A module fixture's body: the API server, the operator and the process kubelet for ``namespace``."""
    for plane in kube_control_plane_fixture():
        sa_config = install_operator(plane, namespace, tmp_path_factory.mktemp("sa") / "operator.kubeconfig")
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        workdir = tmp_path_factory.mktemp("pods")
        with plane.api_client() as admin:
            kube = KubeApi(admin)
            with (
                # Containers that exit come back at once (a kubelet restarts them after the reshard
                # exit too): the operator must stop them before the next generation starts.
                ApiKubelet(kube, namespace, workdir, extra_env={"SHARDCDC_LOG_LEVEL": "INFO"},
                           restart_backoff=0.05) as kubelet,
                env_var("SHARDCDC_OPERATOR_RESYNC_SECONDS", "0.5"),
                plane.kubeconfig_env(sa_config),
                operator_runner(namespace, liveness, timeout=60) as runner,
            ):
                yield Cluster(plane, kube, kubelet, namespace)
            assert kubelet.errors == []
        assert runner.exception is None, runner.output[-3000:]
        # Not a bare "403": log timestamps end in milliseconds like ",403".
        assert "Forbidden" not in runner.output, runner.output[-3000:]


def worker_logs(workdir: Path) -> str:
    """The tail of every worker process's log (for a failing test's message)."""
    return "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in sorted(workdir.rglob("container.log")))
