"""Wire compatibility of proto/vitessapi with upstream Vitess.

Every expected byte string below was worked out by hand from the field numbers
and types in /work/shared/reference/vitess-vstream-protocol.md (tag =
number << 3 | wire type; varints 7 bits per byte, little end first; sint64
zigzag), not produced by the generated code. Each case is checked both ways:
parse(bytes) == message and serialize(message) == bytes, so a wrong field
number, type or packing fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from vitessapi import (
    binlogdata_pb2,
    query_pb2,
    topodata_pb2,
    vtctldata_pb2,
    vtctlservice_pb2,
    vtctlservice_pb2_grpc,
    vtgate_pb2,
    vtgateservice_pb2,
    vtgateservice_pb2_grpc,
    vtrpc_pb2,
    vttime_pb2,
)

EMAIL = b"alice@domain.com".hex()  # 16 bytes


def _row_1_null_email() -> Message:
    return query_pb2.Row(lengths=[1, -1, 16], values=b"1alice@domain.com")


def _vevent_row() -> Message:
    return binlogdata_pb2.VEvent(
        type=binlogdata_pb2.ROW,
        row_event=binlogdata_pb2.RowEvent(
            table_name="ks.t",
            row_changes=[binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1], values=b"7"))],
        ),
        current_time=300,
        keyspace="ks",
        shard="-80",
    )


def _vevent_gtid_v23() -> Message:
    return binlogdata_pb2.VEvent(
        type=binlogdata_pb2.GTID, gtid="g", commit_parent=4, sequence_number=5, event_gtid="u:5"
    )


def _vevent_heartbeat_throttled() -> Message:
    return binlogdata_pb2.VEvent(type=binlogdata_pb2.HEARTBEAT, throttled=True, throttled_reason="x")


def _vevent_lastpk() -> Message:
    return binlogdata_pb2.VEvent(
        type=binlogdata_pb2.LASTPK,
        last_p_k_event=binlogdata_pb2.LastPKEvent(
            table_last_p_k=binlogdata_pb2.TableLastPK(table_name="t"), completed=True
        ),
    )


def _shard_gtid_with_lastpk() -> Message:
    return binlogdata_pb2.ShardGtid(
        keyspace="ks",
        shard="-80",
        gtid="MySQL56/a:1-5",
        table_p_ks=[
            binlogdata_pb2.TableLastPK(
                table_name="t",
                lastpk=query_pb2.QueryResult(
                    fields=[query_pb2.Field(name="id", type=query_pb2.INT64)],
                    rows=[query_pb2.Row(lengths=[1], values=b"5")],
                ),
            )
        ],
    )


def _vstream_flags_all() -> Message:
    return vtgate_pb2.VStreamFlags(
        minimize_skew=True,
        heartbeat_interval=10,
        stop_on_reshard=True,
        cells="z1",
        cell_preference="p",
        tablet_order="o",
        stream_keyspace_heartbeats=True,
        include_reshard_journal_events=True,
        tables_to_copy=["a", "b"],
        exclude_keyspace_from_table_name=True,
        transaction_chunk_size=1048576,
    )


def _vstream_request() -> Message:
    return vtgate_pb2.VStreamRequest(
        tablet_type=topodata_pb2.PRIMARY,
        vgtid=binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="ks", gtid="current")]),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match="/.*")]),
        flags=vtgate_pb2.VStreamFlags(heartbeat_interval=1),
    )


def _field_with_flags() -> Message:
    return query_pb2.Field(
        name="id",
        type=query_pb2.INT64,
        table="t",
        org_table="t",
        database="vt_ks",
        org_name="id",
        column_length=20,
        charset=63,
        flags=49667,
        column_type="bigint",
    )


def _field_event_v20() -> Message:
    return binlogdata_pb2.FieldEvent(table_name="ks.t", enum_set_string_values=True, is_internal_table=True)


def _row_change_bitmaps() -> Message:
    return binlogdata_pb2.RowChange(
        data_columns=binlogdata_pb2.RowChange.Bitmap(count=3, cols=b"\x05"),
        json_partial_values=binlogdata_pb2.RowChange.Bitmap(count=1, cols=b"\x01"),
    )


def _journal() -> Message:
    return binlogdata_pb2.Journal(
        id=7,
        migration_type=binlogdata_pb2.SHARDS,
        participants=[binlogdata_pb2.KeyspaceShard(keyspace="ks", shard="0")],
    )


def _execute_request() -> Message:
    return vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(autocommit=True, target_string="ks:-80@primary"),
        query=query_pb2.BoundQuery(sql="select 1"),
    )


def _execute_response_error() -> Message:
    return vtgate_pb2.ExecuteResponse(
        error=vtrpc_pb2.RPCError(message="bad", code=vtrpc_pb2.INVALID_ARGUMENT)
    )


def _bound_query_bindvar() -> Message:
    return query_pb2.BoundQuery(
        sql="s", bind_variables={"a": query_pb2.BindVariable(type=query_pb2.INT64, value=b"1")}
    )


def _find_all_shards_response() -> Message:
    return vtctldata_pb2.FindAllShardsInKeyspaceResponse(
        shards={
            "80-": vtctldata_pb2.Shard(
                keyspace="ks",
                name="80-",
                shard=topodata_pb2.Shard(
                    primary_alias=topodata_pb2.TabletAlias(cell="zone1", uid=100),
                    key_range=topodata_pb2.KeyRange(start=b"\x80"),
                    is_primary_serving=True,
                ),
            )
        }
    )


def _srv_keyspace() -> Message:
    return topodata_pb2.SrvKeyspace(
        partitions=[
            topodata_pb2.SrvKeyspace.KeyspacePartition(
                served_type=topodata_pb2.PRIMARY,
                shard_references=[
                    topodata_pb2.ShardReference(name="-80", key_range=topodata_pb2.KeyRange(end=b"\x80"))
                ],
            )
        ]
    )


def _tablet() -> Message:
    return topodata_pb2.Tablet(
        alias=topodata_pb2.TabletAlias(cell="z", uid=1),
        port_map={"grpc": 15999},
        type=topodata_pb2.REPLICA,
        primary_term_start_time=vttime_pb2.Time(seconds=1, nanoseconds=2),
    )


def _get_tablets_request() -> Message:
    return vtctldata_pb2.GetTabletsRequest(
        keyspace="ks", shard="0", cells=["z"], strict=True, tablet_type=topodata_pb2.PRIMARY
    )


CASES: list[tuple[str, Callable[[], Message], str]] = [
    # lengths [1,-1,16] zigzag -> 02 01 20, packed under tag 0a; values under 12.
    ("row_packed_zigzag", _row_1_null_email, "0a 03 02 01 20 12 11 31" + EMAIL),
    # type 08 0c | row_event 2a | current_time a0 01 (ac 02 = 300) | keyspace b2 01 | shard ba 01
    (
        "vevent_row",
        _vevent_row,
        "08 0c 2a 10 0a 04 6b 73 2e 74 12 08 12 06 0a 01 02 12 01 37 a0 01 ac 02 b2 01 02 6b 73 ba 01 03 2d 38 30",
    ),
    # gtid 1a | commit_parent d0 01 | sequence_number d8 01 | event_gtid e2 01
    ("vevent_gtid_v23", _vevent_gtid_v23, "08 01 1a 01 67 d0 01 04 d8 01 05 e2 01 03 75 3a 35"),
    # throttled c0 01 | throttled_reason ca 01
    ("vevent_heartbeat", _vevent_heartbeat_throttled, "08 0e c0 01 01 ca 01 01 78"),
    # LASTPK = 18 (0x12); last_p_k_event aa 01
    ("vevent_lastpk", _vevent_lastpk, "08 12 aa 01 07 0a 03 0a 01 74 10 01"),
    # Field{id INT64(265 = 89 02)}; Row; QueryResult fields 0a rows 22; TableLastPK lastpk 1a; table_p_ks 22
    (
        "shard_gtid_table_p_ks",
        _shard_gtid_with_lastpk,
        "0a 02 6b 73 12 03 2d 38 30 1a 0d 4d 79 53 51 4c 35 36 2f 61 3a 31 2d 35"
        " 22 16 0a 01 74 1a 11 0a 07 0a 02 69 64 10 89 02 22 06 0a 01 02 12 01 35",
    ),
    # all eleven VStreamFlags; transaction_chunk_size tag 58, 2^20 = 80 80 40
    (
        "vstream_flags_all",
        _vstream_flags_all,
        "08 01 10 0a 18 01 22 02 7a 31 2a 01 70 32 01 6f 38 01 40 01 4a 01 61 4a 01 62 50 01 58 80 80 40",
    ),
    (
        "vstream_request",
        _vstream_request,
        "10 01 1a 0f 0a 0d 0a 02 6b 73 1a 07 63 75 72 72 65 6e 74 22 07 0a 05 0a 03 2f 2e 2a 2a 02 10 01",
    ),
    # flags 49667 = 83 84 03; charset 63 = 3f; column_length 20 = 14
    (
        "field_with_flags",
        _field_with_flags,
        "0a 02 69 64 10 89 02 1a 01 74 22 01 74 2a 05 76 74 5f 6b 73 32 02 69 64 38 14 40 3f"
        " 50 83 84 03 5a 06 62 69 67 69 6e 74",
    ),
    # enum_set_string_values = 25 -> tag c8 01; is_internal_table = 26 -> d0 01
    ("field_event_v20", _field_event_v20, "0a 04 6b 73 2e 74 c8 01 01 d0 01 01"),
    ("row_change_bitmaps", _row_change_bitmaps, "1a 05 08 03 12 01 05 22 05 08 01 12 01 01"),
    ("journal", _journal, "08 07 10 01 32 07 0a 02 6b 73 12 01 30"),
    # session: autocommit 20 01, target_string 2a; ExecuteRequest session 12, query 1a
    (
        "execute_request",
        _execute_request,
        "12 12 20 01 2a 0e 6b 73 3a 2d 38 30 40 70 72 69 6d 61 72 79 1a 0a 0a 08 73 65 6c 65 63 74 20 31",
    ),
    ("execute_response_error", _execute_response_error, "0a 07 12 03 62 61 64 18 03"),
    ("bound_query_bindvar", _bound_query_bindvar, "0a 01 73 12 0b 0a 01 61 12 06 08 89 02 12 01 31"),
    # map entry {1: "80-", 2: vtctldata.Shard{keyspace, name, shard{primary_alias, key_range, serving 38 01}}}
    (
        "find_all_shards_response",
        _find_all_shards_response,
        "0a 24 0a 03 38 30 2d 12 1d 0a 02 6b 73 12 03 38 30 2d 1a 12"
        " 0a 09 0a 05 7a 6f 6e 65 31 10 64 12 03 0a 01 80 38 01",
    ),
    ("srv_keyspace", _srv_keyspace, "0a 0e 08 01 12 0a 0a 03 2d 38 30 12 03 12 01 80"),
    # alias 0a, port_map 22 {grpc: 15999 = ff 7c}, type 40 02, primary_term_start_time 72
    (
        "tablet",
        _tablet,
        "0a 05 0a 01 7a 10 01 22 09 0a 04 67 72 70 63 10 ff 7c 40 02 72 04 08 01 10 02",
    ),
    ("get_tablets_request", _get_tablets_request, "0a 02 6b 73 12 01 30 1a 01 7a 20 01 30 01"),
]


@pytest.mark.parametrize(("make", "hexbytes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_known_bytes_roundtrip(make: Callable[[], Message], hexbytes: str) -> None:
    msg = make()
    wire = bytes.fromhex(hexbytes)
    assert msg.SerializeToString(deterministic=True) == wire
    parsed = type(msg).FromString(wire)
    assert parsed == msg
    assert parsed.SerializeToString(deterministic=True) == wire


def test_row_lengths_unpacked_form_parses() -> None:
    # Unpacked: one varint per element under tag 08 (field 1, wire type 0).
    wire = bytes.fromhex("08 02 08 01 08 20 12 11 31" + EMAIL)
    row = query_pb2.Row.FromString(wire)
    assert list(row.lengths) == [1, -1, 16]
    assert row.values == b"1alice@domain.com"
    assert row == _row_1_null_email()


def test_row_large_negative_and_positive_lengths() -> None:
    # zigzag(-2) = 3; zigzag(64) = 128 = 80 01
    row = query_pb2.Row(lengths=[-2, 64])
    assert row.SerializeToString() == bytes.fromhex("0a 03 03 80 01")


def test_unknown_upstream_fields_are_skipped() -> None:
    # Keyspace.throttler_config = 9 (omitted here) followed by sidecar_db_name = 10.
    wire = bytes.fromhex("4a 02 08 01 52 03 5f 76 74")
    ks = topodata_pb2.Keyspace.FromString(wire)
    assert ks.sidecar_db_name == "_vt"
    # RPCError field 1 (reserved legacy_code) is ignored on parse.
    err = vtrpc_pb2.RPCError.FromString(bytes.fromhex("08 05 12 01 78 18 0e"))
    assert err.message == "x"
    assert err.code == vtrpc_pb2.UNAVAILABLE


QUERY_TYPES = {
    "NULL_TYPE": 0,
    "INT8": 257,
    "UINT8": 770,
    "INT16": 259,
    "UINT16": 772,
    "INT24": 261,
    "UINT24": 774,
    "INT32": 263,
    "UINT32": 776,
    "INT64": 265,
    "UINT64": 778,
    "FLOAT32": 1035,
    "FLOAT64": 1036,
    "TIMESTAMP": 2061,
    "DATE": 2062,
    "TIME": 2063,
    "DATETIME": 2064,
    "YEAR": 785,
    "DECIMAL": 18,
    "TEXT": 6163,
    "BLOB": 10260,
    "VARCHAR": 6165,
    "VARBINARY": 10262,
    "CHAR": 6167,
    "BINARY": 10264,
    "BIT": 2073,
    "ENUM": 2074,
    "SET": 2075,
    "TUPLE": 28,
    "GEOMETRY": 2077,
    "JSON": 2078,
    "EXPRESSION": 31,
    "HEXNUM": 4128,
    "HEXVAL": 4129,
    "BITNUM": 4130,
    "VECTOR": 2083,
    "RAW": 2084,
    "ROW_TUPLE": 2085,
}


def test_query_type_values() -> None:
    values = {v.name: v.number for v in query_pb2.Type.DESCRIPTOR.values}
    assert values == QUERY_TYPES


def test_query_flag_and_mysql_flag_values() -> None:
    assert {v.name: v.number for v in query_pb2.Flag.DESCRIPTOR.values} == {
        "NONE": 0,
        "ISINTEGRAL": 256,
        "ISUNSIGNED": 512,
        "ISFLOAT": 1024,
        "ISQUOTED": 2048,
        "ISTEXT": 4096,
        "ISBINARY": 8192,
    }
    flags = {v.name: v.number for v in query_pb2.MySqlFlag.DESCRIPTOR.values}
    assert flags == {
        "EMPTY": 0,
        "NOT_NULL_FLAG": 1,
        "PRI_KEY_FLAG": 2,
        "UNIQUE_KEY_FLAG": 4,
        "MULTIPLE_KEY_FLAG": 8,
        "BLOB_FLAG": 16,
        "UNSIGNED_FLAG": 32,
        "ZEROFILL_FLAG": 64,
        "BINARY_FLAG": 128,
        "ENUM_FLAG": 256,
        "AUTO_INCREMENT_FLAG": 512,
        "TIMESTAMP_FLAG": 1024,
        "SET_FLAG": 2048,
        "NO_DEFAULT_VALUE_FLAG": 4096,
        "ON_UPDATE_NOW_FLAG": 8192,
        "NUM_FLAG": 32768,
        "PART_KEY_FLAG": 16384,
        "GROUP_FLAG": 32768,
        "UNIQUE_FLAG": 65536,
        "BINCMP_FLAG": 131072,
    }
    assert query_pb2.MySqlFlag.DESCRIPTOR.GetOptions().allow_alias
    assert query_pb2.NUM_FLAG == query_pb2.GROUP_FLAG == 32768
    pk_bigint_autoinc = (
        query_pb2.NOT_NULL_FLAG
        | query_pb2.PRI_KEY_FLAG
        | query_pb2.AUTO_INCREMENT_FLAG
        | query_pb2.PART_KEY_FLAG
        | query_pb2.NUM_FLAG
    )
    assert pk_bigint_autoinc == 49667


def test_tablet_type_aliases() -> None:
    assert topodata_pb2.TabletType.DESCRIPTOR.GetOptions().allow_alias
    assert topodata_pb2.MASTER == topodata_pb2.PRIMARY == 1
    assert topodata_pb2.BATCH == topodata_pb2.RDONLY == 3
    # The first name declared for a number wins when formatting: Vitess emits PRIMARY.
    assert topodata_pb2.TabletType.Name(1) == "PRIMARY"
    assert topodata_pb2.TabletType.Name(3) == "RDONLY"
    assert topodata_pb2.TabletType.Value("MASTER") == 1
    assert {v.name: v.number for v in topodata_pb2.TabletType.DESCRIPTOR.values} == {
        "UNKNOWN": 0,
        "PRIMARY": 1,
        "MASTER": 1,
        "REPLICA": 2,
        "RDONLY": 3,
        "BATCH": 3,
        "SPARE": 4,
        "EXPERIMENTAL": 5,
        "BACKUP": 6,
        "RESTORE": 7,
        "DRAINED": 8,
    }


def test_vevent_type_values() -> None:
    names = [
        "UNKNOWN",
        "GTID",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "DDL",
        "INSERT",
        "REPLACE",
        "UPDATE",
        "DELETE",
        "SET",
        "OTHER",
        "ROW",
        "FIELD",
        "HEARTBEAT",
        "VGTID",
        "JOURNAL",
        "VERSION",
        "LASTPK",
        "SAVEPOINT",
        "COPY_COMPLETED",
        "PREVIOUS_GTIDS",
        "ROWS_QUERY",
    ]
    assert {v.name: v.number for v in binlogdata_pb2.VEventType.DESCRIPTOR.values} == {
        n: i for i, n in enumerate(names)
    }


def test_small_enums() -> None:
    assert [(v.name, v.number) for v in vtrpc_pb2.Code.DESCRIPTOR.values] == [
        ("OK", 0),
        ("CANCELED", 1),
        ("UNKNOWN", 2),
        ("INVALID_ARGUMENT", 3),
        ("DEADLINE_EXCEEDED", 4),
        ("NOT_FOUND", 5),
        ("ALREADY_EXISTS", 6),
        ("PERMISSION_DENIED", 7),
        ("RESOURCE_EXHAUSTED", 8),
        ("FAILED_PRECONDITION", 9),
        ("ABORTED", 10),
        ("OUT_OF_RANGE", 11),
        ("UNIMPLEMENTED", 12),
        ("INTERNAL", 13),
        ("UNAVAILABLE", 14),
        ("DATA_LOSS", 15),
        ("UNAUTHENTICATED", 16),
        ("CLUSTER_EVENT", 17),
        ("READ_ONLY", 18),
    ]
    assert binlogdata_pb2.MigrationType.Value("SHARDS") == 1
    assert binlogdata_pb2.Filter.FieldEventMode.Value("BEST_EFFORT") == 1
    assert vtgate_pb2.TransactionMode.Value("TWOPC") == 3
    assert topodata_pb2.KeyspaceType.Value("SNAPSHOT") == 1


def _file_proto(module: Any) -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fdp)
    return fdp


def _message(fdp: descriptor_pb2.FileDescriptorProto, name: str) -> descriptor_pb2.DescriptorProto:
    return next(m for m in fdp.message_type if m.name == name)


def _reserved(msg: descriptor_pb2.DescriptorProto) -> set[int]:
    return {n for r in msg.reserved_range for n in range(r.start, r.end)}


def test_packages_and_reserved_numbers() -> None:
    for module, package in [
        (binlogdata_pb2, "binlogdata"),
        (query_pb2, "query"),
        (topodata_pb2, "topodata"),
        (vtgate_pb2, "vtgate"),
        (vtgateservice_pb2, "vtgateservice"),
        (vtrpc_pb2, "vtrpc"),
        (vttime_pb2, "vttime"),
        (vtctldata_pb2, "vtctldata"),
        (vtctlservice_pb2, "vtctlservice"),
    ]:
        assert module.DESCRIPTOR.package == package
        assert _file_proto(module).syntax == "proto3"
    rpc_error = _message(_file_proto(vtrpc_pb2), "RPCError")
    assert _reserved(rpc_error) == {1}
    assert list(rpc_error.reserved_name) == ["legacy_code"]
    assert _reserved(_message(_file_proto(query_pb2), "QueryResult")) == {5}
    topo = _file_proto(topodata_pb2)
    assert _reserved(_message(topo, "Keyspace")) == {1, 2, 3, 4}
    assert _reserved(_message(topo, "Shard")) == {3, 5}
    assert _reserved(_message(topo, "SrvKeyspace")) == {2, 3, 4, 5}
    vtg = _file_proto(vtgate_pb2)
    assert _reserved(_message(vtg, "Session")) == {3}
    assert _reserved(_message(vtg, "ExecuteRequest")) == {4, 5, 6, 7}
    assert _reserved(_message(vtg, "StreamExecuteRequest")) == {3, 4, 5}


def test_field_numbers_of_key_messages() -> None:
    def numbers(desc: Any) -> dict[str, int]:
        return {f.name: f.number for f in desc.fields}

    assert numbers(vtgate_pb2.VStreamFlags.DESCRIPTOR) == {
        "minimize_skew": 1,
        "heartbeat_interval": 2,
        "stop_on_reshard": 3,
        "cells": 4,
        "cell_preference": 5,
        "tablet_order": 6,
        "stream_keyspace_heartbeats": 7,
        "include_reshard_journal_events": 8,
        "tables_to_copy": 9,
        "exclude_keyspace_from_table_name": 10,
        "transaction_chunk_size": 11,
    }
    assert numbers(binlogdata_pb2.VEvent.DESCRIPTOR) == {
        "type": 1,
        "timestamp": 2,
        "gtid": 3,
        "statement": 4,
        "row_event": 5,
        "field_event": 6,
        "vgtid": 7,
        "journal": 8,
        "dml": 9,
        "current_time": 20,
        "last_p_k_event": 21,
        "keyspace": 22,
        "shard": 23,
        "throttled": 24,
        "throttled_reason": 25,
        "commit_parent": 26,
        "sequence_number": 27,
        "event_gtid": 28,
    }
    assert numbers(binlogdata_pb2.FieldEvent.DESCRIPTOR) == {
        "table_name": 1,
        "fields": 2,
        "keyspace": 3,
        "shard": 4,
        "enum_set_string_values": 25,
        "is_internal_table": 26,
    }
    assert numbers(binlogdata_pb2.TableLastPK.DESCRIPTOR) == {"table_name": 1, "lastpk": 3}
    assert numbers(vtgate_pb2.Session.DESCRIPTOR)["target_string"] == 5
    # upstream vtgate.proto (main): ShardSession 5 is vindex_only, ExecuteRequest 8 is prepared
    assert numbers(vtgate_pb2.Session.ShardSession.DESCRIPTOR) == {
        "target": 1, "transaction_id": 2, "tablet_alias": 3, "reserved_id": 4, "vindex_only": 5, "rows_affected": 6,
    }
    assert numbers(vtgate_pb2.ExecuteRequest.DESCRIPTOR) == {"caller_id": 1, "session": 2, "query": 3, "prepared": 8}
    lengths = query_pb2.Row.DESCRIPTOR.fields_by_name["lengths"]
    assert lengths.type == lengths.TYPE_SINT64
    assert lengths.is_packed


class _RecordingChannel:
    """Stands in for grpc.Channel: records the method path and call kind per stub attribute."""

    def __init__(self) -> None:
        self.calls: dict[str, str] = {}

    def _record(self, kind: str) -> Callable[..., object]:
        def factory(method: str, *args: object, **kwargs: object) -> object:
            self.calls[method] = kind
            return object()

        return factory

    def __getattr__(self, name: str) -> Callable[..., object]:
        if name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            return self._record(name)
        raise AttributeError(name)


def test_grpc_method_paths_from_stubs() -> None:
    channel = _RecordingChannel()
    vtgateservice_pb2_grpc.VitessStub(channel)
    assert channel.calls == {
        "/vtgateservice.Vitess/Execute": "unary_unary",
        "/vtgateservice.Vitess/StreamExecute": "unary_stream",
        "/vtgateservice.Vitess/VStream": "unary_stream",
    }
    channel = _RecordingChannel()
    vtctlservice_pb2_grpc.VtctldStub(channel)
    assert channel.calls == {
        f"/vtctlservice.Vtctld/{m}": "unary_unary"
        for m in (
            "GetKeyspace",
            "GetKeyspaces",
            "FindAllShardsInKeyspace",
            "GetShard",
            "GetSrvKeyspaces",
            "GetTablets",
        )
    }


def test_grpc_method_paths_from_descriptors() -> None:
    vitess = vtgateservice_pb2.DESCRIPTOR.services_by_name["Vitess"]
    assert vitess.full_name == "vtgateservice.Vitess"
    vstream = vitess.methods_by_name["VStream"]
    assert f"/{vitess.full_name}/{vstream.name}" == "/vtgateservice.Vitess/VStream"
    assert vstream.input_type.full_name == "vtgate.VStreamRequest"
    assert vstream.output_type.full_name == "vtgate.VStreamResponse"
    assert vstream.server_streaming and not vstream.client_streaming
    execute = vitess.methods_by_name["Execute"]
    assert not execute.server_streaming
    assert execute.input_type.full_name == "vtgate.ExecuteRequest"
    vtctld = vtctlservice_pb2.DESCRIPTOR.services_by_name["Vtctld"]
    fas = vtctld.methods_by_name["FindAllShardsInKeyspace"]
    assert fas.input_type.full_name == "vtctldata.FindAllShardsInKeyspaceRequest"
    assert not fas.server_streaming
