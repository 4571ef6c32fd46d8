"""The Helm charts (``charts/shardcdc``, ``charts/shardcdc-crds``): lint, render, schema, server dry run.

Every value set is linted (``helm lint --strict``) and rendered, and every rendered object is sent to
the real test kube-apiserver with ``kubectl apply --dry-run=server`` (strict field validation, the
CdcConnector CRD and minimal Prometheus Operator CRDs installed), so a wrong field, type or
reference fails here rather than at install time. The same dry run covers every manifest under
``examples/`` and ``tests/e2e/`` (the kind end-to-end suite applies those).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_fixtures import CHART, CRD_CHART, ROOT, by_kind, helm, render, template_text, values_args

from kubetest import KubeControlPlane, kube_control_plane_fixture

CRDS = sorted((ROOT / "crds").glob("*.yaml"))
MONITORING_CRDS = ROOT / "tests" / "fixtures" / "monitoring" / "crds.yaml"
RBAC_YAML = ROOT / "operator" / "rbac.yaml"
NAMESPACE = "shardcdc-system"

OPERATOR_RULES = [
    {"apiGroups": ["shardcdc.io"], "resources": ["cdcconnectors"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["shardcdc.io"], "resources": ["cdcconnectors/status"], "verbs": ["patch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"],
     "verbs": ["get", "list", "create", "patch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["get", "list", "create", "patch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # networkPolicy.create (on by default): the operator makes each connector's workers' policy.
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
]
# rbac.backfills.* (on by default): what cdcoperator.backfill calls.
SPARK_RULE = {"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"],
              "verbs": ["get", "list", "create", "delete"]}
JOB_RULE = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create", "delete"]}
DEFAULT_RULES = [*OPERATOR_RULES, SPARK_RULE, JOB_RULE]

CUSTOM: dict[str, Any] = {
    "image": {"repository": "registry.example.com/shardcdc/operator",
              "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "workerImage": {"repository": "registry.example.com/shardcdc/worker", "digest": "sha256:" + "cd" * 32},
    "serviceAccount": {"name": "cdc-op", "annotations": {"iam.example.com/role": "cdc"}},
    "rbac": {"backfills": {"sparkOperator": False, "sparkSubmit": True}},
    "operator": {"resyncSeconds": 30, "requestTimeoutSeconds": 20, "apiConcurrency": 32, "healthPort": 9090, "metricsPort": 9091,
                 "verbose": True},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                 {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"cpu": 1, "memory": "256Mi"}},
    "podAnnotations": {"example.com/team": "data"},
    "podLabels": {"team": "data"},
    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                           "seccompProfile": {"type": "RuntimeDefault"}},
    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                        "runAsUser": 10001, "capabilities": {"drop": ["ALL"]}},
    "priorityClassName": "shardcdc-critical",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cdc", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]}}},
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "watch-namespaces": {"watchNamespaces": ["team-a", "team-b"]},
    "monitors": {"watchNamespaces": ["team-a"],
                 "metrics": {"podMonitor": {"create": True, "labels": {"release": "prom"}},
                             "serviceMonitor": {"create": True, "interval": "15s"}}},
    "monitors-cluster-wide": {"metrics": {"podMonitor": {"create": True}, "serviceMonitor": {"create": True}}},
    "custom": CUSTOM,
    "hardened": {"watchNamespaces": ["team-a"], "rbac": {"sourceSecrets": True},
                 "policy": {"imageRepositories": ["registry.example.com/cdc/*"], "serviceAccounts": ["spark"]},
                 "workers": {"listenAddress": "${env:POD_IP}"},
                 "networkPolicy": {"monitoringNamespace": "prometheus",
                                   "extraFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
                 "webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5}},
    "secrets-per-namespace": {"rbac": {"kafkaSecrets": True, "secretNamespaces": ["team-a", "team-b"]},
                              "networkPolicy": {"monitoringNamespace": ""}},
    "no-webhook-no-netpol": {"webhook": {"enabled": False}, "networkPolicy": {"create": False},
                             "watchNamespaces": ["team-a"]},
}
# What the chart renders besides the operator's identity and Deployment when the webhook is on.
WEBHOOK_OBJECTS = [("Secret", "shardcdc-webhook-tls"), ("Service", "shardcdc-webhook"),
                   ("ValidatingWebhookConfiguration", "shardcdc")]
WEBHOOK_ARGS = ["--webhook-port=9443", "--webhook-cert-dir=/etc/shardcdc/webhook"]
SECRET_RULE = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
NETPOL_RULE = {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
               "verbs": ["get", "list", "create", "patch", "delete"]}


# --- one home for the CRD ----------------------------------------------------------------------------


@pytest.mark.parametrize("copy_dir", ["charts/shardcdc/crds", "charts/shardcdc-crds/files"])
def test_chart_crds_are_byte_identical_to_crds_dir(copy_dir: str) -> None:
    copies = sorted((ROOT / copy_dir).glob("*.yaml"))
    assert [p.name for p in copies] == [p.name for p in CRDS], "run `make chart-crds`"
    for src, copy in zip(CRDS, copies, strict=True):
        assert copy.read_bytes() == src.read_bytes(), f"{copy} differs from {src}: run `make chart-crds`"


def test_crd_chart_renders_the_crd_with_keep_policy(tmp_path: Path) -> None:
    objs = render(None, tmp_path, chart=CRD_CHART)
    assert [o["metadata"]["name"] for o in objs] == ["cdcconnectors.shardcdc.io"]
    crd = dict(objs[0])
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    # Same content, same JSON types (no integer turned into a float by fromYaml/toYaml).
    assert json.dumps(crd, sort_keys=True) == json.dumps(yaml.safe_load(CRDS[0].read_text()), sort_keys=True)
    unkept = render({"keep": False}, tmp_path, chart=CRD_CHART)
    assert "annotations" not in unkept[0]["metadata"]


def test_operator_rbac_yaml_is_the_chart_rbac(tmp_path: Path) -> None:
    """operator/rbac.yaml is generated from the chart (`make rbac`), for kubectl users and tests."""
    text = RBAC_YAML.read_text()
    expected = template_text({"fullnameOverride": "shardcdc-operator"}, tmp_path,
                             extra=["--show-only", "templates/serviceaccount.yaml",
                                    "--show-only", "templates/rbac.yaml"])
    assert [d for d in yaml.safe_load_all(text) if d] == [d for d in yaml.safe_load_all(expected) if d], (
        "operator/rbac.yaml is stale: run `make rbac`")


# --- lint and render -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict(name: str, tmp_path: Path) -> None:
    r = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_args(VALUE_SETS[name], tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout


def test_crd_chart_lints() -> None:
    r = helm("lint", "--strict", str(CRD_CHART))
    assert r.returncode == 0, r.stdout + r.stderr


def _deployment(objs: list[dict[str, Any]]) -> Mapping[str, Any]:
    (dep,) = by_kind(objs, "Deployment")
    return dep


def test_default_render(tmp_path: Path) -> None:
    objs = render(None, tmp_path)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("ServiceAccount", "shardcdc"), WEBHOOK_OBJECTS[0], ("ClusterRole", "shardcdc"),
        ("ClusterRoleBinding", "shardcdc"), WEBHOOK_OBJECTS[1], ("Deployment", "shardcdc"), WEBHOOK_OBJECTS[2]]
    (role,) = by_kind(objs, "ClusterRole")
    assert role["rules"] == DEFAULT_RULES
    (binding,) = by_kind(objs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "shardcdc", "namespace": NAMESPACE}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "shardcdc"}

    dep = _deployment(objs)
    spec = dep["spec"]
    assert (spec["replicas"], spec["strategy"]) == (1, {"type": "Recreate"})
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "shardcdc"
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/shardcdc/shardcdc-operator:0.1.0"
    assert c["command"] == ["shardcdc", "operator"]
    assert c["args"] == ["--all-namespaces", "--liveness=http://0.0.0.0:8081/healthz", "--metrics-port=8082",
                         *WEBHOOK_ARGS]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 10,
                                  "timeoutSeconds": 5, "failureThreshold": 3}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["ports"] == [{"name": "health", "containerPort": 8081, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 8082, "protocol": "TCP"},
                          {"name": "webhook", "containerPort": 9443, "protocol": "TCP"}]
    assert c["readinessProbe"] == {"tcpSocket": {"port": "webhook"}, "periodSeconds": 5, "timeoutSeconds": 3}
    assert {e["name"]: e.get("value") for e in c["env"]} == {
        "POD_NAMESPACE": None, "SHARDCDC_OPERATOR_RESYNC_SECONDS": "10", "SHARDCDC_OPERATOR_REQUEST_TIMEOUT": "30",
        "SHARDCDC_OPERATOR_API_CONCURRENCY": "16", "SHARDCDC_WORKER_IMAGE": "ghcr.io/shardcdc/shardcdc:0.1.0",
        "TMPDIR": "/tmp",
        # The chart's own worker image only, and no service account a connector may name.
        "SHARDCDC_OPERATOR_POLICY": '{"imageRepositories":["ghcr.io/shardcdc/shardcdc"],"serviceAccounts":[]}',
        "SHARDCDC_WORKER_METRICS_ADDRESS": "0.0.0.0",
        # The workers' NetworkPolicy, made by the operator per connector (issue 28, case 12).
        "SHARDCDC_OPERATOR_NETWORK_POLICY": '{"extraFrom":[],"monitoringNamespace":"monitoring","operatorLabels":'
        '{"app.kubernetes.io/component":"operator","app.kubernetes.io/instance":"shardcdc",'
        '"app.kubernetes.io/name":"shardcdc"},"operatorNamespace":"shardcdc-system"}'}
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"},
                                 {"name": "webhook-tls", "mountPath": "/etc/shardcdc/webhook", "readOnly": True}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                              {"name": "webhook-tls", "secret": {"secretName": "shardcdc-webhook-tls"}}]
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/name": "shardcdc",
                                                "app.kubernetes.io/instance": "shardcdc",
                                                "app.kubernetes.io/component": "operator"}


def test_watch_namespaces_render_roles_only(tmp_path: Path) -> None:
    objs = render(VALUE_SETS["watch-namespaces"], tmp_path)
    assert not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding")
    roles = by_kind(objs, "Role")
    assert [(r["metadata"]["namespace"], r["rules"]) for r in roles] == [
        ("team-a", DEFAULT_RULES), ("team-b", DEFAULT_RULES)]
    bindings = by_kind(objs, "RoleBinding")
    assert [(b["metadata"]["namespace"], b["roleRef"]["kind"], b["subjects"][0]["namespace"]) for b in bindings] == [
        ("team-a", "Role", NAMESPACE), ("team-b", "Role", NAMESPACE)]
    (c,) = _deployment(objs)["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["--namespace=team-a", "--namespace=team-b", "--liveness=http://0.0.0.0:8081/healthz",
                         "--metrics-port=8082", *WEBHOOK_ARGS]


def test_monitors_render(tmp_path: Path) -> None:
    objs = render(VALUE_SETS["monitors"], tmp_path)
    (pm,) = by_kind(objs, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert pm["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "shardcdc-worker",
                                                      "app.kubernetes.io/component": "worker"}}
    assert [(e["port"], e["path"], e["interval"]) for e in pm["spec"]["podMetricsEndpoints"]] == [
        ("metrics", "/metrics", "30s")]
    # The operator's own metrics: a Service over the operator pod, and a ServiceMonitor selecting it.
    (svc,) = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "shardcdc-metrics"]
    dep = _deployment(objs)
    assert svc["metadata"]["namespace"] == NAMESPACE
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8082, "targetPort": "metrics", "protocol": "TCP"}]
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [(e["port"], e["path"], e["interval"]) for e in sm["spec"]["endpoints"]] == [("metrics", "/metrics", "15s")]

    cluster_wide = render(VALUE_SETS["monitors-cluster-wide"], tmp_path)
    (pm,) = by_kind(cluster_wide, "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    assert len(by_kind(cluster_wide, "ServiceMonitor")) == 1
    assert [s["metadata"]["name"] for s in by_kind(render(None, tmp_path), "Service")] == ["shardcdc-webhook"]


def test_custom_values_render(tmp_path: Path) -> None:
    objs = render(CUSTOM, tmp_path)
    (sa,) = by_kind(objs, "ServiceAccount")
    assert (sa["metadata"]["name"], sa["metadata"]["annotations"]) == ("cdc-op", {"iam.example.com/role": "cdc"})
    (role,) = by_kind(objs, "ClusterRole")
    assert role["rules"] == [*OPERATOR_RULES, JOB_RULE]
    pod = _deployment(objs)["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "data"
    assert pod["metadata"]["annotations"] == {"example.com/team": "data"}
    spec = pod["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets", "priorityClassName"):
        assert spec[key] == CUSTOM[key]
    assert spec["securityContext"] == CUSTOM["podSecurityContext"]
    (c,) = spec["containers"]
    assert c["image"] == "registry.example.com/shardcdc/operator@sha256:" + "ab" * 32
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == CUSTOM["resources"]
    assert c["securityContext"] == CUSTOM["securityContext"]
    assert c["args"] == ["--all-namespaces", "--liveness=http://0.0.0.0:9090/healthz", "--metrics-port=9091",
                         *WEBHOOK_ARGS, "--verbose"]
    assert c["env"][-2:] == CUSTOM["extraEnv"]
    env = {e["name"]: e.get("value") for e in c["env"][:-2]}
    assert env["SHARDCDC_OPERATOR_RESYNC_SECONDS"] == "30"
    assert env["SHARDCDC_OPERATOR_API_CONCURRENCY"] == "32"
    assert env["SHARDCDC_WORKER_IMAGE"] == "registry.example.com/shardcdc/worker@sha256:" + "cd" * 32
    tagged = _deployment(render({"workerImage": {"repository": "r.example.com/w", "tag": "1.2"}}, tmp_path))
    (tagged_c,) = tagged["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in tagged_c["env"]}["SHARDCDC_WORKER_IMAGE"] == "r.example.com/w:1.2"
    assert c["ports"][0]["containerPort"] == 9090


def test_notes_name_the_scope_and_the_crd_upgrade_step(plane: KubeControlPlane, tmp_path: Path) -> None:
    # helm install needs a reachable cluster even for a client-side dry run.
    r = helm("install", "shardcdc", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
             "--kubeconfig", str(plane.kubeconfig_path), *values_args(VALUE_SETS["watch-namespaces"], tmp_path))
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert "It serves CdcConnectors in: team-a, team-b (a Role in each)." in notes
    assert "Helm never upgrades CRDs" in notes
    assert "every Secret" not in notes
    # Every namespace served: say what the chart could not restrict, and the value that does.
    r = helm("install", "shardcdc", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
             "--kubeconfig", str(plane.kubeconfig_path), "--set", "rbac.sourceSecrets=true")
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert "The operator may read (get) every Secret of the cluster" in notes and "rbac.secretNamespaces" in notes


# --- policy, webhook, NetworkPolicy, Secrets per namespace ------------------------------------------


def _env(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = _deployment(objs)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in c["env"]}


def test_policy_and_listen_address_reach_the_operator(tmp_path: Path) -> None:
    env = _env(render(VALUE_SETS["hardened"], tmp_path))
    assert json.loads(env["SHARDCDC_OPERATOR_POLICY"]) == {
        "imageRepositories": ["ghcr.io/shardcdc/shardcdc", "registry.example.com/cdc/*"], "serviceAccounts": ["spark"]}
    assert env["SHARDCDC_WORKER_METRICS_ADDRESS"] == "${env:POD_IP}"
    # The worker image's own repository is always allowed, once.
    env = _env(render({"workerImage": {"repository": "r.example.com/w"},
                       "policy": {"imageRepositories": ["r.example.com/w"], "serviceAccounts": ["*"]}}, tmp_path))
    assert json.loads(env["SHARDCDC_OPERATOR_POLICY"]) == {"imageRepositories": ["r.example.com/w"],
                                                           "serviceAccounts": ["*"]}


def _pem_certs(b64: str) -> list[Any]:
    import base64

    from cryptography import x509

    return x509.load_pem_x509_certificates(base64.b64decode(b64))


def test_webhook_renders_its_service_certificate_and_configuration(tmp_path: Path) -> None:
    from cryptography import x509

    objs = render(None, tmp_path)
    (secret,) = by_kind(objs, "Secret")
    assert (secret["metadata"]["name"], secret["type"]) == ("shardcdc-webhook-tls", "kubernetes.io/tls")
    (cert,) = _pem_certs(secret["data"]["tls.crt"])
    (ca,) = _pem_certs(secret["data"]["ca.crt"])
    cert.verify_directly_issued_by(ca)  # the caBundle below is what signed the serving certificate
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "shardcdc-webhook.shardcdc-system.svc" in sans
    (svc,) = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "shardcdc-webhook"]
    assert svc["spec"]["selector"] == _deployment(objs)["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    (vwc,) = by_kind(objs, "ValidatingWebhookConfiguration")
    (hook,) = vwc["webhooks"]
    assert hook["clientConfig"] == {"service": {"name": "shardcdc-webhook", "namespace": NAMESPACE, "port": 443,
                                                "path": "/validate-cdcconnector"},
                                    "caBundle": secret["data"]["ca.crt"]}
    assert (hook["name"], hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "validate.cdcconnectors.shardcdc.io", "Fail", "None", 10)
    assert hook["rules"] == [{"apiGroups": ["shardcdc.io"], "apiVersions": ["v1alpha1"], "resources": ["cdcconnectors"],
                              "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]
    assert "namespaceSelector" not in hook  # every namespace, as the operator
    (cond,) = hook["matchConditions"]
    assert "object.spec != oldObject.spec" in cond["expression"]

    hardened = render(VALUE_SETS["hardened"], tmp_path)
    (hook,) = by_kind(hardened, "ValidatingWebhookConfiguration")[0]["webhooks"]
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 5)
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}

    off = render(VALUE_SETS["no-webhook-no-netpol"], tmp_path)
    assert not [o for o in off if (o["kind"], o["metadata"]["name"]) in WEBHOOK_OBJECTS]
    (c,) = _deployment(off)["spec"]["template"]["spec"]["containers"]
    assert not [a for a in c["args"] if a.startswith("--webhook")]
    assert "readinessProbe" not in c and [m["name"] for m in c["volumeMounts"]] == ["tmp"]


def test_webhook_certificate_from_cert_manager(tmp_path: Path) -> None:
    objs = render({"webhook": {"certManager": {"enabled": True}}}, tmp_path)
    assert not by_kind(objs, "Secret")
    (issuer,) = by_kind(objs, "Issuer")
    assert (issuer["metadata"]["name"], issuer["spec"]) == ("shardcdc-webhook", {"selfSigned": {}})
    (cert,) = by_kind(objs, "Certificate")
    assert cert["spec"]["secretName"] == "shardcdc-webhook-tls"
    assert cert["spec"]["issuerRef"] == {"name": "shardcdc-webhook", "kind": "Issuer"}
    assert "shardcdc-webhook.shardcdc-system.svc" in cert["spec"]["dnsNames"]
    (vwc,) = by_kind(objs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "shardcdc-system/shardcdc-webhook"}
    assert "caBundle" not in vwc["webhooks"][0]["clientConfig"]
    own = render({"webhook": {"certManager": {"enabled": True, "issuerRef": {"name": "corp-ca",
                                                                             "kind": "ClusterIssuer"}}}}, tmp_path)
    assert not by_kind(own, "Issuer")
    assert by_kind(own, "Certificate")[0]["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_network_policy_is_on_by_default_and_reaches_the_operator(tmp_path: Path) -> None:
    """Issue 28, case 12: with the default values the workers of every connector get a NetworkPolicy
    (the operator makes it per connector: the chart cannot know the namespaces when it serves them
    all), admitting only the operator's pods and the monitoring namespace to the metrics port."""
    from cdcoperator.model import ConnectorResource
    from cdcoperator.networkpolicy import build_network_policy, load_network_policy

    objs = render(None, tmp_path)
    assert not by_kind(objs, "NetworkPolicy")  # none from the chart itself: one per connector instead
    env = _env(objs)
    settings = load_network_policy({"SHARDCDC_OPERATOR_NETWORK_POLICY": env["SHARDCDC_OPERATOR_NETWORK_POLICY"]})
    operator_labels = _deployment(objs)["spec"]["selector"]["matchLabels"]
    assert settings is not None and dict(settings.operator_labels) == operator_labels
    assert env["SHARDCDC_WORKER_METRICS_ADDRESS"] == "0.0.0.0"  # workers.listenAddress
    assert NETPOL_RULE in by_kind(objs, "ClusterRole")[0]["rules"]
    cr = ConnectorResource.from_body({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u1"},
        "spec": {"source": {"vitess": {"vtgate": "h:1", "keyspace": "ks"}},
                 "kafka": {"bootstrapServers": "b:1", "topicPrefix": "p", "offsetsTopic": "o"}}})
    policy = build_network_policy(cr, settings)
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == ("orders-workers", "shop")
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u1"
    operator_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                     "podSelector": {"matchLabels": operator_labels}}
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"shardcdc.io/connector": "orders"}}, "policyTypes": ["Ingress"],
        "ingress": [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [
            operator_peer, {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}]}

    hardened = load_network_policy({"SHARDCDC_OPERATOR_NETWORK_POLICY": _env(render(
        VALUE_SETS["hardened"], tmp_path))["SHARDCDC_OPERATOR_NETWORK_POLICY"]})
    assert hardened is not None
    assert build_network_policy(cr, hardened)["spec"]["ingress"][0]["from"] == [
        operator_peer, {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}}]
    no_monitoring = load_network_policy({"SHARDCDC_OPERATOR_NETWORK_POLICY": _env(render(
        VALUE_SETS["secrets-per-namespace"], tmp_path))["SHARDCDC_OPERATOR_NETWORK_POLICY"]})
    assert no_monitoring is not None and build_network_policy(cr, no_monitoring)["spec"]["ingress"][0]["from"] == [
        operator_peer]
    # Off: no settings for the operator, and no permission for NetworkPolicies.
    off = render(VALUE_SETS["no-webhook-no-netpol"], tmp_path)
    assert "SHARDCDC_OPERATOR_NETWORK_POLICY" not in _env(off)
    assert all(NETPOL_RULE not in r["rules"] for r in by_kind(off, "Role"))


