"""Shard discovery of a source with TLS and credentials: the operator reaches VTGate as the workers do.

``source_access`` reads the CA, the client certificate and the static-auth credentials from the
Secrets the connector names; ``discover`` then lists the shards over TLS with the ``username`` /
``password`` call metadata. Against the VTGate test server serving TLS only, and with Secrets
stored in (and refused by) a real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cdcoperator.apply import ApiError, KubeApi
from cdcoperator.discovery import DiscoveryError, SourceAccess, discover, source_access
from cdcoperator.model import ConnectorResource
from kubetest import KubeControlPlane, kube_control_plane_fixture
from kubetest.pki import new_ca
from vtgatesim import VTGateSim

NS = "tls-source"


def connector(address: str, tls: dict[str, Any] | None, credentials: bool,
              vtctld: str | None = None, vtctld_tls: dict[str, Any] | None = None) -> ConnectorResource:
    vitess: dict[str, Any] = {"vtgate": address, "keyspace": "secure"}
    if tls is not None:
        vitess["tls"] = tls
    if vtctld is not None:
        vitess["vtctld"] = vtctld
    if vtctld_tls is not None:
        vitess["vtctldTls"] = vtctld_tls
    if credentials:
        vitess["credentialsSecretRef"] = {"name": "vtgate-login"}
    return ConnectorResource.from_body({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": "c", "namespace": NS, "uid": "u1", "generation": 1},
        "spec": {"source": {"vitess": vitess}, "kafka": {"bootstrapServers": "127.0.0.1:9", "topicPrefix": "c"}},
    })


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    ca = new_ca("vtgate test CA")
    served = ca.issue_server("vtgate.example", ["vtgate.example", "127.0.0.1"])
    client = ca.issue_client("cdc")
    return {"ca": ca.cert_pem, "key": served.key_pem, "cert": served.cert_pem,
            "client_cert": client.cert_pem, "client_key": client.key_pem}


@pytest.fixture(scope="module")
def tls_sim(pki: dict[str, bytes]) -> Iterator[VTGateSim]:
    with VTGateSim(tls=(pki["key"], pki["cert"])) as sim:
        sim.create_keyspace("secure", ["-40", "40-80", "80-"])
        yield sim


def reader(secrets: Mapping[str, Mapping[str, bytes]], calls: list[str]) -> Any:
    async def read(namespace: str, name: str) -> Mapping[str, bytes] | None:
        calls.append(f"{namespace}/{name}")
        return secrets.get(name)

    return read


def test_tls_and_credentials_come_from_the_secrets(tls_sim: VTGateSim, pki: dict[str, bytes]) -> None:
    # kubectl create secret --from-file keeps the files' final line end; the workers drop it (file provider).
    secrets = {"vtgate-ca": {"ca.crt": pki["ca"]}, "vtgate-login": {"username": b"cdc\n", "password": b"s3cret\r\n"},
               "vtgate-client": {"tls.crt": pki["client_cert"], "tls.key": pki["client_key"]}}
    calls: list[str] = []
    cr = connector(tls_sim.address, {"enabled": True, "caSecretRef": {"name": "vtgate-ca"},
                                     "clientCertSecretRef": {"name": "vtgate-client"},
                                     "serverName": "vtgate.example"}, credentials=True)
    access = asyncio.run(source_access(cr, reader(secrets, calls)))
    assert calls == [f"{NS}/vtgate-ca", f"{NS}/vtgate-client", f"{NS}/vtgate-login"]
    assert "s3cret" not in repr(access) and "BEGIN" not in repr(access)  # material never printed
    found = discover(cr.spec.source, access=access, timeout=10)
    assert found.serving == ("-40", "40-80", "80-") and found.via == "vtgate"
    sql, metadata = tls_sim.execute_calls[-1]
    assert "SHOW VITESS_SHARDS" in sql
    assert [kv for kv in metadata if kv[0] in ("username", "password")] == [("username", "cdc"), ("password", "s3cret")]
    # Without the Secrets' material the TLS-only server cannot be reached: what the operator did before.
    with pytest.raises(DiscoveryError, match=r"vtgate SHOW VITESS_SHARDS at 127\.0\.0\.1:\d+ failed: UNAVAILABLE"):
        discover(cr.spec.source, access=SourceAccess(), timeout=3)


def test_vtctld_has_its_own_tls_and_never_gets_vtgates_credentials(tls_sim: VTGateSim, pki: dict[str, bytes]) -> None:
    vtgate_tls = {"enabled": True, "caSecretRef": {"name": "vtgate-ca"}, "serverName": "vtgate.example"}
    secrets = {"vtgate-ca": {"ca.crt": pki["ca"]}, "vtctld-ca": {"ca.crt": pki["ca"]},
               "vtgate-login": {"username": b"cdc", "password": b"s3cret"}}
    # A TLS, credentialed VTGate and a plaintext vtctld (how such connectors ran before discovery
    # learnt TLS): vtctld is dialled in plaintext and no Secret is read.
    calls: list[str] = []
    plain = connector(tls_sim.address, vtgate_tls, True, vtctld="127.0.0.1:1")
    assert asyncio.run(source_access(plain, reader(secrets, calls))) == SourceAccess() and calls == []
    # vtctldTls: its CA is read (and only it) and discovery goes to vtctld over TLS, without credentials.
    cr = connector(tls_sim.address, vtgate_tls, True, vtctld=tls_sim.address,
                   vtctld_tls={"enabled": True, "caSecretRef": {"name": "vtctld-ca"}, "serverName": "vtgate.example"})
    access = asyncio.run(source_access(cr, reader(secrets, calls)))
    assert calls == [f"{NS}/vtctld-ca"] and access.metadata == ()
    found = discover(cr.spec.source, access=access, timeout=10)
    assert found.serving == ("-40", "40-80", "80-") and found.via == "vtctld"
    with pytest.raises(DiscoveryError, match=r"vtctld .* failed: UNAVAILABLE"):
        discover(cr.spec.source, access=SourceAccess(), timeout=3)


def test_plaintext_needs_no_secret_and_missing_material_is_named() -> None:
    calls: list[str] = []
    assert asyncio.run(source_access(connector("127.0.0.1:1", None, False), reader({}, calls))) == SourceAccess()
    no_ca = asyncio.run(source_access(connector("127.0.0.1:1", {"enabled": True}, False), reader({}, calls)))
    assert (no_ca.tls, no_ca.ca, calls) == (True, None, [])  # TLS with the system roots: no Secret read
    cases = [
        ({}, "Secret tls-source/vtgate-ca (spec.source.vitess.tls.caSecretRef) does not exist"),
        ({"vtgate-ca": {"tls.crt": b"x"}}, "Secret tls-source/vtgate-ca (spec.source.vitess.tls.caSecretRef) has no key ca.crt"),
        ({"vtgate-ca": {"ca.crt": b"x"}, "vtgate-login": {"username": b"u"}},
         "Secret tls-source/vtgate-login (spec.source.vitess.credentialsSecretRef) has no key password"),
        ({"vtgate-ca": {"ca.crt": b"x"}, "vtgate-login": {"username": b"u", "password": b"\xff"}},
         "Secret tls-source/vtgate-login (spec.source.vitess.credentialsSecretRef) holds a username or password "
         "that is not UTF-8"),
    ]
    cr = connector("127.0.0.1:1", {"enabled": True, "caSecretRef": {"name": "vtgate-ca"}}, True)
    for secrets, message in cases:
        with pytest.raises(DiscoveryError) as err:
            asyncio.run(source_access(cr, reader(secrets, [])))
        assert str(err.value) == message


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        p.kubectl("create", "namespace", NS, check=True)
        yield p


def test_secrets_read_from_the_api_server_and_a_refusal_says_what_to_grant(
        plane: KubeControlPlane, tls_sim: VTGateSim, pki: dict[str, bytes], tmp_path: Any) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vtgate-ca", "namespace": NS},
              "data": {"ca.crt": base64.b64encode(pki["ca"]).decode()}}
    plane.kubectl("apply", "-f", "-", input=json.dumps(secret), check=True)
    cr = connector(tls_sim.address, {"enabled": True, "caSecretRef": {"name": "vtgate-ca"},
                                     "serverName": "vtgate.example"}, credentials=False)
    with plane.api_client() as client:
        kube = KubeApi(client)
        assert asyncio.run(kube.read_secret(NS, "absent")) is None
        access = asyncio.run(source_access(cr, kube.read_secret))
    assert access.ca == pki["ca"]
    assert discover(cr.spec.source, access=access, timeout=10).serving == ("-40", "40-80", "80-")

    # An identity without get on Secrets (the chart's default): 403, turned into what to do.
    plane.kubectl("-n", NS, "create", "serviceaccount", "no-secrets", check=True)
    token = plane.service_account_token(NS, "no-secrets")
    kubeconfig = plane.write_kubeconfig(tmp_path / "sa.kubeconfig", user="no-secrets", token=token, namespace=NS)
    with plane.api_client(kubeconfig) as client:
        kube = KubeApi(client)
        with pytest.raises(ApiError) as refused:
            asyncio.run(kube.read_secret(NS, "vtgate-ca"))
        assert refused.value.status == 403
        with pytest.raises(DiscoveryError, match=r"may not read Secret tls-source/vtgate-ca .*rbac\.sourceSecrets=true"):
            asyncio.run(source_access(cr, kube.read_secret))
