"""The operator (kopf, ``cdcoperator.handlers``) against a real kube-apiserver and the VTGate test server.

The operator runs in-process with ``KopfRunner`` under the least-privilege identity of
``operator/rbac.yaml`` (a ServiceAccount token), so every test also proves the RBAC suffices.
There is no kubelet: ``FakeNodes`` (devkit/kubetest/fakenodes.py) keeps one pod per Deployment
replica, Running on 127.0.0.1 with a status-document server per task whose content tests script;
task phases (streaming, reshard journals, exits) are simulated through exactly what the operator
reads: the pods (the operator's pod watch) and the ``/status`` documents.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from operator_kube_fixtures import (
    FakeNodes,
    env_var,
    install_operator,
    operator_runner,
    streaming_doc,
    wait_for,
)
from polling import eventually

from cdcoperator.apply import KubeApi
from cdcworker import exitcodes
from kubetest import KubeControlPlane, kube_control_plane_fixture
from kubetest.controlplane import free_port
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

NS = "shop"
SA = "system:serviceaccount:shardcdc-system:shardcdc-operator"


class Env:
    def __init__(self, plane: KubeControlPlane, sim: VTGateSim, nodes: FakeNodes, kube: KubeApi,
                 liveness: str, bootstrap: str) -> None:
        self.plane, self.sim, self.nodes, self.kube, self.liveness = plane, sim, nodes, kube, liveness
        self.bootstrap = bootstrap  # a real broker: the operator reads the offsets topic before generation 0

    def kubectl(self, *args: str, input: str | None = None) -> str:
        r = self.plane.kubectl("-n", NS, *args, input=input)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, name: str) -> dict[str, Any] | None:
        return self.kube.request("GET", f"/apis/shardcdc.io/v1alpha1/namespaces/{NS}/cdcconnectors/{name}", allow=(404,))

    def children(self, kind: str, name: str) -> dict[str, dict[str, Any]]:
        prefix = "/apis/apps/v1" if kind == "deployments" else "/api/v1"
        out = self.kube.request("GET", f"{prefix}/namespaces/{NS}/{kind}",
                              query={"labelSelector": f"shardcdc.io/connector={name}"})
        return {o["metadata"]["name"]: o for o in (out or {}).get("items") or []}

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(name) or {}
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c["type"] == type_:
                return dict(c)
        return None

    def wait_condition(self, name: str, type_: str, status: str, reason: str | None = None,
                       timeout: float = 20.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            c = self.condition(name, type_)
            ok = c is not None and c["status"] == status and (reason is None or c["reason"] == reason)
            return c if ok else None

        return wait_for(check, timeout, f"{name}: {type_}={status} ({reason})")

    def assignment(self, name: str) -> dict[str, Any]:
        return dict(((self.get(name) or {}).get("status") or {}).get("assignment") or {})

    def wait_generation(self, name: str, generation: int, timeout: float = 20.0) -> dict[str, Any]:
        return wait_for(lambda: (a := self.assignment(name)).get("generation") == generation and a, timeout,
                        f"{name}: generation {generation}")

    def events(self, name: str) -> list[tuple[str, str, str]]:
        out = self.kube.request("GET", f"/api/v1/namespaces/{NS}/events",
                              query={"fieldSelector": f"involvedObject.name={name}"})
        items = sorted((out or {}).get("items") or [], key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [(e["type"], e["reason"], e.get("message") or "") for e in items]

    def alive(self) -> bool:
        try:
            return self.reconciles() >= 0
        except OSError:
            return False

    def reconciles(self) -> int:
        with urllib.request.urlopen(self.liveness, timeout=5) as resp:
            return int(json.load(resp)["reconciles"])


def connector(name: str, keyspace: str, env: Env, tasks: int = 2, vtctld: bool = False,
              **spec: Any) -> dict[str, Any]:
    vitess: dict[str, Any] = {"vtgate": env.sim.address, "keyspace": keyspace}
    if vtctld:
        vitess["vtctld"] = env.sim.address
    body: dict[str, Any] = {
        "apiVersion": "shardcdc.io/v1alpha1",
        "kind": "CdcConnector",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"source": {"vitess": vitess}, "kafka": {"bootstrapServers": env.bootstrap, "topicPrefix": name},
                 "tasks": tasks, **spec},
    }
    return body


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker) -> Iterator[Env]:
    with VTGateSim() as sim:
        for plane in kube_control_plane_fixture():
            sa_config = install_operator(plane, NS, tmp_path_factory.mktemp("sa") / "operator.kubeconfig")
            port = free_port()
            liveness = f"http://127.0.0.1:{port}/healthz"
            with plane.api_client() as admin, FakeNodes(KubeApi(admin), NS) as nodes:
                with (
                    env_var("SHARDCDC_OPERATOR_RESYNC_SECONDS", "0.5"),
                    plane.kubeconfig_env(sa_config),
                    operator_runner(NS, liveness, timeout=30) as runner,
                ):
                    e = Env(plane, sim, nodes, KubeApi(admin), liveness, kafka_broker.bootstrap)
                    wait_for(e.alive, 30, "the operator's liveness endpoint")
                    yield e
                assert nodes.errors == []
            assert runner.exception is None, runner.output[-3000:]
            # Least privilege held: kopf logs API refusals (403) as errors.
            # Not a bare "403": log timestamps end in milliseconds like ",403".
            assert "Forbidden" not in runner.output, runner.output[-3000:]


def test_resync_interval_is_the_test_setting(env: Env) -> None:
    import cdcoperator.handlers as handlers

    assert handlers.RESYNC_SECONDS == 0.5


def test_rbac_grants_exactly_what_the_operator_needs(env: Env) -> None:
    def can(verb: str, resource: str) -> str:
        r = env.plane.kubectl("auth", "can-i", verb, resource, "-n", NS, f"--as={SA}")
        return r.stdout.strip()

    assert [can("create", r) for r in ("deployments.apps", "configmaps", "events")] == ["yes"] * 3
    assert [can("patch", r) for r in ("cdcconnectors.shardcdc.io", "cdcconnectors.shardcdc.io/status")] == ["yes"] * 2
    denied = [("get", "secrets"), ("create", "pods"), ("delete", "pods"), ("create", "cdcconnectors.shardcdc.io"),
              ("delete", "cdcconnectors.shardcdc.io"), ("list", "customresourcedefinitions"),
              ("create", "leases.coordination.k8s.io"), ("update", "deployments.apps")]
    assert [can(v, r) for v, r in denied] == ["no"] * len(denied)


def test_create_starts_generation_zero(env: Env) -> None:
    env.sim.create_keyspace("orders", ["-80", "80-"])
    env.apply(connector("orders", "orders", env, tasks=2))
    ready = env.wait_condition("orders", "Ready", "True", "AllTasksStreaming")
    assert ready["message"] == "2 tasks streaming 2 shards in generation 0"

    obj = env.get("orders")
    assert obj is not None
    status = obj["status"]
    assert obj["metadata"]["finalizers"] == ["shardcdc.io/finalizer"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["selector"] == "shardcdc.io/connector=orders"
    assert (status["shards"]["serving"], status["shards"]["servingCount"]) == (["-80", "80-"], 2)
    a = status["assignment"]
    assert (a["generation"], a["tasks"], a["previousTasks"], a["phase"], a["shards"]) == (
        0, 2, -1, "Running", ["-80", "80-"])
    assert [(t["id"], t["shards"], t["phase"], t["pod"], t["lag"]) for t in a["taskStates"]] == [
        (0, ["-80"], "Streaming", "orders-g0-t0-0", "1s"), (1, ["80-"], "Streaming", "orders-g0-t1-0", "1s")]
    assert status["lag"] == "1s"
    # Before generation 0 the offsets topic was read (it does not exist yet): nothing to adopt.
    assert status["adoptedOffsets"] == {"generation": -1, "tasks": 0, "keys": [], "serverKey": False, "shards": []}
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds == {"Ready": ("True", "AllTasksStreaming"), "Progressing": ("False", "Stable"),
                     "Degraded": ("False", "AsExpected"), "Resharding": ("False", "NoReshard"),
                     "Paused": ("False", "Running")}

    row = env.kubectl("get", "cdc", "orders", "--no-headers").split()
    assert row[:7] == ["orders", "True", "running", "2", "2", "0", "1s"]

    deps = env.children("deployments", "orders")
    cms = env.children("configmaps", "orders")
    assert sorted(deps) == ["orders-g0-t0", "orders-g0-t1"] and sorted(cms) == ["orders-g0-workers"]
    owner = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "name": "orders",
             "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for tid in (0, 1):
        name = f"orders-g0-t{tid}"
        dep, cm = deps[name], cms["orders-g0-workers"]
        assert dep["metadata"]["ownerReferences"] == [owner] == cm["metadata"]["ownerReferences"]
        labels = dep["metadata"]["labels"]
        assert (labels["shardcdc.io/connector"], labels["shardcdc.io/generation"], labels["shardcdc.io/task"]) == (
            "orders", "0", str(tid))
        assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
        text = pod_properties(dep, cm)
        for line in (f"shardcdc.task.id={tid}", "shardcdc.task.count=2", "shardcdc.task.generation=0",
                     "vitess.prev.num.tasks=1", f"shardcdc.task.shards={['-80', '80-'][tid]}",
                     "vitess.keyspace=orders", f"database.port={env.sim.port}"):
            assert line in text, (line, text)

    # One event per kind of change and reconcile, naming the objects (posted concurrently by kopf's
    # background task, so they may trail the status: their order is not asserted, their set is).
    def created() -> None:
        events = env.events("orders")
        assert sorted(m for _, r, m in events if r == "Created") == [
            "created ConfigMap: orders-g0-workers", "created Deployment: orders-g0-t0, orders-g0-t1"]
        assert [m for _, r, m in events if r == "GenerationStarted"] == ["generation 0 started: 2 tasks over 2 shards"]

    eventually(created, 20, "the creation's events")

    # Level-based but quiet: further resyncs write nothing while nothing changes. Measured from
    # kopf's last write of the creation cycle (its handled-configuration annotation, progress
    # purged), which may land after Ready was written by the handler.
    def kopf_done() -> dict[str, Any] | None:
        o = env.get("orders") or {}
        kopf_keys = {k for k in (o.get("metadata") or {}).get("annotations") or {}
                     if k.startswith("operator.shardcdc.io/")}
        kopf_keys.discard("operator.shardcdc.io/kopf-managed")  # kopf's marker, written with its first patch
        return o if kopf_keys == {"operator.shardcdc.io/last-handled-configuration"} else None

    obj = wait_for(kopf_done, 20, "kopf to finish the creation cycle")
    rv = obj["metadata"]["resourceVersion"]
    dep_rvs = {n: d["metadata"]["resourceVersion"] for n, d in deps.items()}
    start = env.nodes.reads("orders-g0-t0")
    wait_for(lambda: env.nodes.reads("orders-g0-t0") >= start + 4, 20, "four more reconciles")
    after = env.get("orders")
    assert after is not None and after["metadata"]["resourceVersion"] == rv
    assert {n: d["metadata"]["resourceVersion"] for n, d in env.children("deployments", "orders").items()} == dep_rvs


def pod_properties(dep: dict[str, Any], cm: dict[str, Any]) -> set[str]:
    """The ``key=value`` lines a task's worker reads: its generation's file, then its own identity
    from the pod's ``SHARDCDC_*`` environment (which wins)."""
    from cdcworker.config.loader import env_to_property, is_reserved_env

    (container,) = dep["spec"]["template"]["spec"]["containers"]
    own = {env_to_property(e["name"]): e["value"] for e in container["env"]
           if e["name"].startswith("SHARDCDC_") and "value" in e and not is_reserved_env(e["name"])}
    lines = [line for line in cm["data"]["worker.properties"].splitlines() if line.split("=", 1)[0] not in own]
    return {*lines, *(f"{k}={v}" for k, v in own.items())}


