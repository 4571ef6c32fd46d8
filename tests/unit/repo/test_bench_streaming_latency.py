"""The freshness join of ``bench/streaming.py latency``, shared by shardcdc's workers and Debezium:
a change record names its source transaction by ``source.shard`` and that shard's GTID in
``source.vgtid``; each transaction's commit time joins its last LogAppendTime; the first
``--settle`` seconds are reported apart; a run that delivers less than the rate (a growing backlog)
or whose replay was held back does not count as keeping up."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from loading import load_script

ROOT = Path(__file__).resolve().parents[3]


def _streaming() -> ModuleType:
    return load_script(ROOT / "bench" / "streaming.py", "bench_streaming")


def _record(shard: str, vgtid: list[tuple[str, str]]) -> bytes:
    """A Debezium Vitess change record's value (schema left out: the join reads the payload)."""
    source = {"connector": "vitess", "keyspace": "bench", "shard": shard, "table": "bench",
              "vgtid": json.dumps([{"keyspace": "bench", "shard": s, "gtid": g} for s, g in vgtid])}
    return json.dumps({"schema": {}, "payload": {"op": "c", "source": source}}).encode()


def test_a_record_names_its_shard_and_that_shards_transaction_number() -> None:
    m = _streaming()
    vgtid = [("-80", "MySQL56/aaaa:1-41"), ("80-", "MySQL56/bbbb:1-7,cccc:1-12")]
    assert m._record_txn(_record("80-", vgtid)) == ("80-", 12)
    assert m._record_txn(_record("-80", vgtid)) == ("-80", 41)
    assert m._record_txn(None) is None and m._record_txn(b"") is None  # tombstones


def test_commits_join_their_appends_by_commit_time_and_unmatched_ones_are_left_out() -> None:
    m = _streaming()
    commit = {("-80", 2): 2_000_000_000, ("80-", 1): 1_000_000_000, ("-80", 3): 3_000_000_000}
    appended = {("80-", 1): 1_005, ("-80", 2): 2_012, ("80-", 9): 9_000}
    assert m._joined(commit, appended) == [(1_000_000_000, 1_005), (2_000_000_000, 2_012)]


def test_the_first_settle_seconds_are_split_off() -> None:
    m = _streaming()
    rows = [(0, 1), (999_999_999, 2), (1_000_000_000, 3), (5_000_000_000, 4)]
    assert m._settled(rows, 1.0) == ([(0, 1), (999_999_999, 2)], [(1_000_000_000, 3), (5_000_000_000, 4)])
    assert m._settled([], 1.0) == ([], [])


def test_a_steady_side_keeps_up_with_its_percentiles() -> None:
    m = _streaming()
    # 1,000 transactions of 10 rows, one per ms (10,000 rows/s), each acknowledged 5 ms after its
    # commit, but every 100th 40 ms after: p50 5, p99 5 (10 of 1,000 are slow), p999 40.
    rows = [(i * 1_000_000, i + (40 if i % 100 == 50 else 5)) for i in range(1000)]
    f = m._freshness(rows, 0.0, 10, 1.0, 10_000)
    assert (f["ack_p50_ms"], f["ack_p99_ms"], f["ack_p999_ms"], f["ack_max_ms"]) == (5.0, 5.0, 40.0, 40.0)
    assert f["keeps_up"] and abs(f["slope_ms_per_s"]) < 1
    assert round(f["delivered_rows_per_s"]) == 10_000  # 999 intervals between the appends at 5 and 1,004 ms


def test_a_growing_backlog_or_a_held_back_replay_does_not_keep_up() -> None:
    m = _streaming()
    # Committed at 10,000 rows/s, delivered at 8,000: each transaction 0.25 ms later than the one before.
    behind = [(i * 1_000_000, int(i * 1.25) + 5) for i in range(4000)]
    f = m._freshness(behind, 1.0, 10, 1.0, 10_000)
    assert not f["keeps_up"] and 240 < f["slope_ms_per_s"] < 260
    assert 7900 < f["delivered_rows_per_s"] < 8100
    steady = [(i * 1_000_000, i + 5) for i in range(4000)]
    assert m._freshness(steady, 1.0, 10, 1.0, 10_000)["keeps_up"]
    assert not m._freshness(steady, 1.0, 10, 0.9, 10_000)["keeps_up"]  # the flow control held the replay back
    assert not m._freshness(steady, 1.0, 10, 1.0, 12_000)["keeps_up"]  # 10,000 rows/s delivered of 12,000
