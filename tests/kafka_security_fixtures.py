"""Credentials and stores for tests against the SASL/TLS broker (``secure_kafka_broker`` in conftest)."""

from __future__ import annotations

from pathlib import Path

USER, PASSWORD = "shardcdc", "s3cret-pw"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def jaas(module: str, password: str = PASSWORD, user: str = USER) -> str:
    """A Kafka Connect ``sasl.jaas.config`` line for the test user."""
    return f'{module} required username="{user}" password="{password}";'


def pkcs12_truststore(ca_pem: Path, path: Path, password: str) -> Path:
    """A PKCS12 trust store holding ``ca_pem``, as ``keytool -importcert -storetype PKCS12`` makes."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    ca = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], BestAvailableEncryption(password.encode())))
    return path
