"""The shape of a signal document, checked in one place.

Signals are written by people (an INSERT into the signal table, a record on the signal topic), so
any shape arrives: ``"data": [1]``, ``"additional-conditions": ["x"]``, a number for a name. Every
reader of a signal goes through these functions, which either return typed values or raise
``SignalError`` naming the field and what it should be. A refused signal is logged and skipped;
nothing else about the task changes (its shards keep streaming, later signals are acted on).

Shapes (Debezium 2.x):

- ``execute-snapshot``: ``{"data-collections": ["ks.t", ...] | "ks.t", "type": "incremental"|"blocking",
  "additional-conditions": [{"data-collection": "ks.t", "filter": "<where>"}, ...],
  "additional-condition": "<where>"}`` (the last: older Debezium, for every collection);
- ``stop-snapshot``: ``{"data-collections": [...] | "ks.t"}`` (all when absent);
- ``log``: ``{"message": "..."}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cdcworker.jsontypes import JsonMapping, JsonValue
from cdcworker.snapshot import SnapshotRequest, validate_condition
from cdcworker.textcut import quote

__all__ = ["SNAPSHOT_KINDS", "SignalError", "log_message", "parse_data", "parse_record",
           "snapshot_request", "stop_collections"]

SNAPSHOT_KINDS = ("incremental", "blocking")


class SignalError(ValueError):
    """A signal whose document has the wrong shape; the message names the field."""


def parse_data(raw: object) -> JsonMapping:
    """A signal's ``data``: a JSON object, given as one or as its JSON text (``{}`` when empty)."""
    if raw is None or raw == "" or raw == b"":
        return {}
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, bytes | bytearray):
        try:
            raw = bytes(raw).decode()
        except UnicodeDecodeError as exc:
            raise SignalError(f"data is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(raw, str):
        raise SignalError(f"data must be a JSON object, got {_kind(raw)} {quote(raw)}")
    return _object(_json(raw, "data"), "data")


def parse_record(value: bytes) -> JsonMapping:
    """A Kafka signal record's value: a JSON object ``{"id", "type", "data"}``."""
    try:
        text = value.decode()
    except UnicodeDecodeError as exc:
        raise SignalError(f"the record value is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return _object(_json(text, "the record value"), "the record value")


def snapshot_request(signal_id: str, data: JsonMapping) -> SnapshotRequest:
    """The ``execute-snapshot`` request a signal's ``data`` asks for."""
    collections = _collections(data)
    if not collections:
        raise SignalError('execute-snapshot needs "data-collections": a non-empty list of "keyspace.table" names')
    conditions: dict[str, str] = {}
    items = data.get("additional-conditions")
    if items is not None:
        if not isinstance(items, list):
            raise SignalError(f'"additional-conditions" must be a list of {{"data-collection", "filter"}} '
                              f"objects, got {_kind(items)} {quote(items)}")
        for i, item in enumerate(items):
            dc, flt = _condition_item(i, item)
            conditions[dc] = _where(flt, f'"additional-conditions"[{i}].filter')
    single = data.get("additional-condition")
    if single is not None and single != "":
        if not isinstance(single, str):
            raise SignalError(f'"additional-condition" must be a string (a WHERE expression), got {_kind(single)} '
                              f"{quote(single)}")
        where = _where(single, '"additional-condition"')
        for dc in collections:
            conditions.setdefault(dc, where)
    kind = data.get("type")
    if kind is None or kind == "":
        kind = "incremental"
    if not isinstance(kind, str) or kind.lower() not in SNAPSHOT_KINDS:
        raise SignalError(f'"type" must be one of {", ".join(SNAPSHOT_KINDS)}, got {quote(kind)}')
    return SnapshotRequest(signal_id, collections, conditions, kind.lower())


def stop_collections(data: JsonMapping) -> tuple[str, ...]:
    """The collections a ``stop-snapshot`` names (empty: all of them)."""
    return _collections(data)


def log_message(data: JsonMapping) -> str:
    message = data.get("message", "")
    return message if isinstance(message, str) else json.dumps(message, default=str)


# --- helpers ------------------------------------------------------------------------------------


def _json(text: str, what: str) -> JsonValue:
    try:
        return json.loads(text)
    except RecursionError:
        raise SignalError(f"{what} is nested too deeply to read") from None
    except ValueError as exc:
        raise SignalError(f"{what} is not JSON ({exc}): {quote(text)}") from None


def _object(parsed: object, what: str) -> JsonMapping:
    if not isinstance(parsed, Mapping):
        raise SignalError(f"{what} must be a JSON object, got {_kind(parsed)} {quote(parsed)}")
    return parsed


def _collections(data: JsonMapping) -> tuple[str, ...]:
    value = data.get("data-collections")
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        raise SignalError(f'"data-collections" must be a list of "keyspace.table" names, got {quote(value)}')
    return tuple(value)


def _condition_item(i: int, item: object) -> tuple[str, str]:
    where = f'"additional-conditions"[{i}]'
    if not isinstance(item, Mapping):
        raise SignalError(f'{where} must be an object {{"data-collection": "ks.t", "filter": "<where>"}}, '
                          f"got {_kind(item)} {quote(item)}")
    dc, flt = item.get("data-collection"), item.get("filter")
    if not isinstance(dc, str) or not dc:
        raise SignalError(f'{where}."data-collection" must be a "keyspace.table" name, got {quote(dc)}')
    if not isinstance(flt, str) or not flt.strip():
        raise SignalError(f'{where}.filter must be a WHERE expression (a string), got {quote(flt)}')
    return dc, flt


def _where(text: str, field: str) -> str:
    try:
        return validate_condition(text)
    except ValueError as exc:
        raise SignalError(f"{field}: {exc}") from None


def _kind(value: object) -> str:
    """The JSON name of a value's type, as a user reading the document would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
