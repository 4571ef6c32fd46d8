"""A reshard journal followed shard by shard (cdcworker.journals): which held source shards are
done, which are pending, what the commit points, the VStream request and the reassignment hold."""

from __future__ import annotations

import json

import grpc
import pytest
from events_fixtures import field, field_event, insert

from cdcworker.events import EncoderConfig
from cdcworker.journals import JournalMismatch, JournalProgress, held_participants, reassigned
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.value import Checkpoint
from cdcworker.source.retry import JOURNAL_PARTICIPANTS_MESSAGE, classify
from cdcworker.streaming import StreamProcessor
from vitessapi import binlogdata_pb2, vtgate_pb2

KS = "ks"
MERGE = ["-40", "40-80", "80-c0", "c0-"]  # 4 -> 2: this task holds the first two


def _journal(jid: int = 7, sources: list[str] = MERGE) -> binlogdata_pb2.Journal:
    return binlogdata_pb2.Journal(
        id=jid, migration_type=binlogdata_pb2.SHARDS,
        participants=[binlogdata_pb2.KeyspaceShard(keyspace=KS, shard=s) for s in sources],
        shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=KS, shard="-80", gtid="MySQL56/t:1-3"),
                     binlogdata_pb2.ShardGtid(keyspace=KS, shard="80-", gtid="MySQL56/t:1-4")],
    )


def _pos(gtids: dict[str, int]) -> Vgtid:
    """ks shards at MySQL56/u:1-N, in the order given."""
    return Vgtid(tuple(ShardGtid(KS, shard, f"MySQL56/u:1-{n}") for shard, n in gtids.items()))


def test_held_participants_are_the_journal_sources_this_task_streams() -> None:
    task = _pos({"-40": 5, "40-80": 9}).update([ShardGtid("other", "0", "MySQL56/u:1")])
    assert held_participants(_journal(), task) == {(KS, "-40"), (KS, "40-80")}


def test_first_journal_leaves_the_sibling_pending_and_the_last_completes() -> None:
    progress = JournalProgress()
    at_first = _pos({"-40": 5, "40-80": 9})
    assert progress.reached(_journal(), (KS, "-40"), at_first) is False
    assert progress.pending == [(KS, "40-80")]
    assert progress.done == {(KS, "-40"): ShardGtid(KS, "-40", "MySQL56/u:1-5")}
    assert progress.report() == {"id": "7", "done": ["-40"], "pending": ["40-80"]}
    # The same shard's journal again (a reconnect before it was left out): nothing changes.
    assert progress.reached(_journal(), (KS, "-40"), _pos({"-40": 6, "40-80": 9})) is False
    assert progress.done[(KS, "-40")].gtid == "MySQL56/u:1-5"
    assert progress.reached(_journal(), (KS, "40-80"), _pos({"-40": 5, "40-80": 12})) is True
    assert progress.pending == []


def test_a_task_holding_one_source_shard_completes_at_its_journal() -> None:
    assert JournalProgress().reached(_journal(), (KS, "-40"), _pos({"-40": 5})) is True


def test_done_shards_stay_before_their_journal_in_every_commit_point() -> None:
    progress = JournalProgress()
    progress.reached(_journal(), (KS, "-40"), _pos({"-40": 5, "40-80": 9}))
    # VTGate's VGTID without -40 (left out of the request) or with -40 past its journal; -40
    # keeps its place in the VGTID (the stored offset's shard order does not change).
    assert progress.pin(_pos({"40-80": 11})) == _pos({"-40": 5, "40-80": 11})
    assert progress.pin(_pos({"-40": 6, "40-80": 11})) == _pos({"-40": 5, "40-80": 11})
    point = Checkpoint.at(_pos({"40-80": 11}).shard_gtids, "txn", (("t", 1),), ())
    pinned = progress.pin(point)
    assert isinstance(pinned, Checkpoint) and pinned.transaction_id == "txn"
    assert pinned.get("-40") == ShardGtid(KS, "-40", "MySQL56/u:1-5")


def test_the_request_leaves_done_shards_out() -> None:
    progress = JournalProgress()
    full = _pos({"-40": 5, "40-80": 9})
    assert progress.streamed(full) == full
    progress.reached(_journal(), (KS, "-40"), full)
    assert progress.streamed(full) == _pos({"40-80": 9})


def test_a_rewind_before_a_journal_streams_that_shard_again() -> None:
    progress = JournalProgress()
    progress.reached(_journal(), (KS, "-40"), _pos({"-40": 5, "40-80": 9}))
    assert progress.rewound(_pos({"-40": 5, "40-80": 7})) == []  # -40 still at its pinned position
    assert progress.rewound(_pos({"-40": 4, "40-80": 7})) == [(KS, "-40")]  # an aborted transaction
    assert progress.pending == [(KS, "-40"), (KS, "40-80")]


def test_another_journal_while_waiting_is_refused() -> None:
    progress = JournalProgress()
    progress.reached(_journal(7), (KS, "-40"), _pos({"-40": 5, "40-80": 9}))
    with pytest.raises(JournalMismatch, match="journal 8 arrived while shards ks/40-80 were still streaming"):
        progress.reached(_journal(8), (KS, "40-80"), _pos({"-40": 5, "40-80": 9}))


