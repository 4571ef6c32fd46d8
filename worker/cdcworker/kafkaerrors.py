"""Kafka failures that stop a task: one home for their kinds and for recognising a refused client.

``SinkError`` (records Kafka will not take) and ``OffsetStoreError`` (the offsets topic cannot be
used) are raised by ``sink`` and ``offsets.store``, which re-export them. ``KafkaAccessError`` is
both: the cluster refuses the client's credentials or TLS settings, for the producer and the
offsets topic alike, and no retry helps until the settings change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError

__all__ = ["ACCESS_HINTS", "ClientLog", "KafkaAccessError", "OffsetStoreError", "SinkError", "access_refusal",
           "client_hooks", "first_refusal"]


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


_REFUSED = {KafkaError._AUTHENTICATION: "authentication", KafkaError._SSL: "the TLS handshake"}


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

    def log(self, level: int, fmt: str, *args: Any) -> None:
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
        self._log.log(level, "librdkafka %s: %s%s", self.client, text, more)


def client_hooks(client: str, errors: list[KafkaError] | None = None) -> dict[str, Any]:
    """librdkafka settings that route a client's log (``ClientLog``) and, given ``errors``, its
    error reports (``error_cb``, served by poll/consume) to Python."""
    hooks: dict[str, Any] = {"logger": ClientLog(client)}
    if errors is not None:
        hooks["error_cb"] = errors.append
    return hooks
