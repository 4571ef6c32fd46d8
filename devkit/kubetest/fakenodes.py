"""A fake Deployment controller + kubelet for the operator's tests and benchmark against a real kube-apiserver.

``FakeNodes`` stands in for the Deployment controller and the kubelet, and nothing else: for every
Deployment of a namespace it keeps exactly as many pods as ``spec.replicas`` says (0 or 1), with the
pod template's labels and a ``metrics`` container port, and marks each pod Running/Ready on
127.0.0.1. Each task gets its own port (all served by one thread) serving the worker's ``/status``
document (streaming by default), whose content a test scripts (``set_doc``). A pod can also be made
to "exit" with a status and termination message (``exit_pod``), as the kubelet reports a container
in CrashLoopBackOff. A template change (the restart annotation's ``restartedAt``) recreates the
pod, as ``Recreate`` does.

It watches Deployments and pods (``kubetest.informer``, as a controller and a kubelet do) and runs
a pass when something changed, and at least every ``period`` seconds; a pass reads the watched
objects from memory. It also records, at every pass, which generations have live pods, so a test
can assert that two generations never ran at once. Tests wait on API state with deadlines.

``python -m kubetest.fakenodes --namespace NS --kubeconfig FILE`` runs it as its own process until
SIGTERM (``bench/operator_scale.py``: kept apart from the in-process operator, as a kubelet would be, so
its work does not hold the operator's interpreter lock).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cdcoperator.apply import ApiError, KubeApi, new_api_client
from cdcoperator.naming import LABEL_CONNECTOR, LABEL_GENERATION
from kubetest.informer import Informer

__all__ = ["TEMPLATE_HASH", "FakeNodes", "main", "streaming_doc"]

TEMPLATE_HASH = "fake-nodes/template"
WORKERS = 8  # API writes in flight at once (pods created, deleted, status set)


class _StatusServers:
    """Every task's status port, served by one thread running one asyncio loop: at 10 connectors of
    256 shards a thread per port (2,560 of them) made the harness, not the operator, the machine's
    load. Each port answers ``GET /status`` with its Deployment's document."""

    def __init__(self, nodes: FakeNodes) -> None:
        self._nodes = nodes
        self._loop = asyncio.new_event_loop()
        self._servers: dict[str, asyncio.Server] = {}
        self.ports: dict[str, int] = {}
        self._thread = threading.Thread(target=self._loop.run_forever, name="status-servers", daemon=True)
        self._thread.start()

    def port(self, deployment: str) -> int:
        """The port serving ``deployment``'s document, listening from the first call on."""
        if deployment not in self.ports:
            future = asyncio.run_coroutine_threadsafe(self._listen(deployment), self._loop)
            self.ports[deployment] = future.result(30)
        return self.ports[deployment]

    async def _listen(self, deployment: str) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._answer(deployment, reader, writer)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self._servers[deployment] = server
        return int(server.sockets[0].getsockname()[1])

    async def _answer(self, deployment: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 with keep-alive, as the worker's own server (``protocol_version = "HTTP/1.1"``):
        the operator's aiohttp session reuses its connections across reconciles."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split()
                path = parts[1] if len(parts) > 1 else ""
                close = parts[-1:] == ["HTTP/1.0"] or any(
                    h.lower().replace(" ", "") == "connection:close" for h in lines[1:])
                self._nodes.count_read(deployment)
                body = json.dumps(self._nodes.doc_for(deployment)).encode()
                status = "200 OK" if path == "/status" else "404 Not Found"
                ending = "Connection: close\r\n\r\n" if close else "\r\n"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n{ending}".encode() + body)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client closed the connection (between requests, or mid-request)
        finally:
            writer.close()

    def close(self) -> None:
        async def shut() -> None:
            for server in self._servers.values():
                server.close()
            # The connections' tasks end here, while the loop runs: left to the garbage collector,
            # each closed its writer on a closed loop ("Event loop is closed", 20 warnings a run).
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


def streaming_doc(lag_ms: int = 1500) -> dict[str, Any]:
    return {"state": "streaming", "ready": True, "low_watermark_lag_ms": lag_ms, "shards": []}


class FakeNodes:
    """A Deployment controller + kubelet for one namespace, driven from a thread."""

    def __init__(self, kube: KubeApi, namespace: str, period: float = 0.1, workers: int = WORKERS) -> None:
        self.kube = kube
        self.namespace = namespace
        self.period = period
        self._docs: dict[str, dict[str, Any]] = {}
        self._exits: dict[str, tuple[int, str]] = {}
        self._servers = _StatusServers(self)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fake-kubelet")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-nodes", daemon=True)
        self._changed = threading.Event()  # an informer saw an event, or a test scripted an exit
        self._informers: dict[str, Informer] = {}
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

    def status_port(self, deployment: str) -> int:
        """The port serving this task's ``/status`` document (listening from the first call on)."""
        return self._servers.port(deployment)

    def exit_pod(self, deployment: str, exit_code: int, message: str) -> None:
        """From now on the task's container keeps exiting with ``exit_code`` (CrashLoopBackOff)."""
        with self._lock:
            self._exits[deployment] = (exit_code, message)
        self._changed.set()

    def recover(self, deployment: str) -> None:
        """The task's container runs again from its next pod (``exit_pod`` undone; the pod shown
        exiting stays so until the Deployment recreates it, e.g. after a restart)."""
        with self._lock:
            self._exits.pop(deployment, None)

    # --- the loop -------------------------------------------------------------------------------

    def __enter__(self) -> FakeNodes:
        for kind in ("deployments", "pods"):
            self._informers[kind] = Informer(self.kube.api, self._path(kind), LABEL_CONNECTOR, self._changed)
            self._informers[kind].start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._changed.set()
        self._thread.join(10)
        self._pool.shutdown(wait=True)
        for informer in self._informers.values():
            informer.stop()
        self._servers.close()

    def _loop(self) -> None:
        """A pass when an informer saw an event (or a test scripted an exit), and at least every
        ``period`` seconds; passes read the informers' memory, not the API server."""
        for informer in self._informers.values():
            while not informer.synced.wait(0.1):
                if self._stop.is_set():
                    return
        while not self._stop.is_set():
            self._changed.clear()  # before the pass: an event during it brings the next one
            try:
                self.sync()
            except Exception as exc:  # keep running; the test sees the errors
                self.errors.append(repr(exc))
            self._changed.wait(self.period)

    def _path(self, kind: str, name: str = "", sub: str = "") -> str:
        prefix = "/apis/apps/v1" if kind == "deployments" else "/api/v1"
        out = f"{prefix}/namespaces/{self.namespace}/{kind}"
        return out + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    def _delete_pod(self, name: str) -> None:
        self.kube.request("DELETE", self._path("pods", name), {"gracePeriodSeconds": 0}, allow=(404,))
        self._informers["pods"].drop(name)

    def sync(self) -> None:
        deployments = {d["metadata"]["name"]: d for d in self._informers["deployments"].items()}
        pods = self._informers["pods"].items()
        by_dep: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            by_dep.setdefault(pod["metadata"]["annotations"].get("fake-nodes/deployment", ""), []).append(pod)
        alive: list[Mapping[str, str]] = []  # labels of the pods left after this pass (no second list)
        deletes: list[Callable[[], None]] = []  # this pass's API writes, independent of one another
        for name, pod_list in by_dep.items():
            dep = deployments.get(name)
            for pod in pod_list:
                stale = dep is None or int(dep["spec"].get("replicas") or 0) == 0 or (
                    pod["metadata"]["annotations"].get(TEMPLATE_HASH) != _template_hash(dep))
                if stale:
                    deletes.append(functools.partial(self._delete_pod, pod["metadata"]["name"]))
                else:
                    alive.append(pod["metadata"]["labels"])
        calls: list[Callable[[], None]] = []
        for name, dep in deployments.items():
            live = [p for p in by_dep.get(name, []) if p["metadata"]["annotations"].get(TEMPLATE_HASH)
                    == _template_hash(dep)]
            if int(dep["spec"].get("replicas") or 0) >= 1:
                if not live:
                    calls.append(functools.partial(self._create_pod, dep))  # created, or it existed (409)
                    alive.append(dep["spec"]["template"]["metadata"]["labels"])
                elif name in self._exits:  # read without the lock: a pass later is soon enough
                    calls.append(functools.partial(self._update_exit, name, live[0]))
        # Kubelets on many nodes start and stop pods in parallel: one at a time, the fake's own
        # ~2 calls per pod (create, status) made a 256-shard scale wait seconds on the harness.
        # Deletions first, as ``Recreate`` has the old pod gone before the new one starts.
        for batch in (deletes, calls):
            for future in [self._pool.submit(call) for call in batch]:
                future.result()
        # Which generations have pods now, per connector.
        gens: dict[str, set[int]] = {}
        for labels in alive:
            gens.setdefault(labels[LABEL_CONNECTOR], set()).add(int(labels[LABEL_GENERATION]))
        for connector, g in gens.items():
            self.live_generations.append((connector, frozenset(g)))

    def _create_pod(self, dep: Mapping[str, Any]) -> None:
        name = dep["metadata"]["name"]
        count = self.pods_created.get(name, 0)
        tpl = dep["spec"]["template"]
        container = tpl["spec"]["containers"][0]
        port = self.status_port(name)
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
            created = self.kube.request("POST", self._path("pods"), pod)
        except ApiError as exc:
            if exc.status == 409:
                return
            raise
        if created:
            self._informers["pods"].put(created)
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
        patched = self.kube.request("PATCH", self._path("pods", pod, "status"), {"status": status},
                                    content_type="application/merge-patch+json", allow=(404,))
        if patched:
            self._informers["pods"].put(patched)

    def _update_exit(self, deployment: str, pod: Mapping[str, Any]) -> None:
        with self._lock:
            exiting = deployment in self._exits
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        shown = bool(statuses) and "waiting" in (statuses[0].get("state") or {})
        if exiting and not shown:
            self._set_running(pod["metadata"]["name"], pod["spec"]["containers"][0]["image"], deployment)


