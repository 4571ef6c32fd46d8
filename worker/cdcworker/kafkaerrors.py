"""Kafka failures that stop a task: one home for their kinds and for recognising a refused client.

``SinkError`` (records Kafka will not take) and ``OffsetStoreError`` (the offsets topic cannot be
used) are raised by ``sink`` and ``offsets.store``, which re-export them. ``KafkaAccessError`` is
both: the cluster refuses the client's credentials or TLS settings, for the producer and the
offsets topic alike, and no retry helps until the settings change. ``KafkaSettingError`` is its
family: Kafka refused something a setting decides (also a topic the task cannot create with the
configured replication factor or partitions), so the task ends with one line naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "ACCESS_HINTS", "KafkaAccessError", "KafkaSettingError", "OffsetStoreError", "SinkError", "TopicSizing",
    "access_refusal", "broker_count", "creation_refusal",
]


class SinkError(RuntimeError):
    """Kafka refused records permanently; the worker must stop without advancing offsets."""


class OffsetStoreError(RuntimeError):
    """The offsets topic cannot be used (wrong configuration, delivery failure, timeout)."""


class KafkaSettingError(OffsetStoreError, SinkError):
    """Kafka refused what a setting decides: retrying cannot help until the setting changes, so the
    task ends with this one line (log, termination message, status) instead of a traceback."""


class KafkaAccessError(KafkaSettingError):
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


@dataclass(frozen=True, slots=True)
class TopicSizing:
    """How a topic is created, under the names the user sets it by (for the message of a refusal)."""

    partitions_setting: str  # e.g. offset.storage.partitions, topic.creation.default.partitions
    partitions: int
    replication_setting: str  # e.g. offset.storage.replication.factor
    replication_factor: int


class _Metadata(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object: ...


def broker_count(admin: _Metadata, timeout: float = 5.0) -> int | None:
    """The number of brokers the cluster's metadata names; None when it does not answer."""
    try:
        return len(getattr(admin.list_topics(timeout=timeout), "brokers", {}))
    except KafkaException:
        return None


# Topic creation refusals that no retry changes: the settings (or the broker's policy/ACLs) must.
_CREATION_FIX = {
    KafkaError.INVALID_CONFIG: "fix the topic-level configs of the topic creation group",
    KafkaError.POLICY_VIOLATION: "the broker's create.topic.policy refuses these settings; change them or the policy",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "grant the task's principal CREATE on the topic, or create it yourself",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "grant the task's principal CREATE on the cluster, or create the topic yourself",
}


def creation_refusal(err: KafkaError, topic: str, sizing: TopicSizing, brokers: int | None) -> KafkaSettingError | None:
    """The one-line error to end the task with when Kafka refused to create ``topic`` because of a
    setting; None for other errors (already exists, timeouts: those are not configuration)."""
    code = err.code()
    have = "an unknown number of brokers" if brokers is None else f"{brokers} broker{'s' if brokers != 1 else ''}"
    if code == KafkaError.INVALID_REPLICATION_FACTOR:
        most = f"at most {brokers}" if brokers else "no more than the number of brokers"
        return KafkaSettingError(
            f"cannot create topic {topic!r}: {sizing.replication_setting}={sizing.replication_factor} but the Kafka "
            f"cluster has {have}; set {sizing.replication_setting} to {most} (or -1 for the broker's "
            f"default.replication.factor)"
        )
    if code == KafkaError.INVALID_PARTITIONS:
        return KafkaSettingError(
            f"cannot create topic {topic!r}: Kafka refused {sizing.partitions_setting}={sizing.partitions} "
            f"({err.str()}); set it to a positive number (or -1 for the broker's num.partitions)"
        )
    fix = _CREATION_FIX.get(code)
    if fix is None:
        return None
    return KafkaSettingError(f"cannot create topic {topic!r} on the Kafka cluster with {have}: {err.str()}; {fix}")
