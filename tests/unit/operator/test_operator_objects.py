"""Pure builders of a generation's ConfigMap and a task's Deployment: exact structure."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from cdcoperator import naming
from cdcoperator.model import DEFAULT_IMAGE, WORKER_IMAGE_ENV, ConnectorResource
from cdcoperator.objects import build_config_map, build_deployment, render_properties, worker_properties
from cdcoperator.planner import TaskPlan

BODY: dict[str, Any] = {
    "apiVersion": "shardcdc.io/v1alpha1",
    "kind": "CdcConnector",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 3},
    "spec": {
        "source": {
            "vitess": {
                "vtgate": "vtgate.vitess:15991",
                "keyspace": "commerce",
                "tabletType": "REPLICA",
                "tls": {"enabled": True, "caSecretRef": {"name": "vt-ca"}, "serverName": "vtgate.local"},
                "credentialsSecretRef": {"name": "vt-creds"},
            }
        },
        "kafka": {
            "bootstrapServers": "k1:9092,k2:9092",
            "topicPrefix": "shop",
            "offsetsTopic": "shop-offsets",
            "securityProtocol": "SASL_SSL",
            "securitySecretRef": {"name": "kafka-client", "properties": ["sasl.jaas.config"]},
            "producer": {"linger.ms": "5", "compression.type": "zstd"},
        },
        "tasks": 2,
        "config": {"table.include.list": "commerce\\.orders", "heartbeat.interval.ms": "1000"},
        "worker": {
            "image": "registry/shardcdc:1.2.3",
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}},
            "podTemplate": {
                "labels": {"team": "data", naming.LABEL_TASK: "evil"},
                "annotations": {"prometheus.io/scrape": "true"},
                "nodeSelector": {"pool": "cdc"},
                "tolerations": [{"key": "cdc", "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": False},
            },
        },
    },
}
TASK = TaskPlan(generation=4, task_id=1, task_count=2, prev_task_count=3, shards=("40-80", "c0-"), run=True)
SELF_LABELS = {
    "app.kubernetes.io/name": "shardcdc-worker",
    "app.kubernetes.io/instance": "orders",
    "app.kubernetes.io/component": "worker",
    "app.kubernetes.io/managed-by": "shardcdc-operator",
    "shardcdc.io/connector": "orders",
    "shardcdc.io/generation": "4",
    "shardcdc.io/task": "1",
}
CONFIG_LABELS = {k: v for k, v in SELF_LABELS.items() if k != "shardcdc.io/task"}
OWNER = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "name": "orders", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}

EXPECTED_PROPERTIES = """\
# CdcConnector shop/orders: generation 4; each task's identity (its id, shards, generation) is in its pod's SHARDCDC_* environment.
# Written by the shardcdc operator; edits are overwritten.
name=orders
topic.prefix=shop
database.hostname=vtgate.vitess
database.port=15991
vitess.keyspace=commerce
vitess.tablet.type=REPLICA
database.user=${file:/etc/shardcdc/secrets/vitess-credentials/username}
database.password=${file:/etc/shardcdc/secrets/vitess-credentials/password}
shardcdc.vitess.tls.enabled=true
shardcdc.vitess.tls.ca.file=/etc/shardcdc/secrets/vitess-ca/ca.crt
shardcdc.vitess.tls.server.name=vtgate.local
bootstrap.servers=k1:9092,k2:9092
offset.storage.topic=shop-offsets
security.protocol=SASL_SSL
sasl.jaas.config=${file:/etc/shardcdc/secrets/kafka/sasl.jaas.config}
producer.compression.type=zstd
producer.linger.ms=5
snapshot.mode=initial
shardcdc.metrics.port=8080
heartbeat.interval.ms=1000
table.include.list=commerce\\\\.orders
"""


def build_task_objects(cr: ConnectorResource, task: TaskPlan) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the task's generation's ConfigMap, the task's Deployment)."""
    cm = build_config_map(cr, task.generation)
    return cm, build_deployment(cr, task, cm)