def test_reassignment_replaces_the_sources_by_the_targets() -> None:
    task = _pos({"-40": 5, "40-80": 9}).update([ShardGtid("other", "0", "MySQL56/u:1")])
    assert reassigned(task, _journal()) == Vgtid((
        ShardGtid("other", "0", "MySQL56/u:1"), ShardGtid(KS, "-80", "MySQL56/t:1-3"), ShardGtid(KS, "80-", "MySQL56/t:1-4")))


class _Error(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INTERNAL

    def details(self) -> str:
        return f"{JOURNAL_PARTICIPANTS_MESSAGE}: journal: [...], stream: [...]"


def test_the_participants_error_is_a_reconnect_only_for_a_task_following_journals() -> None:
    assert classify(_Error(), follows_journals=True).retriable
    refused = classify(_Error())
    assert not refused.retriable and "reassignment needed" in refused.reason


def test_a_journal_from_a_shard_the_task_does_not_stream_is_refused() -> None:
    """Ignored, the task would stream on past the cut-over (VTGate follows a journal itself when the
    request holds every participant)."""
    progress = JournalProgress()
    with pytest.raises(JournalMismatch, match=r"delivered by ks/80-c0, which is not one of its source shards "
                                              r"that this task streams \(ks/-40, ks/40-80\)"):
        progress.reached(_journal(), (KS, "80-c0"), _pos({"-40": 5, "40-80": 9}))
    with pytest.raises(JournalMismatch, match=r"delivered by ks/-40, .* \(none\)"):
        progress.reached(_journal(sources=["80-c0", "c0-"]), (KS, "-40"), _pos({"-40": 5}))
    assert progress.journal is None and progress.done == {}


def test_the_participants_error_is_retried_while_shards_deliver_the_journal_then_fails() -> None:
    """Each reconnect after a shard delivered the journal is needed; one more without it is allowed
    (the error may overtake the journal event); two in a row without would loop forever."""
    progress = JournalProgress()
    assert progress.participants_error() is True  # the error overtook the journal event
    progress.reached(_journal(), (KS, "-40"), _pos({"-40": 5, "40-80": 9}))
    assert progress.participants_error() is True  # -40 done since: left out now
    assert progress.participants_error() is True  # once more without: allowed
    assert progress.participants_error() is False  # twice in a row without a journal: fail


class _Sink:
    """The sink interface the processor uses, recording records and commit points."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.positions: list[Vgtid] = []
        self.records_sent = 0

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: object) -> None:
        self.records.append((topic, key, value))
        self.records_sent += 1

    def send_to_partition(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                          headers: object) -> None:
        self.send(topic, key, value, headers)

    def commit_point(self, position: Vgtid) -> None:
        self.positions.append(position)


def _txn_events(shard: str, gtid: str, *rows: bytes) -> list[binlogdata_pb2.VEvent]:
    """One shard's transaction of ``t`` rows (the FIELD first) in VTGate's event order."""
    def ev(t: int, **kw: object) -> binlogdata_pb2.VEvent:
        return binlogdata_pb2.VEvent(type=t, keyspace=KS, shard=shard, **kw)  # type: ignore[arg-type]

    fields = [field("id", "INT64", "bigint", flags=1 | 2)]
    out = [ev(binlogdata_pb2.BEGIN), ev(binlogdata_pb2.FIELD, field_event=field_event("ks.t", fields, KS, shard))]
    if rows:
        rc = [insert(r) for r in rows]
        out.append(ev(binlogdata_pb2.ROW, row_event=binlogdata_pb2.RowEvent(
            table_name="ks.t", keyspace=KS, shard=shard, row_changes=rc)))
    vgtid = binlogdata_pb2.VGtid(shard_gtids=[binlogdata_pb2.ShardGtid(keyspace=KS, shard=shard, gtid=gtid)])
    return [*out, ev(binlogdata_pb2.VGTID, vgtid=vgtid), ev(binlogdata_pb2.COMMIT, timestamp=1_700_000_001)]


def test_a_done_shards_journal_tail_skips_only_that_shards_events() -> None:
    """-40 delivers the journal; its VGTID and COMMIT after it are skipped, while a transaction of
    its sibling 40-80 arriving in between is streamed and committed, -40 pinned before its journal."""
    sink = _Sink()
    proc = StreamProcessor(EncoderConfig("p"), sink, _pos({"-40": 5, "40-80": 9}),  # type: ignore[arg-type]  # the sink's interface
                           journal_stops=True, journals=JournalProgress())
    journal = binlogdata_pb2.VEvent(type=binlogdata_pb2.JOURNAL, keyspace=KS, shard="-40", journal=_journal())
    sibling = _txn_events("40-80", "MySQL56/u:1-10", b"1")
    tail = [e for e in _txn_events("-40", "MySQL56/u:1-6") if e.type in (binlogdata_pb2.VGTID, binlogdata_pb2.COMMIT)]
    proc.process(vtgate_pb2.VStreamResponse(events=[journal, *sibling, *tail]))
    assert [json.loads(r[2])["payload"]["after"]["id"] for r in sink.records if r[2]] == [1]
    assert [Vgtid(p.shard_gtids) for p in sink.positions] == [_pos({"-40": 5, "40-80": 10})]
    # -40's tail ended at its COMMIT: 40-80 streams on.
    proc.process(vtgate_pb2.VStreamResponse(events=_txn_events("40-80", "MySQL56/u:1-11", b"2")))
    assert Vgtid(sink.positions[-1].shard_gtids) == _pos({"-40": 5, "40-80": 11})
