"""Worker logging: ``SHARDCDC_LOG_LEVEL`` and ``SHARDCDC_LOG_FORMAT`` (``text`` or ``json``).

JSON lines carry ``ts`` (UTC, RFC 3339 with milliseconds), ``level``, ``logger``, ``message``, the
task context (connector, task, generation...) and any ``extra=`` fields, so log collectors can
filter by task without parsing messages.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import IO

import orjson

from cdcworker.jsontypes import JsonObject

__all__ = ["LOG_FORMATS", "ContextFilter", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class ContextFilter(logging.Filter):
    """Adds the task context to every record; update it with :meth:`set` (e.g. a new generation)."""

    def __init__(self, context: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self.context: dict[str, object] = dict(context or {})

    def set(self, **fields: object) -> None:
        self.context = {**self.context, **fields}  # replace, never mutate: other threads read it

    def filter(self, record: logging.LogRecord) -> bool:
        record.shardcdc_context = self.context
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        secs = int(record.created)
        ms = int((record.created - secs) * 1000)
        doc: JsonObject = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{ms:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = getattr(record, "shardcdc_context", None)
        if context:
            doc.update(context)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != "shardcdc_context":
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(
    level: str | None = None,
    fmt: str | None = None,
    context: Mapping[str, object] | None = None,
    stream: IO[str] | None = None,
) -> ContextFilter:
    """Install one root handler; arguments default to the environment variables."""
    level_name = (level or os.environ.get("SHARDCDC_LOG_LEVEL") or "INFO").strip().upper()
    if level_name == "WARN":
        level_name = "WARNING"
    numeric = logging.getLevelName(level_name)
    if not isinstance(numeric, int):
        raise ValueError(
            f"SHARDCDC_LOG_LEVEL={level_name!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
        )
    form = (fmt or os.environ.get("SHARDCDC_LOG_FORMAT") or "text").strip().lower()
    if form not in LOG_FORMATS:
        raise ValueError(f"SHARDCDC_LOG_FORMAT={form!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT_FORMAT))
    ctx = ContextFilter(context)
    handler.addFilter(ctx)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return ctx
