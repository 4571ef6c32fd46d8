"""Execute/StreamExecute SELECTs are served from pre-encoded rows (the shard stores' row cache):
the bytes on the wire must equal the message-built responses of the previous path exactly, for
every column type, every `included_fields` mode, cold and cached, and after every kind of write.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from vitessapi import query_pb2, vtgate_pb2
from vtgatesim import VTGateSim, mysqltypes
from vtgatesim.executor import Result
from vtgatesim.server import _result_proto

# (DDL type, stored-from value): one column per type of the rendering matrix
# (tests/unit/devkit/test_vtgatesim_mysqltypes.py RENDER), edge values included.
TYPES: list[tuple[str, list[object]]] = [
    ("tinyint", [-128, 127]), ("tinyint unsigned", [255]), ("tinyint(1)", [True]),
    ("smallint", [-32768]), ("mediumint unsigned", [16777215]), ("int", [-2147483648, 42]),
    ("int unsigned", [4294967295]), ("bigint", [-9223372036854775808, 9223372036854775807]),
    ("bigint unsigned", [18446744073709551615, 9223372036854775808]), ("int(5) zerofill", [42]),
    ("decimal(10,2)", [1.5, "-0.001", decimal.Decimal("99999999.99")]), ("decimal(65,30)", ["1"]),
    ("decimal(8,3) zerofill", ["1.5"]),
    ("float", [3.99, 123456789, -0.000123]), ("float(7,4)", [3.14159]),
    ("double", [1e20, 0.1, 123456789012345680000.0, 1e-15, 0.0]),
    ("year", [2012, 0]), ("date", ["2012-01-01", dt.date(1999, 12, 31), "0000-00-00"]),
    ("datetime", ["2012-01-01T15:45:45.6"]), ("datetime(3)", [dt.datetime(2012, 1, 1, 23, 59, 59, 999600)]),
    ("datetime(6)", ["2012-01-01 15:45:45.1234567"]), ("timestamp", ["2038-01-19 03:14:07"]),
    ("timestamp(3)", ["2020-02-13 01:02:03.5"]),
    ("time", ["-838:59:59", dt.time(7, 8, 9)]), ("time(2)", [dt.timedelta(hours=-1, seconds=-0.25)]),
    ("char(4)", ["ab  ", ""]), ("varchar(4)", ["été", "😀"]), ("varchar(4) character set latin1", ["€"]),
    ("text", ["h"]), ("varchar(8) collate utf8mb4_bin", ["Bin"]),
    ("binary(4)", [b"d"]), ("varbinary(4)", [b"\x00\xff"]), ("blob", [b"f\x00"]),
    ("bit(1)", [1, 0]), ("bit(12)", [0xABC]), ("bit(64)", [2**64 - 1]),
    ("enum('small','Medium')", ["MEDIUM"]), ("set('a','b','c')", ["c,a", ""]),
    ("json", ['{"bb":[1,2],"a":1}', '"vt\\nTablet"', '18446744073709551615']),
]
COLS = [f"c{i}" for i in range(len(TYPES))]
_KIND = {t: i for i, (t, _) in enumerate(TYPES)}
INT, TEXT, DEC, YEAR = (COLS[_KIND[t]] for t in ("int", "text", "decimal(10,2)", "year"))
DDL = ("create table allt (id bigint not null, " + ", ".join(f"{c} {t}" for c, (t, _) in zip(COLS, TYPES, strict=True))
       + ", primary key (id))")
EXTRA = 700  # plain rows on top of the matrix: several 256-row StreamExecute batches
SELECTS = ["select * from allt", "select * from allt where id >= 3 and id < 650",
           f"select id, c0, {DEC} as dec, {YEAR} from allt where id < 300 order by id desc",
           f"select count(*), min({DEC}), max({TEXT}), sum({INT}) from allt"]
INCLUDED = [query_pb2.ExecuteOptions.ALL, query_pb2.ExecuteOptions.TYPE_AND_NAME, query_pb2.ExecuteOptions.TYPE_ONLY]


def _load(sim: VTGateSim) -> None:
    """The type matrix (row per value, other columns NULL; one all-NULL row; one row with every
    column set) plus EXTRA rows, straight into the shard store as the bench loader does."""
    sim.create_keyspace("ks", ddl=[DDL])
    shard = sim.topo.keyspace("ks").shards["0"]
    schema = shard.store.table("allt")
    assert schema is not None
    cts = [c.ct for c in schema.columns]
    rows: list[list[object]] = [[1] + [None] * len(TYPES), [2] + [vals[0] for _, vals in TYPES]]
    for i, (_, vals) in enumerate(TYPES):
        for v in vals:
            r: list[object] = [len(rows) + 1] + [None] * len(TYPES)
            r[i + 1] = v
            rows.append(r)
    for _ in range(EXTRA):
        r = [len(rows) + 1] + [None] * len(TYPES)
        r[1 + _KIND["int"]], r[1 + _KIND["text"]] = len(rows) * 7, f"r{len(rows)}"
        rows.append(r)
    with sim.topo.lock:
        shard.store.insert_many(schema, [tuple(mysqltypes.normalize(ct, v) for ct, v in zip(cts, r, strict=True))
                                         for r in rows])


# --- the previous path: messages built with the generated classes (server._result_proto, the reference)


def reference_stream(sim: VTGateSim, sql: str, included: int) -> list[bytes]:
    res = sim.execute(sql, "ks:0")
    out = [vtgate_pb2.StreamExecuteResponse(result=_result_proto(Result(fields=res.fields), included))]
    for i in range(0, len(res.rows), 256):
        out.append(vtgate_pb2.StreamExecuteResponse(result=_result_proto(Result(rows=res.rows[i:i + 256]), included)))
    return [m.SerializeToString() for m in out]


def reference_execute(sim: VTGateSim, session: vtgate_pb2.Session, sql: str) -> bytes:
    res = sim.execute(sql, session.target_string)
    return vtgate_pb2.ExecuteResponse(session=session,
                                      result=_result_proto(res, session.options.included_fields)).SerializeToString()


# --- raw bytes off the wire


@pytest.fixture(name="sim")
def sim_fixture() -> Iterator[VTGateSim]:
    s = VTGateSim().start()
    try:
        _load(s)
        yield s
    finally:
        s.stop()


@pytest.fixture(name="channel")
def channel_fixture(sim: VTGateSim) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(sim.address)
    try:
        yield ch
    finally:
        ch.close()


def _session(included: int) -> vtgate_pb2.Session:
    return vtgate_pb2.Session(target_string="ks:0@primary", autocommit=True, SessionUUID="fixed-uuid",
                              options=query_pb2.ExecuteOptions(included_fields=included))


def wire_stream(channel: grpc.Channel, sql: str, included: int, binds: dict[str, int] | None = None) -> list[bytes]:
    call = channel.unary_stream("/vtgateservice.Vitess/StreamExecute",
                                request_serializer=vtgate_pb2.StreamExecuteRequest.SerializeToString,
                                response_deserializer=None)
    query = query_pb2.BoundQuery(sql=sql, bind_variables={
        k: query_pb2.BindVariable(type=query_pb2.INT64, value=str(v).encode()) for k, v in (binds or {}).items()})
    return list(call(vtgate_pb2.StreamExecuteRequest(session=_session(included), query=query), timeout=30))


def wire_execute(channel: grpc.Channel, sql: str, included: int) -> bytes:
    call = channel.unary_unary("/vtgateservice.Vitess/Execute",
                               request_serializer=vtgate_pb2.ExecuteRequest.SerializeToString,
                               response_deserializer=None)
    out: bytes = call(vtgate_pb2.ExecuteRequest(session=_session(included), query=query_pb2.BoundQuery(sql=sql)),
                      timeout=30)
    return out


def _check_all(sim: VTGateSim, channel: grpc.Channel) -> None:
    for sql in SELECTS:
        for inc in INCLUDED:
            assert wire_stream(channel, sql, inc) == reference_stream(sim, sql, inc), (sql, inc)
            assert wire_execute(channel, sql, inc) == reference_execute(sim, _session(inc), sql), (sql, inc)


def _cache(sim: VTGateSim) -> dict[Any, bytes]:
    return sim.topo.keyspace("ks").shards["0"].store.row_cache.get("allt", {})


def test_bytes_equal_previous_path_cold_and_cached(sim: VTGateSim, channel: grpc.Channel) -> None:
    assert not _cache(sim)
    _check_all(sim, channel)  # cold: renders and fills the cache
    assert len(_cache(sim)) == 2 + sum(len(v) for _, v in TYPES) + EXTRA
    _check_all(sim, channel)  # from the cache
    # the response really is the streamed shape: fields first, then full 256-row batches
    parts = [vtgate_pb2.StreamExecuteResponse.FromString(b) for b in wire_stream(channel, SELECTS[0], 0)]
    assert len(parts[0].result.fields) == len(TYPES) + 1 and not parts[0].result.rows
    n = len(_cache(sim))
    assert n > 512 and n % 256
    assert [len(p.result.rows) for p in parts[1:]] == [256] * (n // 256) + [n % 256]


def test_every_write_invalidates(sim: VTGateSim, channel: grpc.Channel) -> None:
    _check_all(sim, channel)
    writes = [
        f"update allt set {TEXT} = 'chg', {DEC} = 2.25 where id = 5",
        "update allt set id = 100000 where id = 6",  # primary-key change
        "delete from allt where id in (7, 8)",
        "replace into allt (id, c0) values (9, 1)",
        "insert into allt (id, c0) values (9, 2) on duplicate key update c0 = 3",
        f"insert into allt (id, {TEXT}) values (100001, 'new')",
        f"update allt set {TEXT} = 'CHG' where id = 5",
    ]
    for w in writes:
        sim.execute(w, "ks:0")
        _check_all(sim, channel)
    sim.execute("alter table allt add column extra varchar(10) default 'dflt'", "ks:0")
    assert not _cache(sim)  # a schema change drops the table's cache
    _check_all(sim, channel)
    # a transaction that is rolled back leaves the rows (and their renderings) as they were
    sim.executor.execute_batch([(f"update allt set {TEXT} = 'gone' where id = 10", "ks:0", {})], commit=False)
    _check_all(sim, channel)


@pytest.mark.parametrize("warm", [False, True])
def test_stream_is_one_snapshot(sim: VTGateSim, warm: bool) -> None:
    """A stream started before a write sends the rows as they were when it read them, even when
    another read fills the cache with the new rendering meanwhile; the stale rendering is not cached."""
    sql = "select * from allt where id >= 700"
    ex = sim.executor
    if warm:
        list(_flat(ex.stream_select(sql, "ks:0")))
    before = sim.execute(sql, "ks:0").rows
    first = ex.stream_select(sql, "ks:0")  # read now, rendered lazily
    assert first is not None
    sim.execute(f"update allt set {TEXT} = 'after' where id = 720", "ks:0")
    after = sim.execute(sql, "ks:0").rows
    assert list(_flat(ex.stream_select(sql, "ks:0"))) == [_row(r) for r in after]  # fills the cache
    assert list(_flat(first)) == [_row(r) for r in before]  # the old snapshot
    assert list(_flat(ex.stream_select(sql, "ks:0"))) == [_row(r) for r in after]


def _flat(stream: Any) -> Iterator[bytes]:
    for batch in stream.batches:
        yield from batch


def _row(values: list[bytes | None]) -> bytes:
    return query_pb2.QueryResult(rows=[query_pb2.Row(lengths=[-1 if v is None else len(v) for v in values],
                                                     values=b"".join(v for v in values if v is not None))]
                                 ).SerializeToString()


def _select_raw_calls(sim: VTGateSim, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each SQLite read of the executor (its ``keys_only`` flag) from now on."""
    ex = sim.executor
    calls: list[bool] = []
    real = ex.select_raw

    def spy(*args: Any, keys_only: bool = False) -> Any:
        calls.append(keys_only)
        return real(*args, keys_only=keys_only)

    monkeypatch.setattr(ex, "select_raw", spy)
    return calls


