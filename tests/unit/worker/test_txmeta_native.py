"""The native BEGIN (``_rowenc.tx_begin``) against the Python path of ``TransactionMonitor``.

Two monitors read the same transactions, one with the C call and one without it; every record,
block, epoch, rank and offset field must be equal, and the C call must have decided the common
cases (so a silent fall-back to Python fails the test). Forms the C call leaves to Python (hosts
changing, reshards, multi-host GTIDs, ranks beyond a MySQL GNO) must come back as None.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdcworker.events import native
from cdcworker.events.jsonfmt import dumps
from cdcworker.offsets.vgtid import ShardGtid, Vgtid
from cdcworker.txmeta import TransactionMonitor, TxMetaOptions

pytestmark = pytest.mark.skipif(not native.enabled(), reason="native extension not built (make native)")

U1 = "027a0d3e-93a1-11ee-8d36-0242ac110002"
U2 = "1e7ab2c6-93a1-11ee-8b58-0242ac110003"
KS = "ks"


class Counting:
    """Wraps ``tx_begin`` to count the transactions it decided."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.decided, self.declined = fn, 0, 0

    def __call__(self, *args: Any) -> Any:
        out = self.fn(*args)
        if out is None:
            self.declined += 1
        else:
            self.decided += 1
        return out


def pair(opts: TxMetaOptions, start: Vgtid) -> tuple[TransactionMonitor, TransactionMonitor, Counting]:
    fast = TransactionMonitor(opts, None, start)
    slow = TransactionMonitor(opts, None, start)
    assert fast._native_begin is not None, "the native BEGIN should cover this shape"
    counting = Counting(fast._native_begin)
    fast._native_begin = counting
    slow._native_begin = None
    return fast, slow, counting


def stream(steps: list[tuple[str, str]], shards: tuple[str, ...], share: bool = True) -> Iterator[tuple[str, Vgtid]]:
    """(committing shard, VGTID) per step; each step sets one shard's GTID. ``share`` reuses the
    ShardGtid objects of shards that did not move, as the streaming loop's cache does."""
    current = {s: ShardGtid(KS, s, f"MySQL56/{U1}:1-1") for s in shards}
    for shard, gtid in steps:
        if shard not in current:  # a reshard target appears
            current[shard] = ShardGtid(KS, shard, gtid)
        current[shard] = ShardGtid(KS, shard, gtid)
        if not share:
            current = {k: ShardGtid(v.keyspace, v.shard, v.gtid) for k, v in current.items()}
        yield shard, Vgtid(tuple(current.values()))


def run_both(opts: TxMetaOptions, steps: list[tuple[str, str]], shards: tuple[str, ...] = ("-80", "80-"),
             share: bool = True) -> Counting:
    start = Vgtid(tuple(ShardGtid(KS, s, f"MySQL56/{U1}:1-1") for s in shards))
    fast, slow, counting = pair(opts, start)
    for n, (shard, vgtid) in enumerate(stream(steps, shards, share)):
        txid = vgtid.to_json()
        id_json = dumps(txid)
        ts = 1_700_000_000_000 + n
        assert fast.begin(txid, ts, shard, vgtid, id_json) == slow.begin(txid, ts, shard, vgtid, id_json)
        assert (fast.epoch, fast.rank) == (slow.epoch, slow.rank)
        assert fast._native_parts == slow._native_parts
        dc = f"{shard}.{KS}.t"
        for _ in range(3):
            assert fast.block_bytes(dc) == slow.block_bytes(dc)
        assert fast.native_blocks(dc) == slow.native_blocks(dc)
        end_f, end_s = fast.end(ts + 5), slow.end(ts + 5)
        assert end_f.record == end_s.record
        assert tuple(end_f.offset) == tuple(end_s.offset)
        assert fast.epochs is None or fast.epochs.epochs == slow.epochs.epochs  # type: ignore[union-attr]
    return counting


ORDERED = "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory"

# Ranks around the byte boundaries of BigInteger.toByteArray (a sign bit needs a byte of its own).
RANKS = [0, 1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**23, 2**31 - 1, 2**31, 2**55, 2**63 - 1,
         10**18 - 1]


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("numeric", [False, True])
@pytest.mark.parametrize("schemas", [False, True])
@pytest.mark.parametrize("emit", [False, True])
def test_common_transactions_take_the_c_call_and_equal_python(ordered: bool, numeric: bool, schemas: bool,
                                                             emit: bool) -> None:
    opts = TxMetaOptions("p.transaction", ordered=ordered, decimal_numeric=numeric, emit_boundaries=emit,
                         key_schemas_enable=schemas, value_schemas_enable=schemas, headers=(("h", b"v"),))
    steps = [("-80" if i % 2 else "80-", f"MySQL56/{U1}:1-{r}") for i, r in enumerate(RANKS)]
    steps += [("-80", f"MySQL56/{U1}:{r}") for r in (7, 8)]  # the single-number form
    counting = run_both(opts, steps)
    assert counting.decided == len(steps) and counting.declined == 0


def test_entries_equal_but_not_shared_still_take_the_c_call() -> None:
    counting = run_both(TxMetaOptions("p.transaction", ordered=True),
                        [("-80", f"MySQL56/{U1}:1-{i}") for i in range(2, 8)], share=False)
    assert counting.decided == 6


