"""Where a VStream copy may resume: VTGate's VGTID, made safe to start from.

During a copy VTGate's VGTID (each shard's gtid and ``table_p_ks``) does not always say what is
left to copy, so storing it as it comes can lose data after a restart:

* A shard between two tables (one done, no batch of the next one sent yet, including the
  catch-up VTGate runs in between) shows a gtid and no ``table_p_ks``. A new VStream reads that
  as "copied" and only streams: the shard's remaining tables would never be copied.
* A table whose copy completed leaves ``table_p_ks``. A resumed copy (``uvstreamer``'s
  ``buildTablePlan``) copies every table without a lastpk from the start again, and during its
  catch-up drops the changes of tables whose copy has not started (``shouldSendEventForTable``):
  a row of such a table deleted while the worker was down would stay in the topics.

``CopyResume`` keeps, for each shard whose copy runs in this stream and has not sent its
COPY_COMPLETED, the newest lastpk VTGate reported for every table of it, and turns a VGTID into a
resume point: such a shard keeps its gtid, its ``table_p_ks`` plus the newest lastpk of each table
it completed. From there VTGate replays every change of those tables since the gtid (a table
with a lastpk is in its copy phase, and VTGate sends all of its changes) and copies only their
rows beyond the lastpk (rows inserted since, whose inserts it replays as well). A copying shard
with no lastpk yet (no batch of it sent) resumes with ``gtid=""``: its copy starts over. Limit: a
completed table that was empty at its snapshot has no lastpk; resuming copies it again from the
start and drops its changes until then, so a row inserted into it after its snapshot and deleted
while the worker was down stays in the topic.

Once the shard's COPY_COMPLETED arrived, its entry is VTGate's own. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdcworker.offsets.vgtid import EMPTY_GTID, ShardGtid, TableLastPK, Vgtid

__all__ = ["CopyResume"]


class CopyResume:
    """Resume points for the shards a VStream copies (see the module docstring)."""

    def __init__(self, start: Iterable[ShardGtid]) -> None:
        # (keyspace, shard) still copying -> table -> its newest lastpk
        self._lastpks: dict[tuple[str, str], dict[str, TableLastPK]] = {
            (sg.keyspace, sg.shard): {t.table_name: t for t in sg.table_p_ks} for sg in start if sg.copying
        }

    @property
    def copying(self) -> bool:
        """Some shard of the stream has not sent its COPY_COMPLETED yet."""
        return bool(self._lastpks)

    def completed(self, keyspace: str, shard: str) -> bool:
        """The shard's COPY_COMPLETED; True when its copy ran in this stream (resume points change)."""
        return self._lastpks.pop((keyspace, shard), None) is not None

    def resumable(self, vgtid: Vgtid) -> Vgtid:
        """``vgtid`` as a resume point (the same object when nothing needs to change)."""
        if not self._lastpks:
            return vgtid
        out = []
        changed = False
        for sg in vgtid:
            known = self._lastpks.get((sg.keyspace, sg.shard))
            if known is None or sg.gtid == EMPTY_GTID:
                out.append(sg)  # not copied in this stream, or its copy has not started
                continue
            for t in sg.table_p_ks:
                known[t.table_name] = t
            if not known:
                out.append(ShardGtid(sg.keyspace, sg.shard, EMPTY_GTID))  # no batch yet: copy again
                changed = True
            elif len(known) == len(sg.table_p_ks):
                out.append(sg)
            else:
                listed = {t.table_name for t in sg.table_p_ks}
                done = tuple(known[name] for name in sorted(known) if name not in listed)
                out.append(ShardGtid(sg.keyspace, sg.shard, sg.gtid, sg.table_p_ks + done))
                changed = True
        return Vgtid(tuple(out)) if changed else vgtid
