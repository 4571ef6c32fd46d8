"""Every librdkafka client the product makes: one home, so none prints raw librdkafka lines.

Without a ``logger`` librdkafka writes its own lines to stderr (``%3|...|FAIL|rdkafka#producer-1|
...``), about three a second while a broker is unreachable or a login is refused. Clients made here
log through the project's logger instead, each kind of line at most once per period, and a refused
login as one clear line naming the client (``kafkaerrors.ClientLog``). ``client`` names the client
in those lines ("signal consumer", "topic creator"...). A config that brings its own ``logger`` or
``error_cb`` keeps it. tests/test_kafka_clients.py checks that product code makes no client elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from cdcworker.kafkaerrors import client_hooks

__all__ = ["admin", "consumer", "hooked", "producer"]


def hooked(config: Mapping[str, object], client: str, errors: list[KafkaError] | None = None) -> dict[str, object]:
    """``config`` with the client's log (and, given ``errors``, error reports) routed to Python."""
    return {**client_hooks(client, errors), **config}


def producer(config: Mapping[str, object], client: str, errors: list[KafkaError] | None = None) -> Producer:
    return Producer(hooked(config, client, errors))


def consumer(config: Mapping[str, object], client: str, errors: list[KafkaError] | None = None) -> Consumer:
    return Consumer(hooked(config, client, errors))


def admin(config: Mapping[str, object], client: str, errors: list[KafkaError] | None = None) -> AdminClient:
    # The stub types values as str/int/float/bool; librdkafka also takes the hooks' callbacks.
    return AdminClient(hooked(config, client, errors))  # type: ignore[arg-type]
