"""A fake Deployment controller + kubelet for the operator's tests and benchmark against a real kube-apiserver.

``FakeNodes`` stands in for the Deployment controller and the kubelet, and nothing else: for every
Deployment of a namespace it keeps exactly as many pods as ``spec.replicas`` says (0 or 1), with the
pod template's labels and a ``metrics`` container port, and marks each pod Running/Ready on
127.0.0.1. Each task gets a small HTTP server on that port serving the worker's ``/status``
document (streaming by default), whose content a test scripts (``set_doc``). A pod can also be made
to "exit" with a status and termination message (``exit_pod``), as the kubelet reports a container
in CrashLoopBackOff. A template change (the restart annotation's ``restartedAt``) recreates the
pod, as ``Recreate`` does.

It also records, at every pass, which generations have live pods, so a test can assert that two
generations never ran at once. Polling with a short period is this fake controller's loop, not test
synchronisation: tests wait on API state with deadlines.

``python -m kubetest.fakenodes --namespace NS --kubeconfig FILE`` runs it as its own process until
SIGTERM (``bench/operator_scale.py``: kept apart from the in-process operator, as a kubelet would be, so
its work does not hold the operator's interpreter lock).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cdcoperator.apply import ApiError, KubeApi
from cdcoperator.naming import LABEL_CONNECTOR, LABEL_GENERATION

__all__ = ["TEMPLATE_HASH", "FakeNodes", "main", "streaming_doc"]

TEMPLATE_HASH = "fake-nodes/template"


class _StatusServer:
    def __init__(self, owner: FakeNodes, deployment: str) -> None:
        nodes = owner

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                nodes.count_read(deployment)
                body = json.dumps(nodes.doc_for(deployment)).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"status-{deployment}", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def streaming_doc(lag_ms: int = 1500) -> dict[str, Any]:
    return {"state": "streaming", "ready": True, "low_watermark_lag_ms": lag_ms, "shards": []}


class FakeNodes:
    """A Deployment controller + kubelet for one namespace, driven from a thread."""

    def __init__(self, kube: KubeApi, namespace: str, period: float = 0.1) -> None:
        self.kube = kube
        self.namespace = namespace
        self.period = period
        self._docs: dict[str, dict[str, Any]] = {}
        self._exits: dict[str, tuple[int, str]] = {}
        self._servers: dict[str, _StatusServer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-nodes", daemon=True)
        self.live_generations: list[tuple[str, frozenset[int]]] = []  # (connector, generations with live pods)
        self.pods_created: dict[str, int] = {}
        self.errors: list[str] = []
        self.status_reads: dict[str, int] = {}

    # --- scripting ------------------------------------------------------------------------------

    def set_doc(self, deployment: str, doc: Mapping[str, Any]) -> None:
        with self._lock:
            self._docs[deployment] = dict(doc)

    def doc_for(self, deployment: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._docs.get(deployment) or streaming_doc())

    def count_read(self, deployment: str) -> None:
        with self._lock:
            self.status_reads[deployment] = self.status_reads.get(deployment, 0) + 1

    def reads(self, deployment: str) -> int:
        """How often the operator read this task's status document (one read per reconcile)."""
        with self._lock:
            return self.status_reads.get(deployment, 0)

    def exit_pod(self, deployment: str, exit_code: int, message: str) -> None:
        """From now on the task's container keeps exiting with ``exit_code`` (CrashLoopBackOff)."""
        with self._lock:
            self._exits[deployment] = (exit_code, message)

    def recover(self, deployment: str) -> None:
        """The task's container runs again from its next pod (``exit_pod`` undone; the pod shown
        exiting stays so until the Deployment recreates it, e.g. after a restart)."""
        with self._lock:
            self._exits.pop(deployment, None)

    # --- the loop -------------------------------------------------------------------------------

    def __enter__(self) -> FakeNodes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        # In parallel: each shutdown waits for its server's poll (up to 0.5 s), hundreds at 256 shards.
        closers = [threading.Thread(target=server.close, daemon=True) for server in self._servers.values()]
        for t in closers:
            t.start()
        for t in closers:
            t.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # keep running; the test sees the errors
                self.errors.append(repr(exc))
            self._stop.wait(self.period)

    def _path(self, kind: str, name: str = "", sub: str = "") -> str:
        prefix = "/apis/apps/v1" if kind == "deployments" else "/api/v1"
        out = f"{prefix}/namespaces/{self.namespace}/{kind}"
        return out + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    def _list(self, kind: str) -> list[dict[str, Any]]:
        out = self.kube.request("GET", self._path(kind), query={"labelSelector": LABEL_CONNECTOR})
        return list((out or {}).get("items") or [])

    def _delete_pod(self, name: str) -> None:
        self.kube.request("DELETE", self._path("pods", name), {"gracePeriodSeconds": 0}, allow=(404,))

    def sync(self) -> None:
        deployments = {d["metadata"]["name"]: d for d in self._list("deployments")}
        pods = self._list("pods")
        by_dep: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            by_dep.setdefault(pod["metadata"]["annotations"].get("fake-nodes/deployment", ""), []).append(pod)
        alive: list[Mapping[str, str]] = []  # labels of the pods left after this pass (no second list)
        for name, pod_list in by_dep.items():
            dep = deployments.get(name)
            for pod in pod_list:
                stale = dep is None or int(dep["spec"].get("replicas") or 0) == 0 or (
                    pod["metadata"]["annotations"].get(TEMPLATE_HASH) != _template_hash(dep))
                if stale:
                    self._delete_pod(pod["metadata"]["name"])
                else:
                    alive.append(pod["metadata"]["labels"])
        for name, dep in deployments.items():
            live = [p for p in by_dep.get(name, []) if p["metadata"]["annotations"].get(TEMPLATE_HASH)
                    == _template_hash(dep)]
            if int(dep["spec"].get("replicas") or 0) >= 1:
                if not live:
                    self._create_pod(dep)  # created, or it already existed (409): alive either way
                    alive.append(dep["spec"]["template"]["metadata"]["labels"])
                else:
                    self._update_exit(name, live[0])
        # Which generations have pods now, per connector.
        gens: dict[str, set[int]] = {}
        for labels in alive:
            gens.setdefault(labels[LABEL_CONNECTOR], set()).add(int(labels[LABEL_GENERATION]))
        for connector, g in gens.items():
            self.live_generations.append((connector, frozenset(g)))

    def _server(self, deployment: str) -> _StatusServer:
        if deployment not in self._servers:
            self._servers[deployment] = _StatusServer(self, deployment)
        return self._servers[deployment]

    def _create_pod(self, dep: Mapping[str, Any]) -> None:
        name = dep["metadata"]["name"]
        count = self.pods_created.get(name, 0)
        tpl = dep["spec"]["template"]
        container = tpl["spec"]["containers"][0]
        port = self._server(name).port
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{count}",
                "labels": dict(tpl["metadata"]["labels"]),
                "annotations": {**(tpl["metadata"].get("annotations") or {}), "fake-nodes/deployment": name,
                                TEMPLATE_HASH: _template_hash(dep)},
            },
            "spec": {"containers": [{"name": container["name"], "image": container["image"],
                                     "ports": [{"name": "metrics", "containerPort": port}]}]},
        }
        try:
            self.kube.request("POST", self._path("pods"), pod)
        except ApiError as exc:
            if exc.status == 409:
                return
            raise
        self.pods_created[name] = count + 1
        self._set_running(pod["metadata"]["name"], container["image"], name)

    def _set_running(self, pod: str, image: str, deployment: str) -> None:
        with self._lock:
            exit_info = self._exits.get(deployment)
        cs: dict[str, Any] = {"name": "worker", "image": image, "imageID": "", "restartCount": 0}
        if exit_info is None:
            cs.update(ready=True, started=True, state={"running": {"startedAt": "2024-01-01T00:00:00Z"}})
            ready = "True"
        else:
            code, message = exit_info
            cs.update(ready=False, started=False, restartCount=3,
                      state={"waiting": {"reason": "CrashLoopBackOff"}},
                      lastState={"terminated": {"exitCode": code, "message": message, "reason": "Error",
                                                "startedAt": "2024-01-01T00:00:00Z",
                                                "finishedAt": "2024-01-01T00:00:01Z"}})
            ready = "False"
        status = {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                  "conditions": [{"type": "Ready", "status": ready}], "containerStatuses": [cs]}
        self.kube.request("PATCH", self._path("pods", pod, "status"), {"status": status},
                        content_type="application/merge-patch+json", allow=(404,))

    def _update_exit(self, deployment: str, pod: Mapping[str, Any]) -> None:
        with self._lock:
            exiting = deployment in self._exits
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        shown = bool(statuses) and "waiting" in (statuses[0].get("state") or {})
        if exiting and not shown:
            self._set_running(pod["metadata"]["name"], pod["spec"]["containers"][0]["image"], deployment)


def _template_hash(dep: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(dep["spec"]["template"], sort_keys=True).encode()).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubetest.fakenodes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--period", type=float, default=0.1, help="seconds between passes")
    args = parser.parse_args(argv)
    from kubernetes import config

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with FakeNodes(KubeApi(config.new_client_from_config(config_file=args.kubeconfig)), args.namespace,
                   args.period) as nodes:
        print(f"fake nodes serving namespace {args.namespace}", flush=True)
        stop.wait()
    for error in nodes.errors:
        print(error, file=sys.stderr)
    return 1 if nodes.errors else 0


if __name__ == "__main__":
    sys.exit(main())
