"""The native row encoder (cdcworker._rowenc) writes exactly the bytes of the pure-Python path.

Every column type and mode, NULLs, edge values, unicode, control characters, invalid UTF-8,
non-canonical numbers, zero dates and out-of-range values: each row change is encoded by a
plan compiled with the extension and by one compiled with ``SHARDCDC_NATIVE=0``; records
(topic, key, value, headers) or the raised exception must be identical. The extension is
built by ``make setup`` (``make native``); without it these tests fail, by design.
"""

from __future__ import annotations

import decimal
import itertools
import math
import random
import struct
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from events_fixtures import NOT_NULL, PRI_KEY, delete, field, field_event, insert, update

from cdcworker.events import EncoderConfig, SourceContext, TablePlan, TypeOptions, native
from cdcworker.events.encoder import ColumnCountMismatch, context_headers
from cdcworker.events.jsonfmt import java_double
from vitessapi import binlogdata_pb2, query_pb2

NOW_NS = 1559033904863497147
CTX = SourceContext(keyspace="ks", shard="0", commit_seconds=1559033904,
                    vgtid='[{"keyspace":"ks","shard":"0","gtid":"MySQL56/u:1-5"}]')

# --- value pools: canonical MySQL texts, edge values, and texts only the Python path accepts -----

INTS = [b"0", b"1", b"-1", b"127", b"-128", b"255", b"32767", b"-32768", b"65535", b"8388607", b"-8388608",
        b"2147483647", b"-2147483648", b"4294967295", b"999999999999999999", b"-999999999999999999",
        b"1000000000000000000", b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808",
        b"18446744073709551615", b"18446744073709551616", b"-0", b"007", b"+5", b" 5", b"5 ", b"1_000",
        b"123456789012345678901234567890"]
BAD_INTS = [b"", b"abc", b"1.5", b"--1"]
FLOATS = [b"0", b"-0", b"1", b"1.5", b"-2.5", b"1.1", b"0.1", b"0.001", b"0.000999", b"9999999", b"10000000",
          b"12345678", b"1e20", b"1E-7", b"-1.5e+300", b"3.4028234663852886e38", b"3.5e38", b"1e-46", b"1e400",
          b"-1e400", b"4.9e-324", b"2.2250738585072014e-308", b"123456.789", b"1234567.125", b"0.30000000000000004",
          b"nan", b"inf", b"-Infinity", b" 1.5", b"1_0.5", b"1.", b".5", b"1e", b"1.7976931348623157e308"]
BAD_FLOATS = [b"", b"abc", b"1.5x"]
TEXTS = ["", "a", "plain ascii text", "상품 명1", "emoji 😀 and é", "quote \" backslash \\ slash /",
         "ctl \x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f end", "\x7f del", "line\u2028sep\u2029",
         "literal \\u00e9 and \\\\u00ab", "\ufeffbom", "x" * 3000]
BAD_UTF8 = [b"\xff", b"a\xc0\x80b", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\xc3", b"ok\xfe\xffok",
            b"\xf0\x9f\x98", b"\xe0\x80\xaf"]
DATES = [b"2020-02-11", b"1970-01-01", b"1969-12-31", b"0001-01-01", b"9999-12-31", b"2000-02-29", b"1900-02-28",
         b"0000-00-00", b"2024-00-10", b"2024-02-30", b"1900-02-29", b"2024-13-01", b"20240506", b"2024-W01-1",
         b"2024-5-6", b" 2024-05-06"]
DATETIMES = [b"2020-02-12 01:02:03", b"2020-02-12 01:02:03.1", b"2020-02-12 01:02:03.12", b"2020-02-12 01:02:03.123",
             b"2020-02-12 01:02:03.1234", b"2020-02-12 01:02:03.12345", b"2020-02-12 01:02:03.123456",
             b"2020-02-12 01:02:03.1234567", b"1969-12-31 23:59:59.5", b"1969-12-31 23:59:59.9995",
             b"0001-01-01 00:00:00", b"9999-12-31 23:59:59.999999", b"1970-01-01 00:00:00.000001",
             b"0000-00-00 00:00:00", b"0000-00-00 00:00:00.000000", b"2020-02-12T01:02:03", b"2020-02-12 24:00:00",
             b"2020-02-12 01:02:60", b"2020-02-12 01:02:03.", b"2020-02-12 01:02"]