def objects() -> tuple[dict[str, Any], dict[str, Any]]:
    return build_task_objects(ConnectorResource.from_body(BODY), TASK)


def test_config_map_exact() -> None:
    cm, _ = objects()
    assert cm["data"] == {"worker.properties": EXPECTED_PROPERTIES}
    checksum = cm["metadata"]["annotations"]["shardcdc.io/config-checksum"]
    assert checksum.startswith("sha256:") and len(checksum) == 7 + 64
    assert cm["metadata"] == {
        "name": "orders-g4-workers",
        "namespace": "shop",
        "labels": CONFIG_LABELS,
        "ownerReferences": [OWNER],
        "annotations": {"shardcdc.io/config-checksum": checksum},
    }
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")


def test_no_secret_values_in_config_map() -> None:
    cm, _ = objects()
    text = cm["data"]["worker.properties"]
    for line in text.splitlines():
        if line.startswith(("database.user=", "database.password=", "sasl.jaas.config=")):
            assert "=${file:/etc/shardcdc/secrets/" in line


def test_deployment_exact() -> None:
    cm, dep = objects()
    checksum = cm["metadata"]["annotations"]["shardcdc.io/config-checksum"]
    probe = {"httpGet": {"port": "metrics"}, "timeoutSeconds": 3}
    assert dep == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "orders-g4-t1",
            "namespace": "shop",
            "labels": SELF_LABELS,
            "ownerReferences": [OWNER],
            "annotations": {"shardcdc.io/config-checksum": checksum},
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": SELF_LABELS},
            "template": {
                "metadata": {
                    "labels": {"team": "data", **SELF_LABELS},
                    "annotations": {"prometheus.io/scrape": "true", "shardcdc.io/config-checksum": checksum},
                },
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 45,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "runAsGroup": 65532,
                        "fsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry/shardcdc:1.2.3",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["shardcdc", "worker", "--config", "/etc/shardcdc/worker.properties"],
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_NAMESPACE",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                {"name": "TMPDIR", "value": "/tmp"},
                                {"name": "SHARDCDC_WORKER_SUPERVISED", "value": "1"},
                                # Whether the task stored positions before: read at each start (issue 28, case 7).
                                {"name": "SHARDCDC_SHARDCDC_TASK_OFFSETS_EXPECTED", "valueFrom": {"configMapKeyRef": {
                                    "name": "orders-positions", "key": "task-4-1", "optional": True}}},
                                # The task's identity, over the generation's file.
                                {"name": "SHARDCDC_TASKS_MAX", "value": "2"},
                                {"name": "SHARDCDC_VITESS_OFFSET_STORAGE_PER_TASK", "value": "true"},
                                {"name": "SHARDCDC_VITESS_OFFSET_STORAGE_TASK_KEY_GEN", "value": "4"},
                                {"name": "SHARDCDC_VITESS_PREV_NUM_TASKS", "value": "3"},
                                {"name": "SHARDCDC_SHARDCDC_TASK_ID", "value": "1"},
                                {"name": "SHARDCDC_SHARDCDC_TASK_COUNT", "value": "2"},
                                {"name": "SHARDCDC_SHARDCDC_TASK_GENERATION", "value": "4"},
                                {"name": "SHARDCDC_SHARDCDC_TASK_PREV_COUNT", "value": "3"},
                                {"name": "SHARDCDC_SHARDCDC_TASK_SHARDS", "value": "40-80,c0-"},
                            ],
                            "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}},
                            "startupProbe": {**probe, "httpGet": {"path": "/healthz", "port": "metrics"},
                                             "periodSeconds": 2, "failureThreshold": 60},
                            "livenessProbe": {**probe, "httpGet": {"path": "/healthz", "port": "metrics"},
                                              "periodSeconds": 10, "failureThreshold": 3},
                            "readinessProbe": {**probe, "httpGet": {"path": "/readyz", "port": "metrics"},
                                               "periodSeconds": 5, "failureThreshold": 2},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/shardcdc", "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "config",
                            "projected": {
                                "defaultMode": 0o440,
                                "sources": [
                                    {"configMap": {"name": "orders-g4-workers",
                                                   "items": [{"key": "worker.properties",
                                                              "path": "worker.properties"}]}},
                                    {"secret": {"name": "vt-creds", "items": [
                                        {"key": "username", "path": "secrets/vitess-credentials/username"},
                                        {"key": "password", "path": "secrets/vitess-credentials/password"}]}},
                                    {"secret": {"name": "vt-ca", "items": [
                                        {"key": "ca.crt", "path": "secrets/vitess-ca/ca.crt"}]}},
                                    {"secret": {"name": "kafka-client", "items": [
                                        {"key": "sasl.jaas.config", "path": "secrets/kafka/sasl.jaas.config"}]}},
                                ],
                            },
                        },
                        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
                    ],
                    "nodeSelector": {"pool": "cdc"},
                    "tolerations": [{"key": "cdc", "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
    }


def test_not_running_task_has_zero_replicas_and_same_config() -> None:
    cr = ConnectorResource.from_body(BODY)
    cm_run, dep_run = build_task_objects(cr, TASK)
    cm_stop, dep_stop = build_task_objects(cr, TaskPlan(4, 1, 2, 3, ("40-80", "c0-"), run=False))
    assert dep_stop["spec"]["replicas"] == 0
    assert cm_stop == cm_run  # pausing does not roll the config
    assert {**dep_stop["spec"], "replicas": 1} == dep_run["spec"]


def test_a_change_rolls_the_pods_it_concerns() -> None:
    """The shared configuration's checksum is on every task's pod template (a change rolls them all);
    a task's own identity is in its pod template's environment (a change rolls that pod only)."""
    cr = ConnectorResource.from_body(BODY)
    cm_a, dep_a = build_task_objects(cr, TASK)
    other = copy.deepcopy(BODY)
    other["spec"]["kafka"]["producer"]["linger.ms"] = "50"
    cm_b, dep_b = build_task_objects(ConnectorResource.from_body(other), TASK)
    key = "shardcdc.io/config-checksum"
    assert cm_a["metadata"]["annotations"][key] != cm_b["metadata"]["annotations"][key]
    assert (dep_b["spec"]["template"]["metadata"]["annotations"][key]
            == cm_b["metadata"]["annotations"][key])
    cm_c, dep_c = build_task_objects(cr, TaskPlan(4, 1, 2, 3, ("40-80",), run=True))
    assert cm_c == cm_a  # one ConfigMap for the generation's tasks
    assert dep_c["spec"]["template"] != dep_a["spec"]["template"]
    assert {"name": "SHARDCDC_SHARDCDC_TASK_SHARDS", "value": "40-80"} in \
        dep_c["spec"]["template"]["spec"]["containers"][0]["env"]


def test_minimal_spec_defaults() -> None:
    body = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "[::1]:15991", "keyspace": "ks"}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}}}
    cr = ConnectorResource.from_body(body)
    props = worker_properties(cr, TaskPlan(0, 0, 1, -1, ("0",), True))
    assert props["database.hostname"] == "::1"
    # No previous generation, yet the worker (like Debezium) requires >= 1 with per-task offsets.
    assert props["vitess.prev.num.tasks"] == props["shardcdc.task.prev.count"] == "1"
    assert props["vitess.tablet.type"] == "PRIMARY"
    assert "database.user" not in props and "shardcdc.vitess.tls.enabled" not in props
    assert "shardcdc.task.history" not in props
    # A later generation carries the chain before its previous one, in a form the worker reads.
    later = worker_properties(cr, TaskPlan(3, 0, 1, 2, ("0",), True, history=((2, 2), (1, 3), (0, 1))))
    assert later["shardcdc.task.history"] == "2:2,1:3,0:1"
    from cdcworker.config import load_config

    assert load_config([], env={}, overrides=later).task.history == ((2, 2), (1, 3), (0, 1))
    _, dep = build_task_objects(cr, TaskPlan(0, 0, 1, -1, ("0",), True))
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                 "limits": {"memory": "1Gi"}}
    assert pod["volumes"][0]["projected"]["sources"] == [
        {"configMap": {"name": "c-g0-workers", "items": [{"key": "worker.properties", "path": "worker.properties"}]}}
    ]
    assert "nodeSelector" not in pod and "tolerations" not in pod and "affinity" not in pod


