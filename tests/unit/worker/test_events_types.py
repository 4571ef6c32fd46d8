"""Every column type and mode: exact key/value bytes with and without schemas.

Expected JSON is written out literally from Debezium's Vitess type mapping (the
reference's type table and the connector's test expectations) and Kafka Connect's
JsonConverter layout; it is never produced by the encoder under test.
"""

from __future__ import annotations

from typing import Any

import pytest
from events_fixtures import NOT_NULL, PRI_KEY, field, field_event, insert

from cdcworker.events import EncoderConfig, SourceContext, TablePlan, TypeOptions
from cdcworker.events.jsonfmt import java_double
from cdcworker.events.types import ValueConversionError

NOW_NS = 1559033904863497147
CTX = dict(keyspace="ks", shard="0", commit_seconds=1559033904, vgtid='[{"keyspace":"ks","shard":"0","gtid":"MySQL56/u:1-5"}]')

SOURCE_PAYLOAD = (
    '{"version":"3.5.0.Final","connector":"vitess","name":"srv","ts_ms":1559033904000,"snapshot":"false","db":"",'
    '"sequence":null,"ts_us":1559033904000000,"ts_ns":1559033904000000000,"keyspace":"ks","table":"t","shard":"0",'
    '"vgtid":"[{\\"keyspace\\":\\"ks\\",\\"shard\\":\\"0\\",\\"gtid\\":\\"MySQL56/u:1-5\\"}]"}'
)
SOURCE_SCHEMA = (
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},'
    '{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},'
    '{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum",'
    '"version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},'
    '"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},'
    '{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},'
    '{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"keyspace"},'
    '{"type":"string","optional":false,"field":"table"},{"type":"string","optional":false,"field":"shard"},'
    '{"type":"string","optional":false,"field":"vgtid"}],"optional":false,"name":"io.debezium.connector.vitess.Source",'
    '"version":1,"field":"source"}'
)
TX_SCHEMA = (
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},'
    '{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],'
    '"optional":true,"name":"event.block","version":1,"field":"transaction"}'
)
ID_SCHEMA = '{"type":"int32","optional":false,"field":"id"}'
KEY_WITH_SCHEMA = (
    '{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,'
    '"name":"srv.ks.t.Key"},"payload":{"id":1}}'
)
TAIL = '"transaction":null,"op":"c","ts_ms":1559033904863,"ts_us":1559033904863497,"ts_ns":1559033904863497147}'


def value_payload(col_json: str) -> str:
    return '{"before":null,"after":{"id":1,"c":' + col_json + '},"source":' + SOURCE_PAYLOAD + "," + TAIL


def value_with_schema(col_schema: str, col_json: str) -> str:
    value_struct = '{"type":"struct","fields":[' + ID_SCHEMA + "," + col_schema + '],"optional":true,"name":"srv.ks.t.Value",'
    envelope = (
        '{"type":"struct","fields":['
        + value_struct + '"field":"before"},'
        + value_struct + '"field":"after"},'
        + SOURCE_SCHEMA + "," + TX_SCHEMA + ","
        + '{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},'
        '{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}],'
        '"optional":false,"name":"srv.ks.t.Envelope","version":2}'
    )
    return '{"schema":' + envelope + ',"payload":' + value_payload(col_json) + "}"


def encode(col: Any, raw: bytes | None, schemas: bool, enum_strings: bool = True, **opts: str) -> tuple[bytes | None, bytes | None]:
    cfg = EncoderConfig(
        logical_name="srv",
        types=TypeOptions(**opts),  # type: ignore[arg-type]
        key_schemas_enable=schemas,
        value_schemas_enable=schemas,
    )
    fe = field_event("ks.t", [field("id", "INT32", "int", NOT_NULL | PRI_KEY), col], keyspace="ks", shard="0",
                     enum_set_string_values=enum_strings)
    plan = TablePlan.compile(fe, cfg)
    [rec] = plan.encode_change(insert(b"1", raw), SourceContext(**CTX), NOW_NS)  # type: ignore[arg-type]
    assert rec.topic == "srv.ks.t"
    return rec.key, rec.value


