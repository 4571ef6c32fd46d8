"""Kafka failures that stop a task: one home for their kinds and for recognising a refused client.

``SinkError`` (records Kafka will not take) and ``OffsetStoreError`` (the offsets topic cannot be
used) are raised by ``sink`` and ``offsets.store``, which re-export them. ``KafkaAccessError`` is
both: the cluster refuses the client's credentials or TLS settings, for the producer and the
offsets topic alike, and no retry helps until the settings change.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

__all__ = ["ACCESS_HINTS", "KafkaAccessError", "OffsetStoreError", "SinkError", "access_refusal"]


class SinkError(RuntimeError):
    """Kafka refused records permanently; the worker must stop without advancing offsets."""


class OffsetStoreError(RuntimeError):
    """The offsets topic cannot be used (wrong configuration, delivery failure, timeout)."""


class KafkaAccessError(OffsetStoreError, SinkError):
    """Kafka refused the client's credentials or TLS settings: retrying cannot help until they change."""


# librdkafka's reports that the settings, not the network, are wrong: a rejected login (also at a
# re-authentication: connections.max.reauth.ms) or an untrusted certificate. It keeps retrying
# these, the records waiting until message.timeout.ms (5 minutes); the worker stops at once with
# the reason instead, as Kafka Connect's Java producer fails the task on an AuthenticationException.
ACCESS_HINTS = {
    KafkaError._AUTHENTICATION: "check sasl.mechanism and the credentials in sasl.jaas.config (the Secret named by "
    "spec.kafka.securitySecretRef)",
    KafkaError._SSL: "check the trust store (ssl.truststore.location / ssl.truststore.certificates) and the "
    "broker's certificate",
}


def access_refusal(code: int, reason: str) -> KafkaAccessError | None:
    """The error to stop with when a client error (``error_cb``) is a refusal of access, else None."""
    hint = ACCESS_HINTS.get(code)
    return None if hint is None else KafkaAccessError(f"Kafka refused the connection: {reason}; {hint}")
