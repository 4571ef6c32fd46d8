"""The operator's policy and its validating admission webhook, with a real kube-apiserver.

The operator runs as a subprocess with the arguments and environment of the chart's Deployment
(``helm template``): the policy comes from the chart's ``policy`` values. The webhook test installs
the chart's ValidatingWebhookConfiguration with its clientConfig pointed at the operator on loopback
(a test CA, since the chart's own certificate names the in-cluster Service), so the API server itself
calls it on every ``kubectl apply``.

A private control plane: a ValidatingWebhookConfiguration is cluster-wide and would judge every
other test module's connectors on the shared plane.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_fixtures import by_kind, render
from operator_kube_fixtures import chart_operator, wait_for
from polling import eventually

from kubetest import KubeControlPlane
from kubetest.controlplane import free_port
from localkafka import KafkaBroker
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"
RELEASE_NS = "shardcdc-system"
NS = "apps"
POLICY = {"policy": {"imageRepositories": ["registry.example.com/cdc/*"], "serviceAccounts": ["cdc-backfill"]}}


class Plane:
    def __init__(self, kube: KubeControlPlane, sim: VTGateSim, tmp: Path, bootstrap: str) -> None:
        self.kube, self.sim, self.tmp, self.bootstrap = kube, sim, tmp, bootstrap

    def apply(self, body: dict[str, Any]) -> tuple[int, str]:
        r = self.kube.kubectl("apply", "-f", "-", input=json.dumps(body))
        return r.returncode, r.stderr

    def get(self, kind: str, name: str = "", selector: str = "") -> Any:
        args = ["-n", NS, "get", kind, *([name] if name else []), "-o", "json", *(["-l", selector] if selector else [])]
        r = self.kube.kubectl(*args)
        if r.returncode != 0 and "NotFound" in r.stderr:
            return None
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def children(self, name: str) -> list[str]:
        return sorted(f"{kind}/{o['metadata']['name']}" for kind in ("deployments", "configmaps")
                      for o in self.get(kind, selector=f"shardcdc.io/connector={name}")["items"])

    def events(self, name: str) -> list[tuple[str, str, str]]:
        items = self.get("events")["items"]
        return [(e["type"], e["reason"], e.get("message") or "") for e in items if e["involvedObject"]["name"] == name]

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get("cdc", name) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker) -> Iterator[Plane]:
    with VTGateSim() as sim, KubeControlPlane() as kube:
        for ns in (RELEASE_NS, NS):
            kube.kubectl("create", "namespace", ns, check=True)
        kube.kubectl("apply", "-f", str(CRD_PATH), check=True)
        kube.wait_established("cdcconnectors.shardcdc.io")
        sim.create_keyspace("shop", ["-80", "80-"])
        yield Plane(kube, sim, tmp_path_factory.mktemp("admission"), kafka_broker.bootstrap)


def chart(plane: Plane, values: dict[str, Any]) -> tuple[list[str], dict[str, str], list[dict[str, Any]]]:
    """(operator args, operator env values, rendered objects) of the chart with ``values``."""
    objs = render(values, plane.tmp, namespace=RELEASE_NS)
    (dep,) = by_kind(objs, "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return list(container["args"]), env, objs


def connector(plane: Plane, name: str, config: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"source": {"vitess": {"vtgate": plane.sim.address, "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": plane.bootstrap, "topicPrefix": name}, "tasks": 2,
                 **({"config": config} if config else {}), **spec},
    }


def test_policy_refuses_named_images_and_service_accounts_and_creates_nothing(plane: Plane) -> None:
    """Without the webhook (or with failurePolicy Ignore) the reconcile enforces the policy itself."""
    args, env, _ = chart(plane, {**POLICY, "webhook": {"enabled": False}})
    assert json.loads(env["SHARDCDC_OPERATOR_POLICY"]) == {
        "imageRepositories": ["ghcr.io/shardcdc/shardcdc", "registry.example.com/cdc/*"],
        "serviceAccounts": ["cdc-backfill"]}
    refused = {
        "miner": {"worker": {"image": "docker.io/evil/miner:1"}},
        "lookalike": {"worker": {"image": "registry.example.com/cdc-evil/worker:1"}},
        "admin": {"worker": {"podTemplate": {"serviceAccountName": "cluster-admin-sa"}}},
        "sparky": {"snapshot": {"mode": "initial", "backfill": {"engine": "sparkSubmit", "spark": {
            "sparkConf": {"spark.kubernetes.executor.container.image": "evil/spark:3"}}}}},
    }
    expected = {
        "miner": "spec.worker.image: image 'docker.io/evil/miner:1' is not allowed by the operator's policy "
                 "(allowed repositories: ghcr.io/shardcdc/shardcdc, registry.example.com/cdc/*); use an allowed "
                 "image or ask the cluster admin to add 'docker.io/evil/miner' to the chart's policy.imageRepositories",
        "lookalike": "spec.worker.image: image 'registry.example.com/cdc-evil/worker:1' is not allowed",
        "admin": "spec.worker.podTemplate.serviceAccountName: service account 'cluster-admin-sa' is not allowed by "
                 "the operator's policy (allowed: cdc-backfill); remove it or ask the cluster admin to add it to the "
                 "chart's policy.serviceAccounts",
        "sparky": "spec.snapshot.backfill.spark.sparkConf['spark.kubernetes.executor.container.image']: image "
                  "'evil/spark:3' is not allowed",
    }
    log = plane.tmp / "policy.log"
    with chart_operator(plane.kube, args, None, log, env=env):
        for name, spec in refused.items():
            assert plane.apply(connector(plane, name, **spec))[0] == 0  # no webhook: the API server admits it
        # Allowed: an image under the allowed prefix and the allowed service account.
        allowed = connector(plane, "allowed", worker={"image": "registry.example.com/cdc/worker:2",
                                                      "podTemplate": {"serviceAccountName": "cdc-backfill"}})
        assert plane.apply(allowed)[0] == 0
        wait_for(lambda: len(plane.children("allowed")) == 3, 40, "the allowed connector's children")
        for name, message in expected.items():
            ready = wait_for(lambda n=name: (c := plane.condition(n, "Ready")) and c["reason"] == "PolicyRefused" and c,
                             30, f"{name}: Ready=False PolicyRefused")
            assert ready["status"] == "False"
            assert ready["message"].startswith("refused by the operator's policy: " + message), ready["message"]
            degraded = plane.condition(name, "Degraded")
            assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "PolicyRefused")

            def warned_once(n: str = name, message: str = ready["message"]) -> None:  # posted by kopf's background task
                assert [m for t, r, m in plane.events(n) if (t, r) == ("Warning", "PolicyRefused")] == [message]

            eventually(warned_once, 30, f"{name}: one PolicyRefused warning")  # once, not once per resync
            assert plane.children(name) == []
        deps = plane.get("deployments", selector="shardcdc.io/connector=allowed")["items"]
        pod = deps[0]["spec"]["template"]["spec"]
        assert (pod["containers"][0]["image"], pod["serviceAccountName"]) == (
            "registry.example.com/cdc/worker:2", "cdc-backfill")
    assert "Traceback" not in log.read_text()


FIVE_BAD_CONFIGS = [
    ({"no.such.property": "1"}, "spec.config: no.such.property: unknown property"),
    ({"table.include.list": "shop\\.(orders"},
     "spec.config: table.include.list: 'shop\\\\.(orders' is not a valid regular expression: missing ), "
     "unterminated subpattern at position 6"),
    ({"table.include.list": "shop\\.a", "table.exclude.list": "shop\\.b"},
     "spec.config: table.exclude.list: cannot be used together with table.include.list"),
    ({"decimal.handling.mode": "fast"}, "spec.config: decimal.handling.mode: 'fast' is not one of: precise, double, string"),
    ({"heartbeat.interval.ms": "soon"}, "spec.config: heartbeat.interval.ms: 'soon' is not an integer"),
]


def _install_webhook(plane: Plane, objs: list[dict[str, Any]], port: int, ca_pem: bytes) -> dict[str, Any]:
    """The chart's ValidatingWebhookConfiguration, calling the operator on loopback instead of its Service."""
    (vwc,) = by_kind(objs, "ValidatingWebhookConfiguration")
    vwc = json.loads(json.dumps(vwc))
    (hook,) = vwc["webhooks"]
    path = hook["clientConfig"]["service"]["path"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
    r = plane.kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(vwc))
    assert r.returncode == 0, r.stderr
    return vwc


