"""Vitess shard names, key ranges and the `hash` vindex (pure functions): the test server's own copy.

The VTGate test server imports no product code (scripts/layers.toml): it stands in for Vitess, so
what it computes must come from Vitess's definitions, not from the worker's code under test. This
is the subset of ``cdcworker.keyrange`` the server needs, kept as a copy on purpose: a mistake in
the worker's key-range arithmetic then shows up as a difference instead of being mirrored.

Semantics follow Vitess `go/vt/key/key.go` and `go/vt/topo/shard.go`:

* A keyspace id is a byte string; ids compare as unsigned bytes after trailing
  0x00 bytes are stripped (`normalize`), so ``-80`` == ``00-80`` == ``0000-8000``.
* A range-based shard name is ``start-end`` in hex (either side may be empty:
  empty start = MIN, empty end = MAX). ``0`` is the unsharded convention and
  covers everything, like ``-``.
* A keyspace id ``k`` belongs to ``[start, end)``.
"""

from __future__ import annotations

import functools
import re
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, modes

__all__ = [
    "FULL_RANGE",
    "KeyRange",
    "contains",
    "covers",
    "even_shard_names",
    "hash_keyspace_id",
    "is_valid_shard_name",
    "normalize",
    "overlaps",
    "parse_shard",
    "sort_shards",
]

# Same pattern as Vitess key.KeyRangePattern.
_SHARD_NAME_RE = re.compile(r"^(0|([0-9a-fA-F]{2})*-([0-9a-fA-F]{2})*)$")

_UINT64_MAX = (1 << 64) - 1


def normalize(ksid: bytes) -> bytes:
    """Strip trailing zero bytes so ids of different lengths compare correctly."""
    return ksid.rstrip(b"\x00")


@dataclass(frozen=True, slots=True, order=False)
class KeyRange:
    """A half-open key range ``[start, end)``; both sides stored normalized.

    ``start == b""`` means MIN and ``end == b""`` means MAX.
    """

    start: bytes = b""
    end: bytes = b""

    def __post_init__(self) -> None:
        start, end = normalize(self.start), normalize(self.end)
        if start != self.start:
            object.__setattr__(self, "start", start)
        if end != self.end:
            object.__setattr__(self, "end", end)
        if end and start >= end:
            raise ValueError(
                f"key range start {start.hex() or 'MIN'} must be strictly less than end {end.hex()}"
            )

    @property
    def is_full(self) -> bool:
        """True if the range covers the whole keyspace."""
        return not self.start and not self.end

    @property
    def name(self) -> str:
        """Canonical (normalized, lower-case) shard name, e.g. ``80-c0`` or ``-``."""
        return f"{self.start.hex()}-{self.end.hex()}"

    def __str__(self) -> str:
        return self.name

    def contains(self, ksid: bytes) -> bool:
        """True if keyspace id ``ksid`` lies in ``[start, end)``."""
        k = normalize(ksid)
        return (not self.start or k >= self.start) and (not self.end or k < self.end)

    def overlaps(self, other: KeyRange) -> bool:
        """True if some keyspace id lies in both ranges."""
        return (not self.end or other.start < self.end) and (not other.end or self.start < other.end)


FULL_RANGE = KeyRange()


def is_valid_shard_name(name: str) -> bool:
    """True if ``name`` is ``0`` or a well-formed ``start-end`` hex shard name."""
    return _SHARD_NAME_RE.fullmatch(name) is not None


@functools.lru_cache(maxsize=4096)
def parse_shard(name: str) -> KeyRange:
    """Parse a Vitess shard name into its key range.

    ``0`` and ``-`` give the full range; ``-80`` gives ``[MIN, 0x80)``;
    ``8000-c000`` equals ``80-c0``. Raises ValueError for malformed names or
    when start is not strictly below end.
    """
    if not isinstance(name, str):
        raise ValueError(f"shard name must be a string, got {type(name).__name__}")
    if not is_valid_shard_name(name):
        raise ValueError(
            f"invalid shard name {name!r}: expected '0' or '<hex>-<hex>' with an even number "
            "of hex digits on each side (e.g. '-80', '80-c0', '-')"
        )
    if name == "0":
        return FULL_RANGE
    start_hex, end_hex = name.split("-")
    start, end = bytes.fromhex(start_hex), bytes.fromhex(end_hex)
    # Vitess (topo.ValidateShardName) compares the raw bytes, so "80-00" is out
    # of order rather than "80-MAX"; KeyRange then also rejects ranges that are
    # empty once normalized ("80-8000"), which Vitess would let through.
    if end and start >= end:
        raise ValueError(
            f"invalid shard name {name!r}: start {start_hex} is not strictly less than end {end_hex}"
        )
    try:
        return KeyRange(start, end)
    except ValueError as exc:
        raise ValueError(f"invalid shard name {name!r}: {exc}") from None


