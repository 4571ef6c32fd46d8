"""Local mode's kubelet: a Deployment's pod template run as a local process, reported as a pod body.

A small stand-in program plays the container: it records what it was started with (argv, env,
the files it mounts), serves ``/readyz`` on the port it was told, writes a termination message
and exits with a chosen status, or waits for SIGTERM.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import wait_for

from cdcoperator.local.cluster import LocalCluster, apply_merge_patch
from cdcoperator.local.kubelet import MAX_BACKOFF, ProcessKubelet, decode_secret, restart_delay
from cdcoperator.taskstatus import summarize_pod

FAKE = r'''
import json, os, pathlib, signal, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
out = pathlib.Path(sys.argv[1])
conf = pathlib.Path(os.environ["CONF"])
record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "conf": conf.read_text(),
          "env": {k: v for k, v in os.environ.items() if k in ("POD_NAME", "POD_NAMESPACE", "TOKEN", "MODE", "CONF",
                  "SHARDCDC_SHARDCDC_METRICS_PORT", "SHARDCDC_TERMINATION_LOG", "EXTRA", "UNRELATED")}}
out.write_text(json.dumps(record))
if os.environ["MODE"].startswith("run-then-exit:"):  # a healthy run of that many seconds, then a crash
    import time
    with out.with_suffix(".runs").open("a") as fh:
        fh.write(f"start {time.time()}\n")
    time.sleep(float(os.environ["MODE"].split(":")[1]))
    with out.with_suffix(".runs").open("a") as fh:
        fh.write(f"exit {time.time()}\n")
    sys.exit(1)
if os.environ["MODE"] == "exit":
    pathlib.Path(os.environ["SHARDCDC_TERMINATION_LOG"]).write_text('{"journal": "here"}')
    sys.exit(10)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/readyz" else 404); self.end_headers()
    def log_message(self, *a): pass
server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["SHARDCDC_SHARDCDC_METRICS_PORT"])), H)
def stop(*_):
    out.with_suffix(".term").write_text("SIGTERM")
    threading.Thread(target=server.shutdown).start()
signal.signal(signal.SIGTERM, stop)
server.serve_forever()
'''


def deployment(name: str, out: Path, mode: str = "serve", cm: str = "app", replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "labels": {"shardcdc.io/connector": "c"}},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"shardcdc.io/connector": "c", "shardcdc.io/generation": "3",
                                        "shardcdc.io/task": "1"}, "annotations": {"a": "b"}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "worker", "image": "shardcdc:test",
                        "command": ["fake"], "args": [str(out), "/etc/app/conf.properties"],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                            {"name": "MODE", "value": mode},
                            {"name": "CONF", "value": "/etc/app/conf.properties"},
                        ],
                        "ports": [{"name": "metrics", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                                         {"name": "tmp", "mountPath": "/scratch"}],
                    }],
                    "volumes": [
                        {"name": "config", "projected": {"defaultMode": 0o440, "sources": [
                            {"configMap": {"name": cm, "items": [{"key": "props", "path": "conf.properties"}]}},
                            {"secret": {"name": "creds", "items": [{"key": "token", "path": "secrets/creds/token"}]}},
                        ]}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


class Harness:
    def __init__(self, tmp: Path, **kubelet_args: Any) -> None:
        self.tmp = tmp
        self.deployments: list[dict[str, Any]] = []
        self.snapshots: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()
        script = tmp / "fake.py"
        script.write_text(FAKE)
        data = {("ConfigMap", "app"): {"props": b"token.file=/etc/app/secrets/creds/token\nscratch=/scratch/x\n"},
                ("Secret", "creds"): decode_secret({"data": {"token": "czNjcjN0"}})}

        def on_change(bodies: list[dict[str, Any]]) -> None:
            with self.lock:
                self.snapshots.append(bodies)

        self.kubelet = ProcessKubelet(lambda: list(self.deployments), lambda k, _ns, n: data.get((k, n)),
                                      tmp / "pods", period=0.05, restart_backoff=0.5,
                                      commands={"fake": (sys.executable, str(script))},
                                      extra_env={"EXTRA": "1"}, on_change=on_change, **kubelet_args)

    def pod(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.kubelet.pods() if p["metadata"]["name"] == name), None)


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.setenv("UNRELATED", "host env is not inherited")
    h = Harness(tmp_path)
    h.kubelet.start()
    try:
        yield h
    finally:
        h.kubelet.close()


def test_pod_template_runs_as_a_process_with_its_env_files_and_port(harness: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    harness.deployments.append(deployment("c-g3-t1", out))
    pod = wait_for(lambda: (p := harness.pod("c-g3-t1-0")) and p["status"]["containerStatuses"][0]["ready"] and p,
                   30, "the pod ready")
    record = json.loads(out.read_text())
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    local = tmp_path / "pods" / "ns" / "c-g3-t1-0"
    assert record["argv"] == [str(out), f"{local}/volumes/config/conf.properties"]
    assert record["env"] == {
        "POD_NAME": "c-g3-t1-0", "POD_NAMESPACE": "ns", "TOKEN": "s3cr3t", "MODE": "serve",
        "CONF": f"{local}/volumes/config/conf.properties", "SHARDCDC_SHARDCDC_METRICS_PORT": str(port),
        "SHARDCDC_TERMINATION_LOG": f"{local}/termination-log", "EXTRA": "1"}
    # ConfigMap text names mount paths: they are mapped like argv and env.
    assert record["conf"] == (f"token.file={local}/volumes/config/secrets/creds/token\n"
                              f"scratch={local}/volumes/tmp/x\n")
    assert (local / "volumes/config/secrets/creds/token").read_text() == "s3cr3t"
    assert oct((local / "volumes/config/conf.properties").stat().st_mode & 0o777) == "0o440"
    assert record["cwd"] == str(local)
    summary = summarize_pod(pod)
    assert summary is not None
    assert (summary.name, summary.generation, summary.task, summary.phase, summary.ip, summary.port, summary.ready,
            summary.deleting, summary.exit_code) == ("c-g3-t1-0", 3, 1, "Running", "127.0.0.1", port, True, False,
                                                     None)
    assert pod["metadata"]["annotations"]["a"] == "b"


def test_template_change_recreates_and_zero_replicas_stops(harness: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    harness.deployments.append(deployment("c-g3-t1", out))
    wait_for(lambda: (p := harness.pod("c-g3-t1-0")) and p["status"]["containerStatuses"][0]["ready"], 30, "pod 0")
    changed = deployment("c-g3-t1", out)
    changed["spec"]["template"]["metadata"]["annotations"]["shardcdc.io/restartedAt"] = "now"
    harness.deployments[0] = changed
    wait_for(lambda: (p := harness.pod("c-g3-t1-1")) and p["status"]["containerStatuses"][0]["ready"], 30, "pod 1")
    assert out.with_suffix(".term").read_text() == "SIGTERM"  # the old one was asked to stop
    # Recreate: the new pod started only after the old one had exited.
    with harness.lock:
        for bodies in harness.snapshots:
            running = [b for b in bodies if "running" in b["status"]["containerStatuses"][0]["state"]]
            assert len(running) <= 1
    out.with_suffix(".term").unlink()
    harness.deployments[0] = deployment("c-g3-t1", out, replicas=0)
    wait_for(lambda: harness.pod("c-g3-t1-1") is None, 30, "pod 1 gone")
    assert out.with_suffix(".term").read_text() == "SIGTERM"
    assert not (tmp_path / "pods/ns/c-g3-t1-1/volumes").exists()  # Secret files removed with the pod


def test_exit_status_and_termination_message_then_crash_loop(harness: Harness, tmp_path: Path) -> None:
    harness.deployments.append(deployment("c-g3-t1", tmp_path / "out.json", mode="exit"))

    def restarted() -> dict[str, Any] | None:
        p = harness.pod("c-g3-t1-0")
        return p if p and p["status"]["containerStatuses"][0]["restartCount"] >= 1 and "waiting" in (
            p["status"]["containerStatuses"][0]["state"]) else None

    pod = wait_for(restarted, 30, "a restart after exit status 10")
    cs = pod["status"]["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["ready"] is False
    term = cs["lastState"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (10, "Error", '{"journal": "here"}')
    summary = summarize_pod(pod)
    assert summary is not None
    assert (summary.exit_code, summary.termination_message, summary.waiting_reason) == (
        10, '{"journal": "here"}', "CrashLoopBackOff")


def test_restart_delay_doubles_on_quick_crashes_and_resets_after_a_healthy_run() -> None:
    crashes, delays = 0, []
    for ran_for in (1, 1, 1, 1, 700, 1, 1):
        crashes, delay = restart_delay(crashes, ran_for, 2.0, 600.0)
        delays.append(delay)
    assert delays == [2.0, 4.0, 8.0, 16.0, 2.0, 4.0, 8.0]
    assert restart_delay(20, 1, 2.0, 600.0) == (21, MAX_BACKOFF)


def test_back_off_resets_after_a_healthy_run(tmp_path: Path) -> None:
    """Issue 28, case 9: a pod that ran for its back-off reset period (the kubelet's 10 minutes,
    here 1 s) between crashes restarts after the first delay each time, not a doubling one."""
    h = Harness(tmp_path, backoff_reset=1.0)
    out = tmp_path / "out.json"
    h.deployments.append(deployment("c-g3-t1", out, mode="run-then-exit:1.2"))
    h.kubelet.start()
    try:
        runs = out.with_suffix(".runs")
        wait_for(lambda: runs.exists() and runs.read_text().count("start") >= 6, 60, "six starts")
    finally:
        h.kubelet.close()
    events = [line.split() for line in runs.read_text().splitlines()]
    gaps = [float(b[1]) - float(a[1]) for a, b in itertools.pairwise(events) if (a[0], b[0]) == ("exit", "start")]
    assert len(gaps) >= 5
    # restart_backoff is 0.5 s (+ the start of a Python process): without the reset the 4th and
    # 5th restarts wait 4 and 8 s.
    assert all(g < 3.5 for g in gaps), gaps


def test_a_restarted_container_gets_fresh_host_ports(harness: Harness, tmp_path: Path) -> None:
    """Host ports stand in for the pod's own network: one taken by another process since it was
    picked must not crash-loop the container or answer its probes, so each start picks anew."""
    out = tmp_path / "out.json"
    harness.deployments.append(deployment("c-g3-t1", out, mode="exit"))

    def start(n: int) -> tuple[int, str] | None:
        p = harness.pod("c-g3-t1-0")
        if not p or p["status"]["containerStatuses"][0]["restartCount"] < n or not out.exists():
            return None
        port = p["spec"]["containers"][0]["ports"][0]["containerPort"]
        try:
            recorded = json.loads(out.read_text())["env"]["SHARDCDC_SHARDCDC_METRICS_PORT"]
        except json.JSONDecodeError:
            return None  # the next start is writing the file (write_text is not atomic): poll again
        return (port, recorded) if str(port) == recorded else None  # the body names the port it was given

    first = wait_for(lambda: start(1), 30, "a first restart")
    second = wait_for(lambda: (s := start(2)) and s[0] != first[0] and s, 30, "a restart on another port")
    assert second[0] != first[0]


def test_missing_config_map_is_a_config_error(harness: Harness, tmp_path: Path) -> None:
    harness.deployments.append(deployment("c-g3-t1", tmp_path / "out.json", cm="missing"))
    pod = wait_for(lambda: harness.pod("c-g3-t1-0"), 30, "the pod")
    state = pod["status"]["containerStatuses"][0]["state"]
    assert state == {"waiting": {"reason": "CreateContainerConfigError",
                                 "message": "volume config: ConfigMap missing not found"}}
    assert pod["status"]["phase"] == "Pending" and "podIP" not in pod["status"]


# --- the local API server -------------------------------------------------------------------------------


def _connector(tasks: int = 2) -> dict[str, Any]:
    return {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "c"},
            "spec": {"source": {"vitess": {"vtgate": "127.0.0.1:1", "keyspace": "ks"}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}, "tasks": tasks}}


def test_merge_patch() -> None:
    assert apply_merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3}, "l": [2]}


def test_local_cluster_generations_annotations_and_persistence(tmp_path: Path) -> None:
    asyncio.run(_local_cluster(tmp_path))


async def _local_cluster(tmp_path: Path) -> None:
    from cdcoperator.apply import DEPLOYMENTS

    cluster = LocalCluster(tmp_path)
    body = cluster.put_connector(_connector())
    assert (body["metadata"]["generation"], body["metadata"]["namespace"]) == (1, "default")
    assert cluster.put_connector(_connector())["metadata"]["generation"] == 1  # same spec: no new generation
    assert cluster.patch_connector("default", "c", {"spec": {"tasks": 4}})["metadata"]["generation"] == 2
    with pytest.raises(ValueError, match=r"spec\.tasks must be at least 1"):
        cluster.patch_connector("default", "c", {"spec": {"tasks": 0}})
    with pytest.raises(ValueError, match=r"not metadata\.name"):
        cluster.patch_connector("default", "c", {"metadata": {"name": "d"}})
    cluster.patch_connector("default", "c", {"metadata": {"annotations": {"shardcdc.io/restart": "all"}}})
    await cluster.remove_annotation("default", "c", "shardcdc.io/restart", "task=1")  # value changed: kept
    assert (cluster.connector("default", "c") or {})["metadata"]["annotations"] == {"shardcdc.io/restart": "all"}
    await cluster.remove_annotation("default", "c", "shardcdc.io/restart", "all")
    assert (cluster.connector("default", "c") or {})["metadata"]["annotations"] == {}
    await cluster.patch_connector_status("default", "c", {"assignment": {"generation": 5}})

    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "c-g5-t0", "namespace": "default", "labels": {"shardcdc.io/connector": "c"}},
           "spec": {"replicas": 1, "template": {"metadata": {"annotations": {"x": "1"}}, "spec": {}}}}
    assert await cluster.apply(dep, None) == "created"
    assert await cluster.apply(dep, cluster.deployments()[0]) == "unchanged"
    await cluster.annotate_pod_template("default", "c-g5-t0", "shardcdc.io/restartedAt", "t")
    dep["spec"]["replicas"] = 0
    assert await cluster.apply(dep, cluster.deployments()[0]) == "patched"
    live = (await cluster.list_children(DEPLOYMENTS, "default", "c"))[0]
    assert live["spec"]["replicas"] == 0
    assert live["spec"]["template"]["metadata"]["annotations"] == {"x": "1", "shardcdc.io/restartedAt": "t"}
    assert await cluster.delete(DEPLOYMENTS, "default", "c-g5-t0") is True
    assert await cluster.delete(DEPLOYMENTS, "default", "c-g5-t0") is False

    # A restarted instance continues from the saved connector: uid, generation and status kept.
    again = LocalCluster(tmp_path).put_connector(_connector(tasks=4))
    assert again["metadata"]["uid"] == body["metadata"]["uid"]
    assert again["metadata"]["generation"] == 2 and again["status"] == {"assignment": {"generation": 5}}
    assert LocalCluster(tmp_path).put_connector(_connector(tasks=3))["metadata"]["generation"] == 3


def test_config_paths_are_mapped_once_and_whole() -> None:
    """A worker pod mounts an emptyDir at /tmp and local mode keeps pods under /tmp: a path mapped
    to the config volume must not then be mapped again as if under /tmp (the Secret files of the
    workers were not found: ``.../volumes/tmp/pytest.../volumes/config/...``)."""
    from cdcoperator.local.kubelet import map_mount_paths

    local = "/tmp/state/pods/ns/c-g3-t0-0/volumes"
    mounts = [("/etc/shardcdc", f"{local}/config"), ("/tmp", f"{local}/tmp"), ("/etc", f"{local}/etc")]
    text = ("sasl.jaas.config=${file:/etc/shardcdc/secrets/kafka/sasl.jaas.config}\n"
            "a=/tmp/x b=/var/tmp/y c='/etc/hosts'\n")
    assert map_mount_paths(text, mounts) == (
        f"sasl.jaas.config=${{file:{local}/config/secrets/kafka/sasl.jaas.config}}\n"
        f"a={local}/tmp/x b=/var/tmp/y c='{local}/etc/hosts'\n")
    assert map_mount_paths(text, [("/", "/x")]) == text
