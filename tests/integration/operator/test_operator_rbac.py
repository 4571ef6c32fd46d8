"""The operator runs with exactly the Helm chart's permissions, and they suffice.

The chart's ServiceAccount and RBAC objects (``helm template``, both modes: ClusterRole for every
namespace, a Role per namespace with ``watchNamespaces``) are created in a real kube-apiserver, a
bound token is minted for the ServiceAccount (TokenRequest API), and ``shardcdc operator`` runs as a
subprocess with a kubeconfig holding only that token, with the arguments the chart's Deployment
gives it. A CdcConnector must then be reconciled end to end (children, finalizer, status, events,
deletion) with no 403 in the operator's log.

A private control plane: the operator here serves every namespace (``--all-namespaces``), which on
the process-wide shared plane would also adopt other test modules' connectors. ``FakeNodes``
(tests/operator_kube_fixtures.py) stands in for the Deployment controller and kubelet.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_fixtures import by_kind, render
from operator_kube_fixtures import FakeNodes, chart_operator, wait_for
from polling import eventually

from cdcoperator.apply import KubeApi
from kubetest import KubeControlPlane
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"
RELEASE_NS = "shardcdc-system"


class Plane:
    def __init__(self, kube: KubeControlPlane, sim: VTGateSim, tmp: Path, bootstrap: str) -> None:
        self.kube, self.sim, self.tmp = kube, sim, tmp
        self.network_policy_env: dict[str, str] = {}
        self.bootstrap = bootstrap  # a real broker: the operator reads the offsets topic before generation 0

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None) -> str:
        r = self.kube.kubectl(*args, input=input, kubeconfig=kubeconfig)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def get(self, namespace: str, kind: str, name: str = "", selector: str = "") -> Any:
        args = ["-n", namespace, "get", kind, *([name] if name else []), "-o", "json"]
        if selector:
            args += ["-l", selector]
        r = self.kube.kubectl(*args)
        if r.returncode != 0 and "NotFound" in r.stderr:
            return None
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def install_chart_identity(self, release: str, values: dict[str, Any]) -> tuple[str, Path]:
        """Apply the chart's ServiceAccount + RBAC; return (operator args, the SA's kubeconfig)."""
        objs = render(values, self.tmp, release=release, namespace=RELEASE_NS)
        identity = [o for o in objs if o["kind"] in
                    ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
        assert {o["kind"] for o in identity} >= {"ServiceAccount"}
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(identity))
        (sa,) = by_kind(objs, "ServiceAccount")
        token = self.kube.service_account_token(RELEASE_NS, sa["metadata"]["name"])
        kubeconfig = self.kube.write_kubeconfig(self.tmp / f"{release}.kubeconfig", user=f"{release}-operator",
                                                token=token, namespace=RELEASE_NS)
        (dep,) = by_kind(objs, "Deployment")
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        # The workers' NetworkPolicy settings the chart gives the operator (on by default).
        self.network_policy_env = {e["name"]: e["value"] for e in container["env"]
                                   if e["name"] == "SHARDCDC_OPERATOR_NETWORK_POLICY"}
        return json.dumps(container["args"]), kubeconfig


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker) -> Iterator[Plane]:
    with VTGateSim() as sim, KubeControlPlane() as kube:
        for ns in (RELEASE_NS, "shop-a", "shop-b", "team-x", "team-y"):
            kube.kubectl("create", "namespace", ns, check=True)
        kube.kubectl("apply", "-f", str(CRD_PATH), check=True)
        kube.wait_established("cdcconnectors.shardcdc.io")
        yield Plane(kube, sim, tmp_path_factory.mktemp("rbac"), kafka_broker.bootstrap)


def connector(plane: Plane, name: str, namespace: str, keyspace: str, **vitess: Any) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"vitess": {"vtgate": plane.sim.address, "keyspace": keyspace, **vitess}},
                 "kafka": {"bootstrapServers": plane.bootstrap, "topicPrefix": name}, "tasks": 2},
    }


def assert_reconciles(plane: Plane, namespace: str, name: str, keyspace: str, sim: VTGateSim | None = None,
                      network_policy: bool = False, **vitess: Any) -> None:
    """Create, reach Ready with two tasks, then delete: every step the operator takes, as the SA."""
    sim = sim or plane.sim
    sim.create_keyspace(keyspace, ["-80", "80-"])
    body = connector(plane, name, namespace, keyspace, vtgate=sim.address, **vitess)
    with FakeNodes(KubeApi(plane.kube.api_client()), namespace) as nodes:
        plane.kubectl("apply", "-f", "-", input=json.dumps(body))

        def ready() -> dict[str, Any] | None:
            obj = plane.get(namespace, "cdc", name) or {}
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            ok = conds.get("Ready", {}).get("status") == "True"
            return obj if ok else None

        obj = wait_for(ready, 40, f"{namespace}/{name} Ready")
        assert obj["metadata"]["finalizers"] == ["shardcdc.io/finalizer"]
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        assert obj["status"]["assignment"]["generation"] == 0
        selector = f"shardcdc.io/connector={name}"
        names = {"deployments": [f"{name}-g0-t0", f"{name}-g0-t1"], "configmaps": [f"{name}-g0-workers"]}
        for kind, expected in names.items():
            items = plane.get(namespace, kind, selector=selector)["items"]
            assert sorted(i["metadata"]["name"] for i in items) == expected
        if network_policy:  # the chart's default: the workers' policy, made with the chart's permissions
            (policy,) = plane.get(namespace, "networkpolicies", selector=selector)["items"]
            assert policy["metadata"]["name"] == f"{name}-workers"
            assert policy["spec"]["podSelector"] == {"matchLabels": {"shardcdc.io/connector": name}}

        def posted() -> None:  # kopf posts Events from a background task: they may trail the status
            events = plane.get(namespace, "events", selector="")["items"]
            reasons = {e["reason"] for e in events if e["involvedObject"]["name"] == name}
            assert {"Created", "GenerationStarted"} <= reasons, reasons

        eventually(posted, 20, f"{namespace}/{name}: the reconcile's events")

        plane.kubectl("-n", namespace, "delete", "cdc", name, "--wait=false")
        def gone() -> bool:
            obj = plane.get(namespace, "cdc", name)
            assert obj is None, (obj["metadata"].get("finalizers"), obj["metadata"].get("ownerReferences"))
            return True

        wait_for(gone, 15, f"{namespace}/{name} deleted")
        for kind in ("deployments", "configmaps"):
            assert plane.get(namespace, kind, selector=selector)["items"] == []
    assert nodes.errors == []


def assert_no_refusals(log: Path) -> None:
    text = log.read_text()
    # A refused request shows as status 403 / "Forbidden"; match the status code as a word, not
    # the digits of a log timestamp such as 13:03:18,403.
    refusals = re.findall(r".*(?:Forbidden|(?<![\d,.:])403(?!\d)).*", text)
    assert not refusals, "\n".join(refusals[:20])
    assert "Traceback" not in text, text[-4000:]


def can_i(plane: Plane, kubeconfig: Path, *args: str) -> str:
    r = plane.kube.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig)
    return r.stdout.strip()


def test_cluster_wide_chart_rbac_is_enough_and_no_more(plane: Plane) -> None:
    args, kubeconfig = plane.install_chart_identity("cw", {})
    chart_args = json.loads(args)
    assert chart_args[0] == "--all-namespaces"
    # The token is the chart's identity, not an admin: what the operator never needs is refused.
    assert can_i(plane, kubeconfig, "get", "secrets", "-n", "shop-a") == "no"
    assert can_i(plane, kubeconfig, "create", "pods", "-n", "shop-a") == "no"
    assert can_i(plane, kubeconfig, "update", "deployments.apps", "-n", "shop-a") == "no"
    assert can_i(plane, kubeconfig, "list", "customresourcedefinitions") == "no"
    assert can_i(plane, kubeconfig, "create", "leases.coordination.k8s.io", "-n", RELEASE_NS) == "no"
    assert can_i(plane, kubeconfig, "list", "cdcconnectors.shardcdc.io", "--all-namespaces") == "yes"

    log = plane.tmp / "cluster-wide.log"
    assert plane.network_policy_env  # networkPolicy.create is on by default
    with chart_operator(plane.kube, chart_args, kubeconfig, log, env=plane.network_policy_env):
        assert_reconciles(plane, "shop-a", "orders", "cw_orders", network_policy=True)
        assert_reconciles(plane, "shop-b", "users", "cw_users", network_policy=True)
    assert_no_refusals(log)


def test_watch_namespaces_chart_rbac_is_enough_and_namespaced(plane: Plane) -> None:
    args, kubeconfig = plane.install_chart_identity("ns", {"watchNamespaces": ["team-x", "team-y"]})
    chart_args = json.loads(args)
    assert chart_args[:2] == ["--namespace=team-x", "--namespace=team-y"]
    # Nothing cluster-wide, nothing outside the watched namespaces.
    assert can_i(plane, kubeconfig, "list", "cdcconnectors.shardcdc.io", "--all-namespaces") == "no"
    assert can_i(plane, kubeconfig, "list", "cdcconnectors.shardcdc.io", "-n", "shop-a") == "no"
    assert can_i(plane, kubeconfig, "create", "deployments.apps", "-n", "team-y") == "yes"

    log = plane.tmp / "namespaced.log"
    with chart_operator(plane.kube, chart_args, kubeconfig, log):
        assert_reconciles(plane, "team-x", "orders", "ns_orders")
        assert_reconciles(plane, "team-y", "users", "ns_users")
    assert_no_refusals(log)


def test_source_secrets_switch_lets_the_operator_reach_a_tls_source(plane: Plane) -> None:
    """rbac.sourceSecrets: get (only) on Secrets, and a connector whose VTGate serves TLS only and
    wants credentials reconciles; its Execute calls carried the Secret's username and password."""
    from kubetest.pki import new_ca

    args, kubeconfig = plane.install_chart_identity("ss", {"rbac": {"sourceSecrets": True}})
    assert can_i(plane, kubeconfig, "get", "secrets", "-n", "shop-c") == "yes"
    assert can_i(plane, kubeconfig, "list", "secrets", "-n", "shop-c") == "no"
    ca = new_ca("vtgate test CA")
    served = ca.issue_server("localhost", ["localhost", "127.0.0.1"])
    plane.kubectl("create", "namespace", "shop-c")
    plane.kubectl("-n", "shop-c", "create", "secret", "generic", "vtgate-ca", "--from-literal=ca.crt=" + ca.cert_pem.decode())
    plane.kubectl("-n", "shop-c", "create", "secret", "generic", "vtgate-login", "--from-literal=username=cdc",
                  "--from-literal=password=s3cret")
    log = plane.tmp / "source-secrets.log"
    with VTGateSim(tls=(served.key_pem, served.cert_pem)) as tls_sim, \
            chart_operator(plane.kube, json.loads(args), kubeconfig, log):
        assert_reconciles(plane, "shop-c", "secure", "ss_secure", sim=tls_sim,
                          tls={"enabled": True, "caSecretRef": {"name": "vtgate-ca"}},
                          credentialsSecretRef={"name": "vtgate-login"})
        logins = [kv for _, meta in tls_sim.execute_calls for kv in meta if kv[0] in ("username", "password")]
    assert logins[:2] == [("username", "cdc"), ("password", "s3cret")]
    assert_no_refusals(log)
    assert "s3cret" not in log.read_text()


