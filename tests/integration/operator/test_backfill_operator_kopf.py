"""Backfills through the running operator (kopf, ``cdcoperator.handlers`` -> ``reconcile``) against a
real kube-apiserver, under the chart's least-privilege identity (``operator/rbac.yaml``).

A CdcConnector with ``spec.backfills[]`` gets its SparkApplication (engine ``sparkOperator``;
validated by the spark-operator v2.3.0 release's own CRD, `make spark-crd`) or its spark-submit Job (engine
``sparkSubmit``); the state set on those objects (as the spark-operator / the Job controller would)
moves ``status.backfills[]`` and the ``BackfillRunning`` condition; removing an entry deletes its
objects. Connectors without backfills get no ``BackfillRunning`` condition (the other operator tests
compare conditions exactly).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import FakeNodes, env_var, operator_runner, wait_for
from test_backfill_operator import install_spark_crd

from cdcoperator.apply import KubeApi
from kubetest import KubeControlPlane, kube_control_plane_fixture
from kubetest.controlplane import free_port
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"
RBAC_PATH = ROOT / "operator" / "rbac.yaml"
NS = "bfkopf"
IDENTITY_NS, IDENTITY = "bfkopf-system", "bfkopf-operator"


class Env:
    def __init__(self, plane: KubeControlPlane, sim: VTGateSim, kube: KubeApi, bootstrap: str, liveness: str) -> None:
        self.plane, self.sim, self.kube, self.bootstrap, self.liveness = plane, sim, kube, bootstrap, liveness

    def reconciles(self) -> int:
        try:
            with urllib.request.urlopen(self.liveness, timeout=5) as resp:
                return int(json.load(resp)["reconciles"])
        except OSError:
            return -1

    def kubectl(self, *args: str, input: str | None = None) -> str:
        r = self.plane.kubectl("-n", NS, *args, input=input)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        prefix = {"cdcconnectors": "/apis/shardcdc.io/v1alpha1", "sparkapplications": "/apis/sparkoperator.k8s.io/v1beta2",
                  "jobs": "/apis/batch/v1", "configmaps": "/api/v1"}[plural]
        return self.kube.request("GET", f"{prefix}/namespaces/{NS}/{plural}/{name}", allow=(404,))

    def status(self, name: str) -> dict[str, Any]:
        return dict((self.get("cdcconnectors", name) or {}).get("status") or {})

    def backfills(self, name: str) -> list[tuple[str, str]]:
        return [(e["id"], e["phase"]) for e in self.status(name).get("backfills") or ()]

    def condition(self, name: str) -> tuple[str, str] | None:
        for c in self.status(name).get("conditions") or ():
            if c["type"] == "BackfillRunning":
                return c["status"], c["reason"]
        return None

    def connector(self, name: str, keyspace: str, engine: str, backfills: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "shardcdc.io/v1alpha1",
            "kind": "CdcConnector",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"vitess": {"vtgate": self.sim.address, "keyspace": keyspace}},
                     "kafka": {"bootstrapServers": self.bootstrap, "topicPrefix": name}, "tasks": 1,
                     "snapshot": {"mode": "never", "backfill": {"engine": engine, "spark": {"image": "shardcdc-spark:t"}}},
                     "backfills": backfills},
        }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker) -> Iterator[Env]:
    with VTGateSim() as sim:
        for plane in kube_control_plane_fixture():
            # operator/rbac.yaml's rules under names of our own: the control plane is shared with the
            # other operator tests, which install that identity themselves.
            rbac = RBAC_PATH.read_text().replace("shardcdc-system", IDENTITY_NS).replace("shardcdc-operator", IDENTITY)
            plane.ensure_namespace(IDENTITY_NS)
            plane.ensure_namespace(NS)
            plane.kubectl("apply", "-f", str(CRD_PATH), check=True)
            install_spark_crd(plane)
            plane.kubectl("apply", "-f", "-", input=rbac, check=True)
            plane.wait_established("cdcconnectors.shardcdc.io", "sparkapplications.sparkoperator.k8s.io")
            token = plane.service_account_token(IDENTITY_NS, IDENTITY)
            sa_config = plane.write_kubeconfig(tmp_path_factory.mktemp("sa") / "operator.kubeconfig",
                                               user=IDENTITY, token=token, namespace=NS)
            liveness = f"http://127.0.0.1:{free_port()}/healthz"
            with plane.api_client() as admin, FakeNodes(KubeApi(admin), NS) as nodes:
                with (
                    env_var("SHARDCDC_OPERATOR_RESYNC_SECONDS", "0.5"),
                    plane.kubeconfig_env(sa_config),
                    operator_runner(NS, liveness, timeout=30) as runner,
                ):
                    e = Env(plane, sim, KubeApi(admin), kafka_broker.bootstrap, liveness)
                    wait_for(lambda e=e: e.reconciles() >= 0, 30, "the operator's liveness endpoint")
                    yield e
                assert nodes.errors == []
            assert runner.exception is None, runner.output[-3000:]
            assert "Forbidden" not in runner.output, runner.output[-3000:]  # the chart's RBAC suffices


def test_spark_application_created_tracked_and_cancelled(env: Env) -> None:
    env.sim.create_keyspace("bfso", ["-80", "80-"])
    env.kubectl("apply", "-f", "-", input=json.dumps(env.connector("so", "bfso", "sparkOperator", [
        {"id": "b1", "tables": ["items"], "condition": "qty > 3"}, {"id": "b2", "tables": ["lines"]}])))
    uid = (env.get("cdcconnectors", "so") or {})["metadata"]["uid"]
    app = wait_for(lambda: env.get("sparkapplications", "so-bf-b1"), 30, "SparkApplication so-bf-b1")
    assert app["metadata"]["ownerReferences"][0]["uid"] == uid
    assert app["metadata"]["labels"]["shardcdc.io/backfill-of"] == "so"
    assert app["spec"]["arguments"][:4] == ["--config", "/etc/shardcdc/worker.properties", "--run-id", f"b1-{uid[:8]}"]
    assert env.get("configmaps", "so-bf-b1-config") is not None
    wait_for(lambda: env.backfills("so") == [("b1", "Pending"), ("b2", "Pending")], 30, "both Pending")
    assert env.condition("so") == ("True", "BackfillInProgress")
    # The workers are reconciled as always next to the backfills.
    wait_for(lambda: env.get("configmaps", "so-g0-workers"), 30, "the workers' ConfigMap")

    # The spark-operator moves the application along; the status follows at the next resync.
    def set_state(name: str, state: str) -> None:
        env.kubectl("patch", "sparkapplication", name, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"driverInfo": {}, "applicationState": {"state": state}, "terminationTime": "2026-01-02T03:04:05Z"}}))

    set_state("so-bf-b1", "RUNNING")
    wait_for(lambda: env.backfills("so")[0] == ("b1", "Running"), 30, "b1 Running")
    entry = env.status("so")["backfills"][0]
    assert entry["runName"] == "so-bf-b1" and entry["engine"] == "sparkOperator" and "startTime" in entry
    # One run at a time per connector (the workers hold one run per shard): b2 waits for b1.
    assert env.get("sparkapplications", "so-bf-b2") is None
    assert env.status("so")["backfills"][1]["message"].startswith("queued: starts when backfill b1 has finished")
    set_state("so-bf-b1", "COMPLETED")
    wait_for(lambda: env.get("sparkapplications", "so-bf-b2"), 30, "b2 started once b1 finished")
    set_state("so-bf-b2", "FAILED")
    wait_for(lambda: env.backfills("so") == [("b1", "Succeeded"), ("b2", "Failed")], 30, "b1 done, b2 failed")
    assert env.condition("so") == ("False", "BackfillFailed")
    done = env.status("so")["backfills"][0]
    assert done["completionTime"] == "2026-01-02T03:04:05Z"

    # Removing an entry cancels it: its objects are deleted and it leaves the status.
    env.kubectl("patch", "cdcconnector", "so", "--type=merge", "-p", json.dumps(
        {"spec": {"backfills": [{"id": "b1", "tables": ["items"], "condition": "qty > 3"}]}}))
    wait_for(lambda: env.get("sparkapplications", "so-bf-b2") is None and env.get("configmaps", "so-bf-b2-config")
             is None, 30, "b2 deleted")
    wait_for(lambda: env.backfills("so") == [("b1", "Succeeded")], 30, "b2 gone from the status")
    assert env.condition("so") == ("False", "BackfillsComplete")
    # A finished run is not resubmitted once its application is gone (the TTL removed it).
    env.kubectl("delete", "sparkapplication", "so-bf-b1")
    seen = env.status("so")
    after = env.reconciles() + 3  # both connectors resync every 0.5 s
    wait_for(lambda: env.reconciles() >= after, 30, "three more reconciles")
    assert env.get("sparkapplications", "so-bf-b1") is None
    assert env.status("so")["backfills"] == seen["backfills"]
    # Every backfill removed: b1's leftover ConfigMap goes too.
    env.kubectl("patch", "cdcconnector", "so", "--type=merge", "-p", json.dumps({"spec": {"backfills": []}}))
    wait_for(lambda: env.status("so").get("backfills") == [] and env.get("configmaps", "so-bf-b1-config") is None,
             30, "all cancelled")


def test_spark_submit_job_created_tracked_and_cancelled(env: Env) -> None:
    env.sim.create_keyspace("bfss", ["-"])
    env.kubectl("apply", "-f", "-", input=json.dumps(env.connector("ss", "bfss", "sparkSubmit", [
        {"id": "nightly", "tables": ["items"]}])))
    job = wait_for(lambda: env.get("jobs", "ss-bf-nightly"), 30, "Job ss-bf-nightly")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][4:6] == ["spark-submit", "--master"] and container["image"] == "shardcdc-spark:t"
    templates = env.get("configmaps", "ss-bf-nightly-templates")
    assert templates is not None and set(templates["data"]) == {"driver.yaml", "executor.yaml"}
    wait_for(lambda: env.backfills("ss") == [("nightly", "Pending")], 30, "Pending")
    # The Job controller reports an active pod.
    env.kubectl("patch", "job", "ss-bf-nightly", "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"active": 1, "startTime": "2026-01-02T03:04:05Z"}}))
    wait_for(lambda: env.backfills("ss") == [("nightly", "Running")], 30, "Running")
    assert env.condition("ss") == ("True", "BackfillInProgress")
    env.kubectl("patch", "cdcconnector", "ss", "--type=merge", "-p", json.dumps({"spec": {"backfills": []}}))
    wait_for(lambda: all(env.get(k, n) is None for k, n in (
        ("jobs", "ss-bf-nightly"), ("configmaps", "ss-bf-nightly-templates"), ("configmaps", "ss-bf-nightly-config"))),
        30, "Job and ConfigMaps deleted")
    wait_for(lambda: env.status("ss").get("backfills") == [] and env.condition("ss") == ("False", "NoBackfill"),
             30, "status emptied")



def test_signals_launch_track_and_cancel_spark_runs(env: Env) -> None:
    """An execute-snapshot signal (as a worker hands it over: a record in the progress topic) makes
    the running operator create a SparkApplication like a spec entry's; the counts in
    status.backfills come from the job's records; stop-snapshot deletes it."""
    from confluent_kafka import Producer

    from cdcworker.backfill.progress import ChunkDone, PlanRecord
    from cdcworker.backfill.spec import Chunk
    from cdcworker.signals.forward import BackfillSignalForwarder
    from cdcworker.snapshot import SnapshotRequest

    env.sim.create_keyspace("bfsig", ["-"])
    body = env.connector("sg", "bfsig", "sparkOperator", [])
    body["spec"]["config"] = {"signal.data.collection": "bfsig.dbz_signal"}
    env.kubectl("apply", "-f", "-", input=json.dumps(body))
    uid = (env.get("cdcconnectors", "sg") or {})["metadata"]["uid"]
    topic = "sg.backfill-progress"
    worker = BackfillSignalForwarder({"bootstrap.servers": env.bootstrap}, topic, "bfsig", 1)
    try:
        worker.forward("nightly-fix", "execute-snapshot", SnapshotRequest("nightly-fix", ("bfsig.items",)))
        app = wait_for(lambda: env.get("sparkapplications", "sg-bf-sig-nightly-fix"), 30, "the signal's application")
        assert app["spec"]["arguments"] == ["--config", "/etc/shardcdc/worker.properties",
                                            "--run-id", f"sig-nightly-fix-{uid[:8]}", "--table", "items",
                                            "--await-holds"]
        run = f"sig-nightly-fix-{uid[:8]}"
        producer = Producer({"bootstrap.servers": env.bootstrap})
        for rec in (PlanRecord(run, "bfsig", "-", "items", ("id",), 2, 50, "even"),
                    ChunkDone(Chunk(run, "bfsig", "-", "items", 0, ("id",), None, None), 30, "l", "h", 0, 1767323045000)):
            producer.produce(topic, rec.value(), rec.key())
        assert producer.flush(30) == 0
        entry = wait_for(lambda: next((e for e in env.status("sg").get("backfills") or ()
                                       if e.get("chunksDone") == 1), None), 30, "counts from the progress topic")
        assert (entry["id"], entry["phase"], entry["chunksTotal"], entry["rows"], entry["signalId"]) == (
            "sig-nightly-fix", "Pending", 2, 30, "nightly-fix")
        assert env.condition("sg") == ("True", "BackfillInProgress")
        worker.forward("stop-all", "stop-snapshot", None, ())
        wait_for(lambda: env.get("sparkapplications", "sg-bf-sig-nightly-fix") is None, 30, "application deleted")
        wait_for(lambda: env.backfills("sg") == [("sig-nightly-fix", "Cancelled")], 30, "Cancelled")
        assert env.condition("sg") == ("False", "BackfillsComplete")
    finally:
        worker.close()
