"""Launching backfills: SparkApplication / spark-submit Job builders, Spark state -> status, and
the objects against a real kube-apiserver (creation, ownership, status mapping, cancellation)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import wait_for

from cdcoperator import backfill as bf
from cdcoperator.backfillfeed import FEEDS
from cdcoperator.backfillrelease import Release, running, to_release
from cdcoperator.model import ConnectorResource
from kubetest import KubeControlPlane, kube_control_plane_fixture

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"
NS = "backfills"
NOW = "2026-01-02T03:04:05Z"


def body(engine: str = "sparkOperator", mode: str = "never", uid: str = "0123456789abcdef", **spark: Any) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1",
        "kind": "CdcConnector",
        "metadata": {"name": "orders", "namespace": NS, "uid": uid, "generation": 1},
        "spec": {
            "source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "commerce",
                                  "credentialsSecretRef": {"name": "vt", "usernameKey": "u", "passwordKey": "p"}}},
            "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "orders"},
            "snapshot": {"mode": mode, "backfill": {"engine": engine, "spark": {
                "image": "shardcdc-spark:1", "executorInstances": 3, "chunkSize": 20000, **spark}}},
            "backfills": [{"id": "b1", "tables": ["items", "lines"], "condition": "qty > 3"}],
        },
    }


def cr(**kw: Any) -> ConnectorResource:
    return ConnectorResource.from_body(body(**kw))


def test_requests_names_and_run_ids_are_deterministic() -> None:
    c = cr()
    assert [r.id for r in bf.desired_requests(c)] == ["b1"]
    assert [r.id for r in bf.desired_requests(cr(mode="initial"))] == ["initial", "b1"]
    assert bf.run_name("orders", "b1") == "orders-bf-b1"
    long = bf.run_name("a" * 60, "b" * 40)
    assert len(long) <= bf.MAX_RUN_NAME and long == bf.run_name("a" * 60, "b" * 40)
    assert bf.run_id(c, "b1") == "b1-01234567"
    req = c.spec.backfills[0]
    assert bf.job_arguments(c, req) == [
        "--config", "/etc/shardcdc/worker.properties", "--run-id", "b1-01234567", "--table", "items",
        "--table", "lines", "--condition", "(items|lines)=qty > 3", "--chunk-size", "20000", "--await-holds"]
    # The hand-shake is asked for only when the connector has workers to hold the tables back.
    stopped = body()
    stopped["spec"]["state"] = "stopped"
    assert "--await-holds" not in bf.job_arguments(ConnectorResource.from_body(stopped), req)


def test_spark_application_spec() -> None:
    c = cr()
    app = bf.build_spark_application(c, c.spec.backfills[0], ttl_seconds=600)
    assert (app["apiVersion"], app["kind"], app["metadata"]["name"]) == (
        "sparkoperator.k8s.io/v1beta2", "SparkApplication", "orders-bf-b1")
    owner = app["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("CdcConnector", "0123456789abcdef", True)
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["image"], spec["mainApplicationFile"], spec["timeToLiveSeconds"]) == (
        "Python", "cluster", "shardcdc-spark:1", bf.SPARK_MAIN, 600)
    assert spec["executor"]["instances"] == 3 and spec["driver"]["labels"]["shardcdc.io/backfill"] == "b1"
    assert spec["restartPolicy"]["type"] == "OnFailure"
    # Retries after a failure, never a speculative attempt beside a live one (nothing fences it).
    assert spec["sparkConf"]["spark.speculation"] == "false"
    # Credentials reach the pods as projected Secret files, never in the ConfigMap.
    cm = bf.build_config_map(c, c.spec.backfills[0])
    props = cm["data"]["worker.properties"]
    assert "database.password=${file:/etc/shardcdc/secrets/vitess-credentials/p}" in props
    assert "shardcdc.task" not in props and "tasks.max" not in props
    sources = spec["volumes"][0]["projected"]["sources"]
    assert sources[0]["configMap"]["name"] == "orders-bf-b1-config" and sources[1]["secret"]["name"] == "vt"


def test_spark_submit_job_and_pod_templates() -> None:
    c = cr(engine="sparkSubmit")
    objs = bf.build_objects(c, c.spec.backfills[0])
    assert [o["kind"] for o in objs] == ["ConfigMap", "ConfigMap", "Job"]
    job = objs[2]
    container = job["spec"]["template"]["spec"]["containers"][0]
    wrapper, cmd = container["command"][:4], container["command"][4:]
    assert wrapper == ["/bin/sh", "-c", bf.KILL_ON_TERM, "spark-submit-job"]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "SHARDCDC_SPARK_DRIVER": f"{NS}:orders-bf-b1-driver",
        "SHARDCDC_SPARK_MASTER": "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}
    assert "spark.kubernetes.driver.pod.name=orders-bf-b1-driver" in cmd
    assert cmd[:4] == ["spark-submit", "--master", "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
                       "--deploy-mode"]
    assert "spark.kubernetes.driver.podTemplateFile=/tmpl/driver.yaml" in cmd
    assert "spark.kubernetes.driver.label.shardcdc.io/backfill=b1" in cmd
    assert "spark.speculation=false" in cmd
    assert cmd[cmd.index(bf.SPARK_MAIN) + 1:][:4] == ["--config", "/etc/shardcdc/worker.properties", "--run-id", "b1-01234567"]
    driver = json.loads(objs[1]["data"]["driver.yaml"])
    assert driver["metadata"]["ownerReferences"][0]["uid"] == "0123456789abcdef"
    assert driver["metadata"]["labels"]["spark-role"] == "driver"
    # Spark makes the driver the executors' controller; a second controller reference is refused.
    executor = json.loads(objs[1]["data"]["executor.yaml"])
    assert "ownerReferences" not in executor["metadata"]
    assert executor["metadata"]["labels"]["spark-role"] == "executor"
    assert bf.build_objects(cr(engine="local"), c.spec.backfills[0]) == []


def _fake_spark_submit(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``spark-submit`` on PATH that logs its arguments; the submission runs until terminated."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "spark-submit"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$1" in --kill) exit 0 ;; --exit) exit "$2" ;; esac
tail -f /dev/null & child=$!
trap 'echo terminated >> {log}; kill $child; exit 143' TERM
touch {tmp_path}/started
wait $child
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
           "SHARDCDC_SPARK_DRIVER": "ns:orders-bf-b1-driver", "SHARDCDC_SPARK_MASTER": "k8s://https://10.0.0.1:443"}
    return env, log


def test_spark_submit_job_kills_its_application_when_the_job_is_deleted(tmp_path: Path) -> None:
    """Deleting the Job terminates its pod (SIGTERM): the entrypoint kills the Spark application
    (driver pod) as Spark documents, then stops spark-submit; the exit status is spark-submit's."""
    env, log = _fake_spark_submit(tmp_path)
    proc = subprocess.Popen(["/bin/sh", "-c", bf.KILL_ON_TERM, "spark-submit-job", "spark-submit", "--master",
                             "k8s://x", "--deploy-mode", "cluster", "main.py", "--condition", "a = 'b c'"], env=env)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), 10, "spark-submit running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 143
    finally:
        proc.kill()
    assert log.read_text().splitlines() == [
        "--master k8s://x --deploy-mode cluster main.py --condition a = 'b c'",
        "--kill ns:orders-bf-b1-driver --master k8s://https://10.0.0.1:443",
        "terminated",
    ]