def test_render_properties_escaping() -> None:
    text = render_properties({"a b": " lead", "k:=#!": "x\\y\nz", "plain": "${file:/p:k}"})
    assert text == "a\\ b=\\ lead\nk\\:\\=\\#\\!=x\\\\y\\nz\nplain=${file:/p:k}\n"


def test_names_are_deterministic_and_bounded() -> None:
    assert naming.task_object_name("orders", 12, 3) == "orders-g12-t3"
    assert naming.generation_config_name("orders", 12) == "orders-g12-workers"
    assert len(naming.generation_config_name("x" * 60, 123)) == 63
    # Never a backfill's ConfigMap name (<connector>-bf-<id>-config / -templates).
    from cdcoperator.backfill import run_name

    assert naming.generation_config_name("x-bf-y", 0) != f"{run_name('x', 'y-g0')}-config"
    long = "x" * 60
    name = naming.task_object_name(long, 123, 45)
    assert len(name) == 63 and name.endswith("-g123-t45")
    assert name == naming.task_object_name(long, 123, 45)
    assert naming.task_object_name(long, 123, 45) != naming.task_object_name("y" * 60, 123, 45)
    assert naming.selector("orders") == "shardcdc.io/connector=orders"


def test_default_worker_image_comes_from_the_operator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def image(body: dict[str, Any]) -> str:
        _, dep = build_task_objects(ConnectorResource.from_body(body), TASK)
        return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])

    no_image = copy.deepcopy(BODY)
    del no_image["spec"]["worker"]["image"]
    monkeypatch.delenv(WORKER_IMAGE_ENV, raising=False)
    assert image(no_image) == DEFAULT_IMAGE == "ghcr.io/shardcdc/shardcdc:0.1.0"
    # What the Helm chart sets from workerImage (SHARDCDC_WORKER_IMAGE on the operator's container).
    monkeypatch.setenv(WORKER_IMAGE_ENV, "registry.example.com/cdc/worker@sha256:" + "cd" * 32)
    assert image(no_image) == "registry.example.com/cdc/worker@sha256:" + "cd" * 32
    assert image(BODY) == "registry/shardcdc:1.2.3"  # spec.worker.image still wins
    monkeypatch.setenv(WORKER_IMAGE_ENV, " ")
    assert image(no_image) == DEFAULT_IMAGE


