"""Column value converters: one precompiled callable per column and mode.

Mirrors the Debezium Vitess connector (``VitessType.resolve`` → JDBC type,
``VitessValueConverter`` / core ``JdbcValueConverters``): every converter takes the raw
MySQL text bytes of a non-NULL ROW value and returns a value ready for orjson (int, str,
bool, ``orjson.Fragment`` for Java-formatted doubles), plus the Connect schema (as an
ordered dict in JsonConverter key order) of the field.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import enum
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cdcworker.events.jsonfmt import double_fragment
from cdcworker.jsontypes import JsonObject, JsonValue

# query.Type values (value = ordinal | flag bits), see the VStream protocol reference §2.3.
INT8, UINT8, INT16, UINT16, INT24, UINT24, INT32, UINT32, INT64, UINT64 = (
    257, 770, 259, 772, 261, 774, 263, 776, 265, 778,
)
FLOAT32, FLOAT64, TIMESTAMP, DATE, TIME, DATETIME, YEAR, DECIMAL = 1035, 1036, 2061, 2062, 2063, 2064, 785, 18
TEXT, BLOB, VARCHAR, VARBINARY, CHAR, BINARY, BIT, ENUM, SET, JSON = (
    6163, 10260, 6165, 10262, 6167, 10264, 2073, 2074, 2075, 2078,
)

# query.MySqlFlag bits.
NOT_NULL_FLAG = 1
PRI_KEY_FLAG = 2
UNIQUE_KEY_FLAG = 4



# The values of Debezium's type-mapping modes. StrEnums, so a TypeOptions field (the string the
# configuration holds) compares equal to its member; the planner compares members, never literals.
class DecimalMode(enum.StrEnum):
    """``decimal.handling.mode`` (accepted only: Vitess sends DECIMAL as a string)."""

    PRECISE = "precise"
    DOUBLE = "double"
    STRING = "string"


class TimePrecision(enum.StrEnum):
    """``time.precision.mode`` (Debezium's Vitess connector rejects ``adaptive``)."""

    ADAPTIVE_TIME_MICROSECONDS = "adaptive_time_microseconds"
    CONNECT = "connect"
    ISOSTRING = "isostring"


class BigintUnsignedMode(enum.StrEnum):
    """``bigint.unsigned.handling.mode``."""

    STRING = "string"
    LONG = "long"
    PRECISE = "precise"


class BinaryMode(enum.StrEnum):
    """``binary.handling.mode``."""

    BYTES = "bytes"
    BASE64 = "base64"
    BASE64_URL_SAFE = "base64-url-safe"
    HEX = "hex"


DECIMAL_MODES = tuple(m.value for m in DecimalMode)
TIME_PRECISION_MODES = tuple(m.value for m in TimePrecision)
BIGINT_UNSIGNED_MODES = tuple(m.value for m in BigintUnsignedMode)
BINARY_MODES = tuple(m.value for m in BinaryMode)

# A column's converter: the raw VStream cell to the value the envelope's JSON holds (an int, a str,
# a float or an orjson Fragment, None...: JSON values, one type per column type).
Converter = Callable[[bytes], JsonValue]
Schema = JsonObject  # a Kafka Connect schema (JSON)


class FieldLike(Protocol):
    """The parts of ``query.Field`` the planner reads."""

    name: str
    type: int
    flags: int
    decimals: int
    column_length: int
    column_type: str


@dataclass(frozen=True)
class TypeOptions:
    """Type-mapping settings, with Debezium's property names and defaults."""

    decimal_handling_mode: str = "precise"  # accepted; Vitess DECIMAL is always a string
    time_precision_mode: str = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: str = "string"
    binary_handling_mode: str = "bytes"
    include_unknown_datatypes: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.decimal_handling_mode not in DECIMAL_MODES:
            problems.append(f"decimal.handling.mode={self.decimal_handling_mode!r}")
        if self.time_precision_mode not in TIME_PRECISION_MODES:
            # Debezium's Vitess connector rejects `adaptive` too.
            problems.append(f"time.precision.mode={self.time_precision_mode!r}")
        if self.bigint_unsigned_handling_mode not in BIGINT_UNSIGNED_MODES:
            problems.append(f"bigint.unsigned.handling.mode={self.bigint_unsigned_handling_mode!r}")
        if self.binary_handling_mode not in BINARY_MODES:
            problems.append(f"binary.handling.mode={self.binary_handling_mode!r}")
        if problems:
            raise ValueError("unsupported value(s): " + ", ".join(problems))


@dataclass(frozen=True)
class ColumnCodec:
    """How one column is described (Connect schema) and converted."""

    name: str
    schema: Schema  # without the "field" member
    convert: Converter
    optional: bool


def as_field(schema: Schema, name: str) -> Schema:
    """``schema`` as the field ``name`` of a struct: a copy with ``field`` last, as JsonConverter writes it."""
    return {**schema, "field": name}


def connect_schema(
    type_: str,
    optional: bool,
    name: str | None = None,
    version: int | None = None,
    parameters: dict[str, str] | None = None,
    default: object = None,
) -> Schema:
    """A Connect schema as JsonConverter.asJsonSchema orders it."""
    s: Schema = {"type": type_, "optional": optional}
    if name is not None:
        s["name"] = name
    if version is not None:
        s["version"] = version
    if parameters is not None:
        s["parameters"] = parameters
    if default is not None:
        s["default"] = default
    return s


# --- value helpers -------------------------------------------------------------------------


# Java's new String(bytes, UTF_8) replaces malformed input the same way.
_text: Callable[[bytes], str] = operator.methodcaller("decode", "utf-8", "replace")


def _double(v: float) -> JsonValue:
    # Inside [1e-3, 1e7) orjson and Java's Double.toString print the same shortest digits;
    # outside it Java switches to "1.0E7" style, so the text is spliced in pre-formatted.
    if 1e-3 <= v < 1e7 or -1e7 < v <= -1e-3:
        return v
    return double_fragment(v)


_F32 = struct.Struct("f")


def _float32(raw: bytes) -> JsonValue:
    # MySQL FLOAT goes through Java's Float then widens to double (1.1 -> 1.100000023841858).
    return _double(_F32.unpack(_F32.pack(float(raw)))[0])


def _float64(raw: bytes) -> JsonValue:
    return _double(float(raw))


class ValueConversionError(ValueError):
    """A NOT NULL column's value has no representation in its Connect type.

    Debezium leaves such a field unset (``TableSchemaBuilder`` catches the converter's
    exception) and the JsonConverter then fails the task on the null required field.
    """


_INT64_MAX = (1 << 63) - 1
_MAX_CONNECT_TIME_MICROS = 86_400_000_000  # Debezium's Time.ONE_DAY, inclusive


def _unrepresentable(column: str, what: str, optional: bool) -> Converter:
    """What Debezium writes when the value converter rejects a value: null, or a task failure."""

    def fail(raw: bytes) -> JsonValue:
        if optional:
            return None
        raise ValueConversionError(
            f"column {column!r}: {raw.decode(errors='replace')!r} {what}; the column is NOT NULL, so the record "
            "cannot be written (Debezium fails its task the same way)"
        )

    return fail


def _uint64_as_long(column: str, optional: bool) -> Converter:
    # bigint.unsigned.handling.mode=long: JdbcValueConverters.convertBigInt does Long.valueOf(text),
    # which throws for values >= 2^63; TableSchemaBuilder then leaves the field null (WARN).
    out_of_range = _unrepresentable(column, "does not fit a signed 64-bit long (bigint.unsigned.handling.mode=long)", optional)

    def conv(raw: bytes) -> JsonValue:
        v = int(raw)
        return v if v <= _INT64_MAX else out_of_range(raw)

    return conv


def _time_as_connect_millis(column: str, optional: bool) -> Converter:
    # time.precision.mode=connect: Debezium's Time.toMilliOfDay accepts a Duration only in
    # [00:00:00, 24:00:00]; outside it handleUnknownData writes null (WARN) for nullable columns.
    out_of_range = _unrepresentable(column, "is outside 00:00:00..24:00:00 (time.precision.mode=connect)", optional)

    def conv(raw: bytes) -> JsonValue:
        us = _parse_time_micros(raw)
        if 0 <= us <= _MAX_CONNECT_TIME_MICROS:
            return us // 1000  # Duration.toMillis truncates
        return out_of_range(raw)

    return conv


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _hex(raw: bytes) -> str:
    return binascii.hexlify(raw).decode("ascii")


def _decimal_bytes_b64(unscaled: int) -> str:
    """Connect Decimal: big-endian two's complement, minimal length (BigInteger.toByteArray)."""
    n = (unscaled.bit_length() + 8) // 8
    return _b64(unscaled.to_bytes(n, "big", signed=True))


_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)
_ONE_US = _dt.timedelta(microseconds=1)
_date_from_iso = _dt.date.fromisoformat
_datetime_from_iso = _dt.datetime.fromisoformat