TIMES = [b"00:00:00", b"01:02:03", b"01:02:03.1234", b"-838:59:59", b"838:59:59.000000", b"24:00:00",
         b"24:00:00.000001", b"23:59:59.999999", b"-00:00:00.000001", b"-00:00:00", b"12:34", b"1:2:3",
         b"12:34:56.1234567", b"12:34:56.", b"1000:00:00", b"12:34:56:78", b"abc:00:00"]
BITS1 = [b"\x00", b"\x01", b"", b"\x00\x00", b"\x00\x02"]
LABELS = ["small", "it's", 'q"uote', "com,ma", "é", "ctl\x01", "back\\slash", ""]
SET_LABELS = [f"l{i}" for i in range(64)]  # MySQL's maximum


def _binary(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))


def _double_text(rng: random.Random) -> bytes:
    x = struct.unpack("<d", rng.randbytes(8))[0]
    kind = rng.randrange(4)
    if kind == 0:
        x = rng.uniform(-1e8, 1e8)
    elif kind == 1:
        x = rng.uniform(-1, 1) * 10 ** rng.randrange(-10, 10)
    elif kind == 2:
        x = float(rng.randrange(-10**7, 10**7)) / rng.choice([1, 4, 1000, 1e6])
    return repr(x).encode()


def _text(rng: random.Random) -> bytes:
    k = rng.randrange(10)
    if k == 0:
        return rng.choice(BAD_UTF8)
    if k < 4:
        return rng.choice(TEXTS).encode()
    alphabet = "abcXYZ \"\\/\x00\x01\x1f\x7fé€😀\u2028\n\t"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))).encode()


def _date(rng: random.Random) -> bytes:
    if rng.randrange(3) == 0:
        return rng.choice(DATES)
    return b"%04d-%02d-%02d" % (rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29))


def _datetime(rng: random.Random) -> bytes:
    if rng.randrange(3) == 0:
        return rng.choice(DATETIMES)
    s = b"%04d-%02d-%02d %02d:%02d:%02d" % (rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29),
                                            rng.randrange(24), rng.randrange(60), rng.randrange(60))
    digits = rng.randrange(0, 7)
    return s + (b"." + b"".join(b"%d" % rng.randrange(10) for _ in range(digits)) if digits else b"")


def _time(rng: random.Random) -> bytes:
    if rng.randrange(3) == 0:
        return rng.choice(TIMES)
    s = b"%s%02d:%02d:%02d" % (rng.choice([b"", b"-"]), rng.randrange(0, 839), rng.randrange(60), rng.randrange(60))
    digits = rng.randrange(0, 7)
    return s + (b"." + b"".join(b"%d" % rng.randrange(10) for _ in range(digits)) if digits else b"")


def _int(rng: random.Random) -> bytes:
    k = rng.randrange(4)
    if k == 0:
        return rng.choice(INTS)
    bits = rng.choice([8, 16, 24, 32, 63, 64])
    return b"%d" % rng.randrange(-(1 << bits), 1 << bits)


def _uint(rng: random.Random) -> bytes:
    if rng.randrange(4) == 0:
        return rng.choice(INTS)
    return b"%d" % rng.randrange(0, 1 << rng.choice([8, 32, 62, 63, 64]))


def _float(rng: random.Random) -> bytes:
    return rng.choice(FLOATS) if rng.randrange(3) == 0 else _double_text(rng)


def _enum_index(rng: random.Random) -> bytes:
    return rng.choice([b"0", b"1", b"2", b"8", b"9", b"-1", b"007", b"99999999999999999999"])


def _set_bits(rng: random.Random) -> bytes:
    return rng.choice([b"0", b"1", b"5", b"%d" % ((1 << 64) - 1), b"%d" % (1 << 64), b"007",
                       b"%d" % rng.randrange(1 << 64), b"%d" % rng.randrange(1 << 10)])