def test_kafka_secrets_switch_lets_the_operator_read_the_kafka_secret(plane: Plane) -> None:
    """rbac.kafkaSecrets: get (only) on Secrets, and the operator's Kafka access reads the connector's
    securitySecretRef through the real API server; without the switch it gets 403 and says which
    switch to turn on (tests/integration/operator/test_operator_kafka_access.py uses the access against a SASL broker)."""
    from kafka_security_fixtures import PASSWORD, SCRAM, USER, jaas

    from cdcoperator.kafkaaccess import kafka_access
    from cdcoperator.model import ConnectorResource
    from shardcdc_cli.target import kube_api

    plane.kubectl("create", "namespace", "shop-k")
    plane.kubectl("-n", "shop-k", "create", "secret", "generic", "kafka-client",
                  "--from-literal=sasl.jaas.config=" + jaas(SCRAM))
    cr = ConnectorResource.from_body({"metadata": {"name": "secured", "namespace": "shop-k"}, "spec": {
        "source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "shop"}},
        "kafka": {"bootstrapServers": "kafka:9093", "topicPrefix": "p", "securityProtocol": "SASL_SSL",
                  "securitySecretRef": {"name": "kafka-client", "properties": ["sasl.jaas.config"]}},
        "config": {"sasl.mechanism": "SCRAM-SHA-512"}}})
    for release, values in (("ks", {"rbac": {"kafkaSecrets": True}}), ("nks", {})):
        _args, kubeconfig = plane.install_chart_identity(release, values)
        granted = release == "ks"
        assert can_i(plane, kubeconfig, "get", "secrets", "-n", "shop-k") == ("yes" if granted else "no")
        assert can_i(plane, kubeconfig, "list", "secrets", "-n", "shop-k") == "no"
        api, _ns = kube_api(str(kubeconfig), None)
        try:
            access = asyncio.run(kafka_access(cr, api.read_secret))
        finally:
            api.api.close()
        if granted:
            assert access.config is not None
            assert (access.config["sasl.username"], access.config["sasl.password"]) == (USER, PASSWORD)
        else:
            assert access.config is None
            assert access.problem == ("the Kafka cluster of secured needs the credentials in Secret "
                                      "shop-k/kafka-client, which the operator reads only when installed with "
                                      "rbac.kafkaSecrets=true")


