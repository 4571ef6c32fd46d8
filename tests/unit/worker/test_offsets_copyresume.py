"""Resume points of a VStream copy (``offsets.copyresume``): VTGate's VGTID made safe to restart from."""

from __future__ import annotations

from cdcworker.offsets import ShardGtid, Vgtid
from cdcworker.offsets.copyresume import CopyResume
from cdcworker.offsets.vgtid import LastPK, PKField, PKRow, TableLastPK


def _pk(table: str, value: bytes) -> TableLastPK:
    return TableLastPK(table, LastPK((PKField("id", "INT64", 63, 0),), (PKRow((len(value),), value),)))


def test_a_shard_between_two_tables_keeps_copying_with_the_completed_tables_lastpks() -> None:
    resume = CopyResume(Vgtid((ShardGtid("ks", "-80", ""), ShardGtid("ks", "80-", ""), ShardGtid("ks", "c0-", ""))))
    assert resume.copying
    in_account = Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-5", (_pk("account", b"40"),)),
                        ShardGtid("ks", "80-", ""), ShardGtid("ks", "c0-", "")))
    assert resume.resumable(in_account) is in_account  # VTGate's own entries are resume points
    # -80 finished account (no table_p_ks left) and runs the catch-up before customer; 80- sent the
    # snapshot gtid of an empty first table, no lastpk of it exists; c0- is done.
    assert resume.completed("ks", "c0-")
    between = Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-7"), ShardGtid("ks", "80-", "MySQL56/b:1-3"),
                     ShardGtid("ks", "c0-", "MySQL56/c:1-9")))
    got = resume.resumable(between)
    assert got == Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-7", (_pk("account", b"40"),)),
                         ShardGtid("ks", "80-", ""), ShardGtid("ks", "c0-", "MySQL56/c:1-9")))
    assert [sg.copying for sg in got] == [True, True, False]
    # customer's first batch: the completed table stays listed after VTGate's entry
    in_customer = Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-8", (_pk("customer", b"7"),)),
                         ShardGtid("ks", "80-", "MySQL56/b:1-3", (_pk("orders", b"3"),)),
                         ShardGtid("ks", "c0-", "MySQL56/c:1-9")))
    assert resume.resumable(in_customer) == Vgtid((
        ShardGtid("ks", "-80", "MySQL56/a:1-8", (_pk("customer", b"7"), _pk("account", b"40"))),
        ShardGtid("ks", "80-", "MySQL56/b:1-3", (_pk("orders", b"3"),)),
        ShardGtid("ks", "c0-", "MySQL56/c:1-9")))
    # COPY_COMPLETED: the shard's entries are VTGate's again
    assert resume.completed("ks", "-80") and resume.completed("ks", "80-")
    assert not resume.completed("ks", "-80")
    assert not resume.copying
    done = Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-9"), ShardGtid("ks", "80-", "MySQL56/b:1-4"),
                  ShardGtid("ks", "c0-", "MySQL56/c:1-9")))
    assert resume.resumable(done) is done


def test_a_resumed_copy_keeps_the_lastpks_it_started_from() -> None:
    start = Vgtid((ShardGtid("ks", "0", "MySQL56/a:1-5", (_pk("customer", b"7"), _pk("account", b"40"))),
                   ShardGtid("other", "0", "MySQL56/o:1-2")))
    resume = CopyResume(start)
    # VTGate finishes account (nothing beyond 40) and resumes customer
    later = Vgtid((ShardGtid("ks", "0", "MySQL56/a:1-9", (_pk("customer", b"9"),)), ShardGtid("other", "0", "MySQL56/o:1-4")))
    assert resume.resumable(later) == Vgtid((
        ShardGtid("ks", "0", "MySQL56/a:1-9", (_pk("customer", b"9"), _pk("account", b"40"))),
        ShardGtid("other", "0", "MySQL56/o:1-4")))
    # a shard that only streams (here "other") is never touched, nor a stream without copy
    assert not resume.completed("other", "0")
    streaming = Vgtid((ShardGtid("ks", "0", "MySQL56/a:1-9"),))
    assert CopyResume(streaming).resumable(streaming) is streaming