def test_secret_namespaces_move_get_secrets_out_of_the_cluster_role(tmp_path: Path) -> None:
    cluster_wide = render({"rbac": {"sourceSecrets": True}}, tmp_path)
    assert by_kind(cluster_wide, "ClusterRole")[0]["rules"] == [*OPERATOR_RULES, SECRET_RULE, SPARK_RULE, JOB_RULE]
    objs = render(VALUE_SETS["secrets-per-namespace"], tmp_path)
    assert by_kind(objs, "ClusterRole")[0]["rules"] == DEFAULT_RULES  # no Secrets cluster-wide
    roles = by_kind(objs, "Role")
    assert [(r["metadata"]["name"], r["metadata"]["namespace"], r["rules"]) for r in roles] == [
        ("shardcdc-secrets", "team-a", [SECRET_RULE]), ("shardcdc-secrets", "team-b", [SECRET_RULE])]
    bindings = by_kind(objs, "RoleBinding")
    assert [(b["metadata"]["namespace"], b["roleRef"]["name"], b["subjects"]) for b in bindings] == [
        (ns, "shardcdc-secrets", [{"kind": "ServiceAccount", "name": "shardcdc", "namespace": NAMESPACE}])
        for ns in ("team-a", "team-b")]
    # With watchNamespaces every rule is per namespace already; secretNamespaces adds nothing.
    watched = render({"watchNamespaces": ["team-a"], "rbac": {"sourceSecrets": True, "secretNamespaces": ["x"]}},
                     tmp_path)
    assert [(r["metadata"]["name"], r["metadata"]["namespace"], r["rules"]) for r in by_kind(watched, "Role")] == [
        ("shardcdc", "team-a", [*OPERATOR_RULES, SECRET_RULE, SPARK_RULE, JOB_RULE])]