def test_kubectl_scale_starts_the_next_generation_after_a_drain(env: Env) -> None:
    env.sim.create_keyspace("scaled", 4)
    env.apply(connector("scaled", "scaled", env, tasks=2, vtctld=True))
    env.wait_condition("scaled", "Ready", "True")
    a0 = env.assignment("scaled")
    assert [t["shards"] for t in a0["taskStates"]] == [["-40", "80-c0"], ["40-80", "c0-"]]

    env.kubectl("scale", "cdc/scaled", "--replicas=4")
    a1 = env.wait_generation("scaled", 1)
    assert (a1["tasks"], a1["previousTasks"]) == (4, 2)
    assert [t["shards"] for t in a1["taskStates"]] == [["-40"], ["40-80"], ["80-c0"], ["c0-"]]
    env.wait_condition("scaled", "Ready", "True", "AllTasksStreaming")
    # Generation 0's Deployments went at the drain; its ConfigMap after the start, once nothing waits.
    deps = env.children("deployments", "scaled")
    assert sorted(deps) == [f"scaled-g1-t{i}" for i in range(4)]
    wait_for(lambda: sorted(env.children("configmaps", "scaled")) == ["scaled-g1-workers"],
             20, "generation 0's ConfigMap removed")
    cm = pod_properties(deps["scaled-g1-t2"], env.children("configmaps", "scaled")["scaled-g1-workers"])
    assert {"shardcdc.task.generation=1", "vitess.prev.num.tasks=2", "tasks.max=4",
            "vitess.offset.storage.task.key.gen=1", "shardcdc.task.shards=80-c0", "shardcdc.task.history=0:2"} <= set(cm)
    # Never two generations at once.
    seen = [g for c, g in env.nodes.live_generations if c == "scaled"]
    assert frozenset({0}) in seen and frozenset({1}) in seen
    assert all(len(g) == 1 for g in seen)

    def drained() -> None:
        events = env.events("scaled")
        reasons = [r for _, r, _ in events]
        assert "Draining" in reasons, reasons
        i = reasons.index("Draining")
        assert "GenerationStarted" in reasons[i:] and "Deleted" in reasons[i:], reasons
        assert [m for _, r, m in events if r == "StoppedWorker"] == [
            "deleted the Deployments of generation 0 to drain it (its ConfigMap stays until every worker has "
            "exited): scaled-g0-t0, scaled-g0-t1"]
        assert [m for _, r, m in events if r == "Deleted"] == [
            "deleted the ConfigMap of generation 0 (it has exited): scaled-g0-workers"]
        assert next(m for _, r, m in events if r == "Draining") == (
            "stopping the 2 workers of generation 0 to start generation 1; tasks 2 -> 4 (Scale)")

    eventually(drained, 20, "the scale's events")
    # Back to 2: generation 2 also records generation 0 (kept by the status schema), and its workers
    # get it, so a generation-1 task that never stored an offset cannot block them.
    env.kubectl("scale", "cdc/scaled", "--replicas=2")
    a2 = env.wait_generation("scaled", 2)
    assert (a2["tasks"], a2["previousTasks"]) == (2, 4)
    assert a2["history"] == [{"generation": 1, "tasks": 4}, {"generation": 0, "tasks": 2}]
    # The generation record is stored before its objects are made (write-ahead): wait for them.
    dep2 = wait_for(lambda: env.children("deployments", "scaled").get("scaled-g2-t1"), 15, "generation 2's objects")
    cm2 = pod_properties(dep2, env.children("configmaps", "scaled")["scaled-g2-workers"])
    assert {"vitess.prev.num.tasks=4", "shardcdc.task.history=1:4,0:2"} <= set(cm2)


