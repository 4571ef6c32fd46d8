"""A reshard journal followed shard by shard (cdcworker.journals): which held source shards are
done, which are pending, what the commit points, the VStream request and the reassignment hold."""

from __future__ import annotations

import grpc
import pytest

from cdcworker.journals import JournalMismatch, JournalProgress, held_participants, reassigned
from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.value import Checkpoint
from cdcworker.source.retry import JOURNAL_PARTICIPANTS_MESSAGE, classify
from vitessapi import binlogdata_pb2

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
    # VTGate's VGTID without -40 (left out of the request) or with -40 past its journal.
    assert progress.pin(_pos({"40-80": 11})) == _pos({"40-80": 11, "-40": 5})
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