# (column, raw value, TypeOptions kwargs, field schema JSON, value JSON)
CASES: list[tuple[str, Any, bytes | None, dict[str, Any], str, str]] = [
    ("tinyint", field("c", "INT8", "tinyint(4)"), b"-5", {}, '{"type":"int16","optional":true,"field":"c"}', "-5"),
    ("tinyint1", field("c", "INT8", "tinyint(1)"), b"1", {}, '{"type":"int16","optional":true,"field":"c"}', "1"),
    ("tinyint unsigned", field("c", "UINT8", "tinyint(3) unsigned"), b"255", {}, '{"type":"int16","optional":true,"field":"c"}', "255"),
    ("smallint", field("c", "INT16", "smallint(6)"), b"12", {}, '{"type":"int16","optional":true,"field":"c"}', "12"),
    ("smallint unsigned", field("c", "UINT16", "smallint unsigned"), b"65535", {}, '{"type":"int32","optional":true,"field":"c"}', "65535"),
    ("mediumint", field("c", "INT24", "mediumint"), b"-8388608", {}, '{"type":"int32","optional":true,"field":"c"}', "-8388608"),
    ("mediumint unsigned", field("c", "UINT24", "mediumint unsigned"), b"16777215", {}, '{"type":"int32","optional":true,"field":"c"}', "16777215"),
    ("int", field("c", "INT32", "int"), b"-2147483648", {}, '{"type":"int32","optional":true,"field":"c"}', "-2147483648"),
    ("int unsigned", field("c", "UINT32", "int unsigned"), b"4294967295", {}, '{"type":"int64","optional":true,"field":"c"}', "4294967295"),
    ("bigint", field("c", "INT64", "bigint"), b"-9223372036854775808", {}, '{"type":"int64","optional":true,"field":"c"}', "-9223372036854775808"),
    ("bigint unsigned default string", field("c", "UINT64", "bigint unsigned"), b"18446744073709551615", {},
     '{"type":"string","optional":true,"field":"c"}', '"18446744073709551615"'),
    # >= 2^63 has no Java long: Debezium's convertBigInt fails and the field is left null
    ("bigint unsigned long", field("c", "UINT64", "bigint unsigned"), b"18446744073709551615", {"bigint_unsigned_handling_mode": "long"},
     '{"type":"int64","optional":true,"field":"c"}', "null"),
    ("bigint unsigned long 2^63", field("c", "UINT64", "bigint unsigned"), b"9223372036854775808", {"bigint_unsigned_handling_mode": "long"},
     '{"type":"int64","optional":true,"field":"c"}', "null"),
    ("bigint unsigned long 2^63-1", field("c", "UINT64", "bigint unsigned"), b"9223372036854775807", {"bigint_unsigned_handling_mode": "long"},
     '{"type":"int64","optional":true,"field":"c"}', "9223372036854775807"),
    ("bigint unsigned long small", field("c", "UINT64", "bigint unsigned"), b"12345", {"bigint_unsigned_handling_mode": "long"},
     '{"type":"int64","optional":true,"field":"c"}', "12345"),
    ("bigint unsigned precise", field("c", "UINT64", "bigint unsigned"), b"18446744073709551615", {"bigint_unsigned_handling_mode": "precise"},
     '{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"0"},"field":"c"}',
     '"AP//////////"'),
    ("bigint unsigned precise small", field("c", "UINT64", "bigint unsigned"), b"12345", {"bigint_unsigned_handling_mode": "precise"},
     '{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"0"},"field":"c"}',
     '"MDk="'),
    ("float exact", field("c", "FLOAT32", "float"), b"1.5", {}, '{"type":"double","optional":true,"field":"c"}', "1.5"),
    ("float widened", field("c", "FLOAT32", "float"), b"1.1", {}, '{"type":"double","optional":true,"field":"c"}', "1.100000023841858"),
    ("double", field("c", "FLOAT64", "double"), b"2.5", {}, '{"type":"double","optional":true,"field":"c"}', "2.5"),
    ("double big", field("c", "FLOAT64", "double"), b"1e20", {}, '{"type":"double","optional":true,"field":"c"}', "1.0E20"),
    ("double small", field("c", "FLOAT64", "double"), b"0.0001", {}, '{"type":"double","optional":true,"field":"c"}', "1.0E-4"),
    ("double ten million", field("c", "FLOAT64", "double"), b"12345678", {}, '{"type":"double","optional":true,"field":"c"}', "1.2345678E7"),
    ("decimal precise", field("c", "DECIMAL", "decimal(13,4)"), b"12.3400", {"decimal_handling_mode": "precise"},
     '{"type":"string","optional":true,"field":"c"}', '"12.3400"'),
    ("decimal double", field("c", "DECIMAL", "decimal(13,4)"), b"12.3400", {"decimal_handling_mode": "double"},
     '{"type":"string","optional":true,"field":"c"}', '"12.3400"'),
    ("decimal string", field("c", "DECIMAL", "decimal(13,4)"), b"-0.5000", {"decimal_handling_mode": "string"},
     '{"type":"string","optional":true,"field":"c"}', '"-0.5000"'),
    ("varchar utf8", field("c", "VARCHAR", "varchar(32)"), "상품 명1".encode(), {}, '{"type":"string","optional":true,"field":"c"}', '"상품 명1"'),
    ("varchar escapes", field("c", "VARCHAR", "varchar(32)"), b'a\x01\x1fb"c\\\n', {}, '{"type":"string","optional":true,"field":"c"}',
     '"a\\u0001\\u001Fb\\"c\\\\\\n"'),
    ("varchar empty", field("c", "VARCHAR", "varchar(32)"), b"", {}, '{"type":"string","optional":true,"field":"c"}', '""'),
    ("varchar null", field("c", "VARCHAR", "varchar(32)"), None, {}, '{"type":"string","optional":true,"field":"c"}', "null"),
    ("char", field("c", "CHAR", "char(1)"), b"a", {}, '{"type":"string","optional":true,"field":"c"}', '"a"'),
    ("text", field("c", "TEXT", "text"), b"ij", {}, '{"type":"string","optional":true,"field":"c"}', '"ij"'),
    ("mediumtext as blob type", field("c", "BLOB", "mediumtext"), b"kl", {}, '{"type":"string","optional":true,"field":"c"}', '"kl"'),
    ("json", field("c", "JSON", "json"), b'{"key1":"value1","key2":{"key21":"value21"}}', {},
     '{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"c"}',
     '"{\\"key1\\":\\"value1\\",\\"key2\\":{\\"key21\\":\\"value21\\"}}"'),
    ("enum string", field("c", "ENUM", "enum('small','medium','large')"), b"large", {},
     '{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"small,medium,large"},"field":"c"}',
     '"large"'),
    ("enum quoted label", field("c", "ENUM", "enum('it''s','b')"), b"it's", {},
     '{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"it\'s,b"},"field":"c"}',
     '"it\'s"'),
    ("set string", field("c", "SET", "set('a','b','c','d')"), b"a,c", {},
     '{"type":"string","optional":true,"name":"io.debezium.data.EnumSet","version":1,"parameters":{"allowed":"a,b,c,d"},"field":"c"}',
     '"a,c"'),
    ("binary bytes", field("c", "BINARY", "binary(2)"), b"d\x00", {}, '{"type":"bytes","optional":true,"field":"c"}', '"ZAA="'),
    ("binary base64", field("c", "BINARY", "binary(2)"), b"d\x00", {"binary_handling_mode": "base64"},
     '{"type":"string","optional":true,"field":"c"}', '"ZAA="'),
    ("varbinary base64", field("c", "VARBINARY", "varbinary(8)"), b"\xfb\xff", {"binary_handling_mode": "base64"},
     '{"type":"string","optional":true,"field":"c"}', '"+/8="'),
    ("varbinary base64-url-safe", field("c", "VARBINARY", "varbinary(8)"), b"\xfb\xff", {"binary_handling_mode": "base64-url-safe"},
     '{"type":"string","optional":true,"field":"c"}', '"-_8="'),
    ("varbinary hex", field("c", "VARBINARY", "varbinary(8)"), b"\xfb\xff", {"binary_handling_mode": "hex"},
     '{"type":"string","optional":true,"field":"c"}', '"fbff"'),
    ("blob bytes", field("c", "BLOB", "blob"), b"op", {}, '{"type":"bytes","optional":true,"field":"c"}', '"b3A="'),
    ("varchar with binary collation", field("c", "VARBINARY", "varchar(10)"), b"foo", {}, '{"type":"string","optional":true,"field":"c"}', '"foo"'),
    ("char with binary collation", field("c", "BINARY", "char(9)"), b"foobarfoo", {}, '{"type":"string","optional":true,"field":"c"}', '"foobarfoo"'),
    ("bit(1)", field("c", "BIT", "bit(1)"), b"\x01", {}, '{"type":"boolean","optional":true,"field":"c"}', "true"),
    ("bit(1) false", field("c", "BIT", "bit(1)"), b"\x00", {}, '{"type":"boolean","optional":true,"field":"c"}', "false"),
    ("bit(8)", field("c", "BIT", "bit(8)"), b"\xa5", {}, '{"type":"bytes","optional":true,"field":"c"}', '"pQ=="'),
    ("year", field("c", "YEAR", "year"), b"2020", {},
     '{"type":"int32","optional":true,"name":"io.debezium.time.Year","version":1,"field":"c"}', "2020"),
    ("date", field("c", "DATE", "date"), b"2020-02-11", {},
     '{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"c"}', "18303"),
    ("date pre-epoch", field("c", "DATE", "date"), b"1969-12-31", {},
     '{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"c"}', "-1"),
    ("date zero nullable", field("c", "DATE", "date"), b"0000-00-00", {},
     '{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"c"}', "null"),
    ("date zero not null", field("c", "DATE", "date", NOT_NULL), b"0000-00-00", {},
     '{"type":"int32","optional":false,"name":"io.debezium.time.Date","version":1,"field":"c"}', "0"),
    ("date connect", field("c", "DATE", "date"), b"2020-02-11", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1,"field":"c"}', "18303"),
    ("date isostring", field("c", "DATE", "date"), b"0000-00-00", {"time_precision_mode": "isostring"},
     '{"type":"string","optional":true,"field":"c"}', '"0000-00-00"'),
    ("time", field("c", "TIME", "time"), b"01:02:03", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"c"}', "3723000000"),
    ("time(4)", field("c", "TIME", "time(4)", decimals=4), b"01:02:03.1234", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"c"}', "3723123400"),
    ("time negative", field("c", "TIME", "time"), b"-838:59:59", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"c"}', "-3020399000000"),
    ("time connect", field("c", "TIME", "time(4)", decimals=4), b"01:02:03.1234", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"c"}', "3723123"),
    # connect: a Connect Time holds [00:00:00, 24:00:00] only (Debezium's Time.toMilliOfDay); else null
    ("time connect 24h", field("c", "TIME", "time"), b"24:00:00", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"c"}', "86400000"),
    ("time connect over 24h", field("c", "TIME", "time"), b"24:00:01", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"c"}', "null"),
    ("time connect max", field("c", "TIME", "time"), b"838:59:59", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"c"}', "null"),
    ("time connect negative", field("c", "TIME", "time(6)", decimals=6), b"-00:00:00.000001", {"time_precision_mode": "connect"},
     '{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"c"}', "null"),
    ("time isostring", field("c", "TIME", "time(4)", decimals=4), b"00:00:00.0000", {"time_precision_mode": "isostring"},
     '{"type":"string","optional":true,"field":"c"}', '"00:00:00.0000"'),
    ("datetime", field("c", "DATETIME", "datetime"), b"2020-02-12 01:02:03", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"c"}', "1581469323000"),
    ("datetime(2)", field("c", "DATETIME", "datetime(2)", decimals=2), b"2020-02-12 01:02:03.12", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"c"}', "1581469323120"),
    ("datetime(5)", field("c", "DATETIME", "datetime(5)", decimals=5), b"2020-02-12 01:02:03.12345", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"c"}', "1581469323123450"),
    ("datetime pre-epoch floors", field("c", "DATETIME", "datetime(1)", decimals=1), b"1969-12-31 23:59:59.5", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"c"}', "-500"),
    ("datetime zero nullable", field("c", "DATETIME", "datetime"), b"0000-00-00 00:00:00", {},
     '{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"c"}', "null"),
    ("datetime zero not null", field("c", "DATETIME", "datetime(4)", NOT_NULL, decimals=4), b"0000-00-00 00:00:00.0000", {},
     '{"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"c"}', "0"),
    ("datetime connect", field("c", "DATETIME", "datetime(5)", decimals=5), b"2020-02-12 01:02:03.12345", {"time_precision_mode": "connect"},
     '{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"c"}', "1581469323123"),
    ("datetime isostring", field("c", "DATETIME", "datetime"), b"2020-02-12 01:02:03", {"time_precision_mode": "isostring"},
     '{"type":"string","optional":true,"field":"c"}', '"2020-02-12 01:02:03"'),
    ("timestamp", field("c", "TIMESTAMP", "timestamp"), b"2020-02-13 01:02:03", {},
     '{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"c"}', '"2020-02-13 01:02:03"'),
    ("timestamp(6) zero", field("c", "TIMESTAMP", "timestamp(6)", decimals=6), b"0000-00-00 00:00:00.000000", {},
     '{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"c"}', '"0000-00-00 00:00:00.000000"'),
    ("timestamp connect", field("c", "TIMESTAMP", "timestamp(3)", decimals=3), b"2020-02-13 01:02:03.123", {"time_precision_mode": "connect"},
     '{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"c"}', '"2020-02-13 01:02:03.123"'),
]