def test_initial_snapshot_by_a_backfill_engine_leaves_the_workers_streaming_only() -> None:
    """With ``snapshot.backfill`` set, the backfill takes the initial snapshot; workers must not copy too."""
    import copy

    body = copy.deepcopy(BODY)
    body["spec"]["snapshot"] = {"mode": "initial", "backfill": {"engine": "sparkOperator"}}
    cr = ConnectorResource.from_body(body)
    cm, _ = build_task_objects(cr, TASK)
    assert "\nsnapshot.mode=never\n" in cm["data"]["worker.properties"]
    # A first start holds every table back for the initial run (no live change before its snapshot).
    assert f"\nshardcdc.backfill.initial.run=initial-{cr.uid[:8]}\n" in cm["data"]["worker.properties"]
    body["spec"]["snapshot"] = {"mode": "initial"}
    cm, _ = build_task_objects(ConnectorResource.from_body(body), TASK)
    assert "\nsnapshot.mode=initial\n" in cm["data"]["worker.properties"]
    assert "shardcdc.backfill.initial.run" not in cm["data"]["worker.properties"]


def test_shard_names_with_an_empty_key_range_are_a_spec_error() -> None:
    """'80-40' passes the CRD's name pattern; the planner's key-range parsing would then fail every
    reconcile without a condition. The model refuses it (InvalidSpec)."""
    from cdcoperator.model import SpecError

    body = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "ks", "shards": ["-80", "80-40"]}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}}}
    with pytest.raises(SpecError, match=r"invalid shard names: 80-40 \(a shard is '0' or '<start>-<end>'"):
        ConnectorResource.from_body(body)
    body["spec"]["source"]["vitess"]["shards"] = ["-80", "80-"]
    assert ConnectorResource.from_body(body).spec.source.shards == ("-80", "80-")


