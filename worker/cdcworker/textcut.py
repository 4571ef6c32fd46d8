"""Values quoted in error messages, cut to a readable length.

A user's mistake may be an 8 MB value (a pasted file, a generated blob): the message that names it
must stay one readable line, so it quotes the start and says how long the whole was.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["QUOTE_LIMIT", "quote"]

QUOTE_LIMIT = 80


def quote(value: object, limit: int = QUOTE_LIMIT, render: Callable[[object], str] = repr) -> str:
    """``render(value)`` (``repr``; ``json.dumps`` for Kubernetes-style messages), or, when longer
    than ``limit``, its first ``limit`` characters + ``... (N bytes)``: N is the size of the value
    itself (a string's UTF-8 bytes), not of its rendering."""
    if isinstance(value, str) and len(value) > limit:
        return f"{render(value[:limit])}... ({len(value.encode('utf-8', 'replace'))} bytes)"
    text = render(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, bytes | bytearray) else len(text.encode("utf-8", "replace"))
    return f"{text[:limit]}... ({size} bytes)"