@pytest.mark.parametrize(("label", "col", "raw", "opts", "schema", "payload"), CASES, ids=[c[0] for c in CASES])
def test_type_without_schemas(label: str, col: Any, raw: bytes | None, opts: dict[str, Any], schema: str, payload: str) -> None:
    key, value = encode(col, raw, schemas=False, **opts)
    assert key == b'{"id":1}'
    assert value == value_payload(payload).encode()


@pytest.mark.parametrize(("label", "col", "raw", "opts", "schema", "payload"), CASES, ids=[c[0] for c in CASES])
def test_type_with_schemas(label: str, col: Any, raw: bytes | None, opts: dict[str, Any], schema: str, payload: str) -> None:
    key, value = encode(col, raw, schemas=True, **opts)
    assert key == KEY_WITH_SCHEMA.encode()
    assert value == value_with_schema(schema, payload).encode()


def test_enum_and_set_from_ordinals() -> None:
    enum = field("c", "ENUM", "enum('small','medium','large')")
    assert encode(enum, b"3", schemas=False, enum_strings=False)[1] == value_payload('"large"').encode()
    # Index 0 (MySQL's invalid-value marker) and out-of-range indexes become "".
    assert encode(enum, b"0", schemas=False, enum_strings=False)[1] == value_payload('""').encode()
    assert encode(enum, b"9", schemas=False, enum_strings=False)[1] == value_payload('""').encode()
    s = field("c", "SET", "set('a','b','c','d')")
    assert encode(s, b"5", schemas=False, enum_strings=False)[1] == value_payload('"a,c"').encode()
    assert encode(s, b"0", schemas=False, enum_strings=False)[1] == value_payload('""').encode()


