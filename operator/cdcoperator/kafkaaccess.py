"""How the operator reaches a connector's Kafka cluster itself (offsets scan, ``DeleteOffsets``, the
offsets annotation, backfill progress): the workers' client settings, built the workers' way.

A cluster without ``spec.kafka.securitySecretRef`` needs nothing secret: bootstrap servers,
``securityProtocol`` and the ``sasl.*`` / ``ssl.*`` settings of ``spec.config`` (an SSL cluster with a
public CA, say). With the Secret, the operator reads its listed keys only when the chart grants
``get`` on Secrets (``rbac.kafkaSecrets``; least privilege by default); without that grant, the
access carries the reason, which each use reports (and ``shardcdc offsets`` takes credentials from
the user instead). The settings go through the worker's translation of Java client names
(``cdcworker.config.kafkaclient``), so a Secret holding ``sasl.jaas.config`` works for both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from cdcoperator.model import ConnectorResource
from cdcworker.config.kafkaclient import ClientSettingError, client_key, librdkafka_settings

__all__ = ["KafkaAccess", "SecretReader", "client_settings", "kafka_access", "plain_access"]

SecretReader = Callable[[str, str], Awaitable[Mapping[str, bytes] | None]]  # (namespace, name) -> data
_CLIENT_PREFIXES = ("sasl.", "ssl.")


@dataclass(frozen=True)
class KafkaAccess:
    """librdkafka settings for the connector's cluster, or why the operator cannot have them."""

    config: Mapping[str, object] | None
    problem: str | None = None
    fingerprint: str = field(default="", compare=False)  # tells a rotated credential from the last one

    @classmethod
    def of(cls, settings: Mapping[str, object]) -> KafkaAccess:
        digest = hashlib.sha256(json.dumps(sorted(settings.items()), default=str).encode()).hexdigest()[:16]
        return cls(dict(settings), None, digest)

    @classmethod
    def refused(cls, problem: str) -> KafkaAccess:
        return cls(None, problem)


def client_settings(cr: ConnectorResource, secret: Mapping[str, bytes] | None = None) -> dict[str, str]:
    """The workers' Kafka client settings (Java names translated for librdkafka); pure.

    Raises ``ClientSettingError`` for settings librdkafka cannot take (a JKS store ...).
    """

    kafka = cr.spec.kafka
    java: dict[str, str] = {"bootstrap.servers": kafka.bootstrap_servers, "security.protocol": kafka.security_protocol}
    java.update({k: v for k, v in cr.spec.config.items() if k.startswith(_CLIENT_PREFIXES)})
    java.update({k: v for k, v in kafka.producer.items() if k.startswith(_CLIENT_PREFIXES)})
    if secret is not None and kafka.security is not None:
        for key in kafka.security.properties:
            java[client_key(key)] = secret[key].decode()
    return librdkafka_settings(java)


# What a SASL login needs in librdkafka's names, one of (PLAIN/SCRAM, OIDC).
_SASL_CREDENTIALS = ("sasl.username", "sasl.oauthbearer.method")


def _settings_or_problem(cr: ConnectorResource, secret: Mapping[str, bytes] | None) -> KafkaAccess:

    java = {**cr.spec.config, **cr.spec.kafka.producer}
    refs = sorted(k for k, v in java.items() if k.startswith(_CLIENT_PREFIXES) and "${" in v)
    if refs:
        # ${file:...} names a file of the worker pod (a mounted Secret): not readable from here.
        return KafkaAccess.refused(f"the Kafka client settings of {cr.name} refer to files of the worker pods "
                                   f"({', '.join(refs)}); put the credentials in spec.kafka.securitySecretRef")
    try:
        settings = client_settings(cr, secret)
    except ClientSettingError as exc:
        return KafkaAccess.refused(f"the Kafka client settings of {cr.name} cannot be used: {exc}")
    if cr.spec.kafka.security_protocol.startswith("SASL") and not any(k in settings for k in _SASL_CREDENTIALS):
        return KafkaAccess.refused(f"the Kafka cluster of {cr.name} needs SASL credentials, and the operator reads "
                                   "them only from spec.kafka.securitySecretRef")
    return KafkaAccess.of(settings)


def plain_access(cr: ConnectorResource) -> KafkaAccess:
    """The access that needs no Secret: refused when the connector names one."""
    security = cr.spec.kafka.security
    if security is not None:
        return KafkaAccess.refused(
            f"the Kafka cluster of {cr.name} needs the credentials in Secret {cr.namespace}/{security.name}, which "
            "the operator reads only when installed with rbac.kafkaSecrets=true")
    return _settings_or_problem(cr, None)


async def kafka_access(cr: ConnectorResource, read_secret: SecretReader) -> KafkaAccess:
    """The connector's Kafka access, reading ``spec.kafka.securitySecretRef`` when it names one."""
    security = cr.spec.kafka.security
    if security is None:
        return plain_access(cr)
    where = f"Secret {cr.namespace}/{security.name} (spec.kafka.securitySecretRef)"
    try:
        data = await read_secret(cr.namespace, security.name)
    except Exception as exc:
        if getattr(exc, "status", None) == 403:
            return plain_access(cr)  # says which chart switch grants it
        return KafkaAccess.refused(f"reading {where} failed: {exc}")
    if data is None:
        return KafkaAccess.refused(f"{where} does not exist")
    missing = [k for k in security.properties if k not in data]
    if missing:
        return KafkaAccess.refused(f"{where} has no key {', '.join(missing)}")
    return _settings_or_problem(cr, data)
