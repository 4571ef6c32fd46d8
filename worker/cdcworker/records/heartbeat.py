"""Debezium heartbeat records (``VitessHeartbeatImpl``) and their throttling.

* topic ``<topic.heartbeat.prefix>.<topic.prefix>`` (default ``__debezium-heartbeat.<prefix>``),
  Kafka partition 0;
* key ``io.debezium.connector.common.ServerNameKey`` v1 ``{serverName}`` (the topic prefix);
* value ``io.debezium.connector.vitess.Heartbeat`` v1 ``{vgtid, ts_ms}``: the ``vgtid`` of the offset
  the record carries (``""`` if that offset has none) and the wall-clock time in ms. With the low
  watermark enabled (a shardcdc extension) an optional int64 ``low_watermark`` follows ``ts_ms``;
  Debezium consumers that read ``vgtid``/``ts_ms`` by name are unaffected.

Like Debezium, a heartbeat is due when ``heartbeat.interval.ms`` has elapsed since the previous one
(or since start), is checked after COMMITs, data events and VStream HEARTBEATs, and is skipped —
the timer still restarts — while no offset exists yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cdcworker.events.encoder import OutRecord
from cdcworker.events.jsonfmt import dumps
from cdcworker.events.types import as_field, connect_schema
from cdcworker.jsontypes import JsonObject

__all__ = [
    "HEARTBEAT_KEY_SCHEMA_NAME",
    "HEARTBEAT_PARTITION",
    "HEARTBEAT_VALUE_SCHEMA_NAME",
    "HeartbeatEmitter",
    "heartbeat_key_schema",
    "heartbeat_record",
    "heartbeat_value_schema",
]

HEARTBEAT_KEY_SCHEMA_NAME = "io.debezium.connector.common.ServerNameKey"
HEARTBEAT_VALUE_SCHEMA_NAME = "io.debezium.connector.vitess.Heartbeat"
HEARTBEAT_PARTITION = 0  # Debezium sends heartbeats to partition 0 explicitly
LOW_WATERMARK_FIELD = "low_watermark"


def heartbeat_key_schema() -> JsonObject:
    return {
        "type": "struct",
        "fields": [as_field(connect_schema("string", False), "serverName")],
        "optional": False,
        "name": HEARTBEAT_KEY_SCHEMA_NAME,
        "version": 1,
    }


def heartbeat_value_schema(low_watermark: bool = False) -> JsonObject:
    fields = [as_field(connect_schema("string", False), "vgtid"), as_field(connect_schema("int64", False), "ts_ms")]
    if low_watermark:
        fields.append(as_field(connect_schema("int64", True), LOW_WATERMARK_FIELD))
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": HEARTBEAT_VALUE_SCHEMA_NAME,
        "version": 1,
    }


def _wrap(schema: JsonObject, payload: bytes, enabled: bool) -> bytes:
    return b'{"schema":' + dumps(schema) + b',"payload":' + payload + b"}" if enabled else payload


def heartbeat_record(
    topic: str,
    server_name: str,
    vgtid: str | None,
    ts_ms: int,
    *,
    key_schemas_enable: bool = True,
    value_schemas_enable: bool = True,
    low_watermark: bool = False,
    low_watermark_ms: int | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> OutRecord:
    """One heartbeat record (send it to ``HEARTBEAT_PARTITION``)."""
    key = _wrap(heartbeat_key_schema(), dumps({"serverName": server_name}), key_schemas_enable)
    value: JsonObject = {"vgtid": vgtid if vgtid is not None else "", "ts_ms": ts_ms}
    if low_watermark:
        value[LOW_WATERMARK_FIELD] = low_watermark_ms
    body = _wrap(heartbeat_value_schema(low_watermark), dumps(value), value_schemas_enable)
    return OutRecord(topic, key, body, list(headers))


class HeartbeatEmitter:
    """Throttled heartbeats; ``clock`` (monotonic seconds) and ``wall_ms`` are injectable for tests."""

    def __init__(
        self,
        topic: str,
        server_name: str,
        interval_ms: int,
        *,
        key_schemas_enable: bool = True,
        value_schemas_enable: bool = True,
        low_watermark: bool = False,
        headers: Sequence[tuple[str, bytes]] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.topic = topic
        self.server_name = server_name
        self.interval_s = interval_ms / 1000.0
        self.enabled = interval_ms > 0
        self.low_watermark = low_watermark
        self._clock = clock
        self._wall_ms = wall_ms
        self._headers = list(headers)
        self._key = _wrap(heartbeat_key_schema(), dumps({"serverName": server_name}), key_schemas_enable)
        self._value_prefix = (
            b'{"schema":' + dumps(heartbeat_value_schema(low_watermark)) + b',"payload":'
            if value_schemas_enable
            else b""
        )
        self._due = clock() + self.interval_s  # Debezium starts its timer at construction

    def due(self) -> bool:
        return self.enabled and self._clock() >= self._due

    def maybe_emit(
        self, offset_vgtid: str | None, has_offset: bool = True, low_watermark_ms: int | None = None
    ) -> OutRecord | None:
        """The heartbeat record if one is due (the timer restarts), else None.

        ``offset_vgtid`` is the ``vgtid`` field of the offset the record will carry; ``has_offset``
        False (no offset yet) skips the record like ``VitessHeartbeatImpl.emit`` does.
        """
        if not self.due():
            return None
        self._due = self._clock() + self.interval_s
        return self.emit(offset_vgtid, has_offset, low_watermark_ms)

    def emit(
        self, offset_vgtid: str | None, has_offset: bool = True, low_watermark_ms: int | None = None
    ) -> OutRecord | None:
        """A heartbeat now, regardless of the timer (Debezium's forced beat)."""
        if not self.enabled or not has_offset:
            return None
        value: JsonObject = {
            "vgtid": offset_vgtid if offset_vgtid is not None else "",
            "ts_ms": self._wall_ms(),
        }
        if self.low_watermark:
            value[LOW_WATERMARK_FIELD] = low_watermark_ms
        body = dumps(value)
        out = self._value_prefix + body + b"}" if self._value_prefix else body
        return OutRecord(self.topic, self._key, out, list(self._headers))