def test_workers_listen_on_the_installers_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's workers.listenAddress reaches the worker (operator env -> shardcdc.metrics.address ->
    the endpoint's bind address); unset, the properties do not name it (the worker's 0.0.0.0)."""
    import socket
    import urllib.error
    import urllib.request

    from cdcworker.config import validate
    from cdcworker.config.loader import load_raw
    from cdcworker.observability import TaskMetrics, serve

    plain = {**BODY, "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "commerce"}},
                              "kafka": {"bootstrapServers": "k1:9092", "topicPrefix": "shop"}}}
    cr = ConnectorResource.from_body(plain)
    assert "shardcdc.metrics.address" not in worker_properties(cr, TASK)
    monkeypatch.setenv("SHARDCDC_WORKER_METRICS_ADDRESS", "${env:POD_IP}")
    props = worker_properties(cr, TASK)
    assert props["shardcdc.metrics.address"] == "${env:POD_IP}"
    _, dep = build_task_objects(cr, TASK)
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in env
    cfg = validate(load_raw([], env={"POD_IP": "127.0.0.2"}, overrides={**props, "shardcdc.metrics.port": "0"}))
    assert cfg.behaviour.metrics_address == "127.0.0.2"
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    server = serve(TaskMetrics("orders", "task1_2_4"), port, cfg.behaviour.metrics_address)
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/healthz", timeout=5) as resp:
            assert resp.status in (200, 503)
    except urllib.error.HTTPError as exc:
        assert exc.code == 503  # not streaming yet: the endpoint answered
    finally:
        server.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # not on every interface


def test_the_worker_reads_back_the_task_identity_the_operator_writes(tmp_path: Path) -> None:
    """One contract (issue 26): the operator writes a task's identity with the worker's own type
    (TaskIdentity.properties); the worker's configuration loader reads it back unchanged, from
    the properties alone and as the pod has them (the generation's file, the task's environment)."""
    from cdcworker.config import TaskIdentity, load_config

    body = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "ks"}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}}}
    cr = ConnectorResource.from_body(body)
    plan = TaskPlan(3, 1, 2, 4, ("40-80", "c0-"), True, history=((2, 4), (0, 1)))
    task = load_config([], env={}, overrides=worker_properties(cr, plan)).task
    assert task == TaskIdentity(per_task=True, task_id=1, task_count=2, tasks_max=2, generation=3,
                                prev_task_count=4, shards=("40-80", "c0-"), history=((2, 4), (0, 1)))
    assert task.task_key == "task1_2_3"
    assert task.previous_task_keys() == ("task0_4_2", "task1_4_2", "task2_4_2", "task3_4_2")
    cm, dep = build_task_objects(cr, plan)
    (tmp_path / "worker.properties").write_text(cm["data"]["worker.properties"])
    env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    in_pod = load_config([tmp_path / "worker.properties"], env=env)
    assert in_pod.task == task
    assert in_pod.name == "c" and in_pod.task.context_task_id == "task1_2_3"