# (label, FIELD column, value generator, TypeOptions kwargs, enum_set_string_values)
Spec = tuple[str, query_pb2.Field, Callable[[random.Random], bytes], dict[str, str], bool]
ENUM_TYPE = "enum(" + ",".join("'" + label.replace("'", "''") + "'" for label in LABELS) + ")"
SET_TYPE = "set(" + ",".join(f"'{label}'" for label in SET_LABELS) + ")"
TP_MODES = ["adaptive_time_microseconds", "connect", "isostring"]
SPECS: list[Spec] = [
    *[(f"{t} {ct}", field("c", t, ct), _int, {}, True) for t, ct in [
        ("INT8", "tinyint"), ("UINT8", "tinyint unsigned"), ("INT16", "smallint"), ("UINT16", "smallint unsigned"),
        ("INT24", "mediumint"), ("UINT24", "mediumint unsigned"), ("INT32", "int"), ("UINT32", "int unsigned"),
        ("INT64", "bigint"), ("YEAR", "year")]],
    *[(f"bigint unsigned {m}", field("c", "UINT64", "bigint unsigned"), _uint, {"bigint_unsigned_handling_mode": m}, True)
      for m in ("string", "long", "precise")],
    ("float", field("c", "FLOAT32", "float"), _float, {}, True),
    ("double", field("c", "FLOAT64", "double"), _float, {}, True),
    *[(f"decimal {m}", field("c", "DECIMAL", "decimal(13,4)"), _text, {"decimal_handling_mode": m}, True)
      for m in ("precise", "double", "string")],
    ("varchar", field("c", "VARCHAR", "varchar(255)"), _text, {}, True),
    ("char", field("c", "CHAR", "char(8)"), _text, {}, True),
    ("text", field("c", "TEXT", "text"), _text, {}, True),
    ("mediumtext as blob", field("c", "BLOB", "mediumtext"), _text, {}, True),
    ("json", field("c", "JSON", "json"), _text, {}, True),
    ("varbinary varchar", field("c", "VARBINARY", "varchar(10)"), _text, {}, True),
    ("enum strings", field("c", "ENUM", ENUM_TYPE), _text, {}, True),
    ("set strings", field("c", "SET", SET_TYPE), _text, {}, True),
    ("enum index", field("c", "ENUM", ENUM_TYPE), _enum_index, {}, False),
    ("set bits", field("c", "SET", SET_TYPE), _set_bits, {}, False),
    ("set bits, 66 labels (Python path)", field("c", "SET", SET_TYPE[:-1] + ",'x','y')"), _set_bits, {}, False),
    ("enum index as binary", field("c", "BINARY", ENUM_TYPE), _enum_index, {}, False),
    *[(f"{t} {m}", field("c", t, ct), _binary, {"binary_handling_mode": m}, True)
      for t, ct in [("BLOB", "blob"), ("VARBINARY", "varbinary(40)"), ("BINARY", "binary(4)")]
      for m in ("bytes", "base64", "base64-url-safe", "hex")],
    ("bit(1)", field("c", "BIT", "bit(1)"), lambda rng: rng.choice(BITS1), {}, True),
    ("bit(12)", field("c", "BIT", "bit(12)"), _binary, {}, True),
    *[(f"timestamp {m}", field("c", "TIMESTAMP", "timestamp(6)", decimals=6), _datetime, {"time_precision_mode": m}, True)
      for m in TP_MODES],
    *[(f"date {m}", field("c", "DATE", "date"), _date, {"time_precision_mode": m}, True) for m in TP_MODES],
    *[(f"time {m}", field("c", "TIME", "time(6)", decimals=6), _time, {"time_precision_mode": m}, True) for m in TP_MODES],
    *[(f"datetime({d}) {m}", field("c", "DATETIME", f"datetime({d})", decimals=d), _datetime, {"time_precision_mode": m}, True)
      for m in TP_MODES for d in (0, 3, 6)],
    ("geometry (unknown, included)", field("c", "GEOMETRY", "geometry"), _binary, {"include_unknown_datatypes": "1"}, True),
]

