"""The differential oracle of the native scanner/encoder fuzz target (fuzz/harness.c).

``check(buf)`` takes one input, the bytes of a VStreamResponse (possibly mangled), as a buffer of
exactly its size, and holds the native code to what protobuf's own parser (upb) and the pure-Python
encoder make of the same bytes, the way the streaming stage uses them (streaming.py):

- ``_rowenc.scan``: None (the caller lets upb parse, so any answer is consistent), or items that
  must be upb's events, one for one: the ROW items' table, shard, internal flag and RowChanges equal
  upb's RowEvent, the BEGIN and COMMIT items' timestamp and shard upb's, every item's slice parses
  to upb's VEvent. When upb refuses the whole
  response, the streaming path must refuse it too: some item's slice or RowChange must fail to parse
  (the scanner leaves RowChange bytes to the encoder, which falls back to upb on anything odd).
- ``Program.encode`` (through ``TablePlan.encode_change``): for every FIELD event of the response
  and every ROW item of that table, the records (topic, key, value, headers) or the raised error
  of a plan compiled with the extension equal those of the pure-Python plan (SHARDCDC_NATIVE=0),
  under a few encoder configurations; ``encode`` of an exact-size buffer equals ``encode`` of bytes.
- ``Producer.send_rows`` (when librdkafka is found): sends the rows the encoder takes natively and
  stops at the first row it does not (None, a delete or a key change), as the encoder says.
- ``tx_begin`` (through ``TransactionMonitor.begin``): the input's VGTID events, in order, are the
  transactions of two monitors, one with the C call and one without; every BEGIN record, epoch,
  rank, block and END (or the raised error) must be equal, for the ordered factory in Connect
  Decimal and in NUMERIC form.

Any difference raises AssertionError, which the harness reports as a crash with the input saved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import fuzzmem  # type: ignore[import-not-found]  # the harness's builtin module
from google.protobuf.message import DecodeError

from cdcworker import _rowenc  # type: ignore[attr-defined]  # the instrumented build (harness.c)
from cdcworker.events import EncoderConfig, SourceContext, TablePlan, TypeOptions, native
from cdcworker.events.jsonfmt import dumps
from cdcworker.offsets.vgtid import ShardGtid, Vgtid
from cdcworker.txmeta import TransactionMonitor, TxMetaOptions
from vitessapi import binlogdata_pb2, vtgate_pb2

ROW = binlogdata_pb2.VEventType.ROW
FIELD = binlogdata_pb2.VEventType.FIELD
VGTID = binlogdata_pb2.VEventType.VGTID
BEGIN = binlogdata_pb2.VEventType.BEGIN
COMMIT = binlogdata_pb2.VEventType.COMMIT
NOW_NS = 1_700_000_000_123_456_789
CTX = SourceContext(keyspace="ks", shard="0", commit_seconds=1_700_000_000,
                    vgtid='[{"keyspace":"ks","shard":"0","gtid":"MySQL56/u:1-5"}]')
# Encoder configurations: the defaults, and the modes that switch most converters to other C ops.
CONFIGS = [
    EncoderConfig(logical_name="fz", headers=(("h", b"v"),)),
    EncoderConfig(logical_name="fz", key_schemas_enable=False, value_schemas_enable=False,
                  types=TypeOptions(time_precision_mode="connect", binary_handling_mode="hex",
                                    bigint_unsigned_handling_mode="precise", decimal_handling_mode="string")),
]
MAX_PLANS = 4  # FIELD events compiled per input (each costs two plan compilations per config)
TX_OPTIONS = [TxMetaOptions("fz.transaction", ordered=True, headers=(("h", b"v"),)),
              TxMetaOptions("fz.transaction", ordered=True, decimal_numeric=True, inherit_epoch=True,
                            key_schemas_enable=False, value_schemas_enable=False)]


def check(buf: Any) -> None:
    data = memoryview(buf).tobytes()
    items = _rowenc.scan(buf)
    assert items == _rowenc.scan(data), "scan of an exact buffer differs from scan of bytes"
    events = _upb_events(data)
    if items is None:
        return  # the caller hands the bytes to upb: the same outcome by construction
    _compare_scan(data, items, events)
    _compare_encoder(data, items)
    _compare_tx_begin(_vgtids(data, items))


def _upb_events(data: bytes) -> list[Any] | None:
    try:
        return list(vtgate_pb2.VStreamResponse.FromString(data).events)
    except DecodeError:
        return None


def _parses(parse: Any, data: bytes) -> bool:
    try:
        parse(data)
    except DecodeError:
        return False
    return True


def _compare_scan(data: bytes, items: list[Any], events: list[Any] | None) -> None:
    if events is None:
        refused = any(
            not _parses(binlogdata_pb2.RowChange.FromString, rc) for it in items if len(it) == 7 for rc in it[6]
        ) or any(not _parses(binlogdata_pb2.VEvent.FromString, data[it[1]:it[2]]) for it in items if len(it) == 3)
        assert refused, "scan accepted a response upb refuses, and no item of it fails to parse"
        return
    assert len(items) == len(events), f"scan gave {len(items)} events, upb {len(events)}"
    for it, ev in zip(items, events, strict=True):
        assert it[0] == ev.type, (it[0], ev.type)
        s, e = it[1], it[2]
        assert 0 <= s <= e <= len(data)
        assert binlogdata_pb2.VEvent.FromString(data[s:e]) == ev, "the item's slice is not upb's event"
        if len(it) == 3:
            continue
        if len(it) == 5:  # read natively, never parsed by upb on the stream: what it reads must be upb's
            assert ev.type in (BEGIN, COMMIT) and it[3:] == (ev.timestamp, ev.shard), (it[3:], ev.timestamp, ev.shard)
            continue
        assert len(it) == 7 and ev.type == ROW
        _, _, _, table, shard, internal, rcs = it
        re = ev.row_event
        assert (table, shard, internal) == (re.table_name, re.shard or ev.shard, re.is_internal_table)
        assert [binlogdata_pb2.RowChange.FromString(rc) for rc in rcs] == list(re.row_changes)


def _field_events(data: bytes, items: list[Any]) -> Iterator[Any]:
    n = 0
    for it in items:
        if it[0] == FIELD and len(it) == 3 and n < MAX_PLANS:
            try:
                ev = binlogdata_pb2.VEvent.FromString(data[it[1]:it[2]])
            except DecodeError:
                continue
            n += 1
            yield ev.field_event


def _plans(fe: Any, cfg: EncoderConfig) -> tuple[TablePlan, TablePlan] | None:
    try:
        os.environ[native.ENV] = "1"
        fast = TablePlan.compile(fe, cfg)
        os.environ[native.ENV] = "0"
        slow = TablePlan.compile(fe, cfg)
    except Exception:  # a FIELD event the planner refuses (unknown type, bad enum list...): both paths do
        return None
    finally:
        os.environ[native.ENV] = "1"
    return fast, slow


def _outcome(plan: TablePlan, rc: Any) -> Any:
    try:
        return plan.encode_change(rc, CTX, NOW_NS, "c", None)
    except Exception as exc:  # the same failure, raised the same way, is part of the contract
        return ("raised", type(exc), str(exc))


def _compare_encoder(data: bytes, items: list[Any]) -> None:
    for fe in _field_events(data, items):
        rows = [it[6] for it in items if len(it) == 7 and it[3] == fe.table_name]
        if not rows:
            continue
        for cfg in CONFIGS:
            plans = _plans(fe, cfg)
            if plans is None:
                continue
            fast, slow = plans
            for rcs in rows:
                for rc in rcs:
                    _compare_row(fast, slow, rc)
                _send_rows(fast, rcs)


def _compare_row(fast: TablePlan, slow: TablePlan, rc: bytes) -> None:
    program = fast._native
    if program is not None:
        exact = fuzzmem.exact(rc)
        try:
            got: Any = program.encode(exact)
        except Exception as exc:
            got = ("raised", type(exc), str(exc))
        try:
            ref: Any = program.encode(rc)
        except Exception as exc:
            ref = ("raised", type(exc), str(exc))
        assert got == ref, "encode of an exact buffer differs from encode of bytes"
    a, b = _outcome(fast, rc), _outcome(slow, rc)
    assert a == b, f"native {a!r} != python {b!r}"


# --- send_rows: the native producer, to a broker that is never there --------------------------

_producer: Any = None


def _native_producer() -> Any:
    """A Producer whose records never leave librdkafka's queue (no broker on 127.0.0.1:9; they
    expire after 1 s), or None without librdkafka."""
    global _producer
    if _producer is None:
        from cdcworker.nativesink import _kafka_error, librdkafka_path

        path = librdkafka_path()
        if path is None or not hasattr(_rowenc, "Producer"):
            _producer = False
            return None
        _producer = _rowenc.Producer(path, {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 1000,
                                            "log_level": 0, "queue.buffering.max.messages": 1_000_000},
                                     _kafka_error)
    return _producer or None


def _expected_stop(program: Any, rcs: list[bytes]) -> int:
    for i, rc in enumerate(rcs):
        try:
            images = program.encode(rc)
        except Exception:
            return i
        if images is None or images[1] is None or (images[0] is not None and images[2] != images[3]):
            return i
    return len(rcs)


def _send_rows(fast: TablePlan, rcs: list[bytes]) -> None:
    producer = _native_producer()
    program = fast._native
    if producer is None or program is None:
        return
    # With the transaction block (pre + template with its two counters + post) on odd row counts.
    tx = (b',"transaction":', b',"op":"c"}', b',"transaction":', b',"op":"u"}',
          (b'{"id":"t","total_order":', b',"data_collection_order":', b"}"), 1, 2, len(rcs), 0) if len(rcs) % 2 else None
    start = 0
    while start < len(rcs):
        before = producer.records_sent
        stop = producer.send_rows(program, "fz.t", rcs, start, b'{"before":', b',"op":"c"}', b',"op":"u"}',
                                  [("h", b"v")], tx)
        want = start + _expected_stop(program, rcs[start:])
        assert stop == want, f"send_rows stopped at {stop}, the encoder says {want}"
        assert producer.records_sent - before == stop - start
        start = stop + 1  # the row it did not send goes through the Python path; then it resumes
    producer.poll(0)
    producer.take_errors()  # expired records' reports (no broker): dropped, bounded memory


# --- tx_begin: transaction metadata's BEGIN, native and Python ------------------------------


def _vgtids(data: bytes, items: list[Any]) -> list[tuple[str, Vgtid]]:
    """(committing shard, VGTID) of each VGTID event; entries that did not change are the same
    ShardGtid objects, as the streaming loop's cache makes them (the C call's shortcut)."""
    seen: dict[tuple[str, str, str], ShardGtid] = {}
    out = []
    for it in items:
        if it[0] != VGTID or len(it) != 3:
            continue
        try:
            ev = binlogdata_pb2.VEvent.FromString(data[it[1]:it[2]])
        except DecodeError:
            continue
        entries = tuple(seen.setdefault((g.keyspace, g.shard, g.gtid), ShardGtid(g.keyspace, g.shard, g.gtid))
                        for g in ev.vgtid.shard_gtids)
        try:
            vgtid = Vgtid(entries)
        except ValueError:  # a VGTID the Python position refuses (a shard twice): the task stops on either path
            break
        if entries:
            out.append((ev.shard or entries[0].shard, vgtid))
    return out


def _begin(monitor: TransactionMonitor, n: int, shard: str, vgtid: Vgtid) -> Any:
    try:
        txid = vgtid.to_json()
        rec = monitor.begin(txid, 1_700_000_000_000 + n, shard, vgtid, dumps(txid))
        return rec, monitor.epoch, monitor.rank, monitor.block_bytes("d.c"), monitor.end(1_700_000_000_005 + n).record
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def _compare_tx_begin(vgtids: list[tuple[str, Vgtid]]) -> None:
    if len(vgtids) < 2:
        return
    for opts in TX_OPTIONS:
        try:
            fast = TransactionMonitor(opts, None, vgtids[0][1])
            slow = TransactionMonitor(opts, None, vgtids[0][1])
        except Exception:  # a start position the monitor refuses: no transaction to compare
            continue
        assert fast._native_begin is not None, "the native BEGIN is not in use"
        slow._native_begin = None
        for n, (shard, vgtid) in enumerate(vgtids[1:]):
            a, b = _begin(fast, n, shard, vgtid), _begin(slow, n, shard, vgtid)
            assert a == b, f"native BEGIN {a!r} != python {b!r}"
            if a[0] == "raised":
                break  # the task stops here on either path
