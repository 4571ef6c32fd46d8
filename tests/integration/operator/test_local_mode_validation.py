"""Local mode validates manifests as the API server does: the CRD's schema and CEL rules, same messages.

The cases are test_crd_schema's invalid resources (each with the message the real API server gives)
plus a few more kinds of mistake; each local error must appear verbatim in the real kube-apiserver's
answer to the same object, so local mode can neither accept what ``kubectl apply`` rejects nor word it
differently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kube_fixtures import wait_for
from test_crd_schema import CRD_PATH, INVALID, valid, with_path

from cdcoperator.cel import CelError, compile_rule, evaluate
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.model import SpecError
from cdcoperator.validation import CRD_FILE, crd_schema, validate
from kubetest import KubeControlPlane, kube_control_plane_fixture

MORE = [
    ("tasks-type", with_path("spec/tasks", "2"), 'spec.tasks: Invalid value: "string": spec.tasks in body must be of '
                                                 'type integer: "string"'),
    ("unknown-field", with_path("spec/replicas", 2), 'unknown field "spec.replicas"'),
    ("keyspace-too-long", with_path("spec/source/vitess/keyspace", "k" * 300), "spec.source.vitess.keyspace: Too long"),
    ("config-not-string", with_path("spec/config", {"a": 1}), 'spec.config.a: Invalid value: "integer"'),
    # Names as the API server checks every object's (RFC 1123), with its wording (issue 28, case 4).
    ("name-upper-case", valid("Orders"), 'metadata.name: Invalid value: "Orders": a lowercase RFC 1123 subdomain'),
    ("name-underscore", valid("a_b"), 'metadata.name: Invalid value: "a_b": a lowercase RFC 1123 subdomain'),
]
CASES = [*INVALID, *MORE]


def test_the_packaged_crd_is_the_crd() -> None:
    assert CRD_FILE.read_bytes() == CRD_PATH.read_bytes(), "run `make chart-crds`"


def test_every_rule_of_the_crd_is_in_the_supported_cel_subset() -> None:
    rules: list[str] = []

    def walk(schema: dict[str, Any]) -> None:
        rules.extend(v["rule"] for v in schema.get("x-kubernetes-validations") or ())
        for sub in (schema.get("properties") or {}).values():
            walk(sub)
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                walk(schema[key])

    walk(crd_schema())
    assert len(rules) >= 15
    for rule in rules:
        compile_rule(rule)


def test_cel_subset() -> None:
    assert evaluate("self.matches('^[a-z]+$') && self.size() == 3 && size(self) < 4", {"self": "abc"}) is True
    assert evaluate("!self.exists(k, k.startsWith('a.') || k in ['x', 'y'])", {"self": {"b": 1, "y": 2}}) is False
    assert evaluate("self.all(k, self[k].endsWith('!'))", {"self": {"a": "hi!", "b": "yo!"}}) is True
    assert evaluate("has(self.a) && !has(self.b) ? 1 + 2 * 3 : -1", {"self": {"a": {}}}) == 7
    assert evaluate("self == oldSelf", {"self": "a", "oldSelf": "a"}) is True
    assert evaluate("has(self.x) || self.y", {"self": {"x": 1}}) is True  # the error of self.y is absorbed
    with pytest.raises(CelError, match="no such key: y"):
        evaluate("self.y", {"self": {}})
    with pytest.raises(CelError, match="unsupported function"):
        evaluate("self.lowerAscii()", {"self": "A"})


def test_valid_manifest_has_no_errors() -> None:
    assert validate(valid()) == []
    assert validate(valid(), valid()) == []


@pytest.mark.parametrize(("case", "obj", "message"), CASES, ids=[c[0] for c in CASES])
def test_invalid_manifest_rejected_locally(case: str, obj: dict[str, Any], message: str, tmp_path: Path) -> None:
    errors = validate(obj)
    assert any(message in e for e in errors), errors
    with pytest.raises(SpecError, match="is invalid: "):
        LocalCluster(tmp_path).put_connector(obj)


def test_transition_rules_on_reapply_and_patch(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.put_connector(valid())
    with pytest.raises(SpecError, match=r"spec\.source\.vitess\.keyspace is immutable"):
        cluster.put_connector(with_path("spec/source/vitess/keyspace", "other"))
    with pytest.raises(SpecError, match=r"spec\.kafka\.topicPrefix is immutable"):
        cluster.patch_connector("default", "orders", {"spec": {"kafka": {"topicPrefix": "other"}}})
    with pytest.raises(SpecError, match=r"spec\.tasks in body should be less than or equal to 1024"):
        cluster.patch_connector("default", "orders", {"spec": {"tasks": 5000}})
    assert cluster.patch_connector("default", "orders", {"spec": {"state": "paused"}})["spec"]["state"] == "paused"


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        r = p.kubectl("apply", "-f", str(CRD_PATH))
        assert r.returncode == 0, r.stderr
        # Polled rather than `kubectl wait`, which fails on a just-created CRD without status yet.
        wait_for(lambda p=p: "True" in p.kubectl("get", "crd/cdcconnectors.shardcdc.io", "-o",
                                                 "jsonpath={.status.conditions[?(@.type=='Established')].status}"
                                                 ).stdout,
                 60, "the CRD established")
        yield p


def test_local_messages_are_the_api_servers(plane: KubeControlPlane) -> None:
    for case, obj, _ in CASES:
        r = plane.kubectl("create", "-f", "-", "--dry-run=server", "-o", "json", input=json.dumps(obj))
        assert r.returncode != 0, f"{case} was accepted by the API server"
        for error in validate(obj):
            assert error in r.stderr, (case, error, r.stderr)


def _shardcdc_run(manifest: Path, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcdc_cli.cli", "run", "-f", str(manifest), "--state-dir",
                           str(state)], capture_output=True, text=True, timeout=60, env={**os.environ, **env})


def test_shardcdc_run_refuses_an_invalid_manifest(tmp_path: Path) -> None:
    import yaml

    manifest = tmp_path / "connector.yaml"
    manifest.write_text(yaml.safe_dump(with_path("spec/config", {"tasks.max": "4"})))
    r = _shardcdc_run(manifest, tmp_path / "state")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"shardcdc run: {manifest} CdcConnector/orders is invalid (`shardcdc validate -f {manifest}` "
                        "says the same); nothing was started:\n"
                        '  - spec.config: Invalid value: "object": spec.config must not set tasks.max; use spec.tasks '
                        "(or kubectl scale)\n")


def test_shardcdc_run_refuses_a_bad_port_range_before_starting_anything(tmp_path: Path) -> None:
    import yaml

    manifest = tmp_path / "connector.yaml"
    manifest.write_text(yaml.safe_dump(valid()))
    r = _shardcdc_run(manifest, tmp_path / "state", SHARDCDC_PORT_RANGE="9000")
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("shardcdc run: SHARDCDC_PORT_RANGE='9000': give <low>-<high>, 1024 <= low, high <= 65536 "
                        "and at least 100 ports apart (for example 10000-20000), or unset it\n")
    assert not (tmp_path / "state").exists()