def _parse_date(s: bytes) -> int | None:
    """Days since epoch, or None for a zero date (0000-00-00, or a zero month/day)."""
    try:
        return _date_from_iso(s.decode()).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


def _parse_datetime_micros(s: bytes) -> int | None:
    """Microseconds since epoch (UTC wall clock), or None for a zero date."""
    try:
        return (_datetime_from_iso(s.decode()) - _EPOCH) // _ONE_US
    except ValueError:
        return None


def _parse_time_micros(s: bytes) -> int:
    neg = s[:1] == b"-"
    body = s[1:] if neg else s
    hms, _, frac = body.partition(b".")
    parts = hms.split(b":")
    h, m = int(parts[0]), int(parts[1])
    sec = int(parts[2]) if len(parts) > 2 else 0
    micros = (h * 3600 + m * 60 + sec) * 1_000_000
    if frac:
        micros += int(frac[:6]) * 10 ** (6 - len(frac[:6]))
    return -micros if neg else micros


def _zero_aware(fn: Callable[[bytes], int | None], optional: bool) -> Converter:
    # Zero dates become null; a NOT NULL column gets the schema's fallback 0 (epoch),
    # as JdbcValueConverters.convertValue does.
    if optional:
        return fn
    return lambda raw: fn(raw) or 0


