"""Authenticated listeners for the local broker: SASL over plaintext and over TLS.

A secured production cluster is what the worker's Kafka security settings are for, so tests need
a real broker that checks passwords and serves a certificate: ``KafkaBroker(security=...)`` adds
``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners (mechanisms PLAIN and SCRAM-SHA-512, the users given)
and an ``SSL`` one (TLS, no password)
next to the open ``PLAINTEXT`` one the test harness itself uses. The TLS material is made here: a
throw-away CA and a server certificate for ``127.0.0.1`` / ``localhost`` (PEM files; the broker reads
a PEM key store, as Kafka does since 2.7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class BrokerSecurity:
    """Who may connect to the secured listeners: ``{user: password}`` for PLAIN and SCRAM alike."""

    users: Mapping[str, str] = field(default_factory=lambda: {"shardcdc": "s3cret-pw"})


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate (PEM): what a client trusts
    server: Path  # the server's PKCS#8 key and certificate chain (PEM key store)


def make_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A new CA and a server certificate it signed for ``hosts``, written as PEM files (the
    control plane's PKI: PKCS#8 EC keys, which Kafka's PEM key store reads)."""
    from kubetest.pki import new_ca

    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca("shardcdc-localkafka-ca")
    server = ca.issue_server("localhost", list(hosts))
    files = TlsFiles(directory / "ca.pem", directory / "server.pem")
    files.ca.write_bytes(ca.cert_pem)
    files.server.write_bytes(server.key_pem + server.cert_pem + ca.cert_pem)
    return files


def listener_config(security: BrokerSecurity, tls: TlsFiles) -> dict[str, str]:
    """Broker settings for both secured listeners (the listener lists are the broker's to compose)."""
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in security.users.items())
    props = {"sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS)}
    for listener in ("sasl_plaintext", "sasl_ssl"):
        props[f"listener.name.{listener}.plain.sasl.jaas.config"] = f"{PLAIN_MODULE} required {plain_users};"
        props[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
    for listener in ("sasl_ssl", "ssl"):  # the SSL listener: TLS only, no client certificate asked for
        props[f"listener.name.{listener}.ssl.keystore.type"] = "PEM"
        props[f"listener.name.{listener}.ssl.keystore.location"] = str(tls.server)
    return props


def scram_format_args(security: BrokerSecurity) -> list[str]:
    """``kafka-storage format`` arguments that create the SCRAM users with the cluster (KRaft)."""
    args: list[str] = []
    for name, password in security.users.items():
        args += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
    return args