def test_reshard_waits_for_the_journal_then_follows_it(env: Env) -> None:
    env.sim.create_keyspace("rs", ["-80", "80-"])
    env.apply(connector("resharded", "rs", env, tasks=2))
    env.wait_condition("resharded", "Ready", "True")
    env.sim.reshard("rs", 4)
    awaiting = env.wait_condition("resharded", "Resharding", "True", "AwaitingJournal")
    assert awaiting["message"] == ("shards -80, 80- are no longer serving; waiting for their workers to reach "
                                   "the reshard journal")
    assert env.assignment("resharded")["generation"] == 0
    positions = env.sim.positions("rs")
    targets = ["-40", "40-80", "80-c0", "c0-"]
    journal = {"journal": {"participants": ["-80", "80-"], "positions": {s: positions[s] for s in targets}}}
    # Task 0 says so in its status document, task 1 in its container's termination message.
    env.nodes.set_doc("resharded-g0-t0", {**streaming_doc(), "state": "reassignment_needed", **journal})
    env.nodes.exit_pod("resharded-g0-t1", exitcodes.REASSIGNMENT_NEEDED, json.dumps(journal))

    a1 = env.wait_generation("resharded", 1)
    assert (a1["tasks"], a1["previousTasks"], a1["shards"]) == (2, 2, targets)
    assert [t["shards"] for t in a1["taskStates"]] == [["-40", "80-c0"], ["40-80", "c0-"]]
    assert a1["journalPositions"] == [{"shard": s, "gtid": positions[s]} for s in sorted(targets)]
    env.wait_condition("resharded", "Ready", "True", "AllTasksStreaming")
    env.wait_condition("resharded", "Resharding", "False", "NoReshard")
    # Stopped one by one (a reshard), generation 0's Deployments go after the start, once nothing waits.
    wait_for(lambda: sorted(env.children("deployments", "resharded")) == ["resharded-g1-t0", "resharded-g1-t1"],
             20, "generation 0's Deployments removed")

    def started() -> None:  # kopf posts Events from a background task: they may trail the status
        started = [m for _, r, m in env.events("resharded") if r == "GenerationStarted"]
        assert started[-1:] == ["generation 1 started: 2 tasks over 4 shards (previous tasks 2; Reshard)"]

    eventually(started, 20, "the GenerationStarted event")