# --- the schema rejects bad values with a clear message --------------------------------------------


BAD_VALUES: list[tuple[dict[str, Any], list[str]]] = [
    ({"replicaCount": 2}, ["at '': additional properties 'replicaCount' not allowed"]),
    ({"watchNamespaces": "team-a"}, ["at '/watchNamespaces': got string, want array"]),
    ({"watchNamespaces": ["Team_A"]}, ["at '/watchNamespaces/0': 'Team_A' does not match pattern"]),
    ({"image": {"pullPolicy": "Sometimes"}},
     ["at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"]),
    ({"image": {"digest": "latest"}}, ["at '/image/digest': 'latest' does not match pattern"]),
    ({"workerImage": {"repository": "ghcr.io/shardcdc/shardcdc:latest"}},
     ["at '/workerImage/repository': 'ghcr.io/shardcdc/shardcdc:latest' does not match pattern"]),
    ({"resources": {"limits": {"memory": "lots"}}}, ["at '/resources/limits/memory': 'lots' does not match pattern"]),
    ({"securityContext": {"readOnlyRootFilesystem": False, "allowPrivilegeEscalation": True}},
     ["at '/securityContext/readOnlyRootFilesystem': value must be true",
      "at '/securityContext/allowPrivilegeEscalation': value must be false"]),
    ({"podSecurityContext": {"runAsNonRoot": False}}, ["at '/podSecurityContext/runAsNonRoot': value must be true"]),
    ({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
     ["at '/securityContext/capabilities/add': maxItems: got 1, want 0"]),
    ({"metrics": {"podMonitor": {"create": "yes"}}}, ["at '/metrics/podMonitor/create': got string, want boolean"]),
    ({"metrics": {"podMonitor": {"interval": "30 seconds"}}},
     ["at '/metrics/podMonitor/interval': '30 seconds' does not match pattern"]),
    ({"operator": {"healthPort": 80}}, ["at '/operator/healthPort': minimum: got 80, want 1,024"]),
    ({"extraEnv": [{"value": "x"}]}, ["at '/extraEnv/0': missing property 'name'"]),
    ({"policy": {"imageRepositories": ["ghcr.io/x/y:1.0"]}},
     ["at '/policy/imageRepositories/0': 'ghcr.io/x/y:1.0' does not match pattern"]),
    ({"policy": {"serviceAccounts": ["Admin"]}}, ["at '/policy/serviceAccounts/0': 'Admin' does not match pattern"]),
    ({"webhook": {"failurePolicy": "Sometimes"}}, ["at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"]),
    ({"rbac": {"secretNamespaces": "team-a"}}, ["at '/rbac/secretNamespaces': got string, want array"]),
    ({"networkPolicy": {"create": "yes"}}, ["at '/networkPolicy/create': got string, want boolean"]),
]


@pytest.mark.parametrize(("values", "messages"), BAD_VALUES, ids=[json.dumps(v) for v, _ in BAD_VALUES])
def test_schema_rejects_bad_values(values: dict[str, Any], messages: list[str], tmp_path: Path) -> None:
    r = helm("template", "shardcdc", str(CHART), *values_args(values, tmp_path))
    assert r.returncode == 1, r.stdout
    assert "values don't meet the specifications of the schema(s)" in r.stderr
    for message in messages:
        assert message in r.stderr, r.stderr


def test_service_account_name_required_when_not_created(tmp_path: Path) -> None:
    r = helm("template", "shardcdc", str(CHART), "--set", "serviceAccount.create=false")
    assert r.returncode == 1
    assert "serviceAccount.name is required when serviceAccount.create is false" in r.stderr
    objs = render({"serviceAccount": {"create": False, "name": "existing"}}, tmp_path)
    assert not by_kind(objs, "ServiceAccount")
    assert _deployment(objs)["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# --- server-side dry run against the real API server ------------------------------------------------


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        for path in [*CRDS, MONITORING_CRDS]:
            p.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path), check=True)
        p.wait_established("cdcconnectors.shardcdc.io", "podmonitors.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com")
        yield p