def test_unknown_type_dropped_unless_included() -> None:
    geo = field("c", "GEOMETRY", "point")
    _, value = encode(geo, b"\x01\x02", schemas=False)
    assert value == (
        '{"before":null,"after":{"id":1},"source":' + SOURCE_PAYLOAD + "," + TAIL
    ).encode()
    _, value = encode(geo, b"\x01\x02", schemas=False, include_unknown_datatypes=True)  # type: ignore[arg-type]
    assert value == value_payload('"AQI="').encode()


@pytest.mark.parametrize(
    ("col", "raw", "opts"),
    [
        (field("c", "UINT64", "bigint unsigned", NOT_NULL), b"9223372036854775808", {"bigint_unsigned_handling_mode": "long"}),
        (field("c", "TIME", "time", NOT_NULL), b"-00:00:01", {"time_precision_mode": "connect"}),
    ],
    ids=["bigint-unsigned-long", "time-connect"],
)
def test_unrepresentable_value_in_not_null_column_fails(col: Any, raw: bytes, opts: dict[str, str]) -> None:
    """Debezium leaves the field unset and JsonConverter then fails on the required null: so do we, clearly."""
    with pytest.raises(ValueConversionError, match=r"column 'c': .* the column is NOT NULL"):
        encode(col, raw, schemas=True, **opts)


def test_adaptive_time_precision_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"time\.precision\.mode='adaptive'"):
        TypeOptions(time_precision_mode="adaptive")


@pytest.mark.parametrize(
    ("x", "text"),
    [(1.5, "1.5"), (100.0, "100.0"), (1e7, "1.0E7"), (9999999.0, "9999999.0"), (0.001, "0.001"), (0.0001, "1.0E-4"),
     (-3.25, "-3.25"), (1.234e-5, "1.234E-5"), (123456789.0, "1.23456789E8"), (0.0, "0.0"), (-0.0, "-0.0"), (1e100, "1.0E100")],
)
def test_java_double_formatting(x: float, text: str) -> None:
    assert java_double(x) == text