def test_pause_resume_and_restart_annotation(env: Env) -> None:
    env.sim.create_keyspace("pp", ["-80", "80-"])
    env.apply(connector("pausable", "pp", env, tasks=2))
    env.wait_condition("pausable", "Ready", "True")
    env.kubectl("patch", "cdc/pausable", "--type=merge", "-p", '{"spec": {"state": "paused"}}')
    env.wait_condition("pausable", "Paused", "True", "Paused")
    wait_for(lambda: all(d["spec"]["replicas"] == 0 for d in env.children("deployments", "pausable").values()),
             20, "workers scaled to zero")
    wait_for(lambda: env.assignment("pausable").get("phase") == "Paused", 20, "assignment phase Paused")
    ready = env.wait_condition("pausable", "Ready", "False", "Paused")
    assert ready["message"] == "connector is paused"
    assert sorted(env.children("configmaps", "pausable")) == ["pausable-g0-workers"]

    env.kubectl("patch", "cdc/pausable", "--type=merge", "-p", '{"spec": {"state": "running"}}')
    env.wait_condition("pausable", "Ready", "True", "AllTasksStreaming")
    assert env.assignment("pausable")["generation"] == 0
    paused = env.condition("pausable", "Paused")
    assert paused is not None and (paused["status"], paused["reason"]) == ("False", "Running")

    env.kubectl("annotate", "cdc/pausable", "shardcdc.io/restart=task=1")
    wait_for(lambda: "shardcdc.io/restart" not in ((env.get("pausable") or {})["metadata"].get("annotations") or {}),
             20, "the one-shot annotation removed")
    deps = env.children("deployments", "pausable")
    tpl = {n: d["spec"]["template"]["metadata"].get("annotations") or {} for n, d in deps.items()}
    assert "shardcdc.io/restartedAt" in tpl["pausable-g0-t1"]
    assert "shardcdc.io/restartedAt" not in tpl["pausable-g0-t0"]
    wait_for(lambda: env.nodes.pods_created.get("pausable-g0-t1") == 3, 20, "task 1's pod recreated")
    assert env.nodes.pods_created["pausable-g0-t0"] == 2  # once at start, once after the resume
    env.wait_condition("pausable", "Ready", "True", "AllTasksStreaming")

    # "all" (given right after the one-task restart): every task's template gets the same new stamp,
    # so every pod is recreated once more, in the same generation and the same Deployments.
    task1_stamp = tpl["pausable-g0-t1"]["shardcdc.io/restartedAt"]
    env.kubectl("annotate", "cdc/pausable", "shardcdc.io/restart=all")
    wait_for(lambda: "shardcdc.io/restart" not in ((env.get("pausable") or {})["metadata"].get("annotations") or {}),
             20, "the one-shot annotation removed")
    deps = env.children("deployments", "pausable")
    assert sorted(deps) == ["pausable-g0-t0", "pausable-g0-t1"]
    stamps = {n: d["spec"]["template"]["metadata"]["annotations"]["shardcdc.io/restartedAt"] for n, d in deps.items()}
    assert stamps["pausable-g0-t0"] == stamps["pausable-g0-t1"] != task1_stamp
    wait_for(lambda: (env.nodes.pods_created.get("pausable-g0-t0"), env.nodes.pods_created.get("pausable-g0-t1"))
             == (3, 4), 20, "both pods recreated")
    env.wait_condition("pausable", "Ready", "True", "AllTasksStreaming")
    assert env.assignment("pausable")["generation"] == 0

    def restarted() -> None:
        assert [m for _, r, m in env.events("pausable") if r == "Restarted"] == [
            "restarted task 1 of generation 0", "restarted tasks 0, 1 of generation 0"]

    eventually(restarted, 20, "the Restarted events")
    # stopped: like paused, and once every worker has exited the offsets are recorded as final.
    env.kubectl("patch", "cdc/pausable", "--type=merge", "-p", '{"spec": {"state": "stopped"}}')
    a = wait_for(lambda: (a := env.assignment("pausable")).get("stoppedCleanly") and a, 20, "stoppedCleanly")
    assert (a["phase"], a["generation"]) == ("Stopped", 0)
    assert [t["phase"] for t in a["taskStates"]] == ["Exited", "Exited"]

    def state_changes() -> None:
        reasons = [r for _, r, _ in env.events("pausable")]
        assert [r for r in reasons if r in ("Paused", "Resumed", "Restarted", "Stopped", "StoppedCleanly")] == [
            "Paused", "Resumed", "Restarted", "Restarted", "Stopped", "StoppedCleanly"]

    eventually(state_changes, 20, "the state changes' events")