def _as_range(shard: KeyRange | str) -> KeyRange:
    return shard if isinstance(shard, KeyRange) else parse_shard(shard)


def contains(key_range: KeyRange | str, ksid: bytes) -> bool:
    """True if keyspace id ``ksid`` falls in ``key_range`` (a KeyRange or shard name)."""
    return _as_range(key_range).contains(ksid)


def overlaps(a: KeyRange | str, b: KeyRange | str) -> bool:
    """True if the two ranges (KeyRanges or shard names) share any keyspace id."""
    return _as_range(a).overlaps(_as_range(b))


def _start_sort_key(kr: KeyRange) -> tuple[bytes, int, bytes]:
    # Empty start (MIN) sorts first naturally; an empty end (MAX) must sort last.
    return (kr.start, 1 if not kr.end else 0, kr.end)


def sort_shards(names: Iterable[str]) -> list[str]:
    """Sort shard names by key range start (then end); names are kept as given."""
    return sorted(names, key=lambda n: _start_sort_key(parse_shard(n)))


def covers(ranges: Iterable[KeyRange | str]) -> bool:
    """True if the ranges exactly tile the whole keyspace: no gap, no overlap."""
    ordered = sorted((_as_range(r) for r in ranges), key=_start_sort_key)
    if not ordered:
        return False
    expected_start = b""
    for i, kr in enumerate(ordered):
        if kr.start != expected_start:
            return False
        if not kr.end:
            return i == len(ordered) - 1
        expected_start = kr.end
    return False


def even_shard_names(n: int) -> list[str]:
    """Names of ``n`` equal-width shards, as Vitess ``key.EvenShardsKeyRange`` makes them.

    ``n`` must be a power of two. Boundaries are truncated to the fewest whole
    bytes able to tell ``n`` shards apart (ceil(log256 n)), so n=2 gives
    ``-80,80-`` and n=512 gives 2-byte names (``-0080,0080-0100,...``).
    """
    if n <= 0:
        raise ValueError(f"the shard count must be > 0: {n}")
    if n & (n - 1):
        raise ValueError(f"the shard count must be a power of two: {n}")
    min_bytes = 0
    nn = n - 1
    while nn > 0:
        min_bytes += 1
        nn >>= 8
    width = (1 << 64) // n
    names = []
    for i in range(n):
        start = i * width
        end = start + width
        start_hex = "" if start == 0 else start.to_bytes(8, "big")[:min_bytes].hex()
        end_hex = "" if end > _UINT64_MAX else end.to_bytes(8, "big")[:min_bytes].hex()
        names.append(f"{start_hex}-{end_hex}")
    return names


# ---------------------------------------------------------------------------
# The Vitess `hash` vindex: keyspace id = DES-ECB(zero key) of the 8-byte
# big-endian unsigned column value. TripleDES with an all-zero 24-byte key is
# single DES with the zero key (Vitess itself used 3DES once, then switched).

_DES = Cipher(TripleDES(bytes(24)), modes.ECB())
_UINT64 = struct.Struct(">Q")


class _CipherPair(threading.local):
    """One ECB encryptor per thread, reused across blocks.

    ECB processes each 8-byte block independently, so a long-lived context fed
    exactly one block per update() is equivalent to a fresh one, and saves an
    OpenSSL context allocation per row.
    """

    def __init__(self) -> None:
        self.encryptor = _DES.encryptor()


_ciphers = _CipherPair()


def hash_keyspace_id(value: int) -> bytes:
    """Keyspace id of ``value`` under the Vitess ``hash`` vindex.

    Accepts unsigned 64-bit values and signed 64-bit values; negative values
    are taken as their two's-complement uint64, as Vitess does for signed columns.
    """
    if value < 0:
        if value < -(1 << 63):
            raise ValueError(f"hash vindex value out of int64 range: {value}")
        value += 1 << 64
    elif value > _UINT64_MAX:
        raise ValueError(f"hash vindex value out of uint64 range: {value}")
    return _ciphers.encryptor.update(_UINT64.pack(value))

