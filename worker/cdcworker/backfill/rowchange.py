"""Row changes built from rows we already hold, shaped as ``binlogdata.RowChange`` for the encoder.

``TablePlan.encode_change`` takes a RowChange (``HasField``/``before``/``after``, and its
serialized bytes for the native encoder). A snapshot read is a change with only ``after``; a
primary-key change the hand-off splits keeps only one side. Serializing by hand avoids copying
each ``query.Row`` into a new message.
"""

from __future__ import annotations

from typing import Any


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, row: Any) -> bytes:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    body: bytes = row.SerializeToString()
    n = len(body)
    tag = (number << 3) | 2
    if n < 0x4000:  # rows are almost always under 16 KiB: a two-byte length at most
        head = bytes((tag, n)) if n < 0x80 else bytes((tag, (n & 0x7F) | 0x80, n >> 7))
        return head + body
    return bytes((tag,)) + _uvarint(n) + body


class PartialChange:
    """A RowChange with only ``before`` (a delete) or only ``after`` (a read or a create)."""

    __slots__ = ("_after", "_before")

    def __init__(self, before: object = None, after: object = None) -> None:
        self._before, self._after = before, after

    def HasField(self, name: str) -> bool:  # protobuf's method name
        return (self._before if name == "before" else self._after) is not None

    @property
    def before(self) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        return self._before

    @property
    def after(self) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
        return self._after

    def SerializeToString(self) -> bytes:  # protobuf's method name
        out = b""
        if self._before is not None:
            out += _field(1, self._before)
        if self._after is not None:
            out += _field(2, self._after)
        return out


def read(row: object) -> PartialChange:
    """A snapshot read of ``row`` (a ``query.Row``)."""
    return PartialChange(after=row)