def test_spark_submit_job_exits_with_spark_submits_status(tmp_path: Path) -> None:
    env, log = _fake_spark_submit(tmp_path)
    done = subprocess.run(["/bin/sh", "-c", bf.KILL_ON_TERM, "spark-submit-job", "spark-submit", "--exit", "3"],
                          env=env, timeout=10)
    assert done.returncode == 3
    assert log.read_text().splitlines() == ["--exit 3"]  # no kill without a termination


@pytest.mark.parametrize(("state", "phase"), [
    (None, "Pending"), ("", "Pending"), ("SUBMITTED", "Running"), ("RUNNING", "Running"),
    ("PENDING_RERUN", "Running"), ("SUCCEEDING", "Running"), ("COMPLETED", "Succeeded"),
    ("FAILED", "Failed"), ("SUBMISSION_FAILED", "Failed"), ("SUSPENDED", "Pending"), ("UNKNOWN", "Running"),
])
def test_spark_states_map_to_phases(state: str | None, phase: str) -> None:
    app = None if state is None else {"status": {"applicationState": {"state": state, "errorMessage": "boom"}}}
    got = bf.phase_of_spark_application(app)
    assert got.phase == phase
    if phase == "Failed":
        assert got.message == "boom"


def test_job_status_and_backfill_condition() -> None:
    assert bf.phase_of_job(None).phase == "Pending"
    assert bf.phase_of_job({"status": {"active": 1}}).phase == "Running"
    done = bf.phase_of_job({"status": {"conditions": [{"type": "Complete", "status": "True"}],
                                       "completionTime": NOW}})
    assert (done.phase, done.finished_at) == ("Succeeded", NOW)
    assert bf.phase_of_job({"status": {"conditions": [{"type": "Failed", "status": "True",
                                                       "message": "BackoffLimitExceeded"}]}}).phase == "Failed"
    req = cr().spec.backfills[0]
    running = bf.status_entry(req, bf.Phase("Running"), None, "orders-bf-b1", None, NOW, {"chunksDone": 3, "chunksTotal": 9})
    assert running["startTime"] == NOW and "completionTime" not in running and running["chunksDone"] == 3
    later = bf.status_entry(req, bf.Phase("Succeeded", "ok"), None, "orders-bf-b1", running, "2026-01-02T04:00:00Z")
    assert later["startTime"] == NOW and later["completionTime"] == "2026-01-02T04:00:00Z" and later["chunksTotal"] == 9
    assert bf.backfill_condition([running]).status is True
    assert bf.backfill_condition([later]).reason == "BackfillsComplete"
    assert bf.backfill_condition([later, {"id": "x", "phase": "Failed"}]).reason == "BackfillFailed"
    assert bf.backfill_condition([]).reason == "NoBackfill"