def test_secret_namespaces_keep_a_cluster_wide_operator_off_other_namespaces_secrets(plane: Plane) -> None:
    """rbac.secretNamespaces: with every namespace served (a ClusterRole), `get` on Secrets is granted by
    Roles in the listed namespaces only, and nothing else of the operator's rights changes."""
    plane.kubectl("create", "namespace", "shop-s")
    values = {"rbac": {"sourceSecrets": True, "kafkaSecrets": True, "secretNamespaces": ["shop-s", "team-x"]}}
    _args, kubeconfig = plane.install_chart_identity("sn", values)
    for ns in ("shop-s", "team-x"):
        assert can_i(plane, kubeconfig, "get", "secrets", "-n", ns) == "yes"
        assert can_i(plane, kubeconfig, "list", "secrets", "-n", ns) == "no"
    for ns in ("shop-a", "team-y", RELEASE_NS):
        assert can_i(plane, kubeconfig, "get", "secrets", "-n", ns) == "no"
    assert can_i(plane, kubeconfig, "get", "secrets", "--all-namespaces") == "no"
    assert can_i(plane, kubeconfig, "list", "cdcconnectors.shardcdc.io", "--all-namespaces") == "yes"
    assert can_i(plane, kubeconfig, "create", "deployments.apps", "-n", "shop-a") == "yes"