def _ensure_namespaces(plane: KubeControlPlane, objs: list[dict[str, Any]], *extra: str) -> None:
    wanted = {o["metadata"].get("namespace") for o in objs} | set(extra)
    existing = set(plane.kubectl("get", "namespaces", "-o", "name", check=True).stdout.split())
    for ns in sorted(n for n in wanted if n and f"namespace/{n}" not in existing):
        plane.kubectl("create", "namespace", ns, check=True)


def _dry_run(plane: KubeControlPlane, objs: list[dict[str, Any]], default_ns: str) -> list[str]:
    """Apply with --dry-run=server (strict field validation); return kubectl's per-object lines."""
    _ensure_namespaces(plane, objs, default_ns)
    stream = yaml.safe_dump_all(objs, sort_keys=False)
    r = plane.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=stream)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(objs), r.stdout
    assert all(line.endswith("(server dry run)") for line in lines), r.stdout
    return lines


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_pass_server_dry_run(plane: KubeControlPlane, name: str, tmp_path: Path) -> None:
    objs = render(VALUE_SETS[name], tmp_path)
    lines = _dry_run(plane, objs, NAMESPACE)
    assert [line.split()[0] for line in lines] == [
        f"{o['kind'].lower()}{'.' + o['apiVersion'].split('/')[0] if '/' in o['apiVersion'] else ''}/"
        f"{o['metadata']['name']}" for o in objs]


