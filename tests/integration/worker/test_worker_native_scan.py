"""The raw-bytes fast path of the streaming stage is the parsed path, record for record.

``StreamProcessor.process`` takes a VStreamResponse either parsed by upb (``SHARDCDC_NATIVE=0`` or
no extension) or as the raw bytes gRPC received, scanned by ``cdcworker._rowenc.scan`` (ROW events
go to the native encoder as serialized RowChanges, ``TablePlan.send_rows`` writes the records).
These tests feed the same responses both ways and compare every record (topic, key, value, headers,
partition), every commit point, and the transaction metadata; plus the scanner against upb on odd
encodings, the masked-column constant op, and the incremental epoch map.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from events_fixtures import delete, field, field_event, insert, update
from worker_fixtures import RecordingSink

from cdcworker.events import EncoderConfig, native
from cdcworker.offsets import Vgtid
from cdcworker.offsets.vgtid import ShardGtid
from cdcworker.streaming import Features, StreamProcessor
from cdcworker.txmeta import TransactionMonitor
from cdcworker.txmeta.epoch import EpochError, EpochProvider, ShardEpochMap, next_epoch_map
from cdcworker.txmeta.monitor import TxMetaOptions
from vitessapi import binlogdata_pb2, query_pb2, vtgate_pb2


@pytest.fixture(autouse=True)
def _native_built() -> None:
    """These tests compare the native scanner with upb: without the extension they must fail, not pass."""
    assert native.available(), "the native extension is not built: run `make native`"

_T = binlogdata_pb2.VEventType
UUID_A = "0b7e9d2a-1111-2222-3333-444455556666"
UUID_B = "9f0c1d2e-aaaa-bbbb-cccc-ddddeeeeffff"


def _fields() -> list[query_pb2.Field]:
    return [
        field("id", "INT64", "bigint", flags=1 | 2),  # NOT_NULL | PRI_KEY
        field("name", "VARCHAR", "varchar(64)"),
        field("secret", "VARCHAR", "varchar(64)"),
        field("price", "DECIMAL", "decimal(10,2)", decimals=2),
        field("at", "DATETIME", "datetime(3)", decimals=3),
        field("score", "FLOAT64", "double"),
    ]


def _row(rng: random.Random, i: int) -> list[bytes | None]:
    name = rng.choice([b"plain", "\u00e9t\u00e9 \u2028".encode(), b"quote\" back\\slash \x01", b"", None])
    return [
        str(i).encode(),
        name,
        rng.choice([b"hidden", None, b""]),
        rng.choice([b"12.50", b"-0.01", None]),
        rng.choice([b"2024-05-06 07:08:09.123", b"0000-00-00 00:00:00", None]),
        rng.choice([b"1.5", b"-0", b"1e300", b"nan", None]),
    ]


def _vgtid(gtids: dict[str, str]) -> binlogdata_pb2.VGtid:
    return binlogdata_pb2.VGtid(
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace="ks", shard=s, gtid=g) for s, g in sorted(gtids.items())]
    )


def _workload(seed: int, transactions: int = 40) -> Iterator[vtgate_pb2.VStreamResponse]:
    """Mixed transactions over two shards: inserts, updates (same and new key), deletes, a FIELD
    change, empty transactions, OTHER, DDL and a heartbeat; responses split at random points."""
    rng = random.Random(seed)
    seq = {"-80": 10, "80-": 20}
    events: list[binlogdata_pb2.VEvent] = []
    for shard in seq:
        events.append(binlogdata_pb2.VEvent(type=_T.FIELD, field_event=field_event("ks.t", _fields(), "ks", shard), shard=shard))
    next_id = 1
    for n in range(transactions):
        shard = rng.choice(list(seq))
        seq[shard] += 1
        ts = 1_700_000_000 + n
        events.append(binlogdata_pb2.VEvent(type=_T.BEGIN, timestamp=ts, shard=shard))
        if n == 17:  # a new FIELD mid-stream (column added) replaces the plan
            events.append(binlogdata_pb2.VEvent(
                type=_T.FIELD, shard=shard,
                field_event=field_event("ks.t", [*_fields(), field("extra", "INT32", "int")], "ks", shard),
            ))
        changes = []
        for _ in range(rng.randint(0, 6)):
            kind = rng.random()
            row = _row(rng, next_id)
            if n >= 17 and shard in {e.shard for e in events if e.type == _T.FIELD and len(e.field_event.fields) == 7}:
                row.append(b"7")
            if kind < 0.55:
                changes.append(insert(*row))
                next_id += 1
            elif kind < 0.75:
                changes.append(update(row, [row[0], b"new", *row[2:]]))
            elif kind < 0.85:
                changes.append(update(row, [str(next_id + 1000).encode(), *row[1:]]))  # key change
            else:
                changes.append(delete(*row))
        if changes:
            # Sometimes split one transaction's rows over two ROW events.
            cut = rng.randint(0, len(changes))
            for part in (changes[:cut], changes[cut:]):
                if part:
                    events.append(binlogdata_pb2.VEvent(
                        type=_T.ROW, shard=shard,
                        row_event=binlogdata_pb2.RowEvent(table_name="ks.t", keyspace="ks", shard=shard, row_changes=part),
                    ))
        gtids = {s: f"MySQL56/{UUID_A}:1-{q}" for s, q in seq.items()}
        events.append(binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=_vgtid(gtids), shard=shard))
        if n % 11 == 5:
            events.append(binlogdata_pb2.VEvent(type=_T.DDL, timestamp=ts, statement="alter table t", shard=shard))
        elif n % 13 == 7:
            events.append(binlogdata_pb2.VEvent(type=_T.OTHER, timestamp=ts, shard=shard))
        else:
            events.append(binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=ts, shard=shard))
        if n % 9 == 0:
            events.append(binlogdata_pb2.VEvent(type=_T.HEARTBEAT, timestamp=ts))
    while events:
        k = rng.randint(1, 12)
        yield vtgate_pb2.VStreamResponse(events=events[:k])
        events = events[k:]


def _run(responses: list[vtgate_pb2.VStreamResponse], raw: bool, txmeta: bool) -> RecordingSink:
    sink = RecordingSink()
    start = Vgtid((ShardGtid("ks", "-80", f"MySQL56/{UUID_A}:1-10"), ShardGtid("ks", "80-", f"MySQL56/{UUID_A}:1-20")))
    features = Features()
    if txmeta:
        features.txmeta = TransactionMonitor(TxMetaOptions(topic="p.transaction", ordered=True), None, start)
    proc = StreamProcessor(EncoderConfig("p", headers=(("h", b"v"),)), sink, start, features=features)
    for r in responses:
        proc.process(r.SerializeToString() if raw else r)
    return sink


@pytest.mark.parametrize("txmeta", [False, True], ids=["core", "ordered-txmeta"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_raw_bytes_give_the_parsed_path_records_and_positions(seed: int, txmeta: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_123_456_789)  # processing timestamps
    responses = list(_workload(seed))
    raw = _run(responses, raw=True, txmeta=txmeta)
    parsed = _run(responses, raw=False, txmeta=txmeta)
    monkeypatch.setenv(native.ENV, "0")  # the pure-Python encoder, parsed responses: the reference
    python = _run(responses, raw=False, txmeta=txmeta)
    assert len(raw.records) > 100
    for got in (raw, parsed):
        assert [r[:4] for r in got.records] == [r[:4] for r in python.records]
        assert [r[4] for r in got.records] == [r[4] for r in python.records]
        assert got.points == python.points
    if txmeta:
        assert any(r[0] == "p.transaction" for r in raw.records)
        assert any(b'"transaction_epoch":' in (r[3] or b"") for r in raw.records)


def _events(data: bytes) -> list[binlogdata_pb2.VEvent]:
    return list(vtgate_pb2.VStreamResponse.FromString(data).events)


def test_scan_matches_upb_event_for_event() -> None:
    from cdcworker._rowenc import scan  # type: ignore[attr-defined]

    for resp in _workload(7, transactions=30):
        data = resp.SerializeToString()
        items = scan(data)
        upb = _events(data)
        assert len(items) == len(upb)
        for item, ev in zip(items, upb, strict=True):
            assert binlogdata_pb2.VEvent.FromString(data[item[1] : item[2]]) == ev
            assert item[0] == ev.type
            if ev.type == _T.ROW:
                _, _, _, table, shard, internal, rcs = item
                re = ev.row_event
                assert (table, shard, internal) == (re.table_name, re.shard or ev.shard, re.is_internal_table)
                assert [binlogdata_pb2.RowChange.FromString(b) for b in rcs] == list(re.row_changes)
            elif ev.type in (_T.BEGIN, _T.COMMIT):
                assert item[3:] == (ev.timestamp, ev.shard)
            else:
                assert len(item) == 3


def _tag(field_no: int, wire: int) -> bytes:
    return bytes([field_no << 3 | wire]) if field_no < 16 else bytes([(field_no << 3 | wire) & 0x7F | 0x80, field_no >> 4])


def _ld(field_no: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return _tag(field_no, 2) + bytes([len(payload)]) + payload


def test_scan_leaves_unusual_encodings_to_upb() -> None:
    """Repeated sub-messages (merged by protobuf), unknown fields, the shard only on the VEvent,
    invalid UTF-8 and truncation: the scanner either agrees with upb or hands the event over."""
    from cdcworker._rowenc import scan  # type: ignore[attr-defined]

    rc = binlogdata_pb2.RowChange(after=query_pb2.Row(lengths=[1], values=b"1")).SerializeToString()
    row_event = _ld(1, b"ks.t") + _ld(2, rc) + _ld(4, b"-80")
    # Two row_event fields: protobuf merges them (row_changes appended) -> generic item.
    twice = _tag(1, 0) + bytes([_T.ROW]) + _ld(5, row_event) + _ld(5, _ld(2, rc))
    # Unknown fields everywhere, shard only on the VEvent (field 23).
    unknown = _tag(1, 0) + bytes([_T.ROW]) + _ld(5, _ld(1, b"ks.t") + _ld(2, rc) + _ld(9, b"zz")) + _ld(23, b"80-") + _ld(15, b"x")
    # Invalid UTF-8 in the table name: upb refuses it, so must we (generic item, upb raises).
    bad_utf8 = _tag(1, 0) + bytes([_T.ROW]) + _ld(5, _ld(1, b"\xff\xfe") + _ld(2, rc))
    for ev_bytes, expect in [(twice, "generic"), (unknown, "row"), (bad_utf8, "generic")]:
        data = _ld(1, ev_bytes)
        items = scan(data)
        assert len(items) == 1
        if expect == "generic":
            assert len(items[0]) == 3
        else:
            _, _, _, table, shard, internal, rcs = items[0]
            ev = _events(data)[0]
            assert (table, shard, internal, rcs) == ("ks.t", "80-", False, [rc])
            assert [x.SerializeToString() for x in ev.row_event.row_changes] == rcs
    # BEGIN / COMMIT: timestamp and shard read, negative times as int64, the last value of a
    # repeated scalar wins as in protobuf; a sub-message, a timestamp of another wire type or a
    # shard that is not UTF-8 leave the event to upb.
    def event(*fields: bytes) -> bytes:
        return _ld(1, b"".join(fields))

    ts = binlogdata_pb2.VEvent(timestamp=-7).SerializeToString()
    commit = _tag(1, 0) + bytes([_T.COMMIT])
    cases = [
        (event(_tag(1, 0) + bytes([_T.BEGIN]), ts, _ld(23, b"-80")), (_T.BEGIN, -7, "-80")),
        (event(commit, _tag(2, 0) + b"\x05", _tag(2, 0) + b"\x09", _ld(22, b"ks")), (_T.COMMIT, 9, "")),
        (event(commit, _ld(7, b"")), None),
        (event(commit, _ld(2, b"\x05")), None),
        (event(commit, _ld(23, b"\xff")), None),
    ]
    for data, expect in cases:
        items = scan(data)
        assert len(items) == 1
        if expect is None:
            assert len(items[0]) == 3
            continue
        ev = binlogdata_pb2.VEvent.FromString(data[items[0][1] : items[0][2]])
        assert (items[0][0], items[0][3], items[0][4]) == expect == (ev.type, ev.timestamp, ev.shard)
    whole = vtgate_pb2.VStreamResponse(events=[binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=5)]).SerializeToString()
    assert scan(whole[:-1]) is None  # truncated: the caller lets upb raise
    assert scan(b"") == []


def _vgtid_commits(shards: int) -> Iterator[tuple[str, vtgate_pb2.VStreamResponse]]:
    """VGTID + COMMIT responses over ``shards`` shards, one shard moving per commit, then the odd
    cases: copy progress (table_p_ks) on one entry and gone again, a shard added, one removed, the
    order changed, a shard renamed in place, a GTID that needs JSON escapes, and a duplicate shard
    (twice: the second differs from the first in one entry only)."""
    names = [f"{i * 4:02x}-{i * 4 + 4:02x}" for i in range(shards - 1)] + [f"{(shards - 1) * 4:02x}-"]
    gtids = {s: f"MySQL56/{UUID_A}:1-{i + 1}" for i, s in enumerate(names)}
    lastpk = binlogdata_pb2.TableLastPK(table_name="t", lastpk=query_pb2.QueryResult())

    def commit(label: str, entries: list[binlogdata_pb2.ShardGtid]) -> tuple[str, vtgate_pb2.VStreamResponse]:
        vg = binlogdata_pb2.VGtid(shard_gtids=entries)
        return label, vtgate_pb2.VStreamResponse(events=[
            binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=vg, shard=entries[-1].shard),
            binlogdata_pb2.VEvent(type=_T.COMMIT, timestamp=1_700_000_000, shard=entries[-1].shard),
        ])

    def plain(order: list[str]) -> list[binlogdata_pb2.ShardGtid]:
        return [binlogdata_pb2.ShardGtid(keyspace="ks", shard=s, gtid=gtids[s]) for s in order]

    for n in range(2 * shards):
        s = names[(n * 7) % shards]
        gtids[s] += f",{UUID_B}:{n + 1}"
        yield commit(f"move {s}", plain(names))
    copying = plain(names)
    copying[1].table_p_ks.append(lastpk)
    yield commit("copy progress", copying)
    yield commit("copy done", plain(names))
    gtids["ff-"] = f"MySQL56/{UUID_B}:1-5"
    yield commit("shard added", plain([*names, "ff-"]))
    yield commit("shard removed", plain(names[1:]))
    yield commit("order changed", plain(names[::-1]))
    renamed = plain(names)
    renamed[0].shard = "-04x"
    yield commit("shard renamed in place", renamed)
    gtids[names[0]] = 'odd "gtid" \\ \u00e9'
    yield commit("escaped gtid", plain(names))
    yield commit("duplicate shard", plain([*names, names[0]]))
    gtids[names[0]] += "x"
    yield commit("duplicate shard again", plain([*names, names[0]]))


@pytest.mark.parametrize("txmeta", [False, True], ids=["core", "txmeta"])
def test_vgtid_events_read_natively_give_the_parsed_positions(txmeta: bool) -> None:
    """The native VGTID reader (``vgtid_entries``, only changed entries parsed) gives the commit
    points, VGTID JSON and transaction ids upb's full parse gives, over 64 shards and when the
    shard set, the order or copy progress changes; a duplicate shard fails the same way."""
    from cdcworker._rowenc import scan, vgtid_entries  # type: ignore[attr-defined]

    commits = list(_vgtid_commits(64))
    start = Vgtid.from_proto(commits[0][1].events[0].vgtid)
    runs = []
    for raw in (True, False):
        sink = RecordingSink()
        features = Features()
        if txmeta:
            features.txmeta = TransactionMonitor(TxMetaOptions(topic="p.transaction", ordered=True), None, start)
        proc = StreamProcessor(EncoderConfig("p"), sink, start, features=features)
        seen = []
        for label, resp in commits:
            data = resp.SerializeToString()
            if raw:
                _, s0, s1 = scan(data)[0]
                assert vgtid_entries(data, s0, s1, ()) is not None, label  # the native reader, not upb
            try:
                proc.process(data if raw else resp)
                seen.append((label, proc.position, proc._raw.to_json()))
            except ValueError as exc:
                seen.append((label, "error", str(exc)))
                # Its COMMIT again (a retry): the VGTID is read whole and fails the same way.
                with pytest.raises(ValueError, match="duplicate shard"):
                    proc._commit(1_700_000_000)
        runs.append((seen, sink.points, sink.records))
    assert runs[0] == runs[1]
    for _, pos, text in runs[0][0][-2:]:  # the second one too: a failed VGTID is not trusted later
        assert pos == "error" and "duplicate shard" in text
    # Every commit moved the position, but "copy done" (back to the last move's VGTID).
    assert len({repr(pos) for _, pos, _ in runs[0][0][:-2]}) == len(commits) - 3


def test_vgtid_entries_reuse_unchanged_entries_and_leave_odd_events_to_upb() -> None:
    from cdcworker._rowenc import vgtid_entries  # type: ignore[attr-defined]

    vg = _vgtid({"-80": f"MySQL56/{UUID_A}:1-3", "80-": f"MySQL56/{UUID_A}:1-4"})
    ev = binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=vg, shard="80-").SerializeToString()
    shard, first, changed = vgtid_entries(ev, 0, len(ev), ())
    assert (shard, changed) == ("80-", [0, 1])
    assert [binlogdata_pb2.ShardGtid.FromString(e) for e in first] == list(vg.shard_gtids)
    vg.shard_gtids[1].gtid = f"MySQL56/{UUID_A}:1-5"
    ev2 = binlogdata_pb2.VEvent(type=_T.VGTID, vgtid=vg, shard="80-").SerializeToString()
    _, second, changed = vgtid_entries(b"xy" + ev2, 2, 2 + len(ev2), first)
    assert changed == [1] and second[0] is first[0] and second[1] != first[1]
    # Two vgtid fields (protobuf merges them), another sub-message, bad UTF-8, not a VGTID event,
    # an unknown VGtid field, truncation, a range outside the buffer: None, upb decides.
    vg_bytes = vg.SerializeToString()
    odd = [
        _tag(1, 0) + bytes([_T.VGTID]) + _ld(7, vg_bytes) + _ld(7, vg_bytes),
        _tag(1, 0) + bytes([_T.VGTID]) + _ld(7, vg_bytes) + _ld(6, b""),
        _tag(1, 0) + bytes([_T.VGTID]) + _ld(7, vg_bytes) + _ld(23, b"\xff"),
        _tag(1, 0) + bytes([_T.COMMIT]) + _ld(7, vg_bytes),
        _tag(1, 0) + bytes([_T.VGTID]) + _ld(7, vg_bytes + _ld(2, b"x")),
        ev[:-1],
    ]
    for data in odd:
        assert vgtid_entries(data, 0, len(data), first) is None, data
    assert vgtid_entries(ev, 0, len(ev) + 1, ()) is None


def test_masked_columns_run_the_constant_op() -> None:
    from cdcworker.filters import columns

    op, _, labels = native.column_op(columns._const_conv("*" * 8))
    assert (op, labels) == ("OP_CONST", (b'"********"',))
    assert native.column_op(columns._const_conv(5))[0] == "OP_PY"  # only strings are masks


def _random_vgtid(rng: random.Random, shards: list[str]) -> Vgtid:
    out = []
    for s in shards:
        hosts = rng.choice([[UUID_A], [UUID_A, UUID_B], [UUID_B]])
        gtid = rng.choice([
            "MySQL56/" + ",".join(f"{h}:1-{rng.randint(1, 50)}" for h in hosts),
            "current",
            "MySQL56/",
            f"MySQL56/{UUID_A}:1-x",
        ]) if rng.random() < 0.15 else "MySQL56/" + ",".join(f"{h}:1-{rng.randint(1, 50)}" for h in hosts)
        out.append(ShardGtid("ks", s, gtid))
    return Vgtid(tuple(out))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_epochs_equal_the_full_recomputation(seed: int) -> None:
    rng = random.Random(seed)
    shard_sets = [["-80", "80-"], ["-80", "80-"], ["-40", "40-80", "80-"], ["-80", "80-"]]
    start = _random_vgtid(rng, shard_sets[0])
    provider = EpochProvider(ShardEpochMap({"-80": 0, "80-": 0}), start, inherit=seed % 2 == 0)
    epochs, previous = provider.epochs, start
    for _ in range(300):
        cur = _random_vgtid(rng, rng.choice(shard_sets) if rng.random() < 0.1 else [sg.shard for sg in previous])
        shard = cur.shard_gtids[0].shard
        try:
            expected: Any = next_epoch_map(epochs, previous, cur, provider.inherit)
        except EpochError:
            expected = EpochError
        try:
            got: Any = provider.epoch(shard, cur)
        except EpochError:
            got = EpochError
        if expected is EpochError:
            assert got is EpochError
            return  # Debezium stops here too
        assert got == expected[shard]
        assert provider.epochs == expected
        epochs, previous = expected, cur