def test_webhook_refuses_invalid_specs_at_apply(plane: Plane) -> None:
    from kubetest.pki import new_ca

    args, env, objs = chart(plane, {})
    assert [a for a in args if a.startswith("--webhook")] == ["--webhook-port=9443",
                                                              "--webhook-cert-dir=/etc/shardcdc/webhook"]
    ca = new_ca("webhook test CA")
    served = ca.issue_server("localhost", ["localhost", "127.0.0.1"])
    certs = plane.tmp / "webhook-certs"
    certs.mkdir()
    (certs / "tls.crt").write_bytes(served.cert_pem)
    (certs / "tls.key").write_bytes(served.key_pem)
    port = free_port()
    # Admitted before the webhook exists: its spec is invalid, yet changes that leave the spec alone
    # (labels, the operator's finalizer, deletion) must still go through afterwards.
    legacy = connector(plane, "legacy", {"no.such.property": "1"}, state="stopped")
    assert plane.apply(legacy)[0] == 0
    log = plane.tmp / "webhook.log"
    with chart_operator(plane.kube, args, None, log, env=env,
                        extra_args=[f"--webhook-port={port}", "--webhook-address=127.0.0.1",
                                    f"--webhook-cert-dir={certs}"]):
        _install_webhook(plane, objs, port, ca.cert_pem)
        probe = connector(plane, "probe", {"no.such.property": "1"})
        # The API server's webhook configuration cache fills asynchronously: poll until it calls us.
        wait_for(lambda: "denied the request" in plane.kube.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=json.dumps(probe)).stderr, 30, "the webhook in effect")

        for i, (config, message) in enumerate(FIVE_BAD_CONFIGS):
            code, err = plane.apply(connector(plane, f"bad{i}", config))
            assert code != 0
            assert ('admission webhook "validate.cdcconnectors.shardcdc.io" denied the request: ' + message) in err, err
            assert "Traceback" not in err
            assert plane.get("cdc", f"bad{i}") is None
        code, err = plane.apply(connector(plane, "miner-at-apply", worker={"image": "docker.io/evil/miner:1"}))
        assert code != 0 and "spec.worker.image: image 'docker.io/evil/miner:1' is not allowed by the operator's " \
                             "policy (allowed repositories: ghcr.io/shardcdc/shardcdc)" in err, err

        good = connector(plane, "good", {"table.include.list": "shop\\.orders"}, state="stopped")
        code, err = plane.apply(good)
        assert code == 0, err
        # An update is judged too: the same five values are refused on an existing connector.
        code, err = plane.apply(connector(plane, "good", FIVE_BAD_CONFIGS[3][0], state="stopped"))
        assert code != 0 and FIVE_BAD_CONFIGS[3][1] in err, err
        assert plane.get("cdc", "good")["spec"]["config"] == {"table.include.list": "shop\\.orders"}

        r = plane.kube.kubectl("-n", NS, "label", "cdc", "legacy", "team=data")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: (plane.get("cdc", "legacy")["metadata"].get("finalizers") == ["shardcdc.io/finalizer"]),
                 30, "the operator's finalizer on the legacy connector")
        r = plane.kube.kubectl("-n", NS, "delete", "cdc", "legacy", "good", "--timeout=30s")
        assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    # A user's invalid manifest is logged, but not as an operator error.
    refusals = [line for line in text.splitlines() if "Webhook 'validate-cdcconnector' failed permanently" in line]
    assert len(refusals) >= 7 and all(" INFO " in line for line in refusals), refusals