# Converters every common type must run natively (a types.py change that loses one shows here).
NATIVE_OPS = {
    "INT32 int": "OP_INT", "bigint unsigned long": "OP_INT", "bigint unsigned precise": "OP_DEC_B64",
    "bigint unsigned string": "OP_TEXT", "float": "OP_F32", "double": "OP_F64", "decimal precise": "OP_TEXT",
    "varchar": "OP_TEXT", "json": "OP_TEXT", "enum index": "OP_ENUM", "set bits": "OP_SET", "BLOB bytes": "OP_B64",
    "BLOB base64-url-safe": "OP_B64URL", "BLOB hex": "OP_HEX", "bit(1)": "OP_BOOL", "bit(12)": "OP_B64",
    "timestamp adaptive_time_microseconds": "OP_TEXT", "date adaptive_time_microseconds": "OP_DATE",
    "date connect": "OP_DATE", "time adaptive_time_microseconds": "OP_TIME_MICRO", "time connect": "OP_TIME_CONNECT",
    "datetime(6) adaptive_time_microseconds": "OP_DATETIME", "datetime(3) connect": "OP_DATETIME",
    "date isostring": "OP_TEXT",
}


def _opts(kw: dict[str, str]) -> TypeOptions:
    kw = dict(kw)
    unknown = bool(kw.pop("include_unknown_datatypes", ""))
    return TypeOptions(include_unknown_datatypes=unknown, **kw)  # type: ignore[arg-type]


def _plans(fe: binlogdata_pb2.FieldEvent, cfg: EncoderConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[TablePlan, TablePlan]:
    monkeypatch.setenv(native.ENV, "1")
    fast = TablePlan.compile(fe, cfg)
    monkeypatch.setenv(native.ENV, "0")
    slow = TablePlan.compile(fe, cfg)
    monkeypatch.delenv(native.ENV)
    assert fast._native is not None, "the native encoder is not in use (is the extension built? make native)"
    assert slow._native is None
    return fast, slow


def _outcome(plan: TablePlan, rc: Any, tx: Any = None, op: str = "c") -> Any:
    try:
        return plan.encode_change(rc, CTX, NOW_NS, op, tx)
    except Exception as exc:  # the same failure, raised the same way, is part of the contract
        return ("raised", type(exc), str(exc))


def _tx_blocks() -> Callable[[str], Any]:
    n = itertools.count()

    def tx(_dc: str) -> Any:
        i = next(n)
        return None if i % 5 == 4 else orjson.Fragment(b'{"id":"t%d","total_order":%d}' % (i, i))

    return tx


def _changes(rng: random.Random, gen: Callable[[random.Random], bytes], n: int, key_first: bool) -> list[Any]:
    def val() -> bytes | None:
        return None if rng.randrange(8) == 0 else gen(rng)

    out = []
    for i in range(n):
        ident = b"%d" % (i % 7)
        a = [ident, val()] if key_first else [val(), ident]
        b = [ident, val()] if key_first else [val(), ident]
        if key_first and rng.randrange(3) == 0:
            b[0] = b"%d" % (i % 5)
        if not key_first and rng.randrange(2) == 0:
            b[0] = a[0]  # the key column (the generated one) unchanged
        kind = rng.randrange(4)
        out.append(insert(*a) if kind == 0 else delete(*a) if kind == 1 else update(a, b))
    return out


@pytest.mark.parametrize("spec", SPECS, ids=[s[0] for s in SPECS])
def test_every_type_and_mode_matches_python(spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    label, col, gen, opts, enum_strings = spec
    rng = random.Random(label)
    for nn in (0, NOT_NULL):
        c = query_pb2.Field()
        c.CopyFrom(col)
        c.flags = nn
        for key_first, schemas in ((True, True), (False, False), (False, True)):
            # key_first: INT64 id is the key; else the generated column is the primary key.
            idf = field("id", "INT64", "bigint", NOT_NULL | (PRI_KEY if key_first else 0))
            if not key_first:
                c.flags = nn | PRI_KEY
            fields = [idf, c] if key_first else [c, idf]
            fe = field_event("ks.t", fields, keyspace="ks", shard="0", enum_set_string_values=enum_strings)
            cfg = EncoderConfig(logical_name="srv", types=_opts(opts), key_schemas_enable=schemas,
                                value_schemas_enable=schemas, tombstones_on_delete=schemas,
                                headers=tuple(context_headers("srv", "0", run_id="r")))
            fast, slow = _plans(fe, cfg, monkeypatch)
            for rc in _changes(rng, gen, 150, key_first):
                assert _outcome(fast, rc) == _outcome(slow, rc), (label, rc)


SHORT_DOUBLES = [b"0", b"-0", b"0.000", b"-0.000", b"007.50", b"100.5", b"0.001", b"0.0009", b"0.000999999999999999",
                 b"9999999.99999999", b"10000000", b"10000000.0", b"123456789012345", b"1234567890123456",
                 b"0.1234567890123456", b"-12345.678", b"1000000000000000000000", b"-0.00000000000000000000000012",
                 b"9999999999999999999999999999999999999999", b"0.00000000000000000000000000000000000001",
                 b"0E+00", b"-0E+00", b"1.2345E+03", b"1E+07", b"9.999999E+06", b"1E-03", b"9.99E-04", b"1E+20",
                 b"9.99999999999999E+307", b"1E+308", b"1E+309", b"2.5E-301", b"2.5E-302", b"1E-320",
                 b"1.7976931348623157E+308", b"2.2250738585072014E-308", b"1E+99999999999999999999", b"1E-99999999999999999999"]


def _go_e(text: str) -> str:
    """A decimal in Go's ``strconv.FormatFloat(x, 'E', -1, 64)`` form (Vitess's text of a DOUBLE in
    a binlog ROW event): ``d.dddE±dd``."""
    sign, digits, exp = decimal.Decimal(text).normalize().as_tuple()
    ds = "".join(map(str, digits))
    e = int(exp) + len(ds) - 1
    return ("-" if sign else "") + ds[0] + ("." + ds[1:] if len(ds) > 1 else "") + "E" + ("-" if e < 0 else "+") + f"{abs(e):02d}"


def _short_double(rng: random.Random) -> bytes:
    """A decimal of 1 to 17 significant digits, plain with leading and trailing zeros at times, or
    in Go's 'E' form."""
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 18)))
    point = rng.randrange(0, len(digits) + 1)
    text = ("0" * rng.randrange(3) + digits[:point] or "0") + ("." + digits[point:] + "0" * rng.randrange(3) if point < len(digits) else "")
    if digits.strip("0") and rng.randrange(2):
        text = _go_e(text)
    return (b"-" if rng.randrange(4) == 0 else b"") + text.encode()


