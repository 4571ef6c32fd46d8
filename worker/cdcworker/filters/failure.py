"""``event.processing.failure.handling.mode``: what happens to an event that cannot be converted.

``fail`` stops the task with an error naming the event's offset (VGTID, keyspace/shard, table);
``warn`` logs that offset and skips the event; ``skip`` skips it quietly. Either way only the bad
event is lost: the events before and after it in the same transaction are emitted as usual.

Covered: a FIELD event that cannot be planned (the vstreamer's anonymised ``@1`` columns, which
Debezium treats as transient: in ``fail`` mode the stream is reconnected, as Debezium's retry
does), a ROW value that does not parse for its column type or whose column count disagrees with
the FIELD event, and a record larger than the producer's ``max.request.size`` (Kafka refuses it).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcworker import kafkaclients

if TYPE_CHECKING:
    from cdcworker.observability.metrics import ErroneousCounter

log = logging.getLogger(__name__)

# Bytes a record batch adds around one record (v2 batch header 61 + record framing, headers).
_RECORD_OVERHEAD = 128



class FailureMode(enum.StrEnum):
    """The values of ``event.processing.failure.handling.mode`` (a StrEnum: equal to its string)."""

    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


MODES = tuple(m.value for m in FailureMode)


class EventConversionError(RuntimeError):
    """An event could not be converted and ``event.processing.failure.handling.mode=fail``."""


class AnonymisedColumns(EventConversionError):
    """A FIELD event with ``@1``-style column names (DBZ-2836): a transient vstreamer bug."""


@dataclass(frozen=True, slots=True)
class EventLocation:
    """Where the bad event is, in the terms of the offset a user would restart from."""

    keyspace: str
    shard: str
    table: str
    vgtid: str  # the VGTID JSON of the event's transaction (or the stream position before it)

    def __str__(self) -> str:
        return f"keyspace={self.keyspace} shard={self.shard} table={self.table} vgtid={self.vgtid}"


def is_oversized(exc: BaseException) -> bool:
    """True for librdkafka's MSG_SIZE_TOO_LARGE (the record exceeds ``message.max.bytes``)."""
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    err = exc.args[0]
    return isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def topic_limits(admin_config: dict[str, str]) -> Callable[[str], int | None]:
    """``topic -> max.message.bytes`` from the broker, cached; None when it cannot be read."""
    cache: dict[str, int | None] = {}
    conf: dict[str, object] = dict(admin_config)

    def limit(topic: str) -> int | None:
        if topic not in cache:
            from confluent_kafka.admin import ConfigResource

            try:
                res = ConfigResource(ConfigResource.Type.TOPIC, topic)
                # The client must outlive the future: a temporary one is destroyed at once and
                # its request fails with _DESTROY, which left every limit unknown.
                admin = kafkaclients.admin(conf, "topic config reader")
                entries = admin.describe_configs([res])[res].result(10)
                cache[topic] = int(entries["max.message.bytes"].value)
            except Exception as exc:  # the refusal is then handled as the bad record itself
                log.warning("cannot read max.message.bytes of %s: %s", topic, exc)
                cache[topic] = None
        return cache[topic]

    return limit


def is_oversized_delivery(err: object) -> bool:
    """A delivery report of a record the broker refused as too large (topic ``max.message.bytes``)."""
    from confluent_kafka import KafkaError

    return isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


@dataclass(slots=True)
class FailureHandler:
    """Applies the mode; counts what was skipped (``metrics.on_erroneous``)."""

    mode: FailureMode | str = FailureMode.FAIL  # a str is parsed in __post_init__ (a config value)
    metrics: ErroneousCounter | None = None
    skipped: int = 0
    # The broker's record limit of a topic (max.message.bytes), looked up on the first refusal.
    # Kafka refuses whole produce batches: only a record that alone exceeds it is the bad event;
    # its batch neighbours are refused with it and must not be dropped.
    topic_limit: Callable[[str], int | None] | None = None

    def __post_init__(self) -> None:
        if self.mode == "ignore":
            self.mode = FailureMode.SKIP  # Debezium's deprecated spelling
        if self.mode not in MODES:
            raise ValueError(f"unknown event.processing.failure.handling.mode {self.mode!r}")
        self.mode = FailureMode(self.mode)

    def handle(self, what: str, where: EventLocation, exc: BaseException, error: type[EventConversionError] = EventConversionError) -> None:
        """Raise (``fail``) or record and return (``warn``/``skip``): the caller then drops the event."""
        if self.mode is FailureMode.FAIL:
            raise error(f"Error while processing event at offset {{{where}}}: {what}: {exc}") from exc
        self.skipped += 1
        if self.metrics is not None:
            self.metrics.on_erroneous(1)
        if self.mode is FailureMode.WARN:
            log.warning("Error while processing event at offset {%s}: %s: %s; the event is skipped", where, what, exc)
        else:
            log.debug("skipped event at offset {%s}: %s: %s", where, what, exc)

    def on_delivery_error(self, err: Any, msg: Any) -> bool:  # Any: confluent-kafka's delivery-report arguments (KafkaError, Message) as the callback gets them
        """``KafkaSink.on_error``: True drops a record the broker refused as too large (warn/skip).

        In ``fail`` mode (or for any other error) the record stays an error: the sink stops the
        task naming the offset its transaction ends at.
        """
        if self.mode is FailureMode.FAIL or not is_oversized_delivery(err):
            return False
        size = len(msg.value() or b"") + len(msg.key() or b"")
        limit = self.topic_limit(msg.topic()) if self.topic_limit is not None else None
        if limit is None:
            # The broker refuses a whole produce batch, so a record of normal size shares the
            # error of an oversized neighbour; without the topic's limit nobody can tell which
            # one this is, and dropping it could lose a good record.
            log.error(
                "record of %d bytes for %s[%d] was refused as too large, and the topic's max.message.bytes "
                "cannot be read to tell whether it is the oversized one; it cannot be dropped "
                "(grant DescribeConfigs on the topic)", size, msg.topic(), msg.partition(),
            )
            return False
        if size + _RECORD_OVERHEAD <= limit:
            log.error(
                "record of %d bytes for %s[%d] was refused with a larger one in its produce batch "
                "(max.message.bytes=%d); it cannot be dropped", size, msg.topic(), msg.partition(), limit,
            )
            return False
        self.skipped += 1
        if self.metrics is not None:
            self.metrics.on_erroneous(1)
        what = f"record of {size} bytes for {msg.topic()}[{msg.partition()}] refused by the broker: {err.str()}"
        if self.mode is FailureMode.WARN:
            log.warning("%s; the record is skipped", what)
        else:
            log.debug("skipped %s", what)
        return True