_HASHES: dict[tuple[str, int], str] = {}  # (uid, generation) -> template hash


def _template_hash(dep: Mapping[str, Any]) -> str:
    """The pod template's digest. Every pass hashes every Deployment (2,560 ten times a second in
    the hold benchmark), so it is kept per object uid and generation, which a template change bumps."""
    meta = dep["metadata"]
    key = (str(meta.get("uid") or ""), int(meta.get("generation") or 0))
    digest = _HASHES.get(key) if key[0] else None
    if digest is None:
        digest = hashlib.sha256(json.dumps(dep["spec"]["template"], sort_keys=True).encode()).hexdigest()[:16]
        if key[0]:
            _HASHES[key] = digest
    return digest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubetest.fakenodes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--period", type=float, default=0.1, help="at most this many seconds between passes")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # A pooled connection per writer (the client's default of 4 would discard the rest, with a warning each).
    with FakeNodes(KubeApi(new_api_client(args.kubeconfig, concurrency=WORKERS)), args.namespace,
                   args.period) as nodes:
        print(f"fake nodes serving namespace {args.namespace}", flush=True)
        stop.wait()
    for error in nodes.errors:
        print(error, file=sys.stderr)
    return 1 if nodes.errors else 0


if __name__ == "__main__":
    sys.exit(main())
