"""``schema.name.adjustment.mode`` / ``field.name.adjustment.mode``: Avro-safe names.

Debezium's ``SchemaNameAdjuster``: the first character must be ``[A-Za-z_]``, the others
``[A-Za-z0-9_.]``; ``avro`` replaces an invalid character with ``_``, ``avro_unicode`` with
``_uXXXX`` and, because ``_`` is then its escape character, also writes ``_`` as ``_u005f``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class NameAdjustment(enum.StrEnum):
    """The values of ``schema.name.adjustment.mode`` / ``field.name.adjustment.mode`` (a StrEnum:
    equal to its string, so the configuration's value compares as is)."""

    NONE = "none"
    AVRO = "avro"
    AVRO_UNICODE = "avro_unicode"


MODES = tuple(m.value for m in NameAdjustment)


def _first_ok(c: str) -> bool:
    return c == "_" or ("A" <= c <= "Z") or ("a" <= c <= "z")


def _rest_ok(c: str) -> bool:
    return c == "." or _first_ok(c) or ("0" <= c <= "9")


def _unicode(c: str) -> str:
    return f"_u{ord(c):04x}"


def adjust_avro(name: str) -> str:
    out = []
    for i, c in enumerate(name):
        ok = _first_ok(c) if i == 0 else _rest_ok(c)
        out.append(c if ok else "_")
    return "".join(out)


def adjust_avro_unicode(name: str) -> str:
    out = []
    for i, c in enumerate(name):
        ok = (_first_ok(c) if i == 0 else _rest_ok(c)) and c != "_"
        out.append(c if ok else _unicode(c))
    return "".join(out)


def adjuster(mode: str) -> Callable[[str], str] | None:
    """The name function for a mode; None for ``none`` (names are used unchanged)."""
    if mode == NameAdjustment.AVRO:
        return adjust_avro
    if mode == NameAdjustment.AVRO_UNICODE:
        return adjust_avro_unicode
    if mode == NameAdjustment.NONE:
        return None
    raise ValueError(f"unknown name adjustment mode {mode!r} (expected one of {', '.join(MODES)})")