def test_crd_chart_passes_server_dry_run(plane: KubeControlPlane, tmp_path: Path) -> None:
    objs = render(None, tmp_path, chart=CRD_CHART)
    assert _dry_run(plane, objs, "default") == [
        "customresourcedefinition.apiextensions.k8s.io/cdcconnectors.shardcdc.io configured (server dry run)"]


def test_dry_run_catches_what_the_schema_cannot(plane: KubeControlPlane, tmp_path: Path) -> None:
    """The API server rejects a field the chart passes through unchecked (tolerations are free-form)."""
    objs = render({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, tmp_path)
    _ensure_namespaces(plane, objs, NAMESPACE)
    r = plane.kubectl("apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-",
                      input=yaml.safe_dump_all(objs, sort_keys=False))
    assert r.returncode != 0
    assert 'spec.template.spec.tolerations[0].operator: Unsupported value: "Sometimes"' in r.stderr


# --- every manifest the docs and the kind e2e suite apply ----------------------------------------------

# Kinds whose CRDs belong to other projects and are not installed in the test API server.
EXTERNAL_KINDS = {
    ("argoproj.io", "Application"): "ArgoCD's CRDs are not installed in the test API server",
    ("argoproj.io", "AppProject"): "ArgoCD's CRDs are not installed in the test API server",
    ("kind.x-k8s.io", "Cluster"): "a kind cluster config, read by `kind`, not an API object",
}


def _manifest_files() -> list[Path]:
    files: list[Path] = []
    for top in ("examples",):
        base = ROOT / top
        if base.is_dir():
            files += sorted(p for p in base.rglob("*") if p.suffix in (".yaml", ".yml"))
    return files


def _manifests(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """(objects to dry-run, skipped (group/kind, reason)) of one file."""
    objs: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        assert isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc, f"{path}: not a manifest: {doc!r}"
        group = doc["apiVersion"].rpartition("/")[0]
        reason = EXTERNAL_KINDS.get((group, doc["kind"]))
        if reason is None:
            objs.append(doc)
        else:
            skipped.append((f"{group}/{doc['kind']}", reason))
    return objs, skipped


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` applies)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def test_examples_and_e2e_manifests_pass_server_dry_run(plane: KubeControlPlane) -> None:
    checked: list[str] = []
    skipped: dict[str, str] = {}
    for path in _manifest_files():
        skips: list[tuple[str, str]] = []
        if path.name.startswith("values") or path.name.endswith("-values.yaml"):
            # Helm values for the chart (e.g. the kind e2e install): render with them, then dry-run.
            objs = render(None, ROOT, extra=["-f", str(path)])
        elif path.name.endswith(".patch.yaml"):
            # A merge patch the kind e2e applies to its connector: dry-run the patched connector.
            objs = [_merge_patch(yaml.safe_load((path.parent / "30-connector.yaml").read_text()),
                                 yaml.safe_load(path.read_text()))]
        else:
            objs, skips = _manifests(path)
        skipped.update(skips)
        for o in objs:
            if o.get("kind") == "CdcConnector":
                # Other tests of this session may hold a live connector of the same name whose
                # immutable fields differ; the dry run checks the manifest, not that collision.
                o["metadata"]["name"] += "-dry-run"
        if objs:
            _dry_run(plane, objs, "default")
            checked += [f"{path.relative_to(ROOT)}: {o['kind']}/{o['metadata']['name']}" for o in objs]
    # Only kinds of other projects' CRDs are skipped, each for its stated reason.
    assert all(skipped[k] == EXTERNAL_KINDS[(k.rpartition("/")[0], k.rpartition("/")[2])] for k in skipped)
    # Whatever exists is checked; an empty examples/ and tests/e2e/ would make this vacuous.
    assert checked, "no manifest found under examples/ or tests/e2e/"
