"""Byte-exact imitations of the few Java behaviours that decide Kafka Connect's offset bytes.

* ``jackson_dumps`` / ``jackson_bytes``: compact JSON exactly as Jackson's ``ObjectMapper`` writes
  it (``writeValueAsString`` for Debezium's ``Vgtid.toString``, ``writeValueAsBytes`` for Connect's
  ``JsonConverter``): no spaces, non-ASCII written raw, control characters escaped as ``\\uXXXX``
  with UPPER-case hex except the five short escapes ``\\b \\t \\n \\f \\r``; the bytes form also
  escapes characters outside the BMP as surrogate pairs. Python's ``json`` differs on both counts.
* ``java_hashmap_order``: the iteration order of a ``java.util.HashMap`` with String keys. Connect
  serializes the maps a connector hands it (partition and offset) in that order, and the key of
  an offset record is compared byte for byte, so the order is part of the format.
* ``murmur2`` / ``java_murmur2_partition``: Kafka's ``Utils.murmur2`` and the Java producer's
  default partitioner for keyed records (``toPositive(murmur2(key)) % partitions``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "JsonValue",
    "escapes_only_quotes",
    "jackson_bytes",
    "jackson_dumps",
    "java_hashmap_order",
    "java_murmur2_partition",
    "java_string_hash",
    "java_string_sort_key",
    "murmur2",
]

JsonValue = Any  # None | bool | int | str | list[JsonValue] | Mapping[str, JsonValue]

_M32 = 0xFFFFFFFF

# Jackson's CharTypes output escapes for the 7-bit range; everything >= 0x20 except '"' and '\\' is
# written as is (including 0x7F, '/' and all non-ASCII characters).
_ESCAPES: dict[int, str] = {i: f"\\u{i:04X}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"})
# Lone low surrogates U+DC80..U+DCFF stand for undecodable bytes (Python's "surrogateescape"); Jackson
# never produces them from valid input, and a raw surrogate cannot be UTF-8 encoded, so escape them.
_ESCAPES.update({cp: f"\\u{cp:04x}" for cp in range(0xDC80, 0xDD00)})


_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


def _surrogate_escape(m: re.Match[str]) -> str:
    cp = ord(m.group()) - 0x10000
    return f"\\u{0xD800 + (cp >> 10):04X}\\u{0xDC00 + (cp & 0x3FF):04X}"


def escapes_only_quotes(s: str) -> bool:
    """Whether a JSON writer (Jackson, orjson) escapes nothing in ``s`` but its double quotes:
    printable ASCII without backslashes (names, GTIDs, a VGTID's JSON). The writers' fast path:
    translate() goes character by character, ~0.2 ms for a 64-shard VGTID."""
    return s.isascii() and s.isprintable() and "\\" not in s


def _jstr(s: str, utf8: bool) -> str:
    if escapes_only_quotes(s):
        return '"' + s.replace('"', '\\"') + '"'
    out = s.translate(_ESCAPES)
    if utf8 and not out.isascii():
        out = _SUPPLEMENTARY.sub(_surrogate_escape, out)
    return '"' + out + '"'


def jackson_dumps(value: JsonValue, *, utf8: bool = False) -> str:
    """Serialize to compact JSON exactly as Jackson does (mappings keep their iteration order).

    ``utf8=False`` is ``writeValueAsString`` (characters outside the BMP written as they are);
    ``utf8=True`` is ``writeValueAsBytes`` (Kafka's ``JsonSerializer``), whose UTF-8 generator
    writes each of them as an escaped surrogate pair (``\\uD83D\\uDE00``).
    """
    parts: list[str] = []
    _write(value, parts, utf8)
    return "".join(parts)


def jackson_bytes(value: JsonValue) -> bytes:
    """``ObjectMapper.writeValueAsBytes``: the bytes Connect's JsonConverter produces."""
    return jackson_dumps(value, utf8=True).encode("utf-8")


def _write(value: JsonValue, out: list[str], utf8: bool) -> None:
    if isinstance(value, str):
        out.append(_jstr(value, utf8))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            out.append(_jstr(key, utf8))
            out.append(":")
            _write(item, out, utf8)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, utf8)
        out.append("]")
    else:
        # Floats are deliberately unsupported: no offset field is a float, and Java's double
        # formatting differs from Python's.
        raise TypeError(f"cannot serialize {type(value).__name__} as offset JSON")


def java_string_hash(s: str) -> int:
    """``String.hashCode()``: 31-polynomial over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _M32
    return h - (1 << 32) if h & 0x80000000 else h


def java_string_sort_key(s: str) -> bytes:
    """Sort key giving Java's natural ``String`` order (UTF-16 code unit comparison)."""
    return s.encode("utf-16-be", "surrogatepass")


def _table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return min(max(n, 1), 1 << 30)


def java_hashmap_order(keys: Iterable[str], initial_capacity: int | None = None) -> list[str]:
    """Iteration order of a ``HashMap<String, ?>`` after putting ``keys`` in this order.

    ``initial_capacity=None`` is ``new HashMap<>()`` (16 buckets, doubling when size exceeds 3/4 of
    them). Resizing keeps the relative order inside a bucket, so the final order is: bucket index
    ascending, then insertion order. Duplicate keys keep their first position. (Buckets that turn
    into trees need 8+ colliding keys and 64+ buckets; offsets never come close.)
    """
    ordered: list[str] = []
    seen: set[str] = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            ordered.append(key)
    capacity = 16 if initial_capacity is None else _table_size_for(initial_capacity)
    while len(ordered) > capacity * 3 // 4:
        capacity <<= 1
    mask = capacity - 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & _M32
        return (h ^ (h >> 16)) & mask

    # sorted() is stable: equal buckets keep insertion order.
    return sorted(ordered, key=bucket)


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c) as a signed 32-bit int."""
    buf = bytes(data)
    length = len(buf)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & _M32
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(buf[4 * i : 4 * i + 4], "little")
        k = (k * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = (h * m) & _M32
        h ^= k
    tail = buf[4 * n4 :]
    rest = len(tail)
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_murmur2_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The Java producer's partition for a non-null key: ``(murmur2(key) & 0x7fffffff) % n``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def ordered_map(
    items: Sequence[tuple[str, JsonValue]], initial_capacity: int | None = None
) -> dict[str, JsonValue]:
    """A dict whose order is that of a Java ``HashMap`` filled with ``items`` in sequence."""
    values = dict(items)
    return {k: values[k] for k in java_hashmap_order((k for k, _ in items), initial_capacity)}
