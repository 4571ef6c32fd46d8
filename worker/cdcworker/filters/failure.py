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

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MODES = ("fail", "warn", "skip")


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


@dataclass(slots=True)
class FailureHandler:
    """Applies the mode; counts what was skipped (``metrics.on_erroneous``)."""

    mode: str = "fail"
    metrics: Any = None
    skipped: int = 0

    def __post_init__(self) -> None:
        if self.mode == "ignore":
            self.mode = "skip"  # Debezium's deprecated spelling
        if self.mode not in MODES:
            raise ValueError(f"unknown event.processing.failure.handling.mode {self.mode!r}")

    def handle(self, what: str, where: EventLocation, exc: BaseException, error: type[EventConversionError] = EventConversionError) -> None:
        """Raise (``fail``) or record and return (``warn``/``skip``): the caller then drops the event."""
        if self.mode == "fail":
            raise error(f"Error while processing event at offset {{{where}}}: {what}: {exc}") from exc
        self.skipped += 1
        if self.metrics is not None:
            self.metrics.on_erroneous(1)
        if self.mode == "warn":
            log.warning("Error while processing event at offset {%s}: %s: %s; the event is skipped", where, what, exc)
        else:
            log.debug("skipped event at offset {%s}: %s: %s", where, what, exc)