def test_short_doubles_written_from_their_own_digits_match_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DOUBLE's text of at most 15 significant digits is written from its own digits (no parse,
    no repr), plain or in Go's 'E' form: the same bytes as the Python path, at the edges of Java's
    plain range, with zeros around, at 15 and 16 digits, for signed zeros, and at the ends of the
    exponent range (overflow and the subnormals take the general path)."""
    rng = random.Random(15)
    for text in (b"1.2345E+03", b"-9.99E-04", b"1E+20", b"2.5E-301", b"0E+00"):
        assert native.rowenc.double_text(text) == java_double(float(text)), text
    for text in (b"1E+309", b"2.5E-302", b"1E-320", b"1E+99999999999999999999"):
        assert native.rowenc.double_text(text) is None, text
    fe = field_event("ks.t", [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY), field("d", "FLOAT64", "double")],
                     keyspace="ks", shard="0")
    fast, slow = _plans(fe, EncoderConfig(logical_name="srv"), monkeypatch)
    texts = SHORT_DOUBLES + [_short_double(rng) for _ in range(3000)]
    for i, text in enumerate(texts):
        rc = binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[len(b"%d" % i), len(text)], values=b"%d" % i + text))
        assert _outcome(fast, rc) == _outcome(slow, rc), text


def _long_double(rng: random.Random) -> bytes:
    """A DOUBLE's text of 16 to 19 significant digits, plain (MySQL's) or in Go's 'E' form (Vitess's
    binlog): MySQL's shortest digits of a double (as
    repr gives them), longer or inexact ones (%.17g, a random digit string), doubles at a power of
    two (where the texts that read as one are lopsided) and exact binary fractions (halfway cases)."""
    x = rng.random() * 10.0 ** rng.randrange(-3, 16)
    kind = rng.randrange(5)
    if kind == 0:
        text = repr(x)
    elif kind == 1:
        text = format(x, ".17g")
    elif kind == 2:
        n = rng.randrange(16, 20)
        text = str(decimal.Decimal(rng.randrange(10 ** (n - 1), 10 ** n)).scaleb(-rng.randrange(0, n + 3)))
    elif kind == 3:
        p = math.ldexp(1.0, rng.randrange(-12, 53))
        y = rng.choice([p, math.nextafter(p, 0), math.nextafter(p, math.inf)])
        text = rng.choice([repr(y), format(y, ".16g"), format(y, ".17g")])
    else:
        text = str(decimal.Decimal(rng.randrange(2 ** 30, 2 ** 50) | 1) / (2 ** rng.randrange(1, 14)))
    plain = format(decimal.Decimal(text), "f")
    return (b"-" if rng.randrange(4) == 0 else b"") + (_go_e(plain) if rng.randrange(2) else plain).encode()


def test_long_doubles_decided_in_integers_match_python() -> None:
    """16 to 19 significant digits are decided exactly in 128-bit integers (rowenc.c,
    shortest_exact) where that can be done: every answer is Java's text of the double the text
    reads as (jsonfmt.java_double of float()), and the double's own shortest digits between 1e-3
    and 1e7 (MySQL's text of most DOUBLEs that are not round) are nearly all decided there."""
    rng = random.Random(17)
    decided = 0
    for _ in range(60000):
        text = _long_double(rng)
        got = native.rowenc.double_text(text)
        if got is not None:
            decided += 1
            assert got == java_double(float(text)), text
    assert decided > 40000
    shortest = [repr(rng.random() * 10.0 ** rng.randrange(-2, 7)) for _ in range(5000)]
    shortest = [t for t in shortest if "e" not in t and len(t.replace(".", "").lstrip("0")) >= 16]
    for texts in (shortest, [_go_e(t) for t in shortest]):  # MySQL's and the binlog's form
        assert sum(native.rowenc.double_text(t.encode()) is not None for t in texts) >= 0.98 * len(texts)


def test_long_doubles_in_rows_match_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same texts through the encoder: the same bytes as the Python path."""
    rng = random.Random(19)
    fe = field_event("ks.t", [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY), field("d", "FLOAT64", "double")],
                     keyspace="ks", shard="0")
    fast, slow = _plans(fe, EncoderConfig(logical_name="srv"), monkeypatch)
    for i in range(3000):
        text = _long_double(rng)
        rc = binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[len(b"%d" % i), len(text)], values=b"%d" % i + text))
        assert _outcome(fast, rc) == _outcome(slow, rc), text


def test_common_types_run_natively() -> None:
    by_label = {s[0]: s for s in SPECS}
    for label, op in NATIVE_OPS.items():
        _, col, _, opts, enum_strings = by_label[label]
        fe = field_event("ks.t", [col], keyspace="ks", shard="0", enum_set_string_values=enum_strings)
        plan = TablePlan.compile(fe, EncoderConfig(logical_name="srv", types=_opts(opts)))
        assert native.column_ops(plan._convs) == [op], label
        nn = query_pb2.Field()
        nn.CopyFrom(col)
        nn.flags = NOT_NULL
        fe = field_event("ks.t", [nn], keyspace="ks", shard="0", enum_set_string_values=enum_strings)
        plan = TablePlan.compile(fe, EncoderConfig(logical_name="srv", types=_opts(opts)))
        assert native.column_ops(plan._convs) == [op], f"{label} NOT NULL"


def test_wide_table_fuzz(monkeypatch: pytest.MonkeyPatch) -> None:
    """70+ columns of every kind (the heap path of the C code), random rows, tx hooks, PK changes."""
    rng = random.Random(20240506)
    specs = [s for s in SPECS if not s[3]] + [s for s in SPECS if s[3].get("time_precision_mode") == "connect"]
    specs = (specs * 2)[:72]
    fields = [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY), field("k2", "VARCHAR", "varchar(8)", NOT_NULL | PRI_KEY)]
    gens: list[Callable[[random.Random], bytes]] = []
    for i, (_, col, gen, _, _) in enumerate(specs):
        c = query_pb2.Field()
        c.CopyFrom(col)
        c.name = f"c{i}_\u00e9\x01"
        c.flags = rng.choice([0, NOT_NULL])
        fields.append(c)
        # Only values both paths accept: one raising column would fail every row of a wide table.
        gens.append(gen)
    fe = field_event("ks.wide", fields, keyspace="ks", shard="0", enum_set_string_values=True)
    cfg = EncoderConfig(logical_name="srv", types=TypeOptions(time_precision_mode="connect"),
                        headers=tuple(context_headers("srv", "0")))
    fast, slow = _plans(fe, cfg, monkeypatch)

    def image() -> list[bytes | None]:
        vals: list[bytes | None] = [b"%d" % rng.randrange(4), _text(rng) if rng.randrange(2) else b"k"]
        for gen in gens:
            vals.append(None if rng.randrange(6) == 0 else gen(rng))
        return vals

    tx_fast, tx_slow = _tx_blocks(), _tx_blocks()
    same = 0
    for _ in range(300):
        a, b = image(), image()
        rc = rng.choice([insert(*a), delete(*a), update(a, b), update(a, a)])
        r_fast, r_slow = _outcome(fast, rc, tx_fast), _outcome(slow, rc, tx_slow)
        assert r_fast == r_slow
        same += isinstance(r_fast, list)
    assert same > 30  # most rows encode (the rest raise the same error on both paths)


def test_python_fallbacks_and_malformed_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    fe = field_event("ks.t", [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY), field("d", "FLOAT64", "double"),
                              field("s", "VARCHAR", "varchar(8)")], keyspace="ks", shard="0")
    cfg = EncoderConfig(logical_name="srv")
    fast, slow = _plans(fe, cfg, monkeypatch)
    cases: list[Any] = [
        binlogdata_pb2.RowChange(),  # neither image: nothing
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1, 1], values=b"12")),  # column count
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1, 1, 1, 1], values=b"1234")),
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1, 3, 5], values=b"1")),  # values too short
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[-1, -1, -1])),  # NULL key
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1, 0, 0], values=b"1")),  # empty double: ValueError
        binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1, 3, 2], values=b"1abcxy")),
        binlogdata_pb2.RowChange(after=query_pb2.Row(), data_columns=binlogdata_pb2.RowChange.Bitmap(count=3, cols=b"\x07")),
        update([b"1", b"0", b"a"], [b"1", b"-0", b"a"]),  # -0.0 is another key value only when it is the key
        update([b"1", b"1e20", b"a"], [b"1", b"1e20", b"b"]),
    ]
    for rc in cases:
        assert _outcome(fast, rc) == _outcome(slow, rc), rc
    with pytest.raises(ColumnCountMismatch):
        fast.encode_change(cases[1], CTX, NOW_NS)


@pytest.mark.parametrize("key_type", ["FLOAT64", "FLOAT32"])
def test_double_key_update_compares_values_like_java(key_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A double key outside [1e-3, 1e7) that did not change is an update (Struct.equals), not a key change."""
    fe = field_event("ks.t", [field("k", key_type, "double", NOT_NULL | PRI_KEY), field("v", "INT32", "int")],
                     keyspace="ks", shard="0")
    fast, slow = _plans(fe, EncoderConfig(logical_name="srv"), monkeypatch)
    for before, after, ops in [(b"1e20", b"1e20", ["u"]), (b"0", b"0", ["u"]), (b"0", b"-0", ["d", None, "c"]),
                               (b"2.5", b"2.5", ["u"])]:
        rc = update([before, b"1"], [after, b"2"])
        recs = fast.encode_change(rc, CTX, NOW_NS)
        assert recs == slow.encode_change(rc, CTX, NOW_NS)
        assert [None if r.value is None else orjson.loads(r.value)["payload"]["op"] for r in recs] == ops


def test_filtered_plans_keep_the_python_path() -> None:
    """Subclasses that post-process row images (FilteredTablePlan) never get a native program."""

    class Masking(TablePlan):
        def _value(self, before: Any, after: Any, *args: Any, **kwargs: Any) -> bytes:
            return super()._value(before, after, *args, **kwargs)

    fe = field_event("ks.t", [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY)], keyspace="ks", shard="0")
    cfg = EncoderConfig(logical_name="srv")
    assert TablePlan.compile(fe, cfg)._native is not None
    assert Masking("ks", "0", "t", "srv.ks.t", TablePlan.compile(fe, cfg).codecs, [0], cfg)._native is None