class SlamDoor:
    """A TCP listener that accepts and closes at once (a VTGate that is down), counting attempts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


class Tarpit:
    """A TCP listener that accepts and holds each connection ``hold`` seconds, then closes it (a hung VTGate)."""

    def __init__(self, hold: float) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.hold = hold
        self.accepted = 0
        self._closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        self._closed.wait(self.hold)
        conn.close()

    def close(self) -> None:
        self._closed.set()
        self.sock.close()


def test_deletion_is_not_held_by_a_resync_in_flight(env: Env) -> None:
    """Deleting while the resync timer is mid-reconcile (here: a discovery that hangs for 3 s).

    kopf stops the timer when deletion starts; a timer that does not exit at once is polled every
    ``settings.background.cancellation_polling`` seconds (60 by default) before the finalizer may go,
    and nothing else touches the object meanwhile. The operator polls every second instead.
    """
    pit = Tarpit(hold=3.0)
    try:
        body = connector("hung", "hung", env)
        body["spec"]["source"]["vitess"]["vtgate"] = f"127.0.0.1:{pit.port}"
        env.apply(body)
        env.wait_condition("hung", "Degraded", "True", "SourceUnreachable", timeout=30)
        # A resync's discovery is in flight (it holds the connector's lock for up to 3 s).
        n = pit.accepted
        wait_for(lambda: pit.accepted > n, 20, "a resync in flight")
        env.kubectl("delete", "cdc/hung", "--wait=false")
        wait_for(lambda: env.get("hung") is None, 15, "the connector to be deleted (finalizer removed)")
        # The delete handler ran once (a second run would repeat its events); events post asynchronously.
        wait_for(lambda: [r for _, r, _ in env.events("hung") if r in ("Deleted", "OffsetsKept")] == [
            "Deleted", "OffsetsKept"], 10, "the delete handler's events")
    finally:
        pit.close()


def test_unreachable_source_is_a_clear_condition_and_one_warning(env: Env) -> None:
    door = SlamDoor()
    body = connector("nowhere", "nowhere", env)
    body["spec"]["source"]["vitess"]["vtgate"] = f"127.0.0.1:{door.port}"
    env.apply(body)
    degraded = env.wait_condition("nowhere", "Degraded", "True", "SourceUnreachable")
    assert degraded["message"].startswith(
        f"cannot list the shards of keyspace nowhere: vtgate SHOW VITESS_SHARDS at 127.0.0.1:{door.port} failed: "
        "UNAVAILABLE")
    assert env.children("deployments", "nowhere") == {}
    assert env.assignment("nowhere") == {}
    # Planned again on every resync (each asks the source anew), reported once.
    n = door.accepted
    wait_for(lambda: door.accepted >= n + 4, 20, "more discovery attempts")

    def one_warning() -> None:  # kopf's background task posts it: it may trail the condition
        assert [(t, r) for t, r, _ in env.events("nowhere")] == [("Warning", "SourceUnreachable")]

    eventually(one_warning, 20, "one SourceUnreachable warning")
    door.sock.close()


def test_deletion_removes_children_and_keeps_offsets(env: Env) -> None:
    env.sim.create_keyspace("gone", ["-80", "80-"])
    env.apply(connector("doomed", "gone", env, tasks=2))
    # DeleteOffsets on a SASL cluster without rbac.kafkaSecrets: the operator cannot read the
    # credentials, so it says so and which switch would let it.
    secured = connector("secured", "gone", env, tasks=1, deletionPolicy="DeleteOffsets")
    secured["spec"]["kafka"].update(securityProtocol="SASL_SSL",
                                    securitySecretRef={"name": "kafka", "properties": ["sasl.jaas.config"]})
    env.apply(secured)
    env.wait_condition("doomed", "Ready", "True")
    env.wait_condition("secured", "Ready", "True")
    env.kubectl("delete", "cdc/doomed", "cdc/secured", "--wait=false")
    wait_for(lambda: env.get("doomed") is None, 15, "the connector to be deleted (finalizer removed)")
    # Offsets are touched only after the worker pods are gone (FakeNodes removes them after their Deployment).
    wait_for(lambda: env.get("secured") is None, 15, "the DeleteOffsets connector to be deleted")
    assert env.children("deployments", "secured") == {} and env.children("configmaps", "secured") == {}
    assert env.children("deployments", "doomed") == {} and env.children("configmaps", "doomed") == {}

    def deletion_events() -> None:  # posted by kopf's background task, possibly after the finalizer went
        assert [(t, m) for t, r, m in env.events("secured") if r.startswith("Offsets")] == [
            ("Warning", "offsets of secured in topic shardcdc-offsets were kept: the Kafka cluster of secured needs "
                        "the credentials in Secret shop/kafka, which the operator reads only when installed with "
                        "rbac.kafkaSecrets=true; delete the records with `shardcdc offsets reset`")]
        msgs = {r: m for _, r, m in env.events("doomed")}
        assert msgs.get("Deleted") == ("removed 3 worker objects: deployments/doomed-g0-t0, deployments/doomed-g0-t1, "
                                       "configmaps/doomed-g0-workers")
        assert msgs.get("OffsetsKept") == "offsets are kept (spec.deletionPolicy: Retain)"

    eventually(deletion_events, 20, "the deletion's events")


def test_offsets_lost_condition_and_restore_on_the_api_server(env: Env) -> None:
    """Issue 28, case 7 through the API server: the operator flags a task that reported positions
    (ConfigMap <name>-positions, read by the worker through an optional configMapKeyRef), turns a
    worker's OffsetsLost exit into the condition with the last known positions, and on
    ``shardcdc.io/offsets-lost=restore`` writes them back under the task's key and restarts it."""
    from cdcoperator.model import ConnectorResource
    from cdcworker.offsets import OffsetPartition, Vgtid
    from cdcworker.offsets.store import OffsetStore

    env.sim.create_keyspace("ol", ["-80", "80-"])
    # Its own offsets topic, which no (fake) worker made: restore makes it as the workers would.
    env.apply(connector("lostoffs", "ol", env, tasks=1, kafka={
        "bootstrapServers": env.bootstrap, "topicPrefix": "lostoffs", "offsetsTopic": "lostoffs-offsets"},
        config={"offset.storage.replication.factor": "1", "offset.storage.partitions": "1"}))
    env.wait_condition("lostoffs", "Ready", "True")
    shards = [{"shard": "-80", "durable_gtid": "MySQL56/a:1-9"}, {"shard": "80-", "durable_gtid": "MySQL56/b:1-4"}]
    env.nodes.set_doc("lostoffs-g0-t0", {**streaming_doc(), "shards": shards})

    def flags() -> dict[str, str] | None:
        cm = env.kube.request("GET", f"/api/v1/namespaces/{NS}/configmaps/lostoffs-positions", allow=(404,))
        return (cm or {}).get("data")

    wait_for(lambda: flags() == {"task-0-0": "true"}, 20, "the task flagged as having stored positions")
    (container,) = env.children("deployments", "lostoffs")["lostoffs-g0-t0"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "SHARDCDC_SHARDCDC_TASK_OFFSETS_EXPECTED", "valueFrom": {"configMapKeyRef": {
        "name": "lostoffs-positions", "key": "task-0-0", "optional": True}}} in container["env"]

    env.nodes.exit_pod("lostoffs-g0-t0", 1, json.dumps({"error": "OffsetsLost: ...", "reason": "OffsetsLost"}))
    cond = env.wait_condition("lostoffs", "Ready", "False", "OffsetsLost")
    assert "Last known positions: task 0 (key task0_1_0): -80@MySQL56/a:1-9;80-@MySQL56/b:1-4." in cond["message"]
    degraded = env.condition("lostoffs", "Degraded")
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "OffsetsLost")

    created = env.nodes.pods_created["lostoffs-g0-t0"]
    env.nodes.recover("lostoffs-g0-t0")  # from its next start the worker finds its offsets (the restore's)
    env.kubectl("annotate", "cdc/lostoffs", "shardcdc.io/offsets-lost=restore")
    wait_for(lambda: "shardcdc.io/offsets-lost" not in ((env.get("lostoffs") or {})["metadata"].get("annotations")
                                                        or {}), 20, "the annotation acted on and removed")
    cr = ConnectorResource.from_body(env.get("lostoffs") or {})
    with OffsetStore({"bootstrap.servers": env.bootstrap}, cr.spec.kafka.offsets_topic) as store:
        store.load()
        stored = store.get("lostoffs", OffsetPartition.for_task("lostoffs", 0, 1, 0))

    def restored() -> None:  # kopf posts Events from a background task: they may trail the annotation's removal
        said = {r: m for _, r, m in env.events("lostoffs")}
        assert said.get("OffsetsRestored") == ("wrote back the last known positions: "
                                               "task0_1_0: -80@MySQL56/a:1-9;80-@MySQL56/b:1-4"), said

    eventually(restored, 20, "the OffsetsRestored event")
    assert stored is not None and stored.vgtid == Vgtid.of("ol", {"-80": "MySQL56/a:1-9", "80-": "MySQL56/b:1-4"})
    wait_for(lambda: env.nodes.pods_created["lostoffs-g0-t0"] > created, 20, "the task restarted")
    env.wait_condition("lostoffs", "Ready", "True")
    assert flags() == {"task-0-0": "true"}