def parse_enum_values(column_type: str) -> list[str]:
    """Labels of ``enum('a','b')`` / ``set('a','b')``; a doubled quote is a literal quote."""
    values: list[str] = []
    buf: list[str] = []
    collecting = False
    i, n = 0, len(column_type)
    while i < n:
        c = column_type[i]
        if c == "'":
            if i + 1 < n and column_type[i + 1] == "'":
                buf.append("'")
                i += 2
                continue
            if collecting:
                values.append("".join(buf))
                buf.clear()
            collecting = not collecting
        elif collecting:
            buf.append(c)
        i += 1
    return values


def _matches(upper_type: str, prefix: str) -> bool:
    return upper_type == prefix or upper_type.startswith(prefix + "(")


# --- planning --------------------------------------------------------------------------------


def _binary(opts: TypeOptions, optional: bool) -> tuple[Schema, Converter]:
    mode = opts.binary_handling_mode
    if mode == BinaryMode.BYTES:
        # JsonConverter writes BYTES as standard base64 with padding.
        return connect_schema("bytes", optional), _b64
    conv = {BinaryMode.BASE64: _b64, BinaryMode.BASE64_URL_SAFE: _b64url, BinaryMode.HEX: _hex}[BinaryMode(mode)]
    return connect_schema("string", optional), conv


def _string(optional: bool) -> tuple[Schema, Converter]:
    return connect_schema("string", optional), _text


def _enum_or_set(kind: str, column_type: str, string_values: bool, optional: bool) -> tuple[Schema, Converter]:
    labels = parse_enum_values(column_type)
    name = "io.debezium.data.Enum" if kind == "ENUM" else "io.debezium.data.EnumSet"
    schema = connect_schema("string", optional, name, 1, {"allowed": ",".join(labels)})
    if string_values:
        return schema, _text
    if kind == "ENUM":
        table = dict(enumerate(labels, start=1))

        def enum_conv(raw: bytes) -> str:
            return table.get(int(raw), "")

        return schema, enum_conv

    def set_conv(raw: bytes) -> str:
        bits = int(raw)
        out = []
        i = 0
        while bits:
            if bits & 1 and i < len(labels):
                out.append(labels[i])
            bits >>= 1
            i += 1
        return ",".join(out)

    return schema, set_conv