def test_a_warm_whole_row_read_reads_only_the_keys(sim: VTGateSim, channel: grpc.Channel,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``SELECT *`` of a warm table with an integer primary key and no other index reads the keys
    alone (the rows come from the cache, in the same order); a table with a unique index, a column
    list, or a cold cache reads whole rows. The bytes equal the reference path either way."""
    calls = _select_raw_calls(sim, monkeypatch)
    sql = "select * from allt where id >= 3 and id < 650"
    assert wire_stream(channel, sql, 0) == reference_stream(sim, sql, 0)  # cold: whole rows, fills the cache
    calls.clear()
    assert wire_stream(channel, sql, 0) == reference_stream(sim, sql, 0)
    assert calls[0] is True  # the wire read (the reference's own Execute follows)
    calls.clear()
    assert wire_stream(channel, SELECTS[2], 0) == reference_stream(sim, SELECTS[2], 0)
    assert calls[0] is False  # a column list
    sim.execute("create table uk (id bigint not null, name varchar(8), primary key (id), unique key n (name))", "ks:0")
    for i, name in enumerate(["d", "b", "c", "a"], 1):
        sim.execute(f"insert into uk (id, name) values ({i}, '{name}')", "ks:0")
    for _ in range(2):  # cold, then warm
        calls.clear()
        assert wire_stream(channel, "select * from uk", 0) == reference_stream(sim, "select * from uk", 0)
        assert calls[0] is False


def test_range_reads_of_a_warm_unchanged_table_use_the_key_index(sim: VTGateSim, channel: grpc.Channel,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill chunk's read (``SELECT *`` with only ``pk >= lo`` / ``pk < hi``) of a table whose
    rows are all cached and unchanged since the previous read is served from the shard's key index
    without touching SQLite; the bytes equal the reference path for every range shape. A write, a
    different condition, or a LIMIT goes back to reading SQLite, and the bytes stay right."""
    ex = sim.executor
    calls = _select_raw_calls(sim, monkeypatch)
    n = len(list(_flat(ex.stream_select("select * from allt", "ks:0"))))  # cold: fills the cache
    assert n == len(_cache(sim))
    ranges = [(None, None), (3, 650), (None, 300), (650, None), (1, 2), (5, 5), (10, 3), (-5, 1), (n, n + 10),
              (0, n + 1000), (257, 257 + 512)]

    def sql_of(lo: int | None, hi: int | None) -> tuple[str, dict[str, int]]:
        parts, binds = [], {}
        if lo is not None:
            parts.append("id >= :lo0")
            binds["lo0"] = lo
        if hi is not None:
            parts.append("`id` < :hi0")
            binds["hi0"] = hi
        return "select * from allt" + (" where " + " and ".join(parts) if parts else ""), binds

    def literal(sql: str, binds: dict[str, int]) -> str:
        for k, v in binds.items():
            sql = sql.replace(":" + k, str(v))
        return sql

    sql, binds = sql_of(3, 650)
    wire_stream(channel, sql, 0, binds)  # the first look at the unchanged table: keys-only path
    for lo, hi in ranges:
        sql, binds = sql_of(lo, hi)
        calls.clear()
        got = wire_stream(channel, sql, 0, binds)
        assert calls == [], (lo, hi)  # nothing read from SQLite
        assert got == reference_stream(sim, literal(sql, binds), 0), (lo, hi)
        calls.clear()
        assert wire_stream(channel, literal(sql, binds), 0) == got  # literals take the same path
        assert calls == []

    # Anything else reads SQLite: another condition, a LIMIT, an ORDER BY, a non-integer bound.
    for sql in ["select * from allt where id >= 3 and id < 650 and c0 is null", "select * from allt where id < 650 limit 5",
                "select * from allt where id >= 700 order by id", "select * from allt where id >= '3'",
                "select * from allt where id > 3", "select * from allt where id >= 3 or id < 650"]:
        calls.clear()
        got = wire_stream(channel, sql, 0)
        assert calls, sql  # the wire read went to SQLite
        assert got == reference_stream(sim, sql, 0), sql

    # A write makes the index stale: the next reads take SQLite again and see the write.
    sim.execute("delete from allt where id = 400", "ks:0")
    sim.execute(f"update allt set {TEXT} = 'moved' where id = 401", "ks:0")
    sql, binds = sql_of(300, 500)
    for expected in ([True, False], [True], []):  # keys miss a row: whole rows; first look; the rebuilt index
        calls.clear()
        got = wire_stream(channel, sql, 0, binds)
        assert calls == expected
        assert got == reference_stream(sim, literal(sql, binds), 0)
    flat = b"".join(got)
    assert b"moved" in flat