def test_program_rejects_bad_programs() -> None:
    from cdcworker import _rowenc  # type: ignore[attr-defined]

    dumps, fix = orjson.dumps, native.fix_escapes
    with pytest.raises(ValueError):
        _rowenc.Program([(999, b'"a":', int, 1, ())], [], b"", dumps, fix)
    with pytest.raises(ValueError):
        _rowenc.Program([(_rowenc.OP_DROP, b"", None, 1, ())], [0], b"", dumps, fix)
    with pytest.raises(TypeError):
        _rowenc.Program([(_rowenc.OP_ENUM, b'"a":', int, 1, ("x",))], [], b"", dumps, fix)
    prog = _rowenc.Program([(_rowenc.OP_INT, b'"a":', int, 1, ())], [0], b"", dumps, fix)
    assert prog.encode(insert(b"5").SerializeToString()) == (None, b'{"a":5}', None, b'{"a":5}')
    # Truncated or garbage protobuf bytes: "use the Python path", never a crash.
    good = update([b"123"], [b"456"]).SerializeToString()
    for cut in range(len(good)):
        r = prog.encode(good[:cut])
        assert r is None or isinstance(r, tuple)
    rng = random.Random(7)
    for _ in range(2000):
        r = prog.encode(rng.randbytes(rng.randrange(0, 40)))
        assert r is None or isinstance(r, tuple)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16])