def _temporal(t: int, field: FieldLike, optional: bool, tp: str) -> tuple[Schema, Converter]:
    """TIMESTAMP, DATE, TIME and DATETIME columns, by time.precision.mode (``tp``)."""
    schema: Schema
    conv: Converter
    if t == TIMESTAMP:
        # The text passes through ZonedTimestamp.toIsoString unchanged (String input).
        schema, conv = connect_schema("string", optional, "io.debezium.time.ZonedTimestamp", 1), _text
    elif t in (DATE, TIME, DATETIME) and tp == TimePrecision.ISOSTRING:
        schema, conv = _string(optional)
    elif t == DATE:
        name = "io.debezium.time.Date" if tp != TimePrecision.CONNECT else "org.apache.kafka.connect.data.Date"
        schema, conv = connect_schema("int32", optional, name, 1), _zero_aware(_parse_date, optional)
    elif t == TIME:
        if tp == TimePrecision.CONNECT:
            schema = connect_schema("int32", optional, "org.apache.kafka.connect.data.Time", 1)
            conv = _time_as_connect_millis(field.name, optional)
        else:
            schema, conv = connect_schema("int64", optional, "io.debezium.time.MicroTime", 1), _parse_time_micros
    elif t == DATETIME:
        if tp == TimePrecision.CONNECT:
            name, div = "org.apache.kafka.connect.data.Timestamp", 1000
        elif int(field.decimals) <= 3:
            name, div = "io.debezium.time.Timestamp", 1000
        else:
            name, div = "io.debezium.time.MicroTimestamp", 1

        def dt_conv(raw: bytes, _div: int = div) -> int | None:
            us = _parse_datetime_micros(raw)
            return None if us is None else us // _div

        schema, conv = connect_schema("int64", optional, name, 1), _zero_aware(dt_conv, optional)
    return schema, conv


def plan_column(field: FieldLike, enum_set_string_values: bool, opts: TypeOptions) -> ColumnCodec | None:
    """Schema and converter for one FIELD column; None when Debezium would drop the column."""
    t = int(field.type)
    optional = not (field.flags & NOT_NULL_FLAG)
    upper = (field.column_type or "").upper()
    tp = opts.time_precision_mode
    schema: Schema
    conv: Converter

    if t in (INT8, UINT8, INT16):
        schema, conv = connect_schema("int16", optional), int
    elif t in (UINT16, INT24, UINT24, INT32):
        schema, conv = connect_schema("int32", optional), int
    elif t == YEAR:
        schema, conv = connect_schema("int32", optional, "io.debezium.time.Year", 1), int
    elif t in (UINT32, INT64):
        schema, conv = connect_schema("int64", optional), int
    elif t == UINT64:
        mode = opts.bigint_unsigned_handling_mode
        if mode == BigintUnsignedMode.STRING:
            schema, conv = _string(optional)
        elif mode == BigintUnsignedMode.LONG:
            schema, conv = connect_schema("int64", optional), _uint64_as_long(field.name, optional)
        else:
            schema = connect_schema(
                "bytes", optional, "org.apache.kafka.connect.data.Decimal", 1, {"scale": "0"}
            )
            conv = lambda raw: _decimal_bytes_b64(int(raw))  # noqa: E731
    elif t == FLOAT32:
        schema, conv = connect_schema("double", optional), _float32
    elif t == FLOAT64:
        schema, conv = connect_schema("double", optional), _float64
    elif t in (DECIMAL, VARCHAR, CHAR, TEXT):
        schema, conv = _string(optional)
    elif t == JSON:
        schema, conv = connect_schema("string", optional, "io.debezium.data.Json", 1), _text
    elif t in (ENUM, SET):
        schema, conv = _enum_or_set("ENUM" if t == ENUM else "SET", field.column_type, enum_set_string_values, optional)
    elif t == BLOB:
        if any(_matches(upper, p) for p in ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT")):
            schema, conv = _string(optional)
        else:
            schema, conv = _binary(opts, optional)
    elif t in (VARBINARY, BINARY):
        if (t == VARBINARY and _matches(upper, "VARCHAR")) or _matches(upper, "CHAR"):
            schema, conv = _string(optional)
        elif _matches(upper, "ENUM") or _matches(upper, "SET"):
            kind = "ENUM" if _matches(upper, "ENUM") else "SET"
            schema, conv = _enum_or_set(kind, field.column_type, enum_set_string_values, optional)
        else:
            schema, conv = _binary(opts, optional)
    elif t == BIT:
        if upper in ("BIT", "BIT(1)") or (not upper and field.column_length == 1):
            schema, conv = connect_schema("boolean", optional), lambda raw: any(raw)
        else:
            schema, conv = connect_schema("bytes", optional), _b64
    elif t in (TIMESTAMP, DATE, TIME, DATETIME):
        schema, conv = _temporal(t, field, optional, tp)
    else:
        if not opts.include_unknown_datatypes:
            return None
        schema, conv = _binary(opts, optional)
    return ColumnCodec(field.name, schema, conv, optional)
