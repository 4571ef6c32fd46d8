"""The CdcConnector CRD: structural checks, and validation by a real kube-apiserver (CEL and schema messages)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcoperator.model import ConnectorResource
from cdcoperator.objects import worker_properties
from cdcoperator.planner import TaskPlan
from cdcworker.config.properties import PROPERTIES, family_of, operator_owned
from kubetest import KubeControlPlane, kube_control_plane_fixture

CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "shardcdc.io_cdcconnectors.yaml"
CRD: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
ROOT = VERSION["schema"]["openAPIV3Schema"]
SPEC = ROOT["properties"]["spec"]
CONFIG_RULES = [v["rule"] for v in SPEC["properties"]["config"]["x-kubernetes-validations"]]


def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


# --- structure ------------------------------------------------------------------------------------------


def test_identity() -> None:
    assert CRD["metadata"]["name"] == "cdcconnectors.shardcdc.io"
    spec = CRD["spec"]
    assert (spec["group"], spec["scope"]) == ("shardcdc.io", "Namespaced")
    assert spec["names"]["kind"] == "CdcConnector"
    assert spec["names"]["shortNames"] == ["cdc"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [("v1alpha1", True, True)]


def test_every_field_has_a_description_and_a_type() -> None:
    missing = [p for p, s in walk(ROOT, "") if p != ".metadata" and not s.get("description")]
    assert missing == []
    untyped = [p for p, s in walk(ROOT, "") if "type" not in s and not s.get("x-kubernetes-int-or-string")]
    assert untyped == []


def test_subresources() -> None:
    assert VERSION["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.tasks",
            "statusReplicasPath": ".status.assignment.tasks",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_printer_columns() -> None:
    cols = [(c["name"], c["type"], c["jsonPath"]) for c in VERSION["additionalPrinterColumns"]]
    assert cols == [
        ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        ("State", "string", ".spec.state"),
        ("Shards", "integer", ".status.shards.servingCount"),
        ("Tasks", "integer", ".status.assignment.tasks"),
        ("Generation", "integer", ".status.assignment.generation"),
        ("Lag", "string", ".status.lag"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]


def test_immutability_rules() -> None:
    vt = SPEC["properties"]["source"]["properties"]["vitess"]["properties"]
    assert vt["keyspace"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert SPEC["properties"]["source"]["x-kubernetes-validations"][0]["rule"] == "has(self.vitess) == has(oldSelf.vitess)"
    assert vt["tabletType"]["enum"] == ["PRIMARY", "REPLICA", "RDONLY"]
    assert SPEC["properties"]["state"]["enum"] == ["running", "paused", "stopped"]
    assert SPEC["properties"]["deletionPolicy"]["enum"] == ["Retain", "DeleteOffsets"]
    engine = SPEC["properties"]["snapshot"]["properties"]["backfill"]["properties"]["engine"]
    assert engine["enum"] == ["sparkOperator", "sparkSubmit", "local"]


def test_condition_schema_is_metav1_condition() -> None:
    conds = ROOT["properties"]["status"]["properties"]["conditions"]
    assert conds["x-kubernetes-list-type"] == "map"
    assert conds["x-kubernetes-list-map-keys"] == ["type"]
    assert conds["items"]["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert conds["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def _rejected_by_config_rules(key: str) -> bool:
    """Whether some CEL rule on spec.config names the key or a prefix of it (text check)."""
    for rule in CONFIG_RULES:
        if f"'{key}'" in rule:
            return True
        if any(key.startswith(p) for p in re.findall(r"startsWith\('([^']+)'\)", rule)):
            return True
    return False


def test_config_rules_cover_the_operator_owned_catalogue() -> None:
    owned = operator_owned()
    assert "tasks.max" in owned and "vitess.prev.num.tasks" in owned
    assert [k for k in owned if not _rejected_by_config_rules(k)] == []


def test_every_key_the_operator_writes_is_known_to_the_worker_and_not_user_settable() -> None:
    body = {"metadata": {"name": "c", "namespace": "n", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "h:1", "keyspace": "ks",
                                           "tls": {"enabled": True, "caSecretRef": {"name": "ca"},
                                                   "clientCertSecretRef": {"name": "cc"}, "serverName": "s"},
                                           "credentialsSecretRef": {"name": "cr"}}},
                     "kafka": {"bootstrapServers": "k:1", "topicPrefix": "p", "producer": {"acks": "all"},
                               "securitySecretRef": {"name": "s", "properties": ["sasl.jaas.config"]}}}}
    props = worker_properties(ConnectorResource.from_body(body), TaskPlan(1, 0, 2, 1, ("-80",), True))
    unknown = [k for k in props if k not in PROPERTIES and family_of(k) is None]
    assert unknown == []
    settable = [k for k in props if not _rejected_by_config_rules(k) and k != "sasl.jaas.config"]
    assert settable == []


# --- against a real kube-apiserver --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        r = p.kubectl("apply", "-f", str(CRD_PATH))
        assert r.returncode == 0, r.stderr
        p.wait_established("cdcconnectors.shardcdc.io")
        yield p


def valid(name: str = "orders", **spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"vitess": {"vtgate": "vtgate.vitess:15991", "keyspace": "commerce", "shards": ["-80", "80-"]}},
        "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "shop"},
        "tasks": 2,
        "config": {"table.include.list": "commerce\\.orders", "database.password.file": "${file:/x}"},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def with_path(path: str, value: Any, name: str = "orders") -> dict[str, Any]:
    obj = valid(name)
    node = obj
    keys = path.split("/")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return obj


_DELETE = object()

INVALID = [
    ("tasks-zero", with_path("spec/tasks", 0), "spec.tasks"),
    ("tasks-too-many", with_path("spec/tasks", 5000), "should be less than or equal to 1024"),
    ("state", with_path("spec/state", "sleeping"), 'Unsupported value: "sleeping"'),
    ("tablet-type", with_path("spec/source/vitess/tabletType", "MASTER"), 'Unsupported value: "MASTER"'),
    ("config-tasks-max", with_path("spec/config", {"tasks.max": "4"}),
     "spec.config must not set tasks.max; use spec.tasks (or kubectl scale)"),
    ("config-generation", with_path("spec/config", {"vitess.offset.storage.task.key.gen": "3"}),
     "spec.config must not set vitess.offset.storage.*, vitess.prev.num.tasks or shardcdc.task.*"),
    ("config-prev-tasks", with_path("spec/config", {"vitess.prev.num.tasks": "2"}),
     "the operator manages task generations"),
    ("config-name", with_path("spec/config", {"name": "x"}), "spec.config must not set name or topic.prefix"),
    ("config-password", with_path("spec/config", {"database.password": "hunter2"}),
     "spec.config must not contain credentials"),
    ("config-literal-secret", with_path("spec/config", {"producer.ssl.key.password": "pw"}),
     "spec.config must not contain credentials"),
    ("config-connection", with_path("spec/config", {"database.hostname": "h"}),
     "spec.config must not set the VTGate connection"),
    ("config-kafka", with_path("spec/config", {"bootstrap.servers": "k:1"}),
     "spec.config must not set bootstrap.servers"),
    ("topic-prefix-empty", with_path("spec/kafka/topicPrefix", ""), "spec.kafka.topicPrefix must not be empty"),
    ("topic-prefix-chars", with_path("spec/kafka/topicPrefix", "shop/orders"),
     "spec.kafka.topicPrefix may only contain letters, digits"),
    ("topic-prefix-dot", with_path("spec/kafka/topicPrefix", ".."), "spec.kafka.topicPrefix may only contain"),
    ("bootstrap-empty", with_path("spec/kafka/bootstrapServers", ""), "spec.kafka.bootstrapServers must not be empty"),
    ("bootstrap-spaces", with_path("spec/kafka/bootstrapServers", "a:1, b:2"),
     "spec.kafka.bootstrapServers must be a comma-separated list"),
    ("offsets-topic", with_path("spec/kafka/offsetsTopic", "my offsets"),
     "spec.kafka.offsetsTopic must be a valid Kafka topic name"),
    ("shard-name", with_path("spec/source/vitess/shards", ["-8"]), "spec.source.vitess.shards[0]"),
    ("vtgate-no-port", with_path("spec/source/vitess/vtgate", "vtgate"), "spec.source.vitess.vtgate"),
    ("name-too-long", valid("x" * 41), "metadata.name must be at most 40 characters"),
    ("missing-kafka", with_path("spec/kafka", _DELETE), "spec.kafka: Required value"),
    ("tls-disabled", with_path("spec/source/vitess/tls", {"caSecretRef": {"name": "ca"}}),
     "tls settings need tls.enabled set to true"),
    ("producer-secret", with_path("spec/kafka/producer", {"sasl.jaas.config": "x"}),
     "spec.kafka.producer must not contain credentials"),
    ("producer-owned", with_path("spec/kafka/producer", {"bootstrap.servers": "x"}),
     "spec.kafka.producer must not set bootstrap.servers"),
    ("backfill-id", with_path("spec/backfills", [{"id": "Bad_ID", "tables": ["t"]}]), "spec.backfills[0].id"),
    ("deletion-policy", with_path("spec/deletionPolicy", "Delete"), 'Unsupported value: "Delete"'),
    ("spark-speculation", with_path("spec/snapshot", {"backfill": {"spark": {"sparkConf": {"spark.speculation": "true"}}}}),
     "spark.speculation must be unset or 'false'"),
]


def create(plane: KubeControlPlane, obj: dict[str, Any], *extra: str) -> Any:
    return plane.kubectl("create", "-f", "-", "-o", "json", *extra, input=json.dumps(obj))


def test_valid_resource_accepted_with_defaults(plane: KubeControlPlane) -> None:
    r = create(plane, valid("defaults"), "--dry-run=server")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["spec"]
    assert (spec["state"], spec["kafka"]["offsetsTopic"], spec["source"]["vitess"]["tabletType"]) == (
        "running", "shardcdc-offsets", "PRIMARY")
    assert (spec["deletionPolicy"], spec["kafka"]["securityProtocol"]) == ("Retain", "PLAINTEXT")
    # A model the operator can parse.
    parsed = ConnectorResource.from_body(json.loads(r.stdout))
    assert parsed.spec.tasks == 2 and parsed.spec.source.shards == ("-80", "80-")


def test_spark_conf_accepts_other_keys_and_speculation_off(plane: KubeControlPlane) -> None:
    conf = {"spark.speculation": "false", "spark.executor.memoryOverhead": "512m"}
    r = create(plane, with_path("spec/snapshot", {"backfill": {"spark": {"sparkConf": conf}}}), "--dry-run=server")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("case", "obj", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_resource_rejected(plane: KubeControlPlane, case: str, obj: dict[str, Any], message: str) -> None:
    r = create(plane, obj, "--dry-run=server")
    assert r.returncode != 0, f"{case} was accepted"
    assert message in r.stderr, r.stderr


def test_transition_rules_and_scale(plane: KubeControlPlane) -> None:
    r = create(plane, valid("immutable"))
    assert r.returncode == 0, r.stderr
    for path, value, message in [
        ("spec/source/vitess/keyspace", "other", "spec.source.vitess.keyspace is immutable"),
        ("spec/kafka/topicPrefix", "other", "spec.kafka.topicPrefix is immutable"),
        ("spec/kafka/offsetsTopic", "other-offsets", "spec.kafka.offsetsTopic is immutable"),
    ]:
        r = plane.kubectl("apply", "-f", "-", input=json.dumps(with_path(path, value, name="immutable")))
        assert r.returncode != 0 and message in r.stderr, r.stderr
    # Mutable fields may change; kubectl scale edits spec.tasks through the scale subresource.
    r = plane.kubectl("apply", "-f", "-", input=json.dumps(with_path("spec/state", "paused", name="immutable")))
    assert r.returncode == 0, r.stderr
    r = plane.kubectl("scale", "cdc/immutable", "--replicas=4")
    assert r.returncode == 0, r.stderr
    r = plane.kubectl("get", "cdc", "immutable", "-o", "jsonpath={.spec.tasks} {.spec.state}")
    assert r.stdout == "4 paused"
    r = plane.kubectl("get", "cdc", "immutable")
    assert r.stdout.split("\n")[0].split() == ["NAME", "READY", "STATE", "SHARDS", "TASKS", "GENERATION", "LAG", "AGE"]
    r = plane.kubectl("scale", "cdc/immutable", "--replicas=0")
    assert r.returncode != 0 and "spec.tasks" in r.stderr
