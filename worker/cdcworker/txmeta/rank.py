"""Transaction rank from a MySQL GTID set, as Debezium's ``VitessRankProvider`` / ``Gtid`` compute it.

A GTID set like ``MySQL56/uuid1:1-4,uuid2:2-10`` is parsed as Debezium does:

* the flavor prefix (everything up to the first ``/``) is dropped;
* the rest is split on ``,``; each part is split on ``:``; the first piece is the host (uuid), the
  second piece is split on ``-`` and its *last* number kept. Later intervals are ignored, so in
  ``uuid:1-5:7-10`` only ``1-5`` counts (a quirk we keep: it decides the rank);
* the rank is the sum of the kept numbers (arbitrary precision).

The rank travels as a Connect ``Decimal`` with scale 0: JsonConverter writes it as the base64 of the
big-endian two's-complement bytes of the unscaled value (``decimal.format=BASE64``, the default) or as
a plain JSON number (``decimal.format=NUMERIC``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass

__all__ = ["ParsedGtid", "decimal_json", "decimal_json_bytes", "host_key", "parse_gtid", "rank", "rank_json", "simple_gtid"]

# Java's BigInteger(String) accepts an optional sign and decimal digits, nothing else.
_JAVA_INT_RE = re.compile(r"[+-]?[0-9]+")

# The GTID of nearly every transaction: one host, one interval (``MySQL56/uuid:1-42``). For it,
# ``parse_gtid``'s hosts are {uuid} and its rank is the interval's end; this match gives both
# without the general parse (two per transaction with ordered metadata). Anything else (several
# hosts or intervals, signs, no flavor) takes the general parse.
_SIMPLE_GTID = re.compile(r"([^/]*/)([^,:/]+):(?:[0-9]+-)?([0-9]+)").fullmatch


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split`` with a literal one-character separator: trailing empty strings are dropped
    (but a string without the separator, even ``""``, splits into itself)."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True, slots=True)
class ParsedGtid:
    """The flavor, host (uuid) set and per-host sequence numbers Debezium's ``Gtid`` keeps."""

    flavor: str
    hosts: frozenset[str]
    sequences: tuple[int, ...]


@functools.lru_cache(maxsize=1024)
def parse_gtid(gtid: str) -> ParsedGtid:
    """Parse like Debezium's ``Gtid``; ``ValueError`` where Debezium throws "Error parsing GTID"."""
    index = gtid.find("/")
    flavor, body = (gtid[:index], gtid[index + 1 :]) if index != -1 else ("", gtid)
    hosts: set[str] = set()
    sequences: list[int] = []
    try:
        for part in _java_split(body, ","):
            pieces = _java_split(part, ":")
            hosts.add(pieces[0])
            positions = _java_split(pieces[1], "-")
            last = positions[-1]
            if not _JAVA_INT_RE.fullmatch(last):
                raise ValueError(f"not a number: {last!r}")
            sequences.append(int(last))
    except (IndexError, ValueError) as exc:
        raise ValueError(f"Error parsing GTID: {gtid}") from exc
    return ParsedGtid(flavor, frozenset(hosts), tuple(sequences))


# Cached: each GTID of a stream is looked at three times (the same-hosts check as the new and then
# as the previous GTID, and its rank), matched once.
@functools.lru_cache(maxsize=1024)
def simple_gtid(gtid: str) -> tuple[str, int] | None:
    """(host key, rank) of a single-host, single-interval GTID; None for any other form."""
    m = _SIMPLE_GTID(gtid)
    return None if m is None else (m.group(1) + m.group(2), int(m.group(3)))


def host_key(gtid: str) -> str | None:
    """``flavor/uuid`` of a single-host, single-interval GTID (what decides whether two GTIDs are
    on the same hosts), or None for any other form (compare those with ``parse_gtid``)."""
    hit = simple_gtid(gtid)
    return None if hit is None else hit[0]


def rank(gtid: str) -> int:
    """The transaction rank of a shard GTID: the sum of each host's last sequence number."""
    hit = simple_gtid(gtid)
    if hit is not None:
        return hit[1]
    return sum(parse_gtid(gtid).sequences)


def _byte_array(unscaled: int) -> bytes:
    """``BigInteger.toByteArray``: minimal big-endian two's complement (0 -> one zero byte)."""
    magnitude = unscaled if unscaled >= 0 else ~unscaled
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def decimal_json(unscaled: int, numeric: bool) -> str | int:
    """A scale-0 Connect Decimal as JsonConverter writes it (base64 bytes, or a number)."""
    if numeric:
        return unscaled
    return base64.b64encode(_byte_array(unscaled)).decode("ascii")


def decimal_json_bytes(unscaled: int, numeric: bool) -> bytes:
    """``decimal_json`` serialized: what ``dumps(decimal_json(unscaled, numeric))`` gives."""
    if numeric:
        return b"%d" % unscaled
    return b'"' + binascii.b2a_base64(_byte_array(unscaled), newline=False) + b'"'


def rank_json(gtid: str, numeric: bool = False) -> str | int:
    """The ``transaction_rank`` payload value for a shard GTID."""
    return decimal_json(rank(gtid), numeric)
