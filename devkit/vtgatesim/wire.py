"""Hand-rolled protobuf wire encoding for the hot path of the VStream server.

The generated classes are used everywhere else; here we build `VStreamResponse` bytes by
concatenating pre-encoded pieces, which is what lets the simulator serve hundreds of thousands
of row events per second from Python. Field numbers follow binlogdata.proto / query.proto.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# VEventType values (binlogdata.VEventType)
GTID, BEGIN, COMMIT, ROLLBACK, DDL = 1, 2, 3, 4, 5
OTHER, ROW, FIELD, HEARTBEAT, VGTID, JOURNAL, VERSION, LASTPK = 11, 12, 13, 14, 15, 16, 17, 18
COPY_COMPLETED = 20


def varint(n: int) -> bytes:
    """Unsigned LEB128 varint; negative int64 values use their 10-byte two's complement form."""
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_VARINTS = [varint(i) for i in range(16384)]


def uvarint(n: int) -> bytes:
    """Varint with a lookup table for the common small values (lengths, counts)."""
    if 0 <= n < 16384:
        return _SMALL_VARINTS[n]
    return varint(n)


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def tag(field: int, wire_type: int) -> bytes:
    return uvarint((field << 3) | wire_type)


def f_varint(field: int, value: int) -> bytes:
    """A varint field, omitted when zero (proto3 default)."""
    if not value:
        return b""
    return tag(field, 0) + varint(value)


def f_bytes(field: int, value: bytes) -> bytes:
    """A length-delimited field, omitted when empty (proto3 default for scalars)."""
    if not value:
        return b""
    return tag(field, 2) + uvarint(len(value)) + value


def f_msg(field: int, value: bytes) -> bytes:
    """An embedded message field; present even when the message is empty."""
    return tag(field, 2) + uvarint(len(value)) + value


def f_str(field: int, value: str) -> bytes:
    return f_bytes(field, value.encode())


def encode_row(values: Sequence[bytes | None]) -> bytes:
    """query.Row: packed sint64 lengths (-1 = NULL) and the concatenated values."""
    lengths = bytearray()
    parts: list[bytes] = []
    for v in values:
        if v is None:
            lengths.append(1)  # zigzag(-1) == 1
        else:
            lengths += uvarint(len(v) << 1)
            parts.append(v)
    body = tag(1, 2) + uvarint(len(lengths)) + bytes(lengths) if values else b""
    data = b"".join(parts)
    if data:
        body += tag(2, 2) + uvarint(len(data)) + data
    return body


def row_values(lengths: Iterable[int], values: bytes) -> list[bytes | None]:
    """The column values of a query.Row given its `lengths` and `values` (None where a length is -1)."""
    out: list[bytes | None] = []
    off = 0
    for n in lengths:
        if n < 0:
            out.append(None)
            continue
        out.append(values[off:off + n])
        off += n
    return out


def result_row(values: Sequence[bytes | None]) -> bytes:
    """A query.Row as one `QueryResult.rows` (field 4) entry: results are concatenations of these."""
    body = encode_row(values)
    return b"\x22" + uvarint(len(body)) + body


def encode_row_change(before: bytes | None, after: bytes | None) -> bytes:
    """binlogdata.RowChange from already-encoded query.Row bodies."""
    out = b""
    if before is not None:
        out += f_msg(1, before)
    if after is not None:
        out += f_msg(2, after)
    return out


def encode_shard_gtid(keyspace: str, shard: str, gtid: str, table_pks: Iterable[bytes] = ()) -> bytes:
    """binlogdata.ShardGtid; table_pks are encoded TableLastPK messages."""
    out = f_str(1, keyspace) + f_str(2, shard) + f_str(3, gtid)
    for pk in table_pks:
        out += f_msg(4, pk)
    return out


def encode_vgtid(shard_gtids: Iterable[bytes]) -> bytes:
    return b"".join(f_msg(1, sg) for sg in shard_gtids)


def ct_field(now_ns: int) -> bytes:
    """VEvent.current_time (field 20)."""
    return f_varint(20, now_ns)


def ks_shard_fields(keyspace: str, shard: str) -> bytes:
    """VEvent.keyspace (22) and VEvent.shard (23)."""
    return f_str(22, keyspace) + f_str(23, shard)


def event(prefix: bytes, ct: bytes, suffix: bytes) -> bytes:
    """One VStreamResponse.events entry: (fields < 20) + current_time + (fields > 20)."""
    n = len(prefix) + len(ct) + len(suffix)
    return b"\x0a" + uvarint(n) + prefix + ct + suffix


def event_prefix(etype: int, timestamp: int = 0, body: bytes = b"") -> bytes:
    """VEvent fields 1..19: type, timestamp and an already-tagged payload."""
    return f_varint(1, etype) + f_varint(2, timestamp) + body