# --- against the real API server ----------------------------------------------------------------------

def spark_crd_path() -> str:
    """The Kubeflow spark-operator's own SparkApplication CRD (`make spark-crd`, exported by make)."""
    path = os.environ.get("SHARDCDC_SPARK_CRD", "")
    if not Path(path).is_file():
        pytest.fail(f"SHARDCDC_SPARK_CRD={path!r} is not a file: run the tests through make (make spark-crd)")
    return path


def install_spark_crd(plane: KubeControlPlane) -> None:
    """Install the real CRD, so the API server validates SparkApplications by the schema users have.
    Server-side apply: its ~800 kB would not fit client-side apply's last-applied annotation."""
    plane.kubectl("apply", "--server-side", "-f", spark_crd_path(), check=True)


@pytest.fixture(scope="module", autouse=True)
def _no_feed_outlives_this_file() -> Iterator[None]:
    """The reconciles here start the operator's progress-topic tails (to ``kafka:9092``, which
    does not resolve); they would log their retries through every later test in this process."""
    yield
    FEEDS.close()


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        p.kubectl("create", "namespace", NS)
        p.kubectl("apply", "-f", str(CRD_PATH), check=True)
        install_spark_crd(p)
        p.wait_established("cdcconnectors.shardcdc.io", "sparkapplications.sparkoperator.k8s.io")
        yield p


