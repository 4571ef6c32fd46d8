"""Kafka failures that stop a task: one home for their kinds and for recognising a refused client.

``SinkError`` (records Kafka will not take) and ``OffsetStoreError`` (the offsets topic cannot be
used) are raised by ``sink`` and ``offsets.store``, which re-export them. ``KafkaAccessError`` is
both: the cluster refuses the client's credentials or TLS settings, for the producer and the
offsets topic alike, and no retry helps until the settings change. ``KafkaSettingError`` is its
family: Kafka refused something a setting decides (also a topic the task cannot create with the
configured replication factor or partitions), so the task ends with one line naming the setting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "ACCESS_HINTS", "ClientLog", "KafkaAccessError", "KafkaSettingError", "OffsetStoreError", "SinkError", "TopicSizing",
    "access_refusal", "broker_count", "client_hooks", "creation_refusal", "first_refusal", "refusal_in_log", "syslog_level",
]


# librdkafka's local (client-side) error codes. confluent-kafka names them with a leading underscore
# (``KafkaError._PARTITION_EOF``) as part of its public API; they are named once here so that the
# rest of the product reads no underscore name of another module (ruff SLF001).
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001 - confluent-kafka's public name
TIMED_OUT: int = KafkaError._TIMED_OUT  # noqa: SLF001 - confluent-kafka's public name
FATAL: int = KafkaError._FATAL  # noqa: SLF001 - confluent-kafka's public name
FENCED: int = KafkaError._FENCED  # noqa: SLF001 - confluent-kafka's public name
UNKNOWN_PARTITION: int = KafkaError._UNKNOWN_PARTITION  # noqa: SLF001 - confluent-kafka's public name
AUTHENTICATION: int = KafkaError._AUTHENTICATION  # noqa: SLF001 - confluent-kafka's public name
SSL: int = KafkaError._SSL  # noqa: SLF001 - confluent-kafka's public name


class SinkError(RuntimeError):
    """Kafka refused records permanently; the worker must stop without advancing offsets."""


class OffsetStoreError(RuntimeError):
    """The offsets topic cannot be used (wrong configuration, delivery failure, timeout)."""


class KafkaSettingError(OffsetStoreError, SinkError):
    """Kafka refused what a setting decides: retrying cannot help until the setting changes, so the
    task ends with this one line (log, termination message, status) instead of a traceback."""


class ProducerIdTimeout(SinkError):
    """An exactly-once producer got no producer id in time: the task ends with one line (log,
    termination message, status) and starts again when restarted."""


class KafkaAccessError(KafkaSettingError):
    """Kafka refused the client's credentials or TLS settings: retrying cannot help until they change."""


# librdkafka's reports that the settings, not the network, are wrong: a rejected login (also at a
# re-authentication: connections.max.reauth.ms) or an untrusted certificate. It keeps retrying
# these, the records waiting until message.timeout.ms (5 minutes); the worker stops at once with
# the reason instead, as Kafka Connect's Java producer fails the task on an AuthenticationException.
ACCESS_HINTS = {
    AUTHENTICATION: "check sasl.mechanism and the credentials in sasl.jaas.config (the Secret named by "
    "spec.kafka.securitySecretRef)",
    SSL: "check the trust store (ssl.truststore.location / ssl.truststore.certificates) and the "
    "broker's certificate",
}


_REFUSED = {AUTHENTICATION: "authentication", SSL: "the TLS handshake"}


def access_refusal(code: int, reason: str, client: str = "producer") -> KafkaAccessError | None:
    """The error to stop with when a client error (``error_cb``) is a refusal of access, else None.
    ``client`` says which client was refused (the producer, the offsets consumer...): the status
    shows it, and a Secret may hold settings for one client and not another."""
    hint = ACCESS_HINTS.get(code)
    if hint is None:
        return None
    return KafkaAccessError(f"Kafka refused the connection: {_REFUSED[code]} failed for the {client} ({reason}); {hint}")


def first_refusal(errors: Iterable[KafkaError], client: str) -> KafkaAccessError | None:
    """The first refusal of access among a client's reported errors (None: none so far)."""
    return next((r for e in list(errors) if (r := access_refusal(e.code(), e.str(), client)) is not None), None)


class ClientLog:
    """librdkafka's own log lines for one client, through the project's logging, rate-limited.

    A client that cannot log in retries about three times a second, each try logged by librdkafka
    (raw lines on stderr without a ``logger``). Here each kind of line (librdkafka's facility:
    ``FAIL``, ``SASL``...) is logged at most once per ``every`` seconds, with the count of the ones
    held back since. confluent-kafka calls ``log(level, "%s [%s] %s", facility, client, text)``.
    """

    def __init__(self, client: str, every: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None) -> None:
        self.client = client
        self.every = every
        self._clock = clock
        self._log = logger or logging.getLogger("cdcworker.kafka")
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, fmt: str, *args: object) -> None:
        facility = str(args[0]) if args else ""
        now = self._clock()
        with self._lock:
            last = self._last.get(facility)
            if last is not None and now - last < self.every:
                self._held[facility] = self._held.get(facility, 0) + 1
                return
            self._last[facility] = now
            held = self._held.pop(facility, 0)
        text = fmt % args if args else fmt
        more = f" ({held} more like it in the last {self.every:.0f} s)" if held else ""
        refused = refusal_in_log(str(args[-1]) if len(args) == 3 else text, self.client)
        if refused is not None:  # the one line that says what to check, not librdkafka's wording alone
            self._log.error("%s%s", refused, more)
            return
        self._log.log(level, "librdkafka %s: %s%s", self.client, text, more)


# librdkafka's log wording of a refusal (its error_cb reports it as _AUTHENTICATION or _SSL).
_REFUSAL_TEXTS = ((AUTHENTICATION, ("SASL authentication error", "Authentication failed")),
                  (SSL, ("SSL handshake failed", "certificate verify failed")))


def refusal_in_log(text: str, client: str) -> str | None:
    """The clear one-line refusal (``access_refusal``) when a librdkafka log line reports one."""
    for code, needles in _REFUSAL_TEXTS:
        if any(n in text for n in needles):
            refused = access_refusal(code, text.rsplit("]: ", 1)[-1], client)
            return None if refused is None else str(refused)
    return None


def syslog_level(level: int) -> int:
    """librdkafka's syslog level (0 emergency .. 7 debug) as a ``logging`` level."""
    if level <= 2:
        return logging.CRITICAL
    return {3: logging.ERROR, 4: logging.WARNING, 5: logging.INFO, 6: logging.INFO}.get(level, logging.DEBUG)


def client_hooks(client: str, errors: list[KafkaError] | None = None) -> dict[str, object]:
    """librdkafka settings that route a client's log (``ClientLog``) and, given ``errors``, its
    error reports (``error_cb``, served by poll/consume) to Python."""
    hooks: dict[str, object] = {"logger": ClientLog(client)}
    if errors is not None:
        hooks["error_cb"] = errors.append
    return hooks


@dataclass(frozen=True, slots=True)
class TopicSizing:
    """How a topic is created, under the names the user sets it by (for the message of a refusal)."""

    partitions_setting: str  # e.g. offset.storage.partitions, topic.creation.default.partitions
    partitions: int
    replication_setting: str  # e.g. offset.storage.replication.factor
    replication_factor: int


class TopicLister(Protocol):
    """An admin client or a consumer: both list the cluster's topics."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...  # Any: ClusterMetadata (untyped in confluent-kafka's stubs)


def broker_count(admin: TopicLister, timeout: float = 5.0) -> int | None:
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