def test_truncated_text_runs_natively_and_matches_python(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """column.truncate.to.N.chars on text columns: OP_TEXT_TRUNC cuts in UTF-16 code units as the
    Python converter (Java's substring) does: astral characters count twice, a split pair is
    dropped; invalid UTF-8 and other types still take the Python converter."""
    from cdcworker.config import load_config
    from cdcworker.filters import FilterPolicy

    cfg_props = load_config([], env={}, overrides={
        "name": "m", "topic.prefix": "srv", "database.hostname": "h", "vitess.keyspace": "ks",
        f"column.truncate.to.{n}.chars": r"ks\.t\.(s|b|v)", "column.mask.with.3.chars": r"ks\.t\.m"})
    policy = FilterPolicy.from_config(cfg_props.filters, cfg_props.behaviour)
    fe = field_event("ks.t", [field("id", "INT64", "bigint", NOT_NULL | PRI_KEY), field("s", "VARCHAR", "varchar(64)"),
                              field("b", "BLOB", "blob"), field("m", "VARCHAR", "varchar(8)"),
                              field("v", "VARCHAR", "varchar(8)", NOT_NULL)], keyspace="ks", shard="0")
    cfg = EncoderConfig(logical_name="srv", policy=policy, headers=tuple(context_headers("srv", "0", run_id="r")))
    fast, slow = _plans(fe, cfg, monkeypatch)
    assert native.column_ops(fast._convs) == ["OP_INT", "OP_TEXT_TRUNC", "OP_PY", "OP_CONST", "OP_TEXT_TRUNC"]
    rng = random.Random(n)
    edges = ["", "a" * n, "a" * (n + 1), "😀" * n, "a" * (n - 1) + "😀", "é€" * n, "a" * (n - 1) + "é😀"]
    rows = [[b"%d" % i, t.encode(), t.encode(), None, t.encode()] for i, t in enumerate(edges)]
    for i in range(300):
        rows.append([b"%d" % i, _text(rng), _text(rng), None if i % 3 else b"x", _text(rng)])
    encoded = 0
    for values in rows:
        for rc in (insert(*values), update(values, [values[0], *values[:0:-1]]), delete(*values)):
            r_fast, r_slow = _outcome(fast, rc), _outcome(slow, rc)
            assert r_fast == r_slow, values
            encoded += isinstance(r_fast, list)
    assert encoded > 600
    edge = orjson.loads(fast.encode_change(insert(*rows[4]), CTX, NOW_NS)[0].value)["payload"]["after"]
    assert edge["s"] == "a" * (n - 1)  # the astral character would be split: dropped
    assert edge["m"] == "***"