def test_what_the_c_call_leaves_to_python_is_still_equal() -> None:
    steps = [
        ("-80", f"MySQL56/{U1}:1-5"),
        ("-80", f"MySQL56/{U2}:1-3"),  # another host: the epoch moves (Python)
        ("80-", f"MySQL56/{U1}:1-9,{U2}:1-4"),  # two hosts: the general parse (Python)
        ("80-", f"MySQL56/{U1}:1-10,{U2}:1-4"),
        ("-80", f"MySQL56/{U2}:1-{2**63}"),  # beyond a MySQL GNO (Python)
        ("-80", f"MySQL56/{U2}:1-4:6-8"),  # two intervals: the general parse's quirk (Python)
        ("-80", f"MySQL56/{U2}:1-9"),
        ("-40", f"MySQL56/{U1}:1-2"),  # a reshard target appears (Python)
        ("-40", f"MySQL56/{U1}:1-3"),
    ]
    counting = run_both(TxMetaOptions("p.transaction", ordered=True, inherit_epoch=True), steps)
    assert counting.declined >= 5
    assert counting.decided >= 2


def test_a_remove_field_shape_keeps_the_python_path() -> None:
    opts = TxMetaOptions("p.transaction", ordered=True, remove_fields=frozenset({"transaction.transaction_rank"}))
    assert TransactionMonitor(opts, None, Vgtid.of(KS, [("-80", f"MySQL56/{U1}:1-1")]))._native_begin is None


@pytest.mark.parametrize(
    "text",
    ['[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/u:1-5","table_p_ks":[]}]', "back\\slash", "ctl\x01\x1f",
     "tab\tnew\nline", "del\x7f", 'uni "é" ✓', "surrogate-free 😀", ""],
)
def test_the_id_escape_equals_the_json_writer(text: str) -> None:
    """The streaming loop escapes each shard's VGTID entry once (``json_string_body``) and joins
    them into the transaction id: the same bytes as ``dumps`` of the whole id."""
    from cdcworker.events.jsonfmt import json_string_body

    assert json_string_body(text) == dumps(text)[1:-1]
    assert b'"' + json_string_body(text) + b"," + json_string_body(text) + b'"' == dumps(text + "," + text)


@pytest.mark.parametrize(
    "gtid", [f"MySQL56/{U1}:1-42", "current", "", 'q"uote', "back\\slash", "ctl\x01", "uni-é✓", "del\x7f", "a/b:1-2,c:3"]
)
def test_a_commit_vgtid_json_and_id_equal_the_general_writers(gtid: str) -> None:
    """The streaming loop's per-shard cache (``_shard_entry``, ``entry_json``) against ``jackson_dumps`` of the
    VGTID and ``dumps`` of that JSON (the transaction id, and the source block's ``vgtid`` as its
    body), joined from each shard's, for GTID texts with and without characters a JSON writer escapes."""
    from cdcworker.offsets.javacompat import jackson_dumps
    from cdcworker.streaming import StreamProcessor
    from vitessapi import binlogdata_pb2 as b

    proc = StreamProcessor.__new__(StreamProcessor)
    proc._shard_gtids = {}
    pb = b.VGtid(shard_gtids=[b.ShardGtid(keyspace="k\"s", shard="-80", gtid=gtid),
                              b.ShardGtid(keyspace="ks", shard="80-", gtid=f"MySQL56/{U2}:1-7")])
    for _ in range(2):  # a miss, then the cached entries
        vgtid, text, body = proc._vgtid(pb)
        assert text == jackson_dumps([sg.to_json() for sg in vgtid]) == vgtid.to_json()
        assert b'"' + (body or b"") + b'"' == dumps(text)


def test_an_epoch_beyond_64_bits_is_left_to_python() -> None:
    from cdcworker.events.native import rowenc as _rowenc

    prev = (ShardGtid(KS, "-80", f"MySQL56/{U1}:1-5"),)
    cur = (ShardGtid(KS, "-80", f"MySQL56/{U1}:1-6"),)
    shape = (b'{"id":', b"}", b'{"status":"BEGIN","id":', b"}", b',"total_order":', False, True)
    assert _rowenc.tx_begin(shape, b'"x"', 1, prev, cur, "-80", {"-80": 2**70}) is None
    assert _rowenc.tx_begin(shape, b'"x"', 1, prev, cur, "-80", {"-80": 3})[:2] == (3, 6)


def test_what_python_reads_differently_comes_back_none_without_side_effects() -> None:
    """A committing shard missing from the VGTID (Python raises EpochError), a timestamp beyond
    64 bits or not an int, other argument shapes: None, and None's reference count intact."""
    import sys

    from cdcworker.events.native import rowenc as _rowenc

    prev = (ShardGtid(KS, "-80", f"MySQL56/{U1}:1-5"),)
    cur = (ShardGtid(KS, "-80", f"MySQL56/{U1}:1-6"),)
    shape = (b'{"id":', b"}", b'{"status":"BEGIN","id":', b"}", b',"total_order":', False, True)
    before = sys.getrefcount(None)
    for _ in range(1000):
        assert _rowenc.tx_begin(shape, b'"x"', 1, prev, cur, "80-", {"-80": 0}) is None
        assert _rowenc.tx_begin(shape, b'"x"', 2**63, None, None, None, None) is None
        assert _rowenc.tx_begin(shape, b'"x"', 1.5, None, None, None, None) is None
        assert _rowenc.tx_begin(shape, b'"x"', 1, list(prev), cur, "-80", {"-80": 0}) is None
    assert abs(sys.getrefcount(None) - before) < 50
    # and the monitor then takes the Python path: a timestamp beyond 64 bits still makes its BEGIN
    opts = TxMetaOptions("p.transaction")
    fast, slow, counting = pair(opts, Vgtid(prev))
    vg = Vgtid(cur)
    txid = vg.to_json()
    assert fast.begin(txid, 2**63, "-80", vg, dumps(txid)) == slow.begin(txid, 2**63, "-80", vg, dumps(txid))
    assert counting.declined == 1
