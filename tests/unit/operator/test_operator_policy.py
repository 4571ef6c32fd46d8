"""The operator's policy (cdcoperator.policy) and the admission decision (cdcoperator.admission), as pure functions.

The API server paths (reconcile refusal, webhook refusal at ``kubectl apply``) are in
tests/integration/operator/test_operator_admission.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from cdcoperator.admission import MAX_MESSAGE, denial_message, review
from cdcoperator.policy import Policy, PolicyError, load_policy, repository_of


@pytest.mark.parametrize(("image", "repo"), [
    ("ghcr.io/shardcdc/shardcdc:0.1.0", "ghcr.io/shardcdc/shardcdc"),
    ("ghcr.io/shardcdc/shardcdc", "ghcr.io/shardcdc/shardcdc"),
    ("registry:5000/team/app:1.2@sha256:" + "ab" * 32, "registry:5000/team/app"),
    ("registry:5000/team/app", "registry:5000/team/app"),
    ("nginx@sha256:" + "cd" * 32, "nginx"),
])
def test_repository_of(image: str, repo: str) -> None:
    assert repository_of(image) == repo


def test_prefix_entries_allow_only_below_the_prefix() -> None:
    p = Policy(("registry.example.com/cdc/*", "ghcr.io/shardcdc/shardcdc"))
    assert p.image_allowed("registry.example.com/cdc/worker:1")
    assert p.image_allowed("registry.example.com/cdc/team/worker@sha256:" + "ab" * 32)
    assert not p.image_allowed("registry.example.com/cdc-evil/worker:1")
    assert not p.image_allowed("registry.example.com/cdc:1")
    assert p.image_allowed("ghcr.io/shardcdc/shardcdc:9")
    assert not p.image_allowed("ghcr.io/shardcdc/shardcdc-evil:9")
    assert not p.image_allowed("ghcr.io/shardcdc/shardcdc/sub:9")


def test_every_image_and_service_account_a_spec_can_name_is_checked() -> None:
    spec: dict[str, Any] = {
        "worker": {"image": "a/w:1", "podTemplate": {"serviceAccountName": "root-ish"}},
        "snapshot": {"backfill": {"engine": "sparkSubmit", "spark": {
            "image": "a/s:1", "serviceAccount": "spark",
            "sparkConf": {"spark.kubernetes.container.image": "a/c:1",
                          "spark.kubernetes.driver.container.image": "a/d:1",
                          "spark.kubernetes.authenticate.executor.serviceAccountName": "exec",
                          "spark.executor.memory": "1g"}}}},
    }
    problems = Policy(("ok/*",), ("spark",)).violations(spec)
    assert [p.split(":")[0] for p in problems] == [
        "spec.worker.image", "spec.snapshot.backfill.spark.image",
        "spec.snapshot.backfill.spark.sparkConf['spark.kubernetes.container.image']",
        "spec.snapshot.backfill.spark.sparkConf['spark.kubernetes.driver.container.image']",
        "spec.worker.podTemplate.serviceAccountName",
        "spec.snapshot.backfill.spark.sparkConf['spark.kubernetes.authenticate.executor.serviceAccountName']",
    ]
    assert Policy(("a/*",), ("*",)).violations(spec) == []
    assert Policy().violations({}) == []  # nothing named: the operator's own defaults


def test_load_policy() -> None:
    assert load_policy({}) is None
    assert load_policy({"SHARDCDC_OPERATOR_POLICY": ""}) is None
    assert load_policy({"SHARDCDC_OPERATOR_POLICY": '{"imageRepositories": ["a/b"], "serviceAccounts": []}'}) == \
        Policy(("a/b",), ())
    bad = {
        "{": "$SHARDCDC_OPERATOR_POLICY is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
             "(char 1))",
        "[]": "$SHARDCDC_OPERATOR_POLICY must be a JSON object with imageRepositories and serviceAccounts",
        '{"images": []}': "$SHARDCDC_OPERATOR_POLICY: unknown keys images (expected imageRepositories, serviceAccounts)",
        '{"serviceAccounts": "x"}': '$SHARDCDC_OPERATOR_POLICY: serviceAccounts must be a list of non-empty strings, '
                                    'got "x"',
    }
    for text, message in bad.items():
        with pytest.raises(PolicyError) as err:
            load_policy({"SHARDCDC_OPERATOR_POLICY": text})
        assert str(err.value) == message


def test_operator_refuses_to_start_with_a_bad_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdcoperator.cli import main

    monkeypatch.setenv("SHARDCDC_OPERATOR_POLICY", '{"serviceAccounts": [1]}')
    monkeypatch.setattr("sys.argv", ["shardcdc operator", "--namespace", "x"])
    with pytest.raises(SystemExit) as err:
        main()
    assert str(err.value) == ("shardcdc operator: $SHARDCDC_OPERATOR_POLICY: serviceAccounts must be a list of "
                              "non-empty strings, got [1]")


def _body(config: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "c", "namespace": "n"},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "shop"}},
                     "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "c"},
                     **({"config": config} if config else {}), **spec}}


def test_review_runs_the_validator_and_the_policy() -> None:
    assert review(_body({"table.include.list": "shop\\.orders"}), None, Policy()) == []
    assert review(_body({"decimal.handling.mode": "fast"}), None, None) == [
        "spec.config: decimal.handling.mode: 'fast' is not one of: precise, double, string"]
    assert review(_body(worker={"image": "x/y:1"}), None, Policy(("a",))) == [
        "spec.worker.image: image 'x/y:1' is not allowed by the operator's policy (allowed repositories: a); use an "
        "allowed image or ask the cluster admin to add 'x/y' to the chart's policy.imageRepositories"]
    assert review(_body(worker={"image": "x/y:1"}), None, None) == []  # no policy: unrestricted


def test_review_admits_updates_that_keep_the_spec_and_deletions() -> None:
    invalid = _body({"no.such.property": "1"}, worker={"image": "x/y:1"})
    assert review(invalid, None, Policy())  # refused when created or changed
    relabelled = {**invalid, "metadata": {**invalid["metadata"], "labels": {"team": "data"},
                                          "finalizers": ["shardcdc.io/finalizer"]}}
    assert review(relabelled, invalid, Policy()) == []
    deleting = {**invalid, "metadata": {**invalid["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert review(deleting, None, Policy()) == []


def test_denial_message_is_bounded() -> None:
    assert denial_message(["a: x", "b: y"]) == "a: x; b: y"
    long = denial_message(["v" * 10_000_000])
    assert len(long) == MAX_MESSAGE and long.endswith(" ... (truncated)")


def test_long_refused_values_are_cut_in_messages() -> None:
    huge = "evil/" + "x" * 8_000_000 + ":1"
    (problem,) = Policy(("ok",)).violations({"snapshot": {"backfill": {"spark": {"sparkConf": {
        "spark.kubernetes.container.image": huge}}}}})
    assert len(problem) < 1000 and "... (8000007 characters)" in problem


def test_network_policy_settings_are_checked_at_start() -> None:
    """The chart's networkPolicy values reach the operator as JSON; a bad value is one line (issue 28, case 12)."""
    from cdcoperator.networkpolicy import NETWORK_POLICY_ENV, NetworkPolicyError, load_network_policy

    assert load_network_policy({}) is None
    good = {"operatorNamespace": "ops", "operatorLabels": {"app": "op"}, "monitoringNamespace": "", "extraFrom": []}
    settings = load_network_policy({NETWORK_POLICY_ENV: json.dumps(good)})
    assert settings is not None and settings.operator_labels == (("app", "op"),) and settings.monitoring_namespace == ""
    for value, message in [
        ("{", "$SHARDCDC_OPERATOR_NETWORK_POLICY is not JSON"),
        (json.dumps({**good, "x": 1}), "unknown keys x"),
        (json.dumps({**good, "operatorNamespace": ""}), "operatorNamespace must be a namespace name"),
        (json.dumps({**good, "operatorLabels": {}}), "operatorLabels must be the operator pod's labels"),
        (json.dumps({**good, "extraFrom": [1]}), "extraFrom must be a list of NetworkPolicyPeer objects"),
    ]:
        with pytest.raises(NetworkPolicyError, match=re.escape(message)):
            load_network_policy({NETWORK_POLICY_ENV: value})