def _apply(plane: KubeControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    out = plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _get(plane: KubeControlPlane, kind: str, name: str) -> dict[str, Any] | None:
    out = plane.kubectl("get", kind, name, "-n", NS, "-o", "json")
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_objects_are_accepted_owned_tracked_and_cancelled(plane: KubeControlPlane) -> None:
    live = body(engine="sparkOperator")
    del live["metadata"]["uid"], live["metadata"]["generation"]
    created = _apply(plane, live)
    c = ConnectorResource.from_body(created)
    req = c.spec.backfills[0]
    for obj in bf.build_objects(c, req) + bf.build_objects(ConnectorResource.from_body(
            {**created, "spec": {**created["spec"], "snapshot": {"mode": "never", "backfill": {
                "engine": "sparkSubmit", "spark": {"image": "shardcdc-spark:1"}}},
                "backfills": [{"id": "b2", "tables": ["items"]}]}}), bf.BackfillRequest("b2", ("items",))):
        got = _apply(plane, obj)  # the real API server validates Jobs, ConfigMaps and the CRs
        if obj["kind"] == "SparkApplication":  # by the spark-operator's own schema: nothing pruned
            assert got["spec"] == obj["spec"]
        assert got["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    # Idempotent submission: the deterministic name exists already.
    again = plane.kubectl("create", "-f", "-", input=json.dumps(bf.build_spark_application(c, req)))
    assert again.returncode != 0 and "AlreadyExists" in again.stderr
    # Status follows the state the spark-operator sets.
    name = bf.run_name(c.name, req.id)
    assert bf.phase_of_spark_application(_get(plane, "sparkapplication", name)).phase == "Pending"
    for state, phase in (("RUNNING", "Running"), ("FAILED", "Failed"), ("COMPLETED", "Succeeded")):
        patch = {"status": {"driverInfo": {}, "applicationState": {"state": state, "errorMessage": ""},
                            "terminationTime": NOW}}
        plane.kubectl("patch", "sparkapplication", name, "--subresource=status", "-n", NS, "--type=merge", "-p", json.dumps(patch), check=True)
        assert bf.phase_of_spark_application(_get(plane, "sparkapplication", name)).phase == phase
    entry = bf.status_entry(req, bf.phase_of_spark_application(_get(plane, "sparkapplication", name)),
                            bf.engine_of(c), name, None, NOW, {"chunksDone": 4, "chunksTotal": 4, "rows": 1000})
    status = {"status": {"backfills": [entry]}}
    plane.kubectl("patch", "cdcconnector", c.name, "-n", NS, "--subresource=status", "--type=merge",
                  "-p", json.dumps(status), check=True)
    stored = (_get(plane, "cdcconnector", c.name) or {})["status"]["backfills"][0]
    assert stored == entry  # every field is in the CRD schema (nothing pruned)
    # Cancellation: the request leaves the spec; its objects are the ones to delete.
    plane.kubectl("patch", "cdcconnector", c.name, "-n", NS, "--type=merge", "-p",
                  json.dumps({"spec": {"backfills": []}}), check=True)
    c2 = ConnectorResource.from_body(_get(plane, "cdcconnector", c.name) or {})
    listed = json.loads(plane.kubectl("get", "sparkapplications,jobs,configmaps", "-n", NS, "-l",
                                      bf.selector(c), "-o", "json", check=True).stdout)["items"]
    doomed = bf.to_cancel(c2, listed)
    assert {(o["kind"], o["metadata"]["name"]) for o in doomed} >= {("SparkApplication", name), ("Job", "orders-bf-b2")}
    for o in doomed:
        plane.kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "-n", NS, check=True)
    assert _get(plane, "sparkapplication", name) is None


def test_reconcile_backfills_creates_tracks_and_cancels(plane: KubeControlPlane) -> None:
    import asyncio

    from cdcoperator.apply import KubeApi

    live = body(engine="sparkOperator")
    live["metadata"] = {"name": "rec", "namespace": NS}
    created = _apply(plane, live)
    c = ConnectorResource.from_body(created)
    name = bf.run_name("rec", "b1")
    with plane.api_client() as client:
        kube = KubeApi(client)

        def step(cr: ConnectorResource, status: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
            return asyncio.run(bf.reconcile_backfills(kube, cr, status, NOW))

        entries, cond = step(c, {})
        assert _get(plane, "sparkapplication", name) is not None and _get(plane, "configmap", f"{name}-config")
        assert [(e["id"], e["phase"]) for e in entries] == [("b1", "Pending")] and cond.status is True
        assert step(c, {"backfills": entries})[0] == entries  # idempotent: nothing new, same status
        plane.kubectl("patch", "sparkapplication", name, "--subresource=status", "-n", NS, "--type=merge", "-p",
                      json.dumps({"status": {"driverInfo": {}, "applicationState": {"state": "RUNNING"}}}), check=True)
        entries, cond = step(c, {"backfills": entries})
        assert entries[0]["phase"] == "Running" and entries[0]["startTime"] == NOW and cond.reason == "BackfillInProgress"
        plane.kubectl("patch", "sparkapplication", name, "--subresource=status", "-n", NS, "--type=merge", "-p",
                      json.dumps({"status": {"driverInfo": {}, "applicationState": {"state": "COMPLETED"}, "terminationTime": NOW}}),
                      check=True)
        entries, cond = step(c, {"backfills": entries})
        assert entries[0]["phase"] == "Succeeded" and cond.status is False
        # The TTL removed the finished application: it is not resubmitted, its status stays.
        plane.kubectl("delete", "sparkapplication", name, "-n", NS, check=True)
        again, _ = step(c, {"backfills": entries})
        assert again == entries and _get(plane, "sparkapplication", name) is None
        # b1 leaves the spec and b3 arrives: b1's objects are deleted, b3's created.
        spec = {**created["spec"], "backfills": [{"id": "b3", "tables": ["items"]}]}
        c3 = ConnectorResource.from_body({**created, "spec": spec})
        entries, cond = step(c3, {"backfills": entries})
        assert [e["id"] for e in entries] == ["b3"] and cond.status is True
        assert _get(plane, "configmap", f"{name}-config") is None
        assert _get(plane, "sparkapplication", bf.run_name("rec", "b3")) is not None


def test_backfills_of_one_connector_run_one_at_a_time(plane: KubeControlPlane) -> None:
    """The workers hold one run per shard: a second run launched beside the first would wait for
    holds that never come until it failed. It is queued and starts when the first has finished."""
    import asyncio

    from cdcoperator.apply import KubeApi

    live = body(engine="sparkOperator")
    live["metadata"] = {"name": "queue", "namespace": NS}
    live["spec"]["backfills"] = [{"id": "q1", "tables": ["items"]}, {"id": "q2", "tables": ["lines"]}]
    c = ConnectorResource.from_body(_apply(plane, live))
    first, second = bf.run_name("queue", "q1"), bf.run_name("queue", "q2")
    with plane.api_client() as client:
        kube = KubeApi(client)

        def step(status: dict[str, Any]) -> list[dict[str, Any]]:
            return asyncio.run(bf.reconcile_backfills(kube, c, status, NOW))[0]

        entries = step({})
        assert _get(plane, "sparkapplication", first) is not None and _get(plane, "sparkapplication", second) is None
        assert [(e["id"], e["phase"]) for e in entries] == [("q1", "Pending"), ("q2", "Pending")]
        assert entries[1]["message"].startswith("queued: starts when backfill q1 has finished")
        plane.kubectl("patch", "sparkapplication", first, "--subresource=status", "-n", NS, "--type=merge", "-p",
                      json.dumps({"status": {"driverInfo": {}, "applicationState": {"state": "RUNNING"}}}), check=True)
        entries = step({"backfills": entries})
        assert [e["phase"] for e in entries] == ["Running", "Pending"] and _get(plane, "sparkapplication", second) is None
        plane.kubectl("patch", "sparkapplication", first, "--subresource=status", "-n", NS, "--type=merge", "-p",
                      json.dumps({"status": {"driverInfo": {}, "applicationState": {"state": "COMPLETED"}, "terminationTime": NOW}}),
                      check=True)
        entries = step({"backfills": entries})
        assert [e["phase"] for e in entries] == ["Succeeded", "Pending"]
        assert _get(plane, "sparkapplication", second) is not None  # started as soon as the first finished
        assert not entries[1].get("message", "").startswith("queued")


def test_spark_version_has_one_home() -> None:
    """The SparkApplication's sparkVersion is the pyspark the Spark image installs (constraints.txt)."""
    import re

    from cdcworker.backfill import SPARK_VERSION

    pin = re.search(r"^pyspark==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pin is not None and pin.group(1) == SPARK_VERSION
    assert bf.build_spark_application(cr(), cr().spec.backfills[0])["spec"]["sparkVersion"] == SPARK_VERSION
    docs = (ROOT / "docs" / "backfill.md").read_text()
    assert "SPARK_VERSION" in docs and not re.search(r"pyspark==\d", docs)


def test_operator_releases_cancelled_and_failed_runs_of_its_connector_only() -> None:
    runs = {
        "b1-0123abcd": {"chunksTotal": 4, "chunksDone": 1},  # removed from the spec
        "b2-0123abcd": {"chunksTotal": 4, "chunksDone": 2},  # still wanted, running
        "b3-0123abcd": {"chunksTotal": 4, "chunksDone": 2},  # wanted, its engine failed for good
        "b4-0123abcd": {"chunksTotal": 4, "chunksDone": 4},  # complete: hands off normally
        "b5-0123abcd": {"chunksTotal": 4, "chunksDone": 0, "abandoned": "cancelled"},
        "bf-manual": {"chunksTotal": 4, "chunksDone": 0},  # started by hand: not ours
        "sig-x-0123abcd": {"chunksTotal": 2, "chunksDone": 0},  # a stopped signal run
    }
    wanted = {"b2-0123abcd": "b2", "b3-0123abcd": "b3"}
    ended = {"b3-0123abcd": "failed: driver lost", "sig-x-0123abcd": "cancelled: stopped by signal s"}
    assert to_release("0123abcd-uid", runs, wanted, ended) == [
        Release("b1-0123abcd", "b1", "cancelled: no longer requested"),
        Release("b3-0123abcd", "b3", "failed: driver lost"),
        Release("sig-x-0123abcd", "sig-x", "cancelled: stopped by signal s"),
    ]
    pods = [{"metadata": {"name": "a"}, "status": {"phase": "Running"}}, {"metadata": {"name": "b"}},
            {"metadata": {"name": "c"}, "status": {"phase": "Succeeded"}}]
    assert running(pods) == ["a", "b"]
