"""Byte-level details of Jackson as used by Kafka Connect's JsonConverter.

orjson does the heavy lifting; this module covers the two places where its output
differs from Jackson: doubles (Java ``Double.toString``) and the hex case of
``\\uXXXX`` escapes for control characters (Jackson writes upper case).
"""

from __future__ import annotations

import re

import orjson

from cdcworker.offsets.javacompat import escapes_only_quotes

Fragment = orjson.Fragment


def java_double(x: float) -> str:
    """Format a double exactly like Java's ``Double.toString`` (JDK 19+, shortest repr)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest round-tripping digits, as JDK 19+ does.
    mant, _, exp_s = repr(abs(x)).partition("e")
    exp = int(exp_s) if exp_s else 0
    int_part, _, frac_part = mant.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # Decimal exponent of the first significant digit.
    if int_part.strip("0"):
        point = len(int_part.lstrip("0")) + exp
    else:
        point = -(len(frac_part) - len(frac_part.lstrip("0"))) + exp
    digits = digits.rstrip("0") or "0"
    ax = abs(x)
    if 1e-3 <= ax < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * (-point)}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{point - 1}"


def double_fragment(x: float) -> orjson.Fragment:
    return orjson.Fragment(java_double(x).encode())


_ESCAPE_RE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u00([0-9a-f]{2})")


def _upper(m: re.Match[bytes]) -> bytes:
    return m.group(1) + b"\\u00" + m.group(2).upper()


def fix_escapes(out: bytes) -> bytes:
    """Upper-case the hex digits of ``\\u00XX`` escapes (Jackson style); cheap when absent."""
    if b"\\u00" not in out:
        return out
    return _ESCAPE_RE.sub(_upper, out)


def dumps(obj: object) -> bytes:
    """Compact JSON bytes as JsonConverter would write them."""
    return fix_escapes(orjson.dumps(obj))


def json_string_body(text: str) -> bytes:
    """``dumps(text)`` without its quotes; done without the JSON writer's buffer when only its
    quotes need escaping (a VGTID's JSON)."""
    if escapes_only_quotes(text):
        return text.replace('"', '\\"').encode()
    return dumps(text)[1:-1]
