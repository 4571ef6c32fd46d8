"""MySQL type catalogue and value rendering of the VTGate test server (pure, fast)."""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    # Load the module file directly so the test does not depend on the package's other modules.
    path = Path(__file__).resolve().parents[3] / "devkit" / "vtgatesim" / "mysqltypes.py"
    spec = importlib.util.spec_from_file_location("vtgatesim_mysqltypes_under_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


mt = _load()

# (DDL type, column_type, vitess type, column_length, charset, decimals, flags, storage)
CATALOGUE = [
    ("tinyint", "tinyint", 257, 4, 63, 0, 32768, "INTEGER"),
    ("tinyint unsigned", "tinyint unsigned", 770, 3, 63, 0, 32800, "INTEGER"),
    ("tinyint(1)", "tinyint(1)", 257, 1, 63, 0, 32768, "INTEGER"),
    ("BOOLEAN", "tinyint(1)", 257, 1, 63, 0, 32768, "INTEGER"),
    ("smallint", "smallint", 259, 6, 63, 0, 32768, "INTEGER"),
    ("smallint unsigned", "smallint unsigned", 772, 5, 63, 0, 32800, "INTEGER"),
    ("mediumint", "mediumint", 261, 9, 63, 0, 32768, "INTEGER"),
    ("mediumint unsigned", "mediumint unsigned", 774, 8, 63, 0, 32800, "INTEGER"),
    ("INT", "int", 263, 11, 63, 0, 32768, "INTEGER"),
    ("int(11)", "int", 263, 11, 63, 0, 32768, "INTEGER"),
    ("integer unsigned", "int unsigned", 776, 10, 63, 0, 32800, "INTEGER"),
    ("int(5) zerofill", "int(5) unsigned zerofill", 776, 5, 63, 0, 32864, "INTEGER"),
    ("bigint", "bigint", 265, 20, 63, 0, 32768, "INTEGER"),
    ("BIGINT UNSIGNED", "bigint unsigned", 778, 20, 63, 0, 32800, "INTEGER"),
    ("decimal(10,2)", "decimal(10,2)", 18, 12, 63, 2, 32768, "TEXT"),
    ("decimal(5,2)", "decimal(5,2)", 18, 7, 63, 2, 32768, "TEXT"),
    ("numeric(5,2)", "decimal(5,2)", 18, 7, 63, 2, 32768, "TEXT"),
    ("decimal(12,4) unsigned", "decimal(12,4) unsigned", 18, 13, 63, 4, 32800, "TEXT"),
    ("decimal", "decimal(10,0)", 18, 11, 63, 0, 32768, "TEXT"),
    ("float", "float", 1035, 12, 63, 31, 32768, "REAL"),
    ("float(7,4)", "float(7,4)", 1035, 7, 63, 4, 32768, "REAL"),
    ("double", "double", 1036, 22, 63, 31, 32768, "REAL"),
    ("real", "double", 1036, 22, 63, 31, 32768, "REAL"),
    ("double precision", "double", 1036, 22, 63, 31, 32768, "REAL"),
    ("float(30)", "double", 1036, 22, 63, 31, 32768, "REAL"),
    ("char(16)", "char(16)", 6167, 64, 255, 0, 0, "TEXT"),
    ("varchar(120)", "varchar(120)", 6165, 480, 255, 0, 0, "TEXT"),
    ("varchar(128)", "varchar(128)", 6165, 512, 255, 0, 0, "TEXT"),
    ("varchar(10) CHARACTER SET latin1", "varchar(10)", 6165, 10, 8, 0, 0, "TEXT"),
    ("varchar(10) charset utf8mb3", "varchar(10)", 6165, 30, 33, 0, 0, "TEXT"),
    ("varchar(10) charset utf8", "varchar(10)", 6165, 30, 33, 0, 0, "TEXT"),
    ("varchar(10) character set ascii", "varchar(10)", 6165, 10, 11, 0, 0, "TEXT"),
    # binary-sorted collations set BINARY_FLAG, and Vitess' modifyType then reports VARBINARY/BINARY/BLOB
    ("varchar(10) COLLATE utf8mb4_bin", "varchar(10)", 10262, 40, 46, 0, 128, "TEXT"),
    ("char(4) collate utf8mb4_bin", "char(4)", 10264, 16, 46, 0, 128, "TEXT"),
    ("text collate utf8mb4_bin", "text", 10260, 262140, 46, 0, 144, "TEXT"),
    ("varchar(10) NOT NULL DEFAULT 'a' COLLATE latin1_bin", "varchar(10)", 10262, 10, 47, 0, 128, "TEXT"),
    ("tinytext", "tinytext", 6163, 1020, 255, 0, 16, "TEXT"),
    ("text", "text", 6163, 262140, 255, 0, 16, "TEXT"),
    ("mediumtext", "mediumtext", 6163, 67108860, 255, 0, 16, "TEXT"),
    ("longtext", "longtext", 6163, 4294967295, 255, 0, 16, "TEXT"),
    ("tinytext charset utf8mb3", "tinytext", 6163, 765, 33, 0, 16, "TEXT"),
    ("binary(4)", "binary(4)", 10264, 4, 63, 0, 128, "BLOB"),
    ("varbinary(16)", "varbinary(16)", 10262, 16, 63, 0, 128, "BLOB"),
    ("char(5) character set binary", "binary(5)", 10264, 5, 63, 0, 128, "BLOB"),
    ("tinyblob", "tinyblob", 10260, 255, 63, 0, 144, "BLOB"),
    ("blob", "blob", 10260, 65535, 63, 0, 144, "BLOB"),
    ("mediumblob", "mediumblob", 10260, 16777215, 63, 0, 144, "BLOB"),
    ("longblob", "longblob", 10260, 4294967295, 63, 0, 144, "BLOB"),
    ("bit", "bit(1)", 2073, 1, 63, 0, 32, "INTEGER"),
    ("bit(8)", "bit(8)", 2073, 8, 63, 0, 32, "INTEGER"),
    ("bit(64)", "bit(64)", 2073, 64, 63, 0, 32, "INTEGER"),
    ("enum('a','b')", "enum('a','b')", 2074, 4, 255, 0, 256, "TEXT"),
    ("ENUM('small','medium','large','xlarge','xxlarge')", "enum('small','medium','large','xlarge','xxlarge')",
     2074, 28, 255, 0, 256, "TEXT"),
    ("enum('it''s','Ok')", "enum('it''s','Ok')", 2074, 16, 255, 0, 256, "TEXT"),
    ("set('a','b')", "set('a','b')", 2075, 12, 255, 0, 2048, "TEXT"),
    ("set('knitting','cooking','pickleball','biking','hiking','motorcycle','video games','reading')",
     "set('knitting','cooking','pickleball','biking','hiking','motorcycle','video games','reading')",
     2075, 288, 255, 0, 2048, "TEXT"),
    ("json", "json", 2078, 4294967295, 63, 0, 144, "TEXT"),
    ("date", "date", 2062, 10, 63, 0, 128, "TEXT"),
    ("time", "time", 2063, 10, 63, 0, 128, "TEXT"),
    ("time(3)", "time(3)", 2063, 14, 63, 3, 128, "TEXT"),
    ("datetime", "datetime", 2064, 19, 63, 0, 128, "TEXT"),
    ("datetime(3)", "datetime(3)", 2064, 23, 63, 3, 128, "TEXT"),
    ("datetime(6)", "datetime(6)", 2064, 26, 63, 6, 128, "TEXT"),
    ("timestamp", "timestamp", 2061, 19, 63, 0, 128, "TEXT"),
    ("timestamp(3)", "timestamp(3)", 2061, 23, 63, 3, 128, "TEXT"),
    ("year", "year", 785, 4, 63, 0, 32864, "INTEGER"),
    ("year(4)", "year", 785, 4, 63, 0, 32864, "INTEGER"),
]


@pytest.mark.parametrize(("sql", "column_type", "vtype", "length", "charset", "decimals", "flags", "storage"),
                         CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_catalogue(sql: str, column_type: str, vtype: int, length: int, charset: int, decimals: int,
                   flags: int, storage: str) -> None:
    ct = mt.parse_column_type(sql)
    assert (ct.column_type, ct.vitess_type, ct.column_length, ct.charset, ct.decimals, ct.type_flags,
            ct.storage) == (column_type, vtype, length, charset, decimals, flags, storage)


def test_table_default_collation() -> None:
    ct = mt.parse_column_type("varchar(5)", default_collation=8)
    assert (ct.charset, ct.column_length) == (8, 5)
    assert mt.parse_column_type("char(3) binary", default_collation=8).charset == 47


# (DDL type, input value, expected copy-phase bytes)
RENDER = [
    ("tinyint", -128, b"-128"), ("tinyint", 127, b"127"), ("tinyint unsigned", 255, b"255"),
    ("tinyint(1)", True, b"1"), ("smallint", -32768, b"-32768"), ("smallint unsigned", 65535, b"65535"),
    ("mediumint", -8388608, b"-8388608"), ("mediumint unsigned", 16777215, b"16777215"),
    ("int", -2147483648, b"-2147483648"), ("int unsigned", 4294967295, b"4294967295"),
    ("bigint", -9223372036854775808, b"-9223372036854775808"), ("bigint", 9223372036854775807, b"9223372036854775807"),
    ("bigint unsigned", 18446744073709551615, b"18446744073709551615"),
    ("bigint unsigned", 9223372036854775808, b"9223372036854775808"),
    ("int", "42", b"42"), ("int", 2.5, b"2"), ("int", decimal.Decimal("2.5"), b"3"), ("int", "-2.5", b"-3"),
    ("int(5) zerofill", 42, b"00042"),
    ("decimal(10,2)", 1.5, b"1.50"), ("decimal(10,2)", "-1.5", b"-1.50"), ("decimal(10,2)", 0, b"0.00"),
    ("decimal(10,2)", "0.005", b"0.01"), ("decimal(10,2)", "-0.001", b"0.00"),
    ("decimal(10,2)", decimal.Decimal("99999999.99"), b"99999999.99"),
    ("decimal(12,4)", "-0000000001.23", b"-1.2300"), ("decimal(5,0)", 5, b"5"),
    ("decimal(65,30)", "1", b"1." + b"0" * 30),
    ("float", 3.99, b"3.99"), ("float", 1.12345, b"1.12345"), ("float", 123456789, b"123457000"),
    ("float", 0.5, b"0.5"), ("float", -0.000123, b"-0.000123"), ("float(7,4)", 3.14159, b"3.1416"),
    ("double", 4.99, b"4.99"), ("double", 1.5, b"1.5"), ("double", 1e20, b"1e20"), ("double", 0.1, b"0.1"),
    ("double", 123456789012345680000.0, b"1.2345678901234568e20"), ("double", -0.000123, b"-0.000123"),
    ("double", 1e15, b"1e15"), ("double", 1e14, b"100000000000000"), ("double", 1e-15, b"0.000000000000001"),
    ("double", 1.5e-20, b"1.5e-20"), ("double", 0.0, b"0"), ("double", "2.5e3", b"2500"),
    ("year", 2012, b"2012"), ("year", 0, b"0000"), ("year", "0", b"2000"), ("year", 69, b"2069"),
    ("year", "99", b"1999"), ("year", 1901, b"1901"), ("year", 2155, b"2155"),
    ("date", "2012-01-01", b"2012-01-01"), ("date", dt.date(1999, 12, 31), b"1999-12-31"),
    ("date", "0000-00-00", b"0000-00-00"), ("date", "20200229", b"2020-02-29"),
    ("datetime", "2012-01-01 15:45:45", b"2012-01-01 15:45:45"),
    ("datetime", "2012-01-01T15:45:45.6", b"2012-01-01 15:45:46"),
    ("datetime(3)", "2012-01-01 15:45:45.1", b"2012-01-01 15:45:45.100"),
    ("datetime(3)", dt.datetime(2012, 1, 1, 23, 59, 59, 999600), b"2012-01-02 00:00:00.000"),
    ("datetime(6)", "2012-01-01 15:45:45.1234567", b"2012-01-01 15:45:45.123457"),
    ("datetime", "0000-00-00 00:00:00", b"0000-00-00 00:00:00"),
    ("datetime(3)", "0000-00-00 00:00:00", b"0000-00-00 00:00:00.000"),
    ("timestamp", "2020-02-13 01:02:03", b"2020-02-13 01:02:03"),
    ("timestamp(3)", dt.datetime(2020, 2, 13, 3, 2, 3, 500000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     b"2020-02-13 01:02:03.500"),
    ("timestamp", "0000-00-00 00:00:00", b"0000-00-00 00:00:00"),
    ("timestamp", "2038-01-19 03:14:07", b"2038-01-19 03:14:07"),
    ("time", "15:45:45", b"15:45:45"), ("time", "-838:59:59", b"-838:59:59"), ("time", "838:59:59", b"838:59:59"),
    ("time(3)", "-01:02:03.5", b"-01:02:03.500"), ("time(2)", dt.timedelta(hours=-1, seconds=-0.25), b"-01:00:00.25"),
    ("time", dt.time(7, 8, 9), b"07:08:09"), ("time", "1 02:00:00", b"26:00:00"), ("time", 123456, b"12:34:56"),
    ("char(4)", "ab  ", b"ab"), ("char(4)", "", b""), ("varchar(4)", "ab  ", b"ab  "),
    ("varchar(3)", "abc   ", b"abc"), ("varchar(4)", "été", "été".encode()),
    ("varchar(4) character set latin1", "été", "été".encode("latin-1")),
    ("varchar(4) character set latin1", "€", b"\x80"), ("varchar(4)", "😀", "😀".encode()),
    ("text", "h", b"h"), ("varchar(10)", 12, b"12"),
    ("binary(4)", b"d", b"d\x00\x00\x00"), ("binary(4)", b"abcd", b"abcd"), ("varbinary(4)", b"\x00\xff", b"\x00\xff"),
    ("blob", b"f\x00", b"f\x00"), ("varbinary(8)", "é", "é".encode()),
    ("bit(1)", 1, b"\x01"), ("bit(1)", True, b"\x01"), ("bit(1)", 0, b"\x00"), ("bit(8)", b"\x01", b"\x01"),
    ("bit(12)", 0xABC, b"\x0a\xbc"), ("bit(64)", 2**64 - 1, b"\xff" * 8), ("bit(10)", b"\x03\xff", b"\x03\xff"),
    ("enum('a','b')", "a", b"a"), ("enum('small','Medium')", "MEDIUM", b"Medium"), ("enum('a','b')", 2, b"b"),
    ("enum('a','b') collate utf8mb4_bin", "b", b"b"),
    ("set('a','b','c')", "c,a", b"a,c"), ("set('a','b','c')", "", b""), ("set('a','b','c')", 5, b"a,c"),
    ("set('a','b','c')", ["b", "B", "a"], b"a,b"),
    ("json", '{"foo": "bar"}', b'{"foo": "bar"}'), ("json", '{"bb":[1,2],"a":1}', b'{"a": 1, "bb": [1, 2]}'),
    ("json", '{"b":1,"a":2,"b":3}', b'{"a": 2, "b": 3}'), ("json", "[1.0, 2, 3.14, 1e20, -0.5]", b"[1.0, 2, 3.14, 1e20, -0.5]"),
    ("json", '"vt\\nTablet"', b'"vt\\nTablet"'), ("json", "123456", b"123456"), ("json", "{}", b"{}"),
    ("json", '["abc", 3.14, true, null, false]', b'["abc", 3.14, true, null, false]'),
    ("json", {"z": [1, {"yy": None}], "é": "\x01"}, '{"z": [1, {"yy": null}], "é": "\\u0001"}'.encode()),
    ("json", '18446744073709551615', b"18446744073709551615"),
]


@pytest.mark.parametrize(("sql", "value", "expected"), RENDER, ids=[f"{r[0]}={r[1]!r}" for r in RENDER])
def test_normalize_and_render(sql: str, value: object, expected: bytes) -> None:
    ct = mt.parse_column_type(sql)
    stored = mt.normalize(ct, value)
    assert mt.to_text(ct, stored) == expected


def test_storage_values() -> None:
    assert mt.normalize(mt.parse_column_type("bigint unsigned"), 2**64 - 1) == -1  # wrapped into int64
    assert mt.normalize(mt.parse_column_type("decimal(10,2)"), 1.5) == "1.50"
    assert mt.normalize(mt.parse_column_type("float"), 3.99) == pytest.approx(3.99, rel=1e-7)
    assert mt.normalize(mt.parse_column_type("float"), 3.99) != 3.99  # rounded to single precision
    assert mt.normalize(mt.parse_column_type("binary(3)"), b"a") == b"a\x00\x00"
    assert mt.normalize(mt.parse_column_type("enum('x','y')"), "Y") == "y"
    assert mt.normalize(mt.parse_column_type("int"), None) is None


# Streaming phase: Vitess decodes the binlog itself (go/mysql/binlog/rbr.go).
BINLOG = [
    ("float", 3.99, b"3.99E+00"), ("double", 4.99, b"4.99E+00"), ("double", 1e20, b"1E+20"),
    ("double", -0.000123, b"-1.23E-04"), ("double", 0.0, b"0E+00"), ("float", 123456789, b"1.2345679E+08"),
    ("double", 123456789012345680000.0, b"1.2345678901234568E+20"),
    ("decimal(12,4)", "1.23", b"1.2300"), ("decimal(13,4)", "-1.23", b"-1.2300"),
    ("decimal(5,2)", "0.5", b".50"), ("decimal(5,2)", "-0.5", b"-.50"), ("decimal(5,2)", 0, b".00"),
    ("decimal(20,0)", 1, b"000000000000000001"), ("decimal(10,0)", 5, b"000000005"), ("decimal(5,0)", 0, b"0"),
    ("decimal(20,2)", "1.10", b"1.10"),
    ("int(5) zerofill", 42, b"42"), ("bigint unsigned", 2**64 - 1, b"18446744073709551615"),
    ("binary(4)", b"d", b"d\x00\x00\x00"), ("enum('a','b')", "b", b"b"), ("datetime(3)", "2012-01-01 00:00:00.5",
                                                                         b"2012-01-01 00:00:00.500"),
]


@pytest.mark.parametrize(("sql", "value", "expected"), BINLOG, ids=[f"{r[0]}={r[1]!r}" for r in BINLOG])
def test_binlog_render(sql: str, value: object, expected: bytes) -> None:
    ct = mt.parse_column_type(sql)
    assert mt.to_binlog_text(ct, mt.normalize(ct, value)) == expected


def test_binlog_decimal_fixed_form() -> None:
    ct = mt.parse_column_type("decimal(5,2)")
    assert mt.to_binlog_text(ct, mt.normalize(ct, "0.5"), legacy_decimal=False) == b"0.50"


# (DDL type, bad value, errno, message)
ERRORS = [
    ("tinyint", -129, 1264, "Out of range value for column 'c' at row 1"),
    ("tinyint", 128, 1264, "Out of range value for column 'c' at row 1"),
    ("tinyint unsigned", -1, 1264, "Out of range value for column 'c' at row 1"),
    ("bigint", 2**63, 1264, "Out of range value for column 'c' at row 1"),
    ("bigint unsigned", 2**64, 1264, "Out of range value for column 'c' at row 1"),
    ("int", "abc", 1366, "Incorrect integer value: 'abc' for column 'c' at row 1"),
    ("int", "12abc", 1265, "Data truncated for column 'c' at row 1"),
    ("decimal(5,2)", 1000, 1264, "Out of range value for column 'c' at row 1"),
    ("decimal(5,2) unsigned", -1, 1264, "Out of range value for column 'c' at row 1"),
    ("decimal(5,2)", "x", 1366, "Incorrect decimal value: 'x' for column 'c' at row 1"),
    ("float", 1e39, 1264, "Out of range value for column 'c' at row 1"),
    ("double", float("inf"), 1264, "Out of range value for column 'c' at row 1"),
    ("float(4,2)", 100, 1264, "Out of range value for column 'c' at row 1"),
    ("varchar(3)", "abcd", 1406, "Data too long for column 'c' at row 1"),
    ("char(2)", "abc", 1406, "Data too long for column 'c' at row 1"),
    ("tinytext", "x" * 256, 1406, "Data too long for column 'c' at row 1"),
    ("binary(2)", b"abc", 1406, "Data too long for column 'c' at row 1"),
    ("tinyblob", b"x" * 256, 1406, "Data too long for column 'c' at row 1"),
    ("bit(4)", 16, 1406, "Data too long for column 'c' at row 1"),
    ("varchar(3) charset latin1", "中", 1366, "Incorrect string value: '\\xE4\\xB8\\xAD' for column 'c' at row 1"),
    ("varchar(3) charset utf8mb3", "😀", 1366, "Incorrect string value: '\\xF0\\x9F\\x98\\x80' for column 'c' at row 1"),
    ("varchar(3)", b"\xff", 1366, "Incorrect string value: '\\xFF' for column 'c' at row 1"),
    ("enum('a','b')", "c", 1265, "Data truncated for column 'c' at row 1"),
    ("enum('a','b')", "", 1265, "Data truncated for column 'c' at row 1"),
    ("enum('a','b')", 3, 1265, "Data truncated for column 'c' at row 1"),
    ("set('a','b')", "a,z", 1265, "Data truncated for column 'c' at row 1"),
    ("set('a','b')", 4, 1265, "Data truncated for column 'c' at row 1"),
    ("year", 1900, 1264, "Out of range value for column 'c' at row 1"),
    ("year", 2156, 1264, "Out of range value for column 'c' at row 1"),
    ("date", "2021-02-29", 1292, "Incorrect date value: '2021-02-29' for column 'c' at row 1"),
    ("date", "2021-13-01", 1292, "Incorrect date value: '2021-13-01' for column 'c' at row 1"),
    ("datetime", "2021-01-01 24:00:00", 1292, "Incorrect datetime value: '2021-01-01 24:00:00' for column 'c' at row 1"),
    ("datetime", "yesterday", 1292, "Incorrect datetime value: 'yesterday' for column 'c' at row 1"),
    ("timestamp", "1970-01-01 00:00:00", 1292, "Incorrect datetime value: '1970-01-01 00:00:00' for column 'c' at row 1"),
    ("timestamp", "2038-01-19 03:14:08", 1292, "Incorrect datetime value: '2038-01-19 03:14:08' for column 'c' at row 1"),
    ("time", "839:00:00", 1292, "Incorrect time value: '839:00:00' for column 'c' at row 1"),
    ("time", "10:60:00", 1292, "Incorrect time value: '10:60:00' for column 'c' at row 1"),
]


@pytest.mark.parametrize(("sql", "value", "errno", "message"), ERRORS, ids=[f"{e[0]}={e[1]!r}"[:60] for e in ERRORS])
def test_normalize_errors(sql: str, value: object, errno: int, message: str) -> None:
    ct = mt.parse_column_type(sql)
    with pytest.raises(mt.MySQLError) as ei:
        mt.normalize(ct, value, column="c", row=1)
    assert (ei.value.errno, ei.value.message) == (errno, message)


def test_error_rendering_and_json_error() -> None:
    ct = mt.parse_column_type("json")
    with pytest.raises(mt.MySQLError) as ei:
        mt.normalize(ct, "{bad", column="j")
    assert (ei.value.errno, ei.value.sqlstate) == (3140, "22032")
    e = mt.MySQLError(1264, "22003", "Out of range value for column 'c' at row 2")
    assert str(e) == "Out of range value for column 'c' at row 2 (errno 1264) (sqlstate 22003)"


@pytest.mark.parametrize("sql", ["varchar", "int(", "bogus", "enum()", "set('a','a')", "decimal(66,2)",
                                 "varchar(10) collate nope", "bit(65)", "time(7)"])
def test_parse_errors(sql: str) -> None:
    with pytest.raises(mt.MySQLError):
        mt.parse_column_type(sql)
